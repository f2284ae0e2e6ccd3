"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- entry points.

`train_and_evaluate` runs the paper's comparison on `config.data.datasets`: every deep
detector in `config.model.kinds` with and without LPR (all datasets x seeds x {off, on}
in one vmapped program per detector), plus the classical baselines, and writes
`metrics.jsonl`, `config.json` and the AUROC/claims tables. `run_study` adds the
ablations over bit width and over which layers are quantized. `benchmark` times the
vmapped training program with and without the LPR transform.
"""
from __future__ import annotations

import time

import jax
import numpy as np
from sklearn import metrics

from jaxpapers.core import bench
from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.lpr import classical
from jaxpapers.papers.lpr import datasets as data_lib
from jaxpapers.papers.lpr import detectors
from jaxpapers.papers.lpr import quantize
from jaxpapers.papers.lpr import report

PATHS = ["jaxpapers/papers/lpr", "configs/lpr.py"]


def load_datasets(config) -> list:
  d = config.data
  return [data_lib.load(name, seed=config.seed, test_frac=d.test_frac, mlbench=d.mlbench_dir,
                        npz_dir=d.npz_dir, synthetic_base=d.synthetic_base,
                        synthetic_n=d.synthetic_n, synthetic_ratio=d.synthetic_ratio,
                        max_n=d.max_n)
          for name in d.datasets]


def detector_config(config, kind: str, layers: str | None = None) -> detectors.DetectorConfig:
  return detectors.DetectorConfig(
      kind=kind, hidden=tuple(config.model.hidden), latent=config.model.latent,
      mem_size=config.model.mem_size, steps=config.optim.steps, batch=config.optim.batch,
      lr=config.optim.lr, weight_decay=config.optim.weight_decay,
      noise_std=config.model.noise_std, kl_weight=config.model.kl_weight,
      entropy_weight=config.model.entropy_weight, eta=config.model.eta,
      spec=quantize.LPRSpec(layers=layers or config.lpr.layers, mode=config.lpr.mode,
                            int_bits=config.lpr.int_bits))


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
  """All datasets x seeds x bits in one program; AUROC as [n_sets, n_seeds, n_bits]."""
  ds, sd, bt = [a.ravel() for a in np.meshgrid(
      np.arange(n_sets), np.asarray(seeds), np.asarray(bits_grid, np.float32),
      indexing="ij")]
  out = detectors.fit(cfg, stacked, ds, sd, bt, opt_level)
  shape = (n_sets, len(seeds), len(bits_grid))
  return (np.asarray(out["auroc"]).reshape(shape),
          np.asarray(out["losses"]).reshape(shape + (-1,)),
          np.asarray(out["scores"]).reshape(shape + (-1,)))


def compare(config, workdir, writer=None, data=None):
  """The main comparison; returns (results[column][dataset] -> per-seed AUROCs, rows)."""
  data = data or load_datasets(config)
  names = [d.name for d in data]
  seeds = [config.seed + i for i in range(config.train.seeds)]
  results, step = {}, 0
  for kind in config.model.kinds:
    t0 = time.perf_counter()
    stacked = detectors.pad_stack(data, visible_labels(kind, data, config))
    auc, losses, _ = run_grid(detector_config(config, kind), stacked, len(data), seeds,
                              [0, config.lpr.bits], config.train.xla_opt_level)
    metrics_lib.check_finite(step, {"loss": losses[..., -1], "auroc": auc})
    results[kind] = {n: auc[i, :, 0] for i, n in enumerate(names)}
    results[kind + "+lpr"] = {n: auc[i, :, 1] for i, n in enumerate(names)}
    if writer is not None:
      # Training curves averaged over datasets and seeds, a few points per run.
      for t in np.linspace(0, losses.shape[-1] - 1, 5).astype(int):
        writer.write(step + int(t), {f"{kind}/loss": float(losses[..., 0, t].mean()),
                                     f"{kind}+lpr/loss": float(losses[..., 1, t].mean())})
      writer.write(step, {f"{kind}/auroc": float(auc[..., 0].mean()),
                          f"{kind}+lpr/auroc": float(auc[..., 1].mean()),
                          f"{kind}/seconds": time.perf_counter() - t0}, split="eval")
    step += config.optim.steps
  for name in config.classical.names:
    t0 = time.perf_counter()
    results[name] = {d.name: [_roc(d.y_test, classical.score(name, d.x_train, d.x_test, s))
                              for s in (seeds if name == "iforest" else seeds[:1])]
                     for d in data}
    if writer is not None:
      writer.write(step, {f"{name}/auroc": float(np.mean([np.mean(v) for v in
                                                          results[name].values()])),
                          f"{name}/seconds": time.perf_counter() - t0}, split="eval")
  cols = report.column_names(config.model.kinds, config.classical.names)
  return results, report.auroc_table(results, names, cols)


def _roc(y, s):
  return float(metrics.roc_auc_score(y, s))


def _header(config, title, wall):
  return (f"### {title}\n\nAUROC (%) on the test split, mean over {config.train.seeds} seeds "
          f"(deep models; IForest too), {config.optim.steps} Adam steps, LPR = "
          f"{config.lpr.mode} {config.lpr.bits} bits on `{config.lpr.layers}`. "
          f"Commit `{study_lib.git_commit(PATHS)}`, {wall:.0f} s wall on a shared 2-core CPU.")


def _main_tables(config, workdir, writer, data=None) -> str:
  """Runs `compare` and writes the AUROC and claims tables; returns their markdown."""
  t0 = time.perf_counter()
  _, rows = compare(config, workdir, writer, data)
  cols = ["dataset"] + report.column_names(config.model.kinds, config.classical.names)
  md = study_lib.write_table(workdir, "auroc", rows, cols,
                             _header(config, "AUROC", time.perf_counter() - t0), digits=1)
  claim_rows = report.claims(rows, config.model.kinds, config.classical.names,
                             data_lib.SYNTHETIC_SETS)
  return md + "\n" + study_lib.write_table(workdir, "claims", claim_rows,
                                           ["claim", "measured", "paper", "holds"])


def train_and_evaluate(config, workdir: str) -> str:
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir, total_steps=config.optim.steps
                                     * len(config.model.kinds))
  return _main_tables(config, workdir, writer)


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


def layer_rules(config) -> dict:
  """Named regexes over AE parameter paths for the which-layers ablation."""
  depth = len(config.model.hidden)  # encoder/Dense_{depth} is the code layer
  return {"all": r"(kernel|bias)$", "encoder": r"^encoder/", "decoder": r"^decoder/",
          "bottleneck": rf"^(encoder/Dense_{depth}|decoder/Dense_0)/",
          "output": rf"^decoder/Dense_{depth}/", "none": r"^$"}


def _ablation_layers(config, data, kinds):
  seeds = [config.seed + i for i in range(config.train.seeds)]
  rows = []
  for rule, rx in layer_rules(config).items():
    if rule not in config.study.layer_rules:
      continue
    row = {"layers": f"{rule} `{rx}`".replace("|", "\\|")}  # keep markdown cells intact
    for kind in kinds:
      stacked = detectors.pad_stack(data, visible_labels(kind, data, config))
      auc, _, _ = run_grid(detector_config(config, kind, rx), stacked, len(data), seeds,
                           [config.lpr.bits])
      row[kind] = 100 * float(auc.mean())
      for i, d in enumerate(data):
        if d.name == "clustered":
          row[kind + " (clustered)"] = 100 * float(auc[i].mean())
    rows.append(row)
  return rows


def run_study(config, workdir: str) -> str:
  """Main table + claims, then bit-width and which-layers ablations (tables in workdir)."""
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir)
  t0 = time.perf_counter()
  data = load_datasets(config)
  md = _main_tables(config, workdir, writer, data)
  kinds = list(config.study.ablation_kinds)
  for name, fn, title in (
      ("ablation_bits", _ablation_bits, "Bit-width ablation"),
      ("ablation_layers", _ablation_layers,
       f"Which-layers ablation ({config.lpr.mode}, {config.lpr.bits} bits)")):
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
