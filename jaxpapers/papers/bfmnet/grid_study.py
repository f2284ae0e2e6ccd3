"""BFMNet: truthful budget-feasible procurement menus -- the tuned 16-cell grid (issue 17).

`study=grid`: for one or more n (`ns=5`, one process per n keeps each part short), the
4 (valuation, cost) cells, BFMNet and the ascent / ex-post RegretNet, each with its
learning rate -- and, at n in `penalty_ns`, BFMNet's raw-overspend hinge weight --
chosen per (network, cell) on validation markets, then trained with `seeds` seeds at the
chosen setting and audited on the main study's test instances.

Protocol, per n and network:
  1. sweep: every (lr[, hinge]) x cell at seed `cfg.seed`, one vmapped program;
  2. validation: value (and for RegretNet regret and ex-post overspend) on validation
     markets from their own key (`cfg.seed + 30_011`; test is `cfg.seed + 10_007`);
     `choose` reads these validation rows only (the test set is not even drawn yet);
  3. seeds: the chosen setting trained at seeds cfg.seed + 1, ... (the sweep's run is
     seed cfg.seed), one vmapped program;
  4. test: every (cell, seed) run audited on the test instances (value / optimum,
     budget / IR violations, exhaustive-grid regret; for RegretNet also ascent regret
     and hard ex-post lottery draws; for BFMNet the raw menus' overspends).
Every part writes `grid_n{n}[_{kind}]_rows.json` (test rows), `..._sweep.json`
(validation rows), `..._meta.json` (commit, timings) and a markdown table into the
workdir; `readme_table` rebuilds the README table from the rows of all parts.
`grid_kinds` runs one network per part (short parts at large n).
"""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.bfmnet import evaluate
from jaxpapers.papers.bfmnet import experiment
from jaxpapers.papers.bfmnet import markets as markets_lib

VAL_KEY_OFFSET = 30_011   # validation markets (the neural study's key)
KINDS = ("bfmnet", "regretnet", "rochetnet")
LABELS = {"bfmnet": "BFMNet", "regretnet": "RegretNet", "rochetnet": "RochetNet"}


def _kinds(config):
  unknown = set(config.study.grid_kinds) - set(KINDS)
  if unknown:
    raise ValueError(f"grid_kinds: unknown {sorted(unknown)}; known: {KINDS}")
  return [k for k in KINDS if k in config.study.grid_kinds]


def settings(config, kind: str, n: int) -> list[tuple[float, float]]:
  """The (lr, hinge weight) grid a network is tuned over at n."""
  if kind == "regretnet":
    return [(float(lr), 0.0) for lr in config.study.regretnet_lrs]
  if kind == "rochetnet":
    return [(float(lr), 0.0) for lr in config.study.lrs]
  pens = config.study.penalties if n in config.study.penalty_ns else (0.0,)
  return [(float(lr), float(p)) for p in pens for lr in config.study.lrs]


def choose(sweep_rows: list[dict], max_regret: float, max_overspend: float) -> dict:
  """(n, cell, method) -> index of the chosen setting, from validation rows only.

  Reads only `setting`, `val_value` and, for RegretNet, `val_regret` / `val_overspend`.
  BFMNet and RochetNet (exactly DSIC and budget feasible at every setting): the highest
  validation value. RegretNet: the highest validation value among the settings with validation
  regret <= max_regret and ex-post overspend probability <= max_overspend; where none
  qualifies, the smallest regret + overspend.
  """
  groups: dict = {}
  for r in sweep_rows:
    groups.setdefault((r["n"], r["cell"], r["method"]), []).append(r)
  out = {}
  for key, rows in groups.items():
    rows = sorted(rows, key=lambda r: r["setting"])
    v = np.array([r["val_value"] for r in rows], np.float64)
    if key[2] in ("bfmnet", "rochetnet"):
      out[key] = rows[int(np.argmax(v))]["setting"]
      continue
    reg = np.array([r["val_regret"] for r in rows])
    over = np.array([r["val_overspend"] for r in rows])
    ok = (reg <= max_regret) & (over <= max_overspend)
    i = int(np.argmax(np.where(ok, v, -np.inf))) if ok.any() else int(np.argmin(reg + over))
    out[key] = rows[i]["setting"]
  return out


