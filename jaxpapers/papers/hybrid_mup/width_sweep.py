"""hybrid_mup, `study=width` (issue 43 items 3-5): the width sweep past the bigram regime.

Pattern `width.pattern` ('MA' by default) at widths `width.widths` (muP base
`width.base_width`), `width.steps` steps of batch x seq_len windows (warm-up + cosine,
AdamW b2 0.95, decay 0.1 by MuAdamW's rule `optim.decay_rule='lr'`, clip 1), `width.seeds`
seeds, the LR on a 2^(1/2) grid: lr = LR0[optimizer] * 2^(k/2) for integer k. `width.plan`
names the grid per method and width ('method:width:kmin:kmax'); a point (method, width, k)
is ONE saved file with its seeds (`cells/<method>_d<width>_k<k>.json`), so a killed job
loses at most the program in flight and a grid is extended by widening the plan. Points of
one width share compiled programs of about `width.program_s` estimated seconds; a job
starts no program after `width.budget_s` seconds (run it again to continue).

Held-out: `width.eval_windows` windows of seq_len bytes from the held-out split, the first
half validation (selects the LR), the second half test. Every member logs its training
loss (fresh windows every step, so it is a held-out estimate) in bins, and the update-to-
weight ratio ||W_t+1 - W_t||_F / ||W_t||_F per parameter group (`sweep.update_groups`) in
phases of training.

Analysis (`analyse`): per method and width the seed-mean validation curve over k, the best
grid point (an edge is flagged), a quadratic fit in log2 LR around it (`fit_optimum`), a
seed bootstrap that re-selects the best point and refits (`bootstrap_optima`, seeds
resampled jointly over the widths of a method), the drift of the optimum from the base
width with its interval, the smallest drift the design detects (1.96 bootstrap sd), the
drift over all widths as one slope (octaves per width doubling, `drift_slope`), the
transfer gap on test, and an add-k bigram model on the same windows. `mup_sgd_wd0` is muP
SGD without weight decay (`WD_SCALE`: a member's decay factor, traced).

Depth (claim 1's depth half): `width.pattern` is the stack ('MA' depth 2, 'MAMA' depth 4,
...); each depth is its own sweep (own workdir), and `depth_summary` / `across_depth`
compare them: the drift base -> widest per depth, and the optimum's shift with depth at a
fixed width (seeds paired: a seed's training windows do not depend on the model).

Claim 2's axes: a cell changes one of `width.seq_len`, `width.batch_size`, `width.pattern`
(own workdir); `axis_shift` compares SP's and muP's optimum at one width between a base
cell and the axis cell (shift, bootstrap interval, detectable shift, SP's minus muP's).
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
from jaxpapers.papers.hybrid_mup import experiment
from jaxpapers.papers.hybrid_mup import model as model_lib
from jaxpapers.papers.hybrid_mup import sweep

# label -> (parametrization variant, optimizer)
METHODS = {"sp": ("sp", "adamw"), "mup": ("mup", "adamw"),
           "mup_adam_global": ("mup", "adam_global"), "mup_sgd": ("mup", "sgd"),
           "mup_sgd_wd0": ("mup", "sgd")}
# label -> factor on optim.weight_decay (1 unless named): mup_sgd_wd0 is muP SGD without
# decay, issue 43's check of the decay confound (under the width-independent rule lr x wd,
# SGD's decay per step at its best LR is ~9x Adam's)
WD_SCALE = {"mup_sgd_wd0": 0.0}
LR0 = {"adamw": 1e-2, "adam_global": 1e-2, "sgd": 1.0}
# seconds per member-step on one loaded core ('MA', 8 x 64, sequential scan), used only to
# pack points into programs of about `program_s`: d=32 this sweep's first program; 64, 128
# and 256 the README's refreshed timing row (results/issue43/timing.py on 268e73c)
COST_S = {32: 0.022, 64: 0.0266, 128: 0.0553, 256: 0.167}


def cost_s(width: int, pattern: str = "MA") -> float:
  """Estimated seconds per member-step: COST_S (measured on 'MA') times the number of
  blocks / 2 (a deeper stack costs in proportion to its blocks), ~width^2 past 256."""
  c = COST_S.get(width, COST_S[max(COST_S)] * (width / max(COST_S)) ** 2)
  return c * max(1, len(pattern.replace("-", "").replace("*", "A"))) / 2


PHASES = ((0, 10), (10, 50), (50, 150), (150, 300), (300, 400))   # fractions of 400 steps
LOSS_BINS = 10


def lr_of(method: str, k: int) -> float:
  return LR0[METHODS[method][1]] * 2.0 ** (k / 2)


def parse_plan(plan) -> list[tuple[str, int, int]]:
  """('method:width:kmin:kmax', ...) -> [(method, width, k)] in order, no repeats."""
  out = []
  for entry in plan:
    parts = entry.split(":")
    if len(parts) != 4 or parts[0] not in METHODS:
      raise ValueError(f"bad width.plan entry {entry!r}; expected 'method:width:kmin:kmax' "
                       f"with method in {sorted(METHODS)}")
    m, w, lo, hi = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
    for k in range(lo, hi + 1):
      if (m, w, k) not in out:
        out.append((m, w, k))
  return out


def _cell_config(config, width):
  s = config.width
  return config_lib.override(config, {
      "model.dim": width, "model.pattern": s.pattern, "model.base_width": s.base_width,
      "data.seq_len": s.seq_len, "train.batch_size": s.batch_size, "train.steps": s.steps,
      "model.scan": config.study.scan})


def held_out(config, data):
  s = config.width
  w = text_lib.eval_windows(data.val, s.seq_len, s.eval_windows)
  n = (len(w) // (2 * s.batch_size)) * s.batch_size
  if n == 0:
    raise ValueError(f"{len(w)} held-out windows cannot make validation and test halves")
  return {"val": w[:n], "test": w[n:2 * n]}


def _phase_means(x, steps):
  """(P, steps) -> (P, len(PHASES)) means over the phases (scaled to `steps`)."""
  out = []
  for a, b in PHASES:
    lo, hi = int(a * steps / 400), max(int(a * steps / 400) + 1, int(b * steps / 400))
    out.append(np.nanmean(x[:, lo:hi], axis=1))
  return np.stack(out, 1)


def run_program(config, data, width, points) -> dict:
  """Trains every (method, k) point of one width (all seeds) in one program; rows per point."""
  s = config.width
  cc = _cell_config(config, width)
  hybrid = model_lib.build(cc, data.vocab_size)
  members = []
  for m, k in points:
    variant, opt = METHODS[m]
    num = model_lib.numerics(variant, opt, width, s.base_width, cc.model.n_heads,
                             d_state=cc.model.d_state, base_state=cc.model.d_state,
                             std=cc.model.init_std, d_conv=cc.model.d_conv)
    num = {**num, "wd_scale": WD_SCALE.get(m, 1.0)}
    members += [{"method": m, "k": k, "lr": lr_of(m, k), "seed": config.seed + i, "num": num}
                for i in range(s.seeds)]
  t0 = time.time()
  res = sweep.train_members(cc, data, hybrid, members, held_out(config, data),
                            update_groups=sweep.update_groups(hybrid))
  took = time.time() - t0
  print(f"[width] d={width}: {len(members)} members ({points}), "
        f"params={model_lib.n_params(hybrid):,}: {took:.0f} s", flush=True)
  steps = s.steps
  curve = res["loss_curve"]
  nb = s.get("loss_bins", LOSS_BINS)
  bins = np.stack([np.nanmean(c, 1) for c in np.array_split(curve, nb, axis=1)], 1)
  upd = {k[4:]: _phase_means(v, steps) for k, v in res["stats"].items() if k.startswith("upd/")}
  out = {}
  r4 = lambda x: float(f"{x:.5g}")
  for i, mem in enumerate(members):
    out.setdefault((mem["method"], mem["k"]), []).append({
        "method": mem["method"], "dim": width, "k": mem["k"], "lr": mem["lr"],
        "seed": mem["seed"], "val_bpb": float(res["val_bpb"][i]),
        "test_bpb": float(res["test_bpb"][i]), "final_train_loss": float(res["final_loss"][i]),
        "diverged": bool(res["diverged"][i]),
        "loss_bins": [r4(x) for x in bins[i]],
        "upd": {g: [r4(x) for x in v[i]] for g, v in upd.items()},
        "program_s": round(took, 1), "program_members": len(members)})
  return out


def run(config, workdir: str):
  """study=width: trains the planned points not yet saved (until width.budget_s), then
  analyses every saved point of the plan."""
  commit = study_lib.git_commit(paths=("jaxpapers/papers/hybrid_mup", "configs/hybrid_mup.py",
                                       "jaxpapers/nn", "jaxpapers/data/text.py"))
  t_start = time.time()
  config = experiment.resolve_corpus(config)
  data = experiment.load_data(config)
  s = config.width
  cdir = os.path.join(workdir, "cells")
  os.makedirs(cdir, exist_ok=True)
  key = json.loads(json.dumps({**{n: v for n, v in s.to_dict().items()
                                  if n not in ("plan", "budget_s", "program_s", "restore")},
                               "optim": config.optim.to_dict(), "data": data.name,
                               "seed": config.seed}))
  path = lambda m, w, k: os.path.join(cdir, f"{m}_d{w}_k{k}.json")

  def saved(m, w, k):
    p = path(m, w, k)
    if not os.path.exists(p):
      return None
    with open(p) as f:
      d = json.load(f)
    return d if d.get("key") == key else None

  if s.get("restore"):
    restore(s.restore, s, config.optim.decay_rule, key, path)
  todo = [p for p in parse_plan(s.plan) if saved(*p) is None]
  by_width = {}
  for m, w, k in todo:
    by_width.setdefault(w, []).append((m, k))
  for w in sorted(by_width):
    per_point = s.seeds * s.steps * cost_s(w, s.pattern)
    n = max(1, int(s.program_s // per_point))
    pts = by_width[w]
    for i in range(0, len(pts), n):
      if time.time() - t_start > s.budget_s:
        print(f"[width] budget {s.budget_s} s spent; run again to continue", flush=True)
        break
      for (m, k), rows in run_program(config, data, w, pts[i:i + n]).items():
        with open(path(m, w, k), "w") as f:
          json.dump({"key": key, "commit": commit, "rows": rows}, f)
    else:
      continue
    break
  rows = [r for p in parse_plan(s.plan) if (d := saved(*p)) is not None for r in d["rows"]]
  # 6 significant digits: the committed rows rebuild the committed tables exactly
  rows = alias_sp_base([_short(r) for r in rows], s.base_width)
  missing = [p for p in parse_plan(s.plan) if saved(*p) is None]
  commits = sorted({saved(*p)["commit"] for p in parse_plan(s.plan) if saved(*p) is not None})
  sched = {"steps": s.steps, **{n: config.optim[n] for n in (
      "schedule", "warmup_frac", "min_lr_frac", "weight_decay", "decay_rule")}}
  res = analyse(rows, s.base_width, bigram=bigram(data, held_out(config, data)), sched=sched)
  header = (f"hybrid_mup width sweep on {data.name}: pattern {s.pattern}, widths "
            f"{sorted({w for _, w, _ in parse_plan(s.plan)})} (muP base {s.base_width}), "
            f"{s.steps} steps of {s.batch_size} x "
            f"{s.seq_len}, {s.seeds} seeds, LR = LR0 * 2^(k/2) (LR0 {LR0}), decay rule "
            f"{config.optim.decay_rule}, {s.eval_windows // 2} val / {s.eval_windows // 2} test "
            f"windows. Points computed at commit(s) {commits}; analysis at {commit}. "
            f"{len(rows)} rows, {len(missing)} planned points missing.")
  write(workdir, res, rows, header)
  print(f"[width] wall time {time.time() - t_start:.0f} s; missing {missing}", flush=True)
  return res


def restore(rows_json, s, decay_rule, key, path):
  """Writes a point file for every planned point that is not saved but whose rows are in
  `rows_json` (a committed `width_rows.json` of the same setting: its header is checked),
  so a sweep extended later (new methods or LRs) reuses the committed points instead of
  retraining them. The file's commit says where its rows came from."""
  with open(rows_json) as f:
    d = json.load(f)
  h = d["header"]
  for need in (f"{s.steps} steps of {s.batch_size} x {s.seq_len}, {s.seeds} seeds",
               f"pattern {s.pattern}, ", f"(muP base {s.base_width})", f"decay rule {decay_rule},",
               f"{s.eval_windows // 2} val / {s.eval_windows // 2} test windows"):
    if need not in h:
      raise ValueError(f"width.restore={rows_json!r} is another setting: {need!r} not in "
                       f"its header {h!r}")
  commits = h.split("computed at commit(s) ")[1].split(";")[0]
  points = {}
  for r in d["rows"]:
    if "alias_of" not in r:
      points.setdefault((r["method"], r["dim"], r["k"]), []).append(r)
  n = 0
  for (m, w, k) in parse_plan(s.plan):
    if (m, w, k) in points and not os.path.exists(path(m, w, k)):
      with open(path(m, w, k), "w") as f:
        json.dump({"key": key, "commit": f"restored from the committed rows (points computed "
                   f"at {commits})", "rows": points[(m, w, k)]}, f)
      n += 1
  print(f"[width] restored {n} points from {rows_json}", flush=True)


