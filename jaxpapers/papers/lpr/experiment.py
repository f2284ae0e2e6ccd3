"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- entry points.

`train_and_evaluate` runs the paper's comparison on `config.data.datasets`: every deep
detector in `config.model.kinds` with and without LPR (all datasets x seeds x {off, on}
in one vmapped program per detector), plus the classical baselines, and writes
`metrics.jsonl`, `config.json` and the AUROC/claims tables. Each finished detector is
checkpointed (`workdir/checkpoints`), so a restarted run skips what is done and ends
with the same numbers. `run_study` adds the ablations over bit width and over which
layers are quantized (per-layer precision). `benchmark` times the vmapped training
program with and without the LPR transform.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

import jax
import numpy as np
from sklearn import metrics

from jaxpapers.core import bench
from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.core import validate as validate_lib
from jaxpapers.papers.lpr import classical
from jaxpapers.papers.lpr import datasets as data_lib
from jaxpapers.papers.lpr import detectors
from jaxpapers.papers.lpr import quantize
from jaxpapers.papers.lpr import report
from jaxpapers.papers.lpr import selection

PATHS = ["jaxpapers/papers/lpr", "configs/lpr.py"]


def validate(config) -> None:
  """The launcher's pre-flight hook (core/validate.py): names are checked before the first
  detector trains, not when the run reaches them (a classical name comes after every deep
  detector)."""
  for field, names, known in (("model.kinds", config.model.kinds, detectors.KINDS),
                              ("classical.names", config.classical.names, classical.NAMES),
                              ("study.ablation_kinds", config.study.ablation_kinds,
                               detectors.KINDS)):
    bad = [n for n in names if n not in known]
    if bad:
      raise ValueError(f"config field {field}: unknown {bad}; expected names from {known}")
  if not config.data.datasets:
    raise ValueError("config field data.datasets is empty: name at least one dataset "
                     "(e.g. datasets=wine+optdigits or datasets=mat:/path/cardio.mat)")
  for entry in config.data.datasets:  # npz:<path|stem>, mat:<path>, csv:<path>
    kind, _, path = entry.partition(":")
    if path and kind in ("npz", "mat", "csv") and os.path.isfile(path):
      validate_lib.check_file("data.datasets", path)
  bad = [a for a in config.model.select_archs if a not in selection.ARCHS]
  if bad or not config.model.select_archs:
    raise ValueError(f"config field model.select_archs: unknown {bad}; expected some of "
                     f"{selection.ARCHS}")
  steps, lrs = config.model.select_steps, tuple(config.model.select_lrs)
  if steps and (steps not in selection.STEPS or not lrs
                or any(r not in selection.LRS for r in lrs)):
    raise ValueError(f"config fields model.select_steps={steps} / select_lrs={lrs}: "
                     f"expected steps in {selection.STEPS} and rates in {selection.LRS}")
  if config.lpr.mode not in quantize.MODES:
    raise ValueError(f"config field lpr.mode={config.lpr.mode!r}: expected one of "
                     f"{quantize.MODES}")
  if config.data.scaling not in data_lib.SCALINGS:
    raise ValueError(f"config field data.scaling={config.data.scaling!r}: expected one of "
                     f"{data_lib.SCALINGS}")


def load_datasets(config) -> list:
  d = config.data
  data = [data_lib.load(name, seed=config.seed, test_frac=d.test_frac,
                        scaling=d.scaling, mlbench=d.mlbench_dir, npz_dir=d.npz_dir,
                        synthetic_base=d.synthetic_base, synthetic_n=d.synthetic_n,
                        synthetic_ratio=d.synthetic_ratio, max_n=d.max_n,
                        csv_label=d.csv_label)
          for name in d.datasets]
  names = [x.name for x in data]
  if len(set(names)) != len(names):
    raise ValueError(f"datasets repeat a name: {names}")
  return data