def _builder(kind, model):
  if kind == "bfmnet":
    return lambda p: evaluate.bfmnet_mechanism(model, p)
  if kind == "rochetnet":
    return lambda p: evaluate.rochetnet_mechanism(model, p)
  return lambda p: evaluate.regretnet_mechanism(model, p)


def _per_run(fn):
  """jit(lax.map) of fn(params, *markets) over the leading run axis: one run's memory."""
  return jax.jit(lambda params, *mk: jax.lax.map(lambda a: fn(*a), (params,) + mk))


def validate(cfg, kind, model, params, val, val_reg, ev):
  """Validation metrics per run: value (mean value / mean weight, as in training), and
  for RegretNet grid + ascent regret and the ex-post overspend probability."""
  build = _builder(kind, model)
  grid = jnp.linspace(0.0, markets_lib.COST_MAX, ev.regret_grid)
  value = _per_run(lambda p, m: evaluate.outcomes(build(p), m)[2].mean())(params, val)
  out = {"val_value": np.asarray(value)}
  if kind == "regretnet":
    reg = _per_run(lambda p, m: evaluate.regrets_ascent(
        model, p, m, grid, ev.ascent_steps, ev.ascent_lr).mean())(params, val_reg)
    over = _per_run(lambda p, m: evaluate.regretnet_expost(
        model, p, m, jax.random.PRNGKey(cfg.seed + 40_009), ev.expost_samples)[0].mean())(
            params, val)
    out.update(val_regret=np.asarray(reg), val_overspend=np.asarray(over))
  return out


def test_audit(cfg, kind, model, params, mk, reg_mk, ev):
  """Per run: the audit arrays (truthful outcomes, grid regret) and extras."""
  build = _builder(kind, model)
  grid = jnp.linspace(0.0, markets_lib.COST_MAX, ev.regret_grid)
  arrays, reg = _per_run(lambda p, m, r: evaluate.audit(build(p), m, r, grid))(
      params, mk, reg_mk)
  extra = {}
  if kind == "bfmnet":
    raw = _per_run(lambda p, m: evaluate.outcomes(
        evaluate.raw_menu_mechanism(model, p), m))(params, mk)
    extra["raw_spend"] = np.asarray(raw[3])
  elif kind == "regretnet":
    extra["regret_ascent"] = np.asarray(_per_run(lambda p, r: evaluate.regrets_ascent(
        model, p, r, grid, ev.ascent_steps, ev.ascent_lr))(params, reg_mk))
    over, peak = _per_run(lambda p, m: evaluate.regretnet_expost(
        model, p, m, jax.random.PRNGKey(cfg.seed + 50_021), ev.expost_samples))(params, mk)
    extra.update(expost_overspend=np.asarray(over), expost_peak=np.asarray(peak))
  return arrays, reg, extra