def _short(v):
  return (float(f"{v:.6g}") if isinstance(v, float) else
          [_short(x) for x in v] if isinstance(v, list) else
          {n: _short(x) for n, x in v.items()} if isinstance(v, dict) else v)


def alias_sp_base(rows, base_width):
  """SP's rows at the base width are muP's (the same computation there: same parameters,
  multipliers, attention scale and logits, tested), marked alias_of='mup'; unless SP was
  run at the base width itself."""
  if any(r["method"] == "sp" and r["dim"] == base_width for r in rows):
    return rows
  return rows + [{**r, "method": "sp", "alias_of": "mup"} for r in rows
                 if r["method"] == "mup" and r["dim"] == base_width]


# --- analysis -------------------------------------------------------------------------

def fit_optimum(ks, vals, half_window: int = 2) -> tuple[float, int, bool]:
  """Continuous optimum in k (half-octaves) of one validation curve.

  The best finite grid point and its neighbours within `half_window` grid steps are fitted
  with a quadratic in k; its vertex is the optimum when the curvature is positive and the
  vertex lies inside the fitted points' range, else the best grid point. Returns
  (k*, best grid k, fitted)."""
  ks, vals = np.asarray(ks, float), np.asarray(vals, float)
  ok = np.isfinite(vals)
  ks, vals = ks[ok], vals[ok]
  order = np.argsort(ks)
  ks, vals = ks[order], vals[order]
  if len(ks) == 0:
    return float("nan"), None, False
  i = int(np.argmin(vals))
  sel = np.abs(ks - ks[i]) <= half_window
  if sel.sum() < 3:
    return float(ks[i]), int(ks[i]), False
  a, b, _ = np.polyfit(ks[sel], vals[sel], 2)
  if a <= 0:
    return float(ks[i]), int(ks[i]), False
  v = -b / (2 * a)
  if not ks[sel].min() <= v <= ks[sel].max():
    return float(ks[i]), int(ks[i]), False
  return float(v), int(ks[i]), True