def lpr_grid(config):
  """(per-layer groups, [bits off, bits on]): the two LPR settings of the comparison.

  Uniform LPR (`lpr.layer_bits` empty): scalar widths 0 and `lpr.bits` on `lpr.layers`.
  Per-layer LPR ('encoder.0:2', 'decoder.-1:4'): one width per named layer.
  """
  if not config.lpr.layer_bits:
    return (), [0.0, float(config.lpr.bits)]
  groups, widths = quantize.parse_layer_bits(config.lpr.layer_bits, len(config.model.hidden))
  return groups, [np.zeros(len(groups), np.float32), np.asarray(widths, np.float32)]


def detector_config(config, kind: str, layers: str | None = None,
                    groups: tuple = ()) -> detectors.DetectorConfig:
  return detectors.DetectorConfig(
      kind=kind, hidden=tuple(config.model.hidden), latent=config.model.latent,
      mem_size=config.model.mem_size, steps=config.optim.steps, batch=config.optim.batch,
      lr=config.optim.lr, weight_decay=config.optim.weight_decay,
      noise_std=config.model.noise_std, kl_weight=config.model.kl_weight,
      entropy_weight=config.model.entropy_weight, eta=config.model.eta,
      code_relu=config.model.code_relu, code_frac=config.model.code_frac,
      spec=quantize.LPRSpec(layers=layers or config.lpr.layers, mode=config.lpr.mode,
                            int_bits=config.lpr.int_bits, groups=tuple(groups)))


def visible_labels(kind: str, data: list, config) -> list:
  """What each detector may see of the training labels."""
  sup = detectors.SUPERVISION[kind]
  if sup == "sup":
    return [d.y_train for d in data]
  if sup == "semi":
    return [data_lib.semi_labels(d.y_train, config.data.semi_frac, config.seed) for d in data]
  return [np.zeros_like(d.y_train) for d in data]


def run_grid(cfg: detectors.DetectorConfig, stacked, n_sets: int, seeds, bits_grid,
             opt_level: int = -1):
  """All datasets x seeds x bits in one program; AUROC as [n_sets, n_seeds, n_bits].

  `bits_grid` holds scalars (uniform LPR) or equal-length vectors (per-layer LPR).
  """
  ds, sd, bi = [a.ravel() for a in np.meshgrid(
      np.arange(n_sets), np.asarray(seeds), np.arange(len(bits_grid)), indexing="ij")]
  bits = np.asarray(bits_grid, np.float32)[bi]
  out = detectors.fit(cfg, stacked, ds, sd, bits, opt_level)
  shape = (n_sets, len(seeds), len(bits_grid))
  return (np.asarray(out["auroc"]).reshape(shape),
          np.asarray(out["losses"]).reshape(shape + (-1,)),
          np.asarray(out["scores"]).reshape(shape + (-1,)))


