"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): the study.

Cells are LR sweeps of one model shape, each ONE compiled population (`sweep.py`):

  width      widths study.widths, pattern study.pattern: SP and muP under AdamW, and muP
             under Adam with a global second moment and under momentum SGD (the
             decomposition), muP_shape (1 seed), all LRs x seeds in the same program
  depth      the pattern repeated twice (width widths[1]): SP and muP
  seq        sequence length doubled (width widths[1]): muP
  batch      batch doubled (width widths[1]): muP
  ratio      attention:SSM 1:3 ('MMMA') instead of the base 1:1 'MA' (width widths[1]): muP
  nemotron   a Nemotron-H-shaped pattern 'M-M-M-*-' (width widths[1]): muP

For every cell and method the best LR is chosen on the validation half of the held-out
windows (mean over seeds) and the loss is reported on the other half (test). The
transfer gap of a target cell is
  gap = test bpb at the LR chosen at the SOURCE cell - test bpb at the target's own best LR
(source: the smallest width for the width sweep, the base cell at widths[1] for the
others), per seed (the LRs are chosen once, on the seed-mean validation loss), reported
as mean and std over seeds. The coordinate check reads the activation scales every step
of every member (model.forward) and fits their log-log slope against width.

Results are saved per cell (`cells/<name>.json`) so an interrupted study resumes.
"""
from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import study as study_lib
from jaxpapers.data import text as text_lib
from jaxpapers.papers.hybrid_mup import coord
from jaxpapers.papers.hybrid_mup import experiment
from jaxpapers.papers.hybrid_mup import model as model_lib
from jaxpapers.papers.hybrid_mup import sweep

PATHS = ("jaxpapers/papers/hybrid_mup", "configs/hybrid_mup.py", "jaxpapers/nn",
         "jaxpapers/data/text.py")
# (label, parametrization variant, optimizer)
METHODS = {"sp": ("sp", "adamw"), "mup": ("mup", "adamw"),
           "mup_adam_global": ("mup", "adam_global"), "mup_sgd": ("mup", "sgd"),
           "mup_shape": ("mup_shape", "adamw")}
COORD_STEP_FRACS = (0.0, 0.1, 0.25, 0.5, 1.0)
COORD_SLOPE_TOL = 0.2   # |d log rms / d log width| above this fails the coordinate check


def cells(config) -> list[dict]:
  s = config.study
  mid = s.widths[1] if len(s.widths) > 1 else s.widths[0]
  base = dict(pattern=s.pattern, seq_len=s.seq_len, batch_size=s.batch_size)
  out = [dict(name=f"width{w}", family="width", dim=w,
              methods=("sp", "mup", "mup_adam_global", "mup_sgd", "mup_shape"), **base)
         for w in s.widths]
  out += [
      dict(name="depth2x", family="depth", dim=mid, methods=("sp", "mup"),
           **{**base, "pattern": s.pattern * 2}),
      dict(name="seq2x", family="seq", dim=mid, methods=("mup",),
           **{**base, "seq_len": s.seq_len * 2}),
      dict(name="batch2x", family="batch", dim=mid, methods=("mup",),
           **{**base, "batch_size": s.batch_size * 2}),
      dict(name="ratio1to3", family="ratio", dim=mid, methods=("mup",),
           **{**base, "pattern": "MMMA"}),
      dict(name="nemotron", family="nemotron", dim=mid, methods=("mup",),
           **{**base, "pattern": "M-M-M-*-"}),
  ]
  wanted = s.sweeps.split("+") if s.sweeps != "all" else None
  return [c for c in out if wanted is None or c["family"] in wanted]


def cell_config(config, cell):
  return config_lib.override(config, {
      "model.dim": cell["dim"], "model.pattern": cell["pattern"],
      "model.base_width": config.study.base_width, "data.seq_len": cell["seq_len"],
      "train.batch_size": cell["batch_size"], "train.steps": config.study.steps,
      "model.scan": config.study.scan})


def run_cell(config, data, cell) -> list[dict]:
  """Every (method, LR, seed) member of one cell; one row per member."""
  s = config.study
  cc = cell_config(config, cell)
  hybrid = model_lib.build(cc, data.vocab_size)
  T, B = cell["seq_len"], cell["batch_size"]
  windows = text_lib.eval_windows(data.val, T, s.eval_windows)
  n = (len(windows) // (2 * B)) * B
  if n == 0:
    raise ValueError(f"{len(windows)} held-out windows cannot make validation and test "
                     f"halves of whole batches of {B}; raise study.eval_windows")
  split = {"val": windows[:n], "test": windows[n:2 * n]}
  members = []
  for label in cell["methods"]:
    variant, opt = METHODS[label]
    lrs = s.sgd_lrs if opt == "sgd" else s.lrs
    seeds = [config.seed] if label == "mup_shape" else [config.seed + i for i in range(s.seeds)]
    num = model_lib.numerics(variant, opt, cell["dim"], s.base_width, cc.model.n_heads,
                             d_state=cc.model.d_state, base_state=cc.model.d_state,
                             std=cc.model.init_std, d_conv=cc.model.d_conv)
    for lr in lrs:
      for seed in seeds:
        members.append({"method": label, "lr": float(lr), "seed": seed, "num": num})
  t0 = time.time()
  res = sweep.train_members(cc, data, hybrid, members, split)
  print(f"[study] cell {cell['name']}: {len(members)} members, d={cell['dim']}, "
        f"pattern={cell['pattern']}, T={T}, B={B}, params={model_lib.n_params(hybrid):,}: "
        f"{time.time() - t0:.0f} s", flush=True)
  steps = s.steps
  at = sorted({min(steps - 1, int(round(f * (steps - 1)))) for f in COORD_STEP_FRACS})
  rows = []
  for i, m in enumerate(members):
    rows.append({"cell": cell["name"], "family": cell["family"], "dim": cell["dim"],
                 "pattern": cell["pattern"], "seq_len": T, "batch_size": B,
                 "method": m["method"], "lr": m["lr"], "seed": m["seed"],
                 "val_bpb": float(res["val_bpb"][i]), "test_bpb": float(res["test_bpb"][i]),
                 "final_train_loss": float(res["final_loss"][i]),
                 "diverged": bool(res["diverged"][i]),
                 "coord": {k: {str(t): float(v[i, t]) for t in at}
                           for k, v in res["stats"].items()},
                 "loss_curve": [float(x) for x in res["loss_curve"][i, ::max(1, steps // 30)]]})
  return rows


# --- analysis ---------------------------------------------------------------------------

def lr_table(rows, cell, method):
  """{lr: (val mean, test mean, test per seed {seed: bpb})} for one cell and method."""
  out = {}
  for r in rows:
    if r["cell"] == cell and r["method"] == method:
      out.setdefault(r["lr"], []).append(r)
  table = {}
  for lr, rs in sorted(out.items()):
    val = np.array([x["val_bpb"] for x in rs])
    test = np.array([x["test_bpb"] for x in rs])
    table[lr] = (float(np.mean(val)), float(np.mean(test)),
                 {x["seed"]: x["test_bpb"] for x in rs}, float(np.std(test)))
  return table


def best_lr(table):
  finite = {lr: v for lr, v in table.items() if np.isfinite(v[0])}
  return min(finite, key=lambda lr: finite[lr][0]) if finite else None


def gap(source_table, target_table):
  """(gap mean, gap std over seeds, transferred LR, target's best LR)."""
  lr_src, lr_tgt = best_lr(source_table), best_lr(target_table)
  if lr_src is None or lr_tgt is None:
    return float("nan"), float("nan"), lr_src, lr_tgt
  if lr_src not in target_table:
    return float("nan"), float("nan"), lr_src, lr_tgt
  a, b = target_table[lr_src][2], target_table[lr_tgt][2]
  per_seed = np.array([a[s] - b[s] for s in b if s in a])
  per_seed = np.where(np.isfinite(per_seed), per_seed, np.inf)
  return float(np.mean(per_seed)), float(np.std(per_seed)), lr_src, lr_tgt


def analyse(config, rows):
  s = config.study
  mid = s.widths[1] if len(s.widths) > 1 else s.widths[0]
  present = {r["cell"] for r in rows}
  transfer = []
  src = f"width{s.widths[0]}"
  for label in METHODS:
    if label == "mup_shape" or src not in present:
      continue
    st = lr_table(rows, src, label)
    for w in s.widths:
      tt = lr_table(rows, f"width{w}", label)
      if not tt:
        continue
      g, gs, lr_s, lr_t = gap(st, tt)
      transfer.append({"family": "width", "cell": f"width{w}", "method": label,
                       "source": src, "transferred_lr": lr_s, "best_lr": lr_t,
                       "lr_shift_log2": math.log2(lr_t / lr_s) if lr_s and lr_t else float("nan"),
                       "best_test_bpb": tt[lr_t][1] if lr_t else float("nan"),
                       "gap": g, "gap_std": gs})
  base = f"width{mid}"
  for c in cells(config):
    if c["family"] == "width" or c["name"] not in present or base not in present:
      continue
    for label in c["methods"]:
      st, tt = lr_table(rows, base, label), lr_table(rows, c["name"], label)
      g, gs, lr_s, lr_t = gap(st, tt)
      transfer.append({"family": c["family"], "cell": c["name"], "method": label,
                       "source": base, "transferred_lr": lr_s, "best_lr": lr_t,
                       "lr_shift_log2": math.log2(lr_t / lr_s) if lr_s and lr_t else float("nan"),
                       "best_test_bpb": tt[lr_t][1] if lr_t else float("nan"),
                       "gap": g, "gap_std": gs})
  return transfer, coord_check(config, rows)


def coord_check(config, rows):
  """Log-log slope of each activation's RMS vs width, per method and step (seed 0,
  the LR study.lrs[len // 2]), from the width cells."""
  s = config.study
  lr = sorted(s.lrs)[len(s.lrs) // 2]
  out = []
  for label in ("sp", "mup", "mup_shape"):
    rs = sorted([r for r in rows if r["family"] == "width" and r["method"] == label
                 and r["seed"] == config.seed and abs(r["lr"] - lr) < 1e-12],
                key=lambda r: r["dim"])
    if len(rs) < 2:
      continue
    x = np.log2([r["dim"] for r in rs])
    for kind in rs[0]["coord"]:
      for t in rs[0]["coord"][kind]:
        y = np.log2([max(r["coord"][kind][t], 1e-30) for r in rs])
        slope = float(np.polyfit(x, y, 1)[0])
        # step 0 is the init alone (muP's logits shrink ~ 1/sqrt(width) there by design);
        # the check is about the activations after updates, as in microsoft/mup
        out.append({"method": label, "lr": lr, "kind": kind, "step": int(t),
                    "rms": [r["coord"][kind][t] for r in rs], "slope": slope,
                    "passes": abs(slope) <= COORD_SLOPE_TOL if int(t) > 0 else None})
  return out


# --- entry --------------------------------------------------------------------------------

def _cached(path: str, key, commit: str, compute) -> list[dict]:
  """A cell's rows: reused from `path` when it was saved under the same settings `key`,
  else computed and saved (so a killed study resumes cell by cell)."""
  if os.path.exists(path):
    with open(path) as f:
      saved = json.load(f)
    if saved.get("key") == key:
      print(f"[study] reused {path} (commit {saved['commit']})", flush=True)
      return saved["rows"]
  rows = compute()
  with open(path, "w") as f:
    json.dump({"key": key, "commit": commit, "rows": rows}, f)
  return rows


def coord_cell(config, data, width: int) -> list[dict]:
  """One width of the coordinate check: every (method, seed) in one program."""
  k = config.coord
  cc = config_lib.override(config, {
      "model.dim": width, "model.pattern": k.pattern, "model.base_width": k.base_width,
      "data.seq_len": k.seq_len, "train.batch_size": k.batch_size, "model.scan": config.study.scan})
  hybrid = model_lib.build(cc, data.vocab_size)
  batch = text_lib.token_windows(data.train, k.batch_size, k.seq_len)(config.seed, 0)
  members = []
  for method in k.methods:
    num = model_lib.numerics(method, "adamw", width, k.base_width, cc.model.n_heads,
                             d_state=cc.model.d_state, base_state=cc.model.d_state,
                             std=cc.model.init_std)
    members += [{"method": method, "seed": config.seed + i, "num": num} for i in range(k.seeds)]
  t0 = time.time()
  o = cc.optim
  res = coord.run_members(hybrid, members, batch, lr=k.lr, steps=k.steps, b1=o.b1, b2=o.b2,
                          eps=o.eps)
  print(f"[coord] d={width}: {len(members)} members, params={model_lib.n_params(hybrid):,}: "
        f"{time.time() - t0:.0f} s", flush=True)
  return [{"method": m["method"], "dim": width, "seed": m["seed"],
           "loss": [float(x) for x in res["loss"][i]],
           "stats": {n: [float(x) for x in v[i]] for n, v in res["stats"].items()}}
          for i, m in enumerate(members)]


def run_coord(config, workdir: str):
  """study=coord: the coordinate check, one saved cell per width (a killed run resumes)."""
  commit = study_lib.git_commit(paths=PATHS)
  t_start = time.time()
  data = experiment.load_data(config)
  k = config.coord
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  key = json.loads(json.dumps({**{n: v for n, v in k.to_dict().items() if n != "widths"},
                               "optim": config.optim.to_dict(), "model": config.model.to_dict(),
                               "data": data.name, "seed": config.seed}))
  rows, fresh = [], []
  for w in k.widths:
    rows += _cached(os.path.join(workdir, "cells", f"coord_d{w}.json"), key, commit,
                    lambda w=w: fresh.append(w) or coord_cell(config, data, w))
  table = coord.slopes(rows, k.tol)
  elapsed = time.time() - t_start
  header = (f"hybrid_mup coordinate check on {data.name}: pattern {k.pattern}, widths "
            f"{list(k.widths)} (muP base {k.base_width}), {k.seeds} seeds, t = 1..{k.steps} "
            f"on one fixed batch of {k.batch_size} x {k.seq_len}, Adam LR {k.lr} constant "
            f"(b1 {config.optim.b1}, b2 {config.optim.b2}; no clipping or decay); slope = "
            f"d log2(stat) / d log2(width) of the seed-mean, flat if |slope| <= {k.tol}. "
            f"Commit {commit}. Wall time {elapsed:.0f} s"
            + ("." if len(fresh) == len(k.widths) else
               f" (widths {sorted(set(k.widths) - set(fresh))} reused from cells/, "
               "stamped with the commit that computed them)."))
  study_lib.write_table(workdir, "coord_slopes", table, header=header, digits=3)
  md = study_lib.write_table(workdir, "coord_summary", coord.summary(table, k.tol),
                             header=header, digits=2)
  # the raw rows (6 significant digits: the committed copy stays small)
  short = lambda v: ([float(f"{x:.6g}") for x in v] if isinstance(v, list) else
                     {n: short(x) for n, x in v.items()} if isinstance(v, dict) else v)
  with open(os.path.join(workdir, "coord_rows.json"), "w") as f:
    json.dump({"header": header, "commit": commit,
               "rows": [{n: short(v) for n, v in r.items()} for r in rows]}, f)
  from jaxpapers.papers.hybrid_mup import plots  # pylint: disable=g-import-not-at-top
  plots.coord_protocol(workdir, rows, "l1", "coord_protocol.png")
  print(md, flush=True)
  print(f"[coord] commit {commit}, wall time {elapsed:.0f} s", flush=True)
  return table


def run(config, workdir: str):
  if config.study.get("kind", "transfer") == "coord":
    return run_coord(config, workdir)
  if config.study.get("kind", "transfer") == "width":
    from jaxpapers.papers.hybrid_mup import width_sweep  # pylint: disable=g-import-not-at-top
    return width_sweep.run(config, workdir)
  if config.study.get("kind", "transfer") != "transfer":
    raise ValueError(f"unknown study {config.study.kind!r}; expected 'transfer', 'coord' "
                     "or 'width'")
  commit = study_lib.git_commit(paths=PATHS)
  t_start = time.time()
  data = experiment.load_data(config)
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  rows = []
  # a cell is reused when every study setting but the choice of sweeps matches
  key = json.loads(json.dumps({**{k: v for k, v in config.study.to_dict().items()
                                  if k != "sweeps"}, "optim": config.optim.to_dict()}))
  for cell in cells(config):
    rows += _cached(os.path.join(workdir, "cells", f"{cell['name']}.json"), key, commit,
                    lambda cell=cell: run_cell(config, data, cell))
  transfer, coord = analyse(config, rows)
  elapsed = time.time() - t_start
  s = config.study
  header = (f"hybrid_mup study on {data.name}: pattern {s.pattern}, widths "
            f"{list(s.widths)} (base {s.base_width}), {s.steps} steps of batch "
            f"{s.batch_size} x {s.seq_len}, {s.seeds} seeds, LRs {list(s.lrs)} (SGD "
            f"{list(s.sgd_lrs)}); LR chosen on validation, gap on test. Commit {commit}. "
            f"Wall time {elapsed:.0f} s.")
  md = study_lib.write_table(workdir, "transfer", transfer, header=header, digits=4)
  study_lib.write_table(workdir, "coord_check", [
      {k: v for k, v in r.items() if k != "rms"} for r in coord], digits=3)
  slim = [{k: v for k, v in r.items() if k not in ("coord", "loss_curve")} for r in rows]
  study_lib.write_table(workdir, "rows", slim, digits=4)
  from jaxpapers.papers.hybrid_mup import plots  # pylint: disable=g-import-not-at-top
  plots.lr_curves(workdir, config, rows)
  plots.coord_check(workdir, config, coord)
  print(md, flush=True)
  print(f"[study] commit {commit}, wall time {elapsed:.0f} s", flush=True)
  return transfer