def _curves(rows, method):
  """{width: (ks, seeds, V (n_seeds, n_k) val bpb, T test bpb)} (inf where diverged)."""
  out = {}
  for w in sorted({r["dim"] for r in rows if r["method"] == method}):
    rs = [r for r in rows if r["method"] == method and r["dim"] == w]
    ks = sorted({r["k"] for r in rs})
    seeds = sorted({r["seed"] for r in rs})
    V = np.full((len(seeds), len(ks)), np.inf)
    T = np.full((len(seeds), len(ks)), np.inf)
    for r in rs:
      if np.isfinite(r["val_bpb"]) and not r["diverged"]:
        V[seeds.index(r["seed"]), ks.index(r["k"])] = r["val_bpb"]
        T[seeds.index(r["seed"]), ks.index(r["k"])] = r["test_bpb"]
    out[w] = (ks, seeds, V, T)
  return out


def bootstrap_optima(curves, n_boot: int = 2000, seed: int = 0) -> dict:
  """{width: (n_boot,) k*} re-selecting and refitting on seed resamples; the same resampled
  seed indices for every width of the method (runs with the same seed share their
  training windows)."""
  rng = np.random.default_rng(seed)
  n_seeds = min(len(c[1]) for c in curves.values())
  idx = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
  out = {}
  for w, (ks, _, V, _) in curves.items():
    out[w] = np.array([fit_optimum(ks, V[ix].mean(0))[0] for ix in idx])
  return out