def run_n(config, n: int, k: int, workdir: str):
  cfg = experiment._variant(config, n, k)
  ev = cfg.eval
  cells = [(v, d) for v in config.study.valuations for d in config.study.cost_dists]
  names = [f"{v}_{d}" for v, d in cells]
  n_c, seeds = len(cells), int(config.study.seeds)
  ids = jnp.stack([markets_lib.cell_ids(v, d) for v, d in cells])
  val_C = jax.vmap(lambda i: markets_lib.sample_markets(
      jax.random.PRNGKey(cfg.seed + VAL_KEY_OFFSET), ev.val_instances, n, i,
      cfg.market.budget_per_seller))(ids)
  sweep, chosen_params, models, timing = [], {}, {}, {}
  # 1-2. Sweep at seed cfg.seed and validation.
  for kind in _kinds(config):
    grid = settings(config, kind, n)
    h = len(grid)
    run_cell = np.repeat(np.arange(n_c), h)                       # run r = c * h + s
    run_set = np.tile(np.arange(h), n_c)
    t1 = time.perf_counter()
    sweep_dir = os.path.join(workdir, f"n{n}", f"sweep_{kind}")
    # Training curves of every sweep run (chunk means): metrics.jsonl in sweep_dir.
    writer = metrics_lib.MetricsWriter(sweep_dir, cfg.optim.steps)
    run_names = [f"{names[c]}_lr{grid[s][0]:g}_h{grid[s][1]:g}"
                 for c, s in zip(run_cell, run_set)]
    model, params, _ = experiment.train(
        cfg, kind, ids[run_cell], sweep_dir, writer, run_names,
        lrs=[grid[s][0] for s in run_set], seeds=[cfg.seed] * len(run_cell),
        penalties=[grid[s][1] for s in run_set] if kind == "bfmnet" else None)
    timing[f"{kind}_sweep_train_s"] = time.perf_counter() - t1
    val = jax.tree.map(lambda x: x[run_cell], val_C)
    val_reg = jax.tree.map(lambda x: x[:, :ev.val_regret_instances], val)
    m = validate(cfg, kind, model, params, val, val_reg, ev)
    for r in range(len(run_cell)):
      row = {"n": n, "cell": names[run_cell[r]], "method": kind, "setting": int(run_set[r]),
             "lr": grid[run_set[r]][0], "penalty": grid[run_set[r]][1], "seed": cfg.seed}
      row.update({key: float(a[r]) for key, a in m.items()})
      sweep.append(row)
    models[kind] = model
    chosen_params[kind] = (params, run_cell, run_set)
  choice = choose(sweep, ev.max_val_regret, ev.max_val_overspend)  # validation rows only
  for r in sweep:
    r["chosen"] = choice[(r["n"], r["cell"], r["method"])] == r["setting"]
  # 3. Seeds cfg.seed + 1 ... at the chosen setting.  4. Test audit of every seed.
  mk, opt, timeouts = experiment.eval_sets(cfg, ids)
  reg_mk = jax.tree.map(lambda x: x[:, :ev.regret_instances], mk)
  rows = []
  for kind in _kinds(config):
    grid = settings(config, kind, n)
    params0, run_cell, run_set = chosen_params[kind]
    pick = [choice[(n, names[c], kind)] for c in range(n_c)]
    first = jax.tree.map(lambda x: x[np.arange(n_c) * len(grid) + np.asarray(pick)], params0)
    if seeds > 1:
      cell_of = np.repeat(np.arange(n_c), seeds - 1)
      seed_of = np.tile(cfg.seed + 1 + np.arange(seeds - 1), n_c)
      t1 = time.perf_counter()
      _, more, _ = experiment.train(
          cfg, kind, ids[cell_of], os.path.join(workdir, f"n{n}", f"seeds_{kind}"),
          lrs=[grid[pick[c]][0] for c in cell_of], seeds=list(seed_of),
          penalties=[grid[pick[c]][1] for c in cell_of] if kind == "bfmnet" else None)
      timing[f"{kind}_seeds_train_s"] = time.perf_counter() - t1
      more = jax.tree.map(lambda x: x.reshape((n_c, seeds - 1) + x.shape[1:]), more)
      params = jax.tree.map(lambda a, b: jnp.concatenate([a[:, None], b], 1).reshape(
          (n_c * seeds,) + a.shape[1:]), first, more)                # run = c * S + s
    else:
      params = first
    rep = np.repeat(np.arange(n_c), seeds)
    t1 = time.perf_counter()
    arrays, reg, extra = test_audit(cfg, kind, models[kind], params,
                                    jax.tree.map(lambda x: x[rep], mk),
                                    jax.tree.map(lambda x: x[rep], reg_mk), ev)
    timing[f"{kind}_test_audit_s"] = time.perf_counter() - t1
    for r in range(n_c * seeds):
      c, s = divmod(r, seeds)
      cell_mk = jax.tree.map(lambda x: x[c], mk)
      out = evaluate.summarize(jax.tree.map(lambda x: x[r], arrays), reg[r], cell_mk, opt[c])
      lr, pen = grid[pick[c]]
      row = {"n": n, "valuation": cells[c][0], "costs": cells[c][1], "method": kind,
             "seed": cfg.seed + s, "lr": lr, "penalty": pen, "steps": cfg.optim.steps,
             "batch": cfg.optim.batch, "test_instances": ev.instances, **out}
      if kind == "bfmnet":
        row["raw_budget_viol"] = int((extra["raw_spend"][r] > cell_mk["budget"]
                                      * (1 + 1e-5) + 1e-5).sum())
      elif kind == "regretnet":
        row.update(regret_ascent_max=float(extra["regret_ascent"][r].max()),
                   regret_ascent_mean=float(extra["regret_ascent"][r].mean()),
                   expost_overspend_prob=float(extra["expost_overspend"][r].mean()),
                   max_realised_spend_over_B=float(extra["expost_peak"][r].max()))
      rows.append(row)
  return rows, sweep, dict(timing, milp_timeouts=timeouts)


