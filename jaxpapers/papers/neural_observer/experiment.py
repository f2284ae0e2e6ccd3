"""Two-stage training of LMI-certified neural network observers: launcher entry points.

`train_and_evaluate`: one plant and width, every method over `seeds` seeds (baselines
tuned on validation), test RMSE of states and disturbances, certificate validity and
margin, wall-clock; optionally runs the certified observer on a user CSV.
`run_study`: systems x methods, the width sweep (two-stage vs direct LMI wall-clock to a
certificate at matched accuracy), and the X-29 ablations (no hinge; 3x noise).
"""
from __future__ import annotations

import json
import os
import time

import jax
import ml_collections
import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.neural_observer import data_io
from jaxpapers.papers.neural_observer import train

PATHS = ["jaxpapers/papers/neural_observer", "configs/neural_observer.py",
         "tests/test_neural_observer.py", "colabs/neural_observer.ipynb"]
BASELINES = ("luenberger", "high_gain", "eso", "ekf")


def flat(config) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({**config.data.to_dict(), **config.model.to_dict(),
                                    **config.train.to_dict()})


def run_plant(config, plant: str, width: int, methods, seeds, noise_scale: float = 1.0,
              baselines: bool = True, trainer=None, log=None):
  """Rows (one per method and seed) of test metrics, certificates and timings."""
  cfg, rows = flat(config), []
  for seed in seeds:
    prob = train.build_problem(cfg, plant, seed, noise_scale)
    if trainer is None:
      trainer = train.Trainer(prob, width, cfg)
    base = dict(plant=plant, width=width, seed=seed, noise_scale=noise_scale)
    lin = train.linear_part_metrics(prob, "test")
    rows.append(dict(base, method="linear_part", **lin))
    if baselines:
      for name, m in train.tune_baselines(prob, config.baselines).items():
        rows.append(dict(base, method=name, **m))
    summaries = {}
    for method in methods:
      params, trace, s = trainer.run(method, seed, cfg.lr, prob, cfg.sdp_solver)
      row = dict(base, method=method, certified=s["certified"], total_s=s["total_s"],
                 time_to_cert=s["time_to_cert"], sdp_solves=s["sdp_solves"],
                 val_nmse=s["best_val_nmse"], margin=s.get("margin", np.nan))
      if method == "two_stage":
        g = train.stage1_guarantees(prob, *trainer.stage1_state, config.eval.n_check,
                                    config.eval.beta, seed)
        row.update(stage1_s=s["stage1_s"], **g)
      if params is not None:
        row.update(train.evaluate(prob, trainer.predict(params, prob.data["test"]),
                                  "test"))
      summaries[method] = (trace, s, row)
      rows.append(row)
      if log:
        log(row)
    # Wall-clock to a verified certificate at the accuracy both LMI methods reach.
    if "two_stage" in summaries and "direct" in summaries:
      vals = [summaries[m][1]["best_val_nmse"] for m in ("two_stage", "direct")]
      level = max(vals)
      for m in ("two_stage", "direct"):
        summaries[m][2]["time_to_matched"] = train.time_to_accuracy(summaries[m][0], level)
  return rows, trainer


def aggregate(rows, keys, metrics):
  """mean and std over seeds of each metric per group of `keys`."""
  groups = {}
  for r in rows:
    groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
  out = []
  for g, rs in groups.items():
    row = dict(zip(keys, g))
    row["n"] = len(rs)
    for m in metrics:
      vals = np.array([float(r.get(m, np.nan)) for r in rs], dtype=float)
      if m == "certified":
        row[m] = f"{int(np.nansum(vals))}/{len(rs)}"
        continue
      ok = vals[np.isfinite(vals)]
      row[m] = (f"{ok.mean():.4g} ± {ok.std():.2g}" + (f" ({len(ok)}/{len(rs)})"
                                                          if len(ok) < len(rs) else "")
                if ok.size else "n/a")
    out.append(row)
  return out


def train_and_evaluate(config, workdir):
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir, total_steps=None)
  counter = [0]

  def log(row):
    m = {k: v for k, v in row.items() if isinstance(v, (int, float, bool, np.floating))
         and not isinstance(v, bool)}
    metrics_lib.check_finite(counter[0], {k: v for k, v in m.items()
                                          if k not in ("time_to_cert", "margin",
                                                       "time_to_matched", "val_nmse")})
    writer.write(counter[0], dict(m, method=row["method"]))
    counter[0] += 1

  if config.data.csv_path:  # fail on a bad file before any training
    from jaxpapers.papers.neural_observer import plants as plants_lib
    data_io.load_csv(config.data.csv_path, plants_lib.make_plant(config.data.plant),
                     config.data.dt)
  seeds = [config.seed + i for i in range(config.seeds)]
  methods = ("two_stage", "direct", "unconstrained")
  rows, trainer = run_plant(config, config.data.plant, config.model.width, methods, seeds,
                            config.data.noise_scale, log=log)
  table = aggregate(rows, ["plant", "method"],
                    ["rmse_x", "rmse_d", "certified", "margin", "time_to_cert",
                     "time_to_matched", "total_s"])
  md = study_lib.write_table(workdir, "results", table,
                             header=f"commit {study_lib.git_commit(paths=PATHS)}")
  print(md)
  with open(os.path.join(workdir, "rows.json"), "w") as f:
    json.dump(rows, f, indent=1, default=str)
  if config.data.csv_path:
    _estimate_csv(config, trainer, workdir)
  return rows