def compare(config, workdir, writer=None, data=None, stop_after: int | None = None):
  """The main comparison; returns (results[column][dataset] -> per-seed AUROCs, rows).

  Units of work are the deep detectors, then the classical ones; after each, the AUROCs
  so far are checkpointed in `workdir`, and a restarted run resumes after the last
  finished unit. `stop_after` (tests, preemption drills) returns None after that many
  units in total.
  """
  data = data or load_datasets(config)
  names = [d.name for d in data]
  seeds = [config.seed + i for i in range(config.train.seeds)]
  kinds, classical_names = list(config.model.kinds), list(config.classical.names)
  groups, bits_grid = lpr_grid(config)
  # At least one row each: Orbax refuses zero-size arrays (e.g. `kinds=` = classical only).
  state = {"deep": np.zeros((max(len(kinds), 1), len(data), len(seeds), 2), np.float32),
           "classical": np.zeros((max(len(classical_names), 1), len(data), len(seeds)),
                                 np.float64)}
  ckpt = checkpoint_lib.Checkpointer(workdir) if workdir else None
  done = 0
  if ckpt is not None:
    state, done = ckpt.restore_or(state)
    state = {k: np.array(v) for k, v in state.items()}
    if writer is not None:  # unit u writes its rows from step u * optim.steps on
      writer.truncate_after(done * config.optim.steps - 1, splits=("train", "eval"))
  code_select = config.model.code_select
  keeps = column_masks(data, workdir) if classical_names or code_select else []
  sel = None
  if code_select:  # per-set AE code and PCA k by the validation rule (selection.py)
    sel = selection.load_or_select(
        f"{workdir}/code_selection.json" if workdir else None, names,
        lambda: selection.select(detector_config(config, "ae"), data, seeds, keeps,
                                 config.seed, config.train.xla_opt_level,
                                 tuple(config.model.select_archs),
                                 f"{workdir}/code_selection_partial.json" if workdir
                                 else None, config.model.select_extend,
                                 max_steps=config.model.select_steps,
                                 lrs=tuple(config.model.select_lrs),
                                 lpr_bits=(float(config.lpr.bits)
                                           if config.model.select_lpr and "ae" in kinds
                                           else 0.0)))
    for r in selection.table(sel):
      print("selection (validation split of the training rows):", r, flush=True)
    for r in sel:
      if r.get("capacity_edge"):
        print(f"selection: {r['dataset']} picks {r['arch']}, the largest capacity searched "
              "(an edge of its grid: extend selection.ARCHS)", flush=True)
      for edge, what in (("lr_edge", "learning rate"), ("steps_edge", "steps")):
        if r.get(edge):
          print(f"selection: {r['dataset']}'s {what} pick is the end of its ladder "
                "(selection.LRS / selection.STEPS)", flush=True)
    for r in selection.training_table(sel):
      print("selection, training length:", r, flush=True)
    for r in selection.training_table(sel, lpr=True):
      print("selection, training length of the AE with LPR:", r, flush=True)
  units = [("deep", i, k) for i, k in enumerate(kinds)] + [
      ("classical", i, c) for i, c in enumerate(classical_names)]
  for u, (group, i, name) in enumerate(units):
    if u < done:
      continue
    if stop_after is not None and u >= stop_after:
      if ckpt is not None:
        ckpt.close()
      return None
    t0 = time.perf_counter()
    step = u * config.optim.steps
    if group == "deep":
      cfg = detector_config(config, name, groups=groups)
      if sel is not None and name in detectors.AE_KINDS:
        auc, losses, scores = _per_set_architectures(cfg, sel, data, config, seeds,
                                                     bits_grid)
      else:
        stacked = detectors.pad_stack(data, visible_labels(name, data, config))
        auc, losses, scores = run_grid(cfg, stacked, len(data), seeds, bits_grid,
                                       config.train.xla_opt_level)
      metrics_lib.check_finite(step, {"loss": losses[..., -1], "auroc": auc})
      state["deep"][i] = auc
      if workdir and metrics_lib.is_writer():
        save_scores(f"{workdir}/scores/{name}.npz", data, scores)
      if writer is not None:
        # Training curves averaged over datasets and seeds, a few points per run.
        for t in np.linspace(0, losses.shape[-1] - 1, 5).astype(int):
          # (a per-set steps choice trains past optim.steps: its points are squeezed
          # into this unit's optim.steps logged steps)
          at = step + int(t * config.optim.steps // losses.shape[-1])
          writer.write(at, {f"{name}/loss": float(losses[..., 0, t].mean()),
                            f"{name}+lpr/loss": float(losses[..., 1, t].mean())})
        writer.write(step, {f"{name}/auroc": float(auc[..., 0].mean()),
                            f"{name}+lpr/auroc": float(auc[..., 1].mean()),
                            f"{name}/seconds": time.perf_counter() - t0}, split="eval")
    else:
      for j, d in enumerate(data):
        keep = keeps[j]
        for s, seed in enumerate(seeds):
          # Only IForest and CBLOF are random; the others give the same AUROC per seed.
          random_method = name in ("iforest", "cblof")
          state["classical"][i, j, s] = (
              _roc(d.y_test, classical.score(name, d.x_train, d.x_test, seed, keep,
                                             sel[j]["pca_k"] if sel is not None
                                             else config.classical.pca_k,
                                             0.0 if sel is not None
                                             else config.classical.pca_frac))
              if random_method or s == 0 else state["classical"][i, j, 0])
      if writer is not None:
        writer.write(step, {f"{name}/auroc": float(state["classical"][i].mean()),
                            f"{name}/seconds": time.perf_counter() - t0}, split="eval")
    if ckpt is not None:
      ckpt.save(u + 1, state)
  if ckpt is not None:
    ckpt.close()
  results = {}
  for i, kind in enumerate(kinds):
    results[kind] = {n: state["deep"][i, j, :, 0] for j, n in enumerate(names)}
    results[kind + "+lpr"] = {n: state["deep"][i, j, :, 1] for j, n in enumerate(names)}
  for i, c in enumerate(classical_names):
    results[c] = {n: state["classical"][i, j] for j, n in enumerate(names)}
  cols = report.column_names(kinds, classical_names)
  return results, report.auroc_table(results, names, cols)


def _per_set_architectures(cfg, sel, data, config, seeds, bits_grid):
  """AUROC [sets, seeds, bits] and losses of an AE-family detector with each set's own
  capacity and code from `selection.select`, and, where the selection chose them, its
  own steps and learning rate: one program per (capacity, steps) and set (a set's
  numbers do not depend on which sets share the call: `detectors.fit`). The plain AE
  with LPR trains at its own steps and rate where the selection chose them
  (`lpr_training`, tenth pass), so its two columns run apart; the other kinds run both
  columns at the plain AE's pick. Losses are padded to the longest training with each
  run's last loss."""
  own = cfg.kind == "ae" and all("lpr_training" in r for r in sel)
  columns = [[0], [1]] if own else [list(range(len(bits_grid)))]

  def pick(r, col):
    src = r["lpr_training"] if own and col == [1] else r
    return int(src.get("steps", config.optim.steps)), src.get("lr")

  steps = {(j, c[0]): pick(r, c)[0] for j, r in enumerate(sel) for c in columns}
  auc = np.zeros((len(data), len(seeds), len(bits_grid)), np.float32)
  losses = np.zeros(auc.shape + (max(steps.values()),), np.float32)
  scores = np.zeros(auc.shape + (max(len(d.y_test) for d in data),), np.float32)
  for col in columns:
    for arch in selection.ARCHS:
      for n_steps in sorted(set(steps.values())):
        idx = [j for j, r in enumerate(sel)
               if r["arch"] == arch and steps[(j, col[0])] == n_steps]
        if not idx:
          continue
        sub = [data[j] for j in idx]
        lr = [pick(sel[j], col)[1] for j in idx] if "lr" in sel[idx[0]] else None
        stacked = detectors.pad_stack(sub, visible_labels(cfg.kind, sub, config),
                                      [sel[j]["code"] for j in idx], lr)
        run_cfg = dataclasses.replace(selection.arch_config(cfg, arch), steps=n_steps)
        a, loss, sc = run_grid(run_cfg, stacked, len(sub), seeds,
                               [bits_grid[c] for c in col], config.train.xla_opt_level)
        ix = np.ix_(idx, range(len(seeds)), col)
        auc[ix] = a
        losses[ix] = np.concatenate(
            [loss, np.repeat(loss[..., -1:], losses.shape[-1] - n_steps, -1)], -1)
        scores[ix + (slice(0, sc.shape[-1]),)] = sc
  return auc, losses, scores


def save_scores(path: str, data: list, scores) -> None:
  """Test scores [seeds, bits] x test rows of one deep detector, one array per set
  (padded rows cut), for paired tests over test rows (`paired_bootstrap.py`)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  arrays = {d.name: np.asarray(scores[j, ..., :len(d.y_test)], np.float32)
            for j, d in enumerate(data)}
  with open(path + ".tmp", "wb") as f:
    np.savez_compressed(f, **arrays)
  os.replace(path + ".tmp", path)  # atomic: a killed run never leaves half a file


def column_masks(data: list, workdir: str | None = None) -> list:
  """Per dataset, the training rows' independent columns the classical detectors use.

  Rank-deficient tables (constant or collinear columns, e.g. ODDS cardio: rank 20 of 21)
  get one line each in the run log (stdout and `workdir/data_notes.txt`), checked before
  any detector runs rather than failing inside PyOD's PCA minutes later.
  """
  keeps, notes = [], []
  for d in data:
    keep = data_lib.independent_columns(d.x_train)
    note = data_lib.rank_note(d.name, d.x_train, keep)
    if note:
      print(note, flush=True)
      notes.append(note)
    keeps.append(keep)
  if workdir and notes:
    os.makedirs(workdir, exist_ok=True)
    with open(f"{workdir}/data_notes.txt", "w") as f:
      f.write("\n".join(notes) + "\n")
  return keeps


def _roc(y, s):
  return float(metrics.roc_auc_score(y, s))


def _header(config, title, wall, commit):
  steps = (f"{config.optim.steps} Adam steps" if not (
      config.model.code_select and config.model.select_steps) else
      "AE family: per-set Adam steps and learning rate (validation rule"
      + ("; AE+LPR its own" if config.model.select_lpr and "ae" in config.model.kinds
         else "") + "), others "
      f"{config.optim.steps} Adam steps")
  return (f"### {title}\n\nAUROC (%) on the test split, mean over {config.train.seeds} seeds "
          f"(deep models; IForest, CBLOF too), {steps}, LPR = "
          f"{config.lpr.mode} {_lpr_text(config)}, {config.data.scaling} scaling. "
          f"Commit `{commit}` (stamped at the start), {wall:.0f} s wall on a shared 2-core CPU.")


def _lpr_text(config) -> str:
  if config.lpr.layer_bits:
    return "per layer " + "+".join(config.lpr.layer_bits)
  return f"{config.lpr.bits} bits on `{config.lpr.layers}`".replace("|", "\\|")


def _main_tables(config, workdir, writer, data=None, stop_after=None) -> str | None:
  """Runs `compare` and writes the AUROC and claims tables; returns their markdown."""
  commit = study_lib.git_commit(PATHS)  # stamped before the run
  t0 = time.perf_counter()
  data = data or load_datasets(config)
  out = compare(config, workdir, writer, data, stop_after)
  if out is None:
    return None
  results, rows = out
  if metrics_lib.is_writer() and workdir:
    # Per-seed AUROCs (%), so paired gains and bootstraps can be rebuilt from the file:
    # {column: {dataset: [seed 0, seed 1, ...]}}, seeds config.seed + i.
    os.makedirs(workdir, exist_ok=True)
    with open(f"{workdir}/auroc_per_seed.json", "w") as f:
      json.dump({"seeds": [config.seed + i for i in range(config.train.seeds)],
                 "auroc": {c: {n: [round(100 * float(v), 4) for v in vals]
                               for n, vals in per_set.items()}
                           for c, per_set in results.items()}}, f, indent=1)
  cols = ["dataset"] + report.column_names(config.model.kinds, config.classical.names)
  md = study_lib.write_table(workdir, "auroc", rows, cols,
                             _header(config, "AUROC", time.perf_counter() - t0, commit), digits=1)
  names = [r["dataset"] for r in rows[:-1]]
  if config.model.code_select and os.path.exists(f"{workdir}/code_selection.json"):
    with open(f"{workdir}/code_selection.json") as f:
      sel_rows = selection.table(json.load(f))
    md += "\n" + study_lib.write_table(
        workdir, "code_selection_table", sel_rows, list(sel_rows[0]),
        "### Per-set bottleneck by the validation rule (training rows only): validation "
        "AUROC (%) per AE code size (no LPR, mean over seeds) and per PCA k; [chosen]")
    with open(f"{workdir}/code_selection.json") as f:
      train_rows = selection.training_table(json.load(f))
    if train_rows:
      md += "\n" + study_lib.write_table(
          workdir, "training_selection_table", train_rows, list(train_rows[0]),
          "### Per-set Adam steps and learning rate by the same rule, at the set's "
          "(capacity, code) pick: validation AUROC (%) after each snapshot, mean over "
          "seeds; [chosen]; the chosen rate's training loss (mean of the 50 minibatch "
          "losses before the snapshot) at the pick and at twice as many steps")
    with open(f"{workdir}/code_selection.json") as f:
      lpr_rows = selection.training_table(json.load(f), lpr=True)
    if lpr_rows:
      md += "\n" + study_lib.write_table(
          workdir, "training_selection_lpr_table", lpr_rows, list(lpr_rows[0]),
          "### The AE with LPR: its own Adam steps and learning rate by the same rule at "
          "the same (capacity, code) pick (validation AUROC (%) of AE+LPR after each "
          "snapshot, mean over seeds; [chosen])")
  if config.model.kinds:
    md += "\n" + study_lib.write_table(
        workdir, "paired_gains", report.paired_gains(results, names, config.model.kinds),
        ["dataset"] + list(config.model.kinds),
        f"### LPR - no LPR, AUROC points, paired by seed: mean +- s.d. over "
        f"{config.train.seeds} seeds")
  ae_kinds = [k for k in config.model.kinds if k in detectors.AE_KINDS]
  if ae_kinds and "pca_recon" in config.classical.names:
    counts = {d.name: (int(d.y_test.sum()), int((1 - d.y_test).sum())) for d in data}
    md += "\n" + study_lib.write_table(
        workdir, "versus_linear", report.versus_linear(results, names, counts, ae_kinds),
        ["dataset", "pca_recon"] + ae_kinds,
        "### AE family (no LPR) - PCA reconstruction (the linear AE), AUROC points: "
        "difference +- its test-split s.e. (Hanley-McNeil, conservative)")
  claim_rows = report.claims(rows, config.model.kinds, config.classical.names,
                             data_lib.SYNTHETIC_SETS, results)
  return md + "\n" + study_lib.write_table(workdir, "claims", claim_rows,
                                           ["claim", "measured", "paper", "holds"])


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> str | None:
  """The comparison table; resumes from `workdir/checkpoints` after a restart."""
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir, total_steps=config.optim.steps * (
      len(config.model.kinds) + len(config.classical.names)))
  return _main_tables(config, workdir, writer, stop_after=stop_after)


def _ablation_bits(config, data, kinds):
  """Mean AUROC per bit width, in the configured format and in the other one."""
  seeds = [config.seed + i for i in range(config.train.seeds)]
  other = "fixed" if config.lpr.mode == "mantissa" else "mantissa"
  rows = []
  for mode, grid in ((config.lpr.mode, [0] + list(config.study.bit_grid)),
                     (other, list(config.study.other_grid))):
    sub = config_lib.override(config, {"lpr.mode": mode})
    part = {b: {"format": mode if b else "off", "bits": str(b) if b else "-"} for b in grid}
    for kind in kinds:
      stacked = detectors.pad_stack(data, visible_labels(kind, data, config))
      auc, _, _ = run_grid(detector_config(sub, kind), stacked, len(data), seeds, grid)
      for j, b in enumerate(grid):
        part[b][kind] = 100 * float(auc[:, :, j].mean())
        for i, d in enumerate(data):
          if d.name == "clustered":
            part[b][kind + " (clustered)"] = 100 * float(auc[i, :, j].mean())
    rows += list(part.values())
  return rows


def layer_settings(config) -> tuple[tuple, dict]:
  """Per-layer LPR settings of the which-layers ablation: (layer names, rows).

  Each row gives one bit width per AE layer (0 = float32): none, all, encoder, decoder,
  each single layer alone, and `lpr.layer_bits` when set. All rows run in one program.
  """
  depth = len(config.model.hidden)
  layers = tuple(f"{part}.{i}" for part in ("encoder", "decoder") for i in range(depth + 1))
  b = float(config.lpr.bits)
  rows = {"none": [0.0] * len(layers), "all": [b] * len(layers),
          "encoder": [b if l.startswith("encoder") else 0.0 for l in layers],
          "decoder": [b if l.startswith("decoder") else 0.0 for l in layers]}
  for j, l in enumerate(layers):
    rows[f"{l} only"] = [b if k == j else 0.0 for k in range(len(layers))]
  if config.lpr.layer_bits:
    groups, widths = quantize.parse_layer_bits(config.lpr.layer_bits, depth)
    own = [0.0] * len(layers)
    for g, w in zip(groups, widths):
      for k, l in enumerate(layers):
        if quantize.layer_regex(l, depth) == g:
          own[k] = float(w)
    rows["+".join(config.lpr.layer_bits)] = own
  wanted = config.study.layer_rules
  return layers, {k: v for k, v in rows.items()
                  if "each" in wanted and k.endswith(" only") or k in wanted
                  or k == "+".join(config.lpr.layer_bits)}


def _ablation_layers(config, data, kinds):
  seeds = [config.seed + i for i in range(config.train.seeds)]
  depth = len(config.model.hidden)
  layers, settings = layer_settings(config)
  groups = tuple(quantize.layer_regex(l, depth) for l in layers)
  out = {name: {"layers": name, "bits per layer": "/".join(f"{w:g}" for w in widths)}
         for name, widths in settings.items()}
  for kind in kinds:
    stacked = detectors.pad_stack(data, visible_labels(kind, data, config))
    auc, _, _ = run_grid(detector_config(config, kind, groups=groups), stacked, len(data),
                         seeds, list(settings.values()))
    for j, name in enumerate(settings):
      out[name][kind] = 100 * float(auc[:, :, j].mean())
      for i, d in enumerate(data):
        if d.name == "clustered":
          out[name][kind + " (clustered)"] = 100 * float(auc[i, :, j].mean())
  return list(out.values())


def run_study(config, workdir: str) -> str:
  """Main table + claims, then bit-width and which-layers ablations (tables in workdir)."""
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir)
  t0 = time.perf_counter()
  data = load_datasets(config)
  parts = set(config.study.parts)
  unknown = parts - {"main", "bits", "layers"}
  if unknown:
    raise ValueError(f"unknown study parts {sorted(unknown)}; expected main, bits, layers")
  # The main table is checkpointed per detector, so a killed study resumes it.
  md = _main_tables(config, workdir, writer, data) if "main" in parts else ""
  kinds = list(config.study.ablation_kinds)
  for name, fn, title in (
      ("ablation_bits", _ablation_bits, "Bit-width ablation"),
      ("ablation_layers", _ablation_layers,
       f"Which-layers ablation ({config.lpr.mode}, {config.lpr.bits} bits per chosen "
       f"layer; order {'/'.join(layer_settings(config)[0])})")):
    if name.split("_")[1] not in parts:
      continue
    t1 = time.perf_counter()
    rows = fn(config, data, kinds)
    md += "\n" + study_lib.write_table(
        workdir, name, rows, None, f"### {title}: mean AUROC (%) over all sets, "
        f"{config.train.seeds} seeds ({time.perf_counter() - t1:.0f} s)", digits=1)
  total = time.perf_counter() - t0
  writer.write(0, {"study_seconds": total}, split="study")
  md += f"\nTotal study wall time: {total:.0f} s (shared 2-core CPU).\n"
  with open(f"{workdir}/study.md", "w") as f:
    f.write(md)
  print(md)
  return md


def plan(config):
  """One training step of every run of one deep detector, for `launch/plan.py`.

  The main table's compute is `len(model.kinds)` programs, one per deep detector, each
  all datasets x seeds x {off, on} runs vmapped and spread over the devices. XLA counts
  a scan's body once, so the planned program is one step of the AE's scan body (the exact
  `train_step` of the study, from each run's state) over every run, and `steps` = Adam steps x deep detectors
  (the other detectors are MLPs of the same widths, counted as the AE). The classical
  detectors (scikit-learn, PyOD) run on the host and are not planned. Nothing allocated.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jaxpapers.core import planner, sharding  # pylint: disable=g-import-not-at-top
  sc = config.scale
  n_runs = sc.sets * config.train.seeds * 2
  groups, bits_grid = lpr_grid(config)
  cfg = detector_config(config, "ae", groups=groups)
  det = detectors.Detector(cfg, sc.dim)
  sds = jax.ShapeDtypeStruct
  stacked = {"x_train": sds((sc.sets, sc.train_rows, sc.dim), jnp.float32),
             "y_train": sds((sc.sets, sc.train_rows), jnp.float32),
             "n_train": sds((sc.sets,), jnp.int32),
             "fmask": sds((sc.sets, sc.dim), jnp.float32),
             "x_test": sds((sc.sets, sc.test_rows, sc.dim), jnp.float32),
             "y_test": sds((sc.sets, sc.test_rows), jnp.float32),
             "tmask": sds((sc.sets, sc.test_rows), jnp.float32)}
  bits = sds((n_runs,) + np.shape(bits_grid[1]), jnp.float32)

  def one_step(run_rng, aux, carry, b, i, stacked):
    return detectors.train_step(det, run_rng, aux, b, jax.tree.map(lambda a: a[i], stacked),
                                carry, 0)

  # One run's state before its first step, with a leading run axis (shapes only).
  run_rng, aux, carry = jax.eval_shape(lambda: detectors.init_run(
      det, jax.random.key(0), jnp.zeros(bits.shape[1:]),
      jax.tree.map(lambda a: jnp.zeros(a.shape[1:], a.dtype), stacked)))
  lead = lambda t: jax.tree.map(lambda a: sds((n_runs,) + a.shape, a.dtype), t)
  fn, args = sharding.spread_plan(one_step, lead(run_rng), lead(aux), lead(carry), bits,
                                  sds((n_runs,), jnp.int32), stacked,
                                  in_axes=(0, 0, 0, 0, 0, None))
  label = (f"LPR AE step: {n_runs} runs ({sc.sets} sets x {config.train.seeds} seeds x "
           f"off/on), {sc.train_rows}/{sc.test_rows} rows x {sc.dim} features padded, "
           f"AE {sc.dim}-{'-'.join(map(str, config.model.hidden))}-{config.model.latent}, "
           f"batch {config.optim.batch}; x {config.optim.steps} steps x "
           f"{len(config.model.kinds)} detectors")
  return planner.Plan(fn, args, steps=config.optim.steps * len(config.model.kinds),
                      label=label)


def benchmark(config, workdir: str) -> dict:
  """Run-steps/s of the vmapped AE training program, LPR transform vs none."""
  data = load_datasets(config_lib.override(config, {"data.datasets":
                                                   tuple(config.data.datasets[:1])}))
  stacked = detectors.pad_stack(data)
  runs = config.train.seeds
  out = {"dataset": data[0].name, "runs": runs, "steps": config.optim.steps}
  for label, layers, bits in (("no_lpr", r"^$", 0), ("lpr", config.lpr.layers,
                                                     config.lpr.bits)):
    cfg = detector_config(config, "ae", layers)
    args = (np.zeros(runs, np.int32), np.arange(runs), np.full(runs, bits))
    t0 = time.perf_counter()
    jax.block_until_ready(detectors.fit(cfg, stacked, *args)["auroc"])
    out[f"{label}_first_call_s"] = time.perf_counter() - t0
    sec = bench.time_call(lambda: detectors.fit(cfg, stacked, *args)["auroc"],
                          warmup=0, iters=1, min_time=1.0)
    out[f"{label}_run_steps_per_s"] = runs * config.optim.steps / sec
  out["lpr_slowdown"] = out["no_lpr_run_steps_per_s"] / out["lpr_run_steps_per_s"]
  metrics_lib.write_config(workdir, config)
  metrics_lib.MetricsWriter(workdir).write(0, out, split="benchmark")
  return out