def drift_slope(curves, boots) -> dict:
  """The optimum's drift over all widths of a method as one number: the least-squares slope
  of log2 LR* against log2 width (octaves per width doubling; 0 = transfer), with the
  95% interval and the detectable slope (1.96 sd x sqrt(n / (n - 1)), as the drift's) of
  the same seed bootstrap, refitting the line on each resample's optima."""
  widths = sorted(curves)
  x = np.log2(widths)
  k = np.array([fit_optimum(curves[w][0], curves[w][2].mean(0))[0] for w in widths])
  b = np.stack([boots[w] for w in widths], 1) / 2          # (n_boot, n_widths), octaves
  ok = np.isfinite(b).all(1)
  xc = x - x.mean()
  bs = (b[ok] - b[ok].mean(1, keepdims=True)) @ xc / (xc @ xc)
  n = min(len(curves[w][1]) for w in widths)
  return {"widths": widths, "slope": float(np.polyfit(x, k / 2, 1)[0]),
          "slope_ci95": [round(float(q), 3) for q in np.percentile(bs, [2.5, 97.5])],
          "detectable": float(1.96 * bs.std() * math.sqrt(n / max(n - 1, 1)))}


def across_depth(rows_by_depth: dict, width: int, method: str, n_boot: int = 2000) -> list[dict]:
  """The optimum of one method at one width over depths ({depth: rows} of width sweeps
  with the same seeds): the fit and the re-selecting seed bootstrap of the width drift
  (one resample of the seeds for every depth: a seed's runs share their training
  windows), the shift from the first depth in octaves with its 95% interval and the
  detectable shift. Depth is not a muP width axis: this is a by-product, not a test."""
  curves = {d: c[width] for d, rows in sorted(rows_by_depth.items())
            if width in (c := _curves(rows, method))}
  if not curves:
    return []
  boots = bootstrap_optima(curves, n_boot)
  d0 = min(curves)
  lr0 = math.log2(LR0[METHODS[method][1]])
  k0 = fit_optimum(curves[d0][0], curves[d0][2].mean(0))[0]
  out = []
  for d, (ks, seeds, V, _) in curves.items():
    k = fit_optimum(ks, V.mean(0))[0]
    row = {"method": method, "width": width, "depth": d, "grid_k": f"{ks[0]}..{ks[-1]}",
           "log2_lr_opt": lr0 + k / 2,
           "opt_ci95": [round(float(lr0 + q / 2), 3)
                        for q in np.nanpercentile(boots[d], [2.5, 97.5])],
           "shift_log2": None, "shift_ci95": None, "detectable_log2": None}
    if d != d0:
      x = (boots[d] - boots[d0]) / 2
      n = len(seeds)
      row.update({"shift_log2": (k - k0) / 2,
                  "shift_ci95": [round(float(q), 3) for q in np.nanpercentile(x, [2.5, 97.5])],
                  "detectable_log2": float(1.96 * np.nanstd(x) * math.sqrt(n / max(n - 1, 1)))})
    out.append(row)
  return out