def summary(rows: list[dict]) -> list[dict]:
  """Mean and spread (sample std over seeds) per (n, cell), both networks side by side."""
  groups: dict = {}
  for r in rows:
    groups.setdefault((r["n"], r["valuation"], r["costs"]), {}).setdefault(
        r["method"], []).append(r)
  out = []
  for (n, valuation, costs), by in sorted(groups.items(), key=lambda kv: (
      kv[0][0], kv[0][1], kv[0][2] != "uniform", kv[0][2])):
    row = {"n": n, "valuation": valuation, "costs": costs}
    for kind, label in LABELS.items():
      rs = by.get(kind, [])
      if not rs:
        continue
      v = np.array([r["value_ratio"] for r in rs])
      row.update({f"{label}_mean": float(v.mean()),
                  f"{label}_std": float(v.std(ddof=1)) if len(v) > 1 else float("nan"),
                  f"{label}_seeds": len(v), f"{label}_lr": rs[0]["lr"],
                  f"{label}_regret_max": max(r["regret_max"] for r in rs),
                  f"{label}_budget_viol": sum(r["budget_viol"] for r in rs),
                  f"{label}_ir_viol": sum(r["ir_viol"] for r in rs)})
      if kind == "bfmnet":
        row["BFMNet_penalty"] = rs[0]["penalty"]
        row["BFMNet_raw_budget_viol_mean"] = float(np.mean([r["raw_budget_viol"]
                                                            for r in rs]))
      elif kind == "regretnet":
        row["RegretNet_regret_ascent_max"] = max(r["regret_ascent_max"] for r in rs)
        row["RegretNet_expost_overspend_prob"] = float(np.mean(
            [r["expost_overspend_prob"] for r in rs]))
    out.append(row)
  return out


def grid_study(config, workdir: str) -> str:
  commit = study_lib.git_commit(paths=experiment.PAPER_PATHS)
  t0 = time.perf_counter()
  md = ""
  for k, n in enumerate(config.study.ns):
    t1 = time.perf_counter()
    rows, sweep, timing = run_n(config, n, k, workdir)
    meta = {"n": n, "commit": commit, "wall_s": time.perf_counter() - t1,
            "kinds": _kinds(config), "map_runs": config.optim.map_runs, **timing}
    part = f"n{n}" if len(_kinds(config)) > 1 else f"n{n}_{_kinds(config)[0]}"
    part += f"_{config.study.tag}" if config.study.get("tag") else ""
    for name, obj in (("rows", rows), ("sweep", sweep), ("meta", meta)):
      with open(os.path.join(workdir, f"grid_{part}_{name}.json"), "w") as f:
        json.dump(obj, f, indent=1)
    print(f"[grid] {part} done: {meta}", flush=True)
    header = (f"BFMNet study `grid` (`python launch/study.py --config=configs/bfmnet.py:"
              f"study=grid,ns={n},grid_kinds={'+'.join(_kinds(config))},map_runs="
              f"{config.optim.map_runs} --workdir=DIR`), commit {commit}, "
              f"{meta['wall_s']:.0f} s wall. Value = buyer value / optimum; "
              "mean and std over training seeds at the setting chosen on validation.")
    md += study_lib.write_table(workdir, f"bfmnet_grid_{part}", summary(rows), header=header)
    md += "\n" + study_lib.write_table(workdir, f"bfmnet_grid_{part}_sweep", sweep,
                                       header="Validation sweep (selection reads these "
                                              "rows only).")
  print(f"[grid] total {time.perf_counter() - t0:.0f} s", flush=True)
  return md


def rochet_table(rows: list[dict], classical_rows: list[dict], bfm_rows: list[dict]) -> str:
  """README table of the RochetNet-style baseline beside BFMNet's tuned grid values."""
  best = {(r["n"], r["valuation"], r["costs"]): (r["best_truthful"], r["best_value"])
          for r in classical_rows}
  bfm = {(s["n"], s["valuation"], s["costs"]): s for s in summary(bfm_rows)
         if "BFMNet_mean" in s}
  head = ("| n | valuation | costs | RochetNet (mean +- std) | lr | regret max / budget, "
          "IR viol. | BFMNet (grid) | best proven truthful |")
  lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
  for s in summary(rows):
    if "RochetNet_mean" not in s:
      continue
    key = (s["n"], s["valuation"], s["costs"])
    name, v = best.get(key, ("-", float("nan")))
    b = bfm.get(key)
    lines.append("| " + " | ".join([
        str(s["n"]), s["valuation"], s["costs"],
        f"{s['RochetNet_mean']:.3f} +- {s['RochetNet_std']:.3f}", f"{s['RochetNet_lr']:g}",
        f"{s['RochetNet_regret_max']:.0e} / {s['RochetNet_budget_viol']}, "
        f"{s['RochetNet_ir_viol']}",
        f"{b['BFMNet_mean']:.3f}" if b else "-", f"{name} {v:.3f}"]) + " |")
  return "\n".join(lines) + "\n"