def _estimate_csv(config, trainer, workdir):
  """Two-stage certified observer (first seed) run on the user's trajectories."""
  cfg = flat(config)
  prob = train.build_problem(cfg, config.data.plant, config.seed, config.data.noise_scale)
  params, _, s = trainer.run("two_stage", config.seed, cfg.lr, prob, cfg.sdp_solver)
  if params is None:
    print("no verified certificate for the CSV run; using the last two-stage network")
    params = trainer.stage1_state[0]
  traj = data_io.load_csv(config.data.csv_path, prob.plant, cfg.dt)
  out = data_io.estimate(prob, trainer, params, traj)
  data_io.write_estimates(os.path.join(workdir, "estimates.csv"), traj, out["zhat"])
  print("estimates written to", os.path.join(workdir, "estimates.csv"),
        {k: v for k, v in out.items() if k != "zhat"})


def run_study(config, workdir):
  commit = study_lib.git_commit(paths=PATHS)
  metrics_lib.write_config(workdir, config)
  t_start = time.perf_counter()
  seeds = [config.seed + i for i in range(config.seeds)]
  width = config.model.width
  rows = []
  trainers = {}
  for plant in config.study.plants:
    r, trainers[plant] = run_plant(config, plant, width, config.study.methods, seeds)
    rows += [dict(x, part="systems") for x in r]
    print(f"[study] {plant} done at {time.perf_counter() - t_start:.0f}s", flush=True)
  # Width sweep on the pendulum: two-stage vs direct (width from the systems part).
  for w in config.study.widths:
    if w == width:
      continue
    r, _ = run_plant(config, "pendulum", w, config.study.width_methods, seeds,
                     baselines=False)
    rows += [dict(x, part="widths") for x in r if x["method"] != "linear_part"]
    print(f"[study] width {w} done at {time.perf_counter() - t_start:.0f}s", flush=True)
  if "x29" in config.study.plants:
    r, _ = run_plant(config, "x29", width, ("two_stage_nohinge",), seeds, baselines=False,
                     trainer=trainers["x29"])
    rows += [dict(x, part="x29_ablation") for x in r if x["method"] != "linear_part"]
    r, _ = run_plant(config, "x29", width, ("two_stage", "direct"), seeds,
                     noise_scale=config.study.x29_noise, trainer=trainers["x29"])
    rows += [dict(x, part="x29_noise") for x in r]
  elapsed = time.perf_counter() - t_start
  header = (f"commit {commit}; study wall-clock {elapsed:.0f}s; seeds {seeds}; "
            f"width {width}")
  sys_rows = [r for r in rows if r["part"] == "systems"]
  t1 = aggregate(sys_rows, ["plant", "method"],
                 ["rmse_x", "rmse_d", "nmse", "certified", "margin", "time_to_cert",
                  "time_to_matched", "total_s", "local_radius", "violation",
                  "coverage_eps"])
  w_rows = [r for r in rows if r["part"] == "widths" or (
      r["part"] == "systems" and r["plant"] == "pendulum"
      and r["method"] in config.study.width_methods)]
  t2 = aggregate(w_rows, ["width", "method"],
                 ["time_to_matched", "time_to_cert", "total_s", "sdp_solves",
                  "certified", "margin", "nmse"])
  t2.sort(key=lambda r: (r["width"], r["method"]))
  a_rows = [r for r in rows if r["part"] in ("x29_ablation", "x29_noise") or (
      r["part"] == "systems" and r["plant"] == "x29"
      and r["method"] in ("two_stage", "direct"))]
  t3 = aggregate(a_rows, ["part", "noise_scale", "method"],
                 ["rmse_x", "rmse_d", "certified", "time_to_cert", "total_s"])
  md = (study_lib.write_table(workdir, "systems", t1, header=header)
        + "\n" + study_lib.write_table(workdir, "widths", t2, header=header)
        + "\n" + study_lib.write_table(workdir, "x29_ablations", t3, header=header))
  with open(os.path.join(workdir, "rows.json"), "w") as f:
    json.dump(dict(commit=commit, elapsed_s=elapsed, rows=rows), f, indent=1, default=str)
  _plot(workdir, t2, sys_rows)
  print(md)
  return rows


def _plot(workdir, width_table, sys_rows):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
  for m in ("two_stage", "direct"):
    pts = [(r["width"], r["total_s"]) for r in width_table if r["method"] == m]
    xs = [p[0] for p in pts]
    ys = [float(str(p[1]).split(" ")[0]) if p[1] != "n/a" else np.nan for p in pts]
    axes[0].plot(xs, ys, "o-", label=m)
  axes[0].set_xscale("log", base=2)
  axes[0].set_xlabel("width")
  axes[0].set_ylabel("wall-clock of the run [s]")
  axes[0].legend()
  axes[0].set_title("pendulum: two-stage vs direct LMI")
  plants = sorted({r["plant"] for r in sys_rows})
  methods = ["linear_part", *BASELINES, "unconstrained", "direct", "two_stage"]
  for j, m in enumerate(methods):
    vals = []
    for p in plants:
      v = [r.get("nmse", np.nan) for r in sys_rows if r["plant"] == p and r["method"] == m]
      vals.append(np.nanmean(v) if v else np.nan)
    axes[1].bar(np.arange(len(plants)) + 0.09 * j, vals, width=0.09, label=m)
  axes[1].set_xticks(np.arange(len(plants)) + 0.36, plants, fontsize=8)
  axes[1].set_yscale("log")
  axes[1].set_ylabel("test normalised MSE")
  axes[1].legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "study.png"), dpi=110)
  plt.close(fig)