def axis_shift(base_rows, cell_rows, width: int, methods=("sp", "mup"),
               n_boot: int = 2000) -> list[dict]:
  """Claim 2 (sequence length, batch, attention:SSM ratio, Nemotron-H shape): the optimum
  of each method at one width in a base cell and in a cell that changes one axis, both
  with the same seeds, grid spacing and held-out design. Per method: the shift of the
  optimum (cell - base, octaves) with the seed bootstrap's 95% interval (re-selecting;
  one resample of the seeds for both cells and both methods, as in `across_depth`) and
  the detectable shift; the gap in the cell at the base's best grid LR (the transferred
  LR; the grid point nearest it where the cell's grid does not hold it, flagged); and
  `sp_minus_mup`: SP's shift minus muP's with its interval, i.e. whether the design
  tells the two apart on this axis. SP and muP are the same computation only at the
  base width, so `width` must differ from it for the control to mean anything."""
  out, boots_by_m = [], {}
  for method in methods:
    cb, cc = _curves(base_rows, method).get(width), _curves(cell_rows, method).get(width)
    if cb is None or cc is None:
      continue
    boots = bootstrap_optima({0: cb, 1: cc}, n_boot)
    kb, kb_grid, _ = fit_optimum(cb[0], cb[2].mean(0))
    ks, seeds, V, T = cc
    k, kbest, fitted = fit_optimum(ks, V.mean(0))
    x = (boots[1] - boots[0]) / 2
    boots_by_m[method] = x
    n = len(seeds)
    kg = min(ks, key=lambda q: (abs(q - kb_grid), q))
    g = T[:, ks.index(kg)] - T[:, ks.index(kbest)]
    lr0 = math.log2(LR0[METHODS[method][1]])
    out.append({"method": method, "width": width, "grid_k": f"{ks[0]}..{ks[-1]}",
                "best_k": kbest, "edge": kbest in (ks[0], ks[-1]), "fitted": fitted,
                "base_log2_lr_opt": lr0 + kb / 2, "log2_lr_opt": lr0 + k / 2,
                "shift_log2": (k - kb) / 2,
                "shift_ci95": [round(float(q), 3) for q in np.nanpercentile(x, [2.5, 97.5])],
                "detectable_log2": float(1.96 * np.nanstd(x) * math.sqrt(n / max(n - 1, 1))),
                "best_val": float(V.mean(0)[ks.index(kbest)]),
                "best_test": float(T[:, ks.index(kbest)].mean()),
                "best_test_std": float(T[:, ks.index(kbest)].std()),
                "gap": float(g.mean()), "gap_std": float(g.std()),
                "gap_at_k": None if kg == kb_grid else kg})
  if "sp" in boots_by_m and "mup" in boots_by_m:
    d = boots_by_m["sp"] - boots_by_m["mup"]
    r = {q["method"]: q for q in out}
    n = min(len(_curves(cell_rows, m)[width][1]) for m in ("sp", "mup"))
    for q in out:
      q["sp_minus_mup"] = r["sp"]["shift_log2"] - r["mup"]["shift_log2"]
      q["sp_minus_mup_ci95"] = [round(float(v), 3) for v in np.nanpercentile(d, [2.5, 97.5])]
      q["sp_minus_mup_detectable"] = float(1.96 * np.nanstd(d) * math.sqrt(n / max(n - 1, 1)))
  return out


def depth_summary(rows_by_depth: dict, base_width: int, widths=(32, 128),
                  methods=("sp", "mup"), n_boot: int = 2000) -> dict:
  """Claim 1's depth half: `analyse` per depth on the rows of `widths` and `methods` (the
  drift base -> widths[-1] at every depth), and `across_depth` per method and width."""
  table = []
  for d, rows in sorted(rows_by_depth.items()):
    sel = [r for r in alias_sp_base(rows, base_width)
           if r["dim"] in widths and r["method"] in methods]
    for r in analyse(sel, base_width, n_boot=n_boot)["table"]:
      table.append({"depth": d, **{k: v for k, v in r.items() if k != "loss_bins"}})
  across = [r for m in methods for w in widths for r in across_depth(
      {d: alias_sp_base(rows, base_width) for d, rows in rows_by_depth.items()}, w, m, n_boot)]
  return {"table": table, "across_depth": across}


# Training length (issue 43 item 3, "more steps if the curve has not flattened"): the rule
# was fixed before the 800-step rows were seen. A cell's best run is FLAT when its
# seed-mean training loss (fresh windows every step: a held-out estimate) falls by at
# most FLAT_EIGHTH_NATS over the last eighth of training and FLAT_QUARTER_NATS over the
# last quarter; 0.005 nats (0.007 bpb) is the size of the validation differences between
# neighbouring grid points near an optimum, so a curve falling less than that per eighth
# is past the point where its tail could reorder them at that rate. The verdict is on the
# point estimates; `tail_drops` gives the seed standard error beside them (a drop within
# 2 se of the threshold is called flat or not by noise).
FLAT_EIGHTH_NATS, FLAT_QUARTER_NATS = 0.005, 0.010