def readme_table(rows: list[dict], classical_rows: list[dict]) -> str:
  """The README's grid table: the summary joined with the classical study's values on the
  same test instances (same key and counts), BFMNet's gap to the best proven-truthful."""
  best = {(r["n"], r["valuation"], r["costs"]): (r["best_truthful"], r["best_value"])
          for r in classical_rows}
  head = ("| n | valuation | costs | BFMNet (mean +- std, 3 seeds) | lr, hinge | "
          "regret max / budget, IR viol. | raw overspends (mean of 3) | RegretNet "
          "(mean +- std) | lr | regret max (grid + ascent) | P(ex-post overspend) | "
          "best proven truthful | BFMNet vs best |")
  lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
  for s in summary(rows):
    name, v = best.get((s["n"], s["valuation"], s["costs"]), ("-", float("nan")))
    cols = [str(s["n"]), s["valuation"], s["costs"]]
    if "BFMNet_mean" in s:
      cols += [f"{s['BFMNet_mean']:.3f} +- {s['BFMNet_std']:.3f}",
               f"{s['BFMNet_lr']:g}, {s['BFMNet_penalty']:g}",
               f"{s['BFMNet_regret_max']:.0e} / {s['BFMNet_budget_viol']}, "
               f"{s['BFMNet_ir_viol']}", f"{s['BFMNet_raw_budget_viol_mean']:.1f}"]
    else:
      cols += ["not run"] + ["-"] * 3
    if "RegretNet_mean" in s:
      cols += [f"{s['RegretNet_mean']:.3f} +- {s['RegretNet_std']:.3f}",
               f"{s['RegretNet_lr']:g}",
               f"{max(s['RegretNet_regret_max'], s['RegretNet_regret_ascent_max']):.3f}",
               f"{s['RegretNet_expost_overspend_prob']:.3f}"]
    else:
      cols += ["not run (cost)"] + ["-"] * 3
    gap = (f"{100 * (s['BFMNet_mean'] / v - 1):+.1f}%" if "BFMNet_mean" in s else "-")
    cols += [f"{name} {v:.3f}", gap]
    lines.append("| " + " | ".join(cols) + " |")
  return "\n".join(lines) + "\n"


def merge_rows(*row_lists) -> list[dict]:
  """Rows of several parts; a later part's rows replace an earlier part's rows of the
  same (n, valuation, costs, method) (e.g. cells rerun at a newly chosen setting)."""
  out: dict = {}
  for rows in row_lists:
    later = {}
    for r in rows:
      later.setdefault((r["n"], r["valuation"], r["costs"], r["method"]), []).append(r)
    out.update(later)
  return [r for rs in out.values() for r in rs]


def extend_choice(old_sweep: list[dict], new_sweep: list[dict]) -> dict:
  """(n, cell, method) -> (old chosen lr, val value, new best lr, val value): the choice
  over the union of two validation sweeps of the same seed (a grid extended past its
  edge). Reads validation values only."""
  out = {}
  for key in {(r["n"], r["cell"], r["method"]) for r in new_sweep}:
    old = [r for r in old_sweep if (r["n"], r["cell"], r["method"]) == key]
    new = [r for r in new_sweep if (r["n"], r["cell"], r["method"]) == key]
    best_old = next(r for r in old if r["chosen"])
    best = max(old + new, key=lambda r: r["val_value"])
    out[key] = (best_old["lr"], best_old["val_value"], best["lr"], best["val_value"],
                best["penalty"])
  return out


def extension_rows(old_sweep: list[dict], new_sweep: list[dict], new_rows: list[dict]):
  """The test rows of an extension part (a grid extended by new settings, e.g. the hinge
  at n < 50) for the cells where the choice over the union of both validation sweeps
  picks the new part's setting; other cells keep the old rows. Validation rows decide."""
  pick = {key: (lr, pen) for key, (_, _, lr, _, pen) in
          extend_choice(old_sweep, new_sweep).items()}
  return [r for r in new_rows
          if pick.get((r["n"], f"{r['valuation']}_{r['costs']}", r["method"]))
          == (r["lr"], r["penalty"])]