def tail_drops(bins, steps: int, fracs=(1 / 4, 1 / 8), avg: float = 1 / 16) -> list[dict]:
  """Drop of a loss curve over its last fractions. bins: (n_seeds, nb), steps / nb steps
  each. The drop over the last f = the mean over the `avg` x steps ending at (1 - f) x
  steps minus the mean over the last `avg` x steps (one bin per end where avg x nb is not
  a whole number of bins), per seed; mean, seed std and the standard error of the mean
  (std / sqrt(n - 1)). A fraction that does not fall on a bin edge is left out (the
  400-step rows have 10 bins: their fifth and tenth, one bin per end)."""
  b = np.asarray(bins, float)
  n, nb = b.shape
  a = int(round(avg * nb)) if abs(avg * nb - round(avg * nb)) < 1e-9 and avg * nb >= 1 else 1
  out = []
  for f in fracs:
    j = (1 - f) * nb
    if abs(j - round(j)) > 1e-9 or round(j) < a:
      continue
    j = int(round(j))
    d = b[:, j - a:j].mean(1) - b[:, nb - a:].mean(1)
    out.append({"frac": f, "steps": f * steps, "avg_steps": a * steps / nb,
                "drop": float(d.mean()), "std": float(d.std()),
                "se": float(d.std() / math.sqrt(max(n - 1, 1)))})
  return out


def length_summary(rows_by_steps: dict, base_width: int, widths=(32, 128),
                   methods=("sp", "mup"), n_boot: int = 2000) -> dict:
  """Training length: the width sweep's SP / muP rows at several run lengths ({steps:
  rows}, the same seeds, held-out windows and schedule shape) analysed alike. `table`:
  `analyse` per length on `widths` and `methods` (the optimum, the drift base ->
  widths[-1], the best test) with the tail of the best run's curve (`tail_drops`: the
  last quarter and eighth where the bins allow, else the last fifth and tenth) and the
  flat verdict where both quarter and eighth exist; `shift`: the optimum's shift with the
  run length at each (method, width) (`across_depth`'s paired seed bootstrap: a seed's
  first steps see the same windows at every length)."""
  table = []
  for n, rows in sorted(rows_by_steps.items()):
    sel = [r for r in alias_sp_base(rows, base_width)
           if r["dim"] in widths and r["method"] in methods]
    for r in analyse(sel, base_width, n_boot=n_boot)["table"]:
      rs = [q for q in sel if (q["method"], q["dim"], q["k"]) == (r["method"], r["width"],
                                                                   r["best_k"])]
      lb = np.array([q["loss_bins"] for q in sorted(rs, key=lambda q: q["seed"])])
      drops = tail_drops(lb, n) or tail_drops(lb, n, (1 / 5, 1 / 10))
      by_f = {d["frac"]: d["drop"] for d in drops}
      flat = (by_f[1 / 8] <= FLAT_EIGHTH_NATS and by_f[1 / 4] <= FLAT_QUARTER_NATS
              if {1 / 4, 1 / 8} <= set(by_f) else None)
      table.append({"steps": n, **{k: v for k, v in r.items() if k != "loss_bins"},
                    "tail": [{k: (round(v, 5) if isinstance(v, float) else v)
                              for k, v in d.items()} for d in drops], "flat": flat,
                    "loss_bins": [round(float(x), 5) for x in lb.mean(0)]})
  shift = []
  for m in methods:
    for w in widths:
      got = across_depth({n: alias_sp_base(rows, base_width)
                          for n, rows in rows_by_steps.items()}, w, m, n_boot)
      shift += [{"steps": r.pop("depth"), **r} for r in got]
  return {"table": table, "shift": shift}


def length_shift_steps(rows_by_steps: dict, base_width: int, widths=(32, 128),
                       methods=("sp", "mup"), n_boot: int = 2000) -> list[dict]:
  """The optimum's shift from each run length to the next (`across_depth`'s paired seed
  bootstrap on the two lengths alone), per (method, width): rows with `from_steps`."""
  ns = sorted(rows_by_steps)
  out = []
  for a, b in zip(ns, ns[1:]):
    pair = {n: alias_sp_base(rows_by_steps[n], base_width) for n in (a, b)}
    for m in methods:
      for w in widths:
        out += [{"from_steps": a, "steps": r.pop("depth"), **r}
                for r in across_depth(pair, w, m, n_boot) if r["depth"] == b]
  return out


def analyse(rows, base_width: int, *, bigram: dict | None = None, n_boot: int = 2000,
            sched: dict | None = None) -> dict:
  """Tables from the rows; `sched` (steps, schedule, warmup_frac, min_lr_frac, weight_decay,
  decay_rule) adds the decay-only update ratio to `upd_contrast`."""
  table, lr_rows, upd_rows, slopes = [], [], [], []
  for method in METHODS:
    curves = _curves(rows, method)
    if not curves:
      continue
    boots = bootstrap_optima(curves, n_boot)
    if len(curves) >= 2:
      slopes.append({"method": method, **drift_slope(curves, boots)})
    base = curves.get(base_width)
    kb = fit_optimum(base[0], base[2].mean(0))[0] if base else float("nan")
    kb_grid = fit_optimum(base[0], base[2].mean(0))[1] if base else None
    for w, (ks, seeds, V, T) in curves.items():
      vmean = V.mean(0)
      kstar, kbest, fitted = fit_optimum(ks, vmean)
      edge = kbest in (ks[0], ks[-1])
      b = boots[w]
      row = {"method": method, "width": w, "grid_k": f"{ks[0]}..{ks[-1]}", "n_seeds": len(seeds),
             "best_k": kbest, "best_lr": lr_of(method, kbest) if kbest is not None else None,
             "edge": edge, "fitted": fitted,
             "log2_lr_opt": math.log2(LR0[METHODS[method][1]]) + kstar / 2,
             "opt_ci95": [round(float(math.log2(LR0[METHODS[method][1]]) + q / 2), 3)
                          for q in np.nanpercentile(b, [2.5, 97.5])],
             "best_val": float(vmean[ks.index(kbest)]) if kbest is not None else None,
             "best_test": float(T[:, ks.index(kbest)].mean()) if kbest is not None else None,
             "best_test_std": float(T[:, ks.index(kbest)].std()) if kbest is not None else None}
      row.update({"drift_log2": None, "drift_ci95": None, "detectable_log2": None,
                  "transferred_lr": None, "gap": None, "gap_std": None, "gap_at_k": None})
      if base is not None and w != base_width:
        d = (b - boots[base_width]) / 2
        row["drift_log2"] = (kstar - kb) / 2
        row["drift_ci95"] = [round(float(x), 3) for x in np.nanpercentile(d, [2.5, 97.5])]
        # the bootstrap's variance of a mean over n seeds is (n - 1) / n of the sampling
        # variance: corrected here (3 seeds: x 1.22)
        n = len(seeds)
        row["detectable_log2"] = float(1.96 * np.nanstd(d) * math.sqrt(n / max(n - 1, 1)))
        # the transferred LR is the base's best grid point; where this width's grid does
        # not reach it, the gap is taken at the grid point nearest it (a lower bound on
        # the gap when the curve rises towards the transferred LR), flagged gap_at_k
        kg = min(ks, key=lambda k: (abs(k - kb_grid), k))
        g = T[:, ks.index(kg)] - T[:, ks.index(kbest)]
        row["gap"], row["gap_std"] = float(g.mean()), float(g.std())
        row["transferred_lr"] = lr_of(method, kb_grid)
        row["gap_at_k"] = None if kg == kb_grid else kg
      table.append(row)
      for j, k in enumerate(ks):
        lr_rows.append({"method": method, "width": w, "k": k, "lr": lr_of(method, k),
                        "val_mean": float(V[:, j].mean()), "val_std": float(V[:, j].std()),
                        "test_mean": float(T[:, j].mean()), "test_std": float(T[:, j].std())})
      if kbest is not None:
        rs = [r for r in rows if r["method"] == method and r["dim"] == w and r["k"] == kbest]
        for g in rs[0]["upd"]:
          ph = np.mean([r["upd"][g] for r in rs], 0)
          upd_rows.append({"method": method, "width": w, "group": g,
                           **{f"t{a}-{b2}": float(x) for (a, b2), x in zip(PHASES, ph)}})
        lb = np.mean([r["loss_bins"] for r in rs], 0)
        row["loss_bins"] = [float(x) for x in lb]
        row["last_bin_drop"] = float(lb[-2] - lb[-1])
  return {"table": table, "lr_rows": lr_rows, "upd_rows": upd_rows, "drift_slopes": slopes,
          "upd_slopes": update_slopes(rows, base_width),
          "upd_contrast": update_contrast(rows, base_width, sched), "bigram": bigram,
          "sched": sched}


ABLATION_CONTRAST = ("mup", "mup_adam_global", "mup_sgd", "mup_sgd_wd0")


def decay_only_ratio(lr: float, sched: dict) -> list[float]:
  """||dW||/||W|| per phase of a decayed matrix whose gradient term is zero: lr_t x wd under
  MuAdamW's rule (`lm.schedule`'s warm-up + cosine, in NumPy). A group whose measured
  ratio sits at this level is moved by its weight decay, not by its gradients."""
  steps = sched["steps"]
  t = np.arange(steps, dtype=float)
  warm = max(1, int(sched["warmup_frac"] * steps))
  frac = np.clip((t - warm) / max(1, steps - warm), 0.0, 1.0)
  floor = sched["min_lr_frac"]
  down = (floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * frac))
          if sched["schedule"] == "cosine" else np.ones_like(frac))
  lr_t = lr * np.where(t < warm, t / warm, down)
  return [float(x) for x in _phase_means((lr_t * sched["weight_decay"])[None], steps)[0]]


def update_contrast(rows, base_width: int, sched: dict | None = None) -> list[dict]:
  """Item 5's Adam-vs-SGD contrast: `update_slopes` of muP under AdamW, global Adam and
  SGD over the SAME widths (those every one of them was run at), each at its own
  transferred LR (the base width's best grid point). Empty unless two of them share two
  widths."""
  have = {m: {r["dim"] for r in rows if r["method"] == m} for m in ABLATION_CONTRAST}
  have = {m: w for m, w in have.items() if w}
  if len(have) < 2:
    return []
  widths = set.intersection(*have.values())
  if len(widths) < 2:
    return []
  out = update_slopes([r for r in rows if r["method"] in have and r["dim"] in widths],
                      base_width)
  if sched and sched["decay_rule"] == "lr" and sched["weight_decay"]:
    phases = [f"t{a}-{b}" for a, b in PHASES]
    for r in out:   # every tracked group but the embedding is decayed (DECAYED roles);
      #              none under a method without decay (WD_SCALE 0)
      off = r["group"] == "embed" or WD_SCALE.get(r["method"], 1.0) != 1.0
      r["decay_only"] = None if off else float(
          f"{decay_only_ratio(r['lr'], sched)[phases.index(r['phase'])]:.4g}")
  return out