def write_plot(rows: list[dict], classical_rows: list[dict], path: str) -> None:
  """The grid study's plot: per cell, each network's mean +- std over seeds beside the
  best proven-truthful baseline and the corrected CGL (classical study, same instances)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  cl = {(r["n"], r["valuation"], r["costs"]): r for r in classical_rows}
  s = [r for r in summary(rows) if (r["n"], r["valuation"], r["costs"]) in cl]
  xs = np.arange(len(s))
  fig, ax = plt.subplots(figsize=(12, 4.2))
  for k, (label, color) in enumerate((("BFMNet", "C0"), ("RochetNet", "C2"),
                                      ("RegretNet", "C3"))):
    pts = [(x, r[f"{label}_mean"], r[f"{label}_std"]) for x, r in zip(xs, s)
           if f"{label}_mean" in r]
    if pts:
      px, m, sd = map(np.asarray, zip(*pts))
      ax.errorbar(px + 0.12 * (k - 1), m, yerr=np.nan_to_num(sd), fmt="o", color=color,
                  capsize=3, label=f"{label} (mean +- std, seeds)")
  best = [cl[(r["n"], r["valuation"], r["costs"])] for r in s]
  ax.plot(xs, [b["best_value"] for b in best], "k_", markersize=18, mew=2,
          label="best proven-truthful (Singer / tuned SPP)")
  ax.plot(xs, [b["CGL"] for b in best], "x", color="gray", label="CGL (affordable i*)")
  ax.set_xticks(xs, [f"n={r['n']}\n{r['valuation'][:3]}\n{r['costs'][:3]}" for r in s],
                fontsize=7)
  ax.set_ylabel("buyer value / optimum")
  ax.set_ylim(0, 1)
  ax.legend(fontsize=7, loc="lower left", ncol=2)
  ax.set_title("BFMNet 16-cell grid: lr chosen on validation, 3 seeds (test instances)")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def rebuild(results_dir: str, parts: list[str], out_dir: str | None = None,
            extensions=()) -> str:
  """README table + plot from committed raw rows: `parts` are rows files (later ones
  replace earlier rows of the same cell and method), joined with classical.json.
  `extensions`: (old sweep files, new sweep file, new rows file) triples, applied after
  `parts` through `extension_rows` (only the cells whose union choice is the new one)."""
  load = lambda p: json.load(open(os.path.join(results_dir, p)))
  rows = merge_rows(*[load(p) for p in parts])
  for old, new, new_rows in extensions:
    old_sweep = [r for f in old for r in load(f)]
    rows = merge_rows(rows, extension_rows(old_sweep, load(new), load(new_rows)))
  classical_rows = json.load(open(os.path.join(results_dir, "classical.json")))
  out_dir = out_dir or results_dir
  os.makedirs(out_dir, exist_ok=True)
  write_plot(rows, classical_rows, os.path.join(out_dir, "grid_plot.png"))
  md = readme_table(rows, classical_rows)
  with open(os.path.join(out_dir, "grid_table.md"), "w") as f:
    f.write(md)
  return md


def training_curves(metrics_path: str, keys=("value", "regret", "budget_violation")) -> dict:
  """run name -> {key: [(step, chunk mean), ...]} from a sweep's metrics.jsonl."""
  out: dict = {}
  for line in open(metrics_path):
    row = json.loads(line)
    if row.get("split") != "train":
      continue
    for name, v in row.items():
      parts = name.split("/")
      if len(parts) == 3 and parts[2] in keys:
        out.setdefault(parts[0], {}).setdefault(parts[2], []).append((row["step"], v))
  return out


def write_curves(curves: dict, path: str, title: str) -> None:
  """One panel per metric, one line per run (the training chunk means)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  keys = sorted({k for c in curves.values() for k in c})
  fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4))
  for ax, key in zip(np.atleast_1d(axes), keys):
    for name, c in sorted(curves.items()):
      if key in c:
        s, v = zip(*c[key])
        ax.plot(s, v, label=name)
    ax.set_title(key)
    ax.set_xlabel("step")
    ax.set_yscale("symlog", linthresh=1e-3)
  np.atleast_1d(axes)[0].legend(fontsize=6)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