def update_slopes(rows, base_width: int) -> list[dict]:
  """Log-log slope over width of the update-to-weight ratio (seed mean) per method, group
  and phase, at ONE LR for every width: the base width's best grid point (the LR that
  transfers), or the grid point nearest it that every width has. Adam's per-coordinate update ~ lr x mult whatever the gradient's scale, so
  at a fixed LR the RMS ratio of a matrix with init std ~ fan_in^-1/2 goes as
  width^-1/2 under muP (mult 1/width) and width^+1/2 under SP (mult 1); with std fixed
  (0.02: embedding, unembedding, SP's Transformer layers) as width^0 under SP."""
  out = []
  for method in METHODS:
    curves = _curves(rows, method)
    if base_width not in curves:
      continue
    ks, _, V, _ = curves[base_width]
    kbest = fit_optimum(ks, V.mean(0))[1]
    common = set.intersection(*[set(c[0]) for c in curves.values()])
    if len(curves) < 2 or not common:
      continue
    k0 = min(common, key=lambda k: (abs(k - kbest), k))   # nearest the base's best
    rs = [r for r in rows if r["method"] == method and r["k"] == k0]
    widths = sorted({r["dim"] for r in rs})
    for g in rs[0]["upd"]:
      for j, (a, b) in enumerate(PHASES):
        y = [np.mean([r["upd"][g][j] for r in rs if r["dim"] == w]) for w in widths]
        out.append({"method": method, "lr": lr_of(method, k0), "group": g, "phase": f"t{a}-{b}",
                    "widths": widths, "ratio": [float(f"{v:.4g}") for v in y],
                    "slope": float(np.polyfit(np.log2(widths), np.log2(y), 1)[0])})
  return out


def bigram(data, windows, ks=(1e-4, 1e-3, 1e-2, 0.1, 0.3, 1, 3, 10)) -> dict:
  """Add-k bigram counts on the training split, k chosen on validation, test bits per byte."""
  tr = np.asarray(data.train)
  counts = np.zeros((data.vocab_size, data.vocab_size))
  np.add.at(counts, (tr[:-1], tr[1:]), 1)

  def bpb(win, k):
    p = (counts + k) / (counts + k).sum(1, keepdims=True)
    return float(-np.log(p[win[:, :-1], win[:, 1:]]).sum() / (math.log(2) * win[:, 1:].size))
  vs = [bpb(windows["val"], k) for k in ks]
  k = ks[int(np.argmin(vs))]
  return {"k": k, "k_grid": list(ks), "val_bpb": min(vs), "test_bpb": bpb(windows["test"], k)}


def write(workdir, res, rows, header):
  t = [{k: v for k, v in r.items() if k != "loss_bins"} for r in res["table"]]
  bg = res["bigram"]
  h = header + (f" Bigram (add-k, k={bg['k']} chosen on validation): test {bg['test_bpb']:.3f} "
                f"bpb." if bg else "")
  md = study_lib.write_table(workdir, "width_summary", t, header=h, digits=3)
  study_lib.write_table(workdir, "width_lr", res["lr_rows"], header=h, digits=4)
  study_lib.write_table(workdir, "width_updates", res["upd_rows"], header=h, digits=4)
  study_lib.write_table(workdir, "width_drift_slopes", res["drift_slopes"], header=h, digits=3)
  study_lib.write_table(workdir, "width_update_slopes", res["upd_slopes"], header=h, digits=3)
  if res["upd_contrast"]:
    study_lib.write_table(workdir, "width_update_contrast", res["upd_contrast"], header=h,
                          digits=3)
  with open(os.path.join(workdir, "width_rows.json"), "w") as f:
    # the rows as trained (SP's base-width alias is rebuilt by alias_sp_base)
    json.dump({"header": h, "rows": [r for r in rows if "alias_of" not in r], "bigram": bg,
               "sched": res["sched"],
               "loss_bins": {f"{r['method']}_d{r['width']}": r.get("loss_bins")
                             for r in res["table"]}}, f)
  from jaxpapers.papers.hybrid_mup import plots  # pylint: disable=g-import-not-at-top
  plots.width_sweep(workdir, res)
  print(md, flush=True)


def load_committed_rows(results_dir: str, dirs: dict):
  """{key: rows}, {key: header} of the committed `<results_dir>/<name>/width_rows.json` for
  each key -> name of `dirs` (missing folders skipped): the cross-sweep tables' input."""
  rows, headers = {}, {}
  for key, name in dirs.items():
    p = os.path.join(results_dir, name, "width_rows.json")
    if os.path.exists(p):
      with open(p) as f:
        saved = json.load(f)
      rows[key], headers[key] = saved["rows"], saved["header"]
  return rows, headers
