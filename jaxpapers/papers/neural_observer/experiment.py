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

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.neural_observer import data_io
from jaxpapers.papers.neural_observer import observer
from jaxpapers.papers.neural_observer import plants as plants_lib
from jaxpapers.papers.neural_observer import train

PATHS = ["jaxpapers/papers/neural_observer", "configs/neural_observer.py",
         "tests/test_neural_observer.py", "colabs/neural_observer.ipynb"]
BASELINES = ("open_loop", "luenberger", "luenberger_pp", "high_gain", "eso", "ekf")


def flat(config) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({**config.data.to_dict(), **config.model.to_dict(),
                                    **config.train.to_dict()})


def _one_run(config, trainer, prob, method, seed, lr, base, total_steps=None,
             ckpt_root=None):
  """One training run; its row (test metrics only when a model was returned).
  ckpt_root: checkpoint the run under it (one directory per run) and resume it there."""
  cfg = flat(config)
  ckpt_dir = None
  if ckpt_root:
    ckpt_dir = os.path.join(ckpt_root, f"{base['plant']}_w{base['width']}_noise"
                            f"{base['noise_scale']:g}_{method}_s{seed}_lr{lr:g}_"
                            f"T{total_steps or cfg.total_steps}")
  if method == "direct_sdp":  # direct LMI with the weights in the SDP (direct_sdp.py)
    from jaxpapers.papers.neural_observer import direct_sdp
    params, trace, s = direct_sdp.run(trainer, seed, lr, prob, cfg.sdp_solver,
                                      total_steps=total_steps)
  else:
    params, trace, s = trainer.run(method, seed, lr, prob, cfg.sdp_solver,
                                   total_steps=total_steps, max_lmi_s=cfg.max_lmi_s,
                                   ckpt_dir=ckpt_dir)
  row = dict(base, method=method, lr=lr, certified=s["certified"], total_s=s["total_s"],
             time_to_cert=s["time_to_cert"], sdp_solves=s["sdp_solves"],
             val_nmse=s["best_val_nmse"], last_val_nmse=s["last_val_nmse"],
             margin=s.get("margin", np.nan), margin_capped=s.get("margin_capped", np.nan),
             sdp_t_opt=s.get("sdp_t_opt", np.nan), gain_alpha=prob.gain_alpha,
             capped=s["capped"],
             steps_done=s["steps_done"], sdp_s=s.get("sdp_s", 0.0),  # 0: no SDP
             # (wall-clock, val nmse) of every verified certificate, for matched times
             cert_trace=[[r["time_s"], r["val_nmse"]] for r in trace if r.get("valid")])
  if method.startswith("two_stage"):
    g = train.stage1_guarantees(prob, *trainer.stage1_state, config.eval.n_check,
                                config.eval.beta, seed)
    row.update(stage1_s=s["stage1_s"], **g)
  if params is not None:
    row.update(train.evaluate(prob, trainer.predict(params, prob.data["test"]), "test"))
  return row, trace, s


def select_lr(run, score, lrs, extend: int):
  """Learning rate chosen on validation from the grid `lrs`, the grid extended outward
  while the choice sits on its edge (DONE.md: an edge is not a choice).

  run(lr) -> candidate, score(candidate) -> sortable (smaller is better). While the best
  candidate is the smallest or the largest rate tried, one more rate is tried beyond it at
  the grid's outermost ratio on that side, at most `extend` times per side; a choice still
  on the edge after that is reported as such by the study's selections table. Returns
  (sorted rates tried, their candidates, index of the chosen one)."""
  lrs = sorted(float(x) for x in lrs)
  cands = {lr: run(lr) for lr in lrs}
  added = {"lo": 0, "hi": 0}
  while True:
    grid = sorted(cands)
    k = min(range(len(grid)), key=lambda i: score(cands[grid[i]]))
    if len(grid) < 2:
      break
    if k == 0 and added["lo"] < extend:
      lr, added["lo"] = grid[0] * grid[0] / grid[1], added["lo"] + 1
    elif k == len(grid) - 1 and added["hi"] < extend:
      lr, added["hi"] = grid[-1] * grid[-1] / grid[-2], added["hi"] + 1
    else:
      break
    cands[lr] = run(lr)
  return grid, [cands[g] for g in grid], k


def run_plant(config, plant: str, width: int, methods, seeds, noise_scale: float = 1.0,
              baselines: bool = True, trainer=None, log=None, lrs=None,
              total_steps=None, ckpt_root=None, gain_alpha=None, gain_rows=None,
              mismatch: float = 0.0, friction: float = 0.0):
  """Rows (one per method and seed) of test metrics, certificates and timings.

  lrs maps method -> learning rate; a method not in it has its learning rate chosen from
  config.train.lrs on the VALIDATION split of the first seed (train.selection_score),
  every method with the same grid and the same number of updates; the run of the chosen
  rate is that seed's row (no rerun). gain_alpha: decay of the neural observers' LMI gain
  L; None: chosen on the first seed's validation split from config.baselines.
  luenberger_alpha like the Luenberger baseline (train.select_gain; config.model.tune_gain
  False: config.model.alpha_gain); its candidates are appended to gain_rows. Returns
  (rows, tuning_rows, trainer, chosen), chosen["gain_alpha"] the decay used.
  mismatch / friction > 0: data (training, validation, test) from the true plant with its
  physical parameters off by +-mismatch and / or an unmodelled friction
  (plants.true_plant); every observer, gain and certificate on the nominal model; every
  selection on the true plant's validation split (train.build_problem).
  """
  cfg, rows, tuning, chosen = flat(config), [], [], dict(lrs or {})
  if gain_alpha is None and not config.model.tune_gain:
    gain_alpha = config.model.alpha_gain
  for seed in seeds:
    if gain_alpha is None:  # first seed: tune L's decay on its validation split
      g, cands = train.select_gain(train.build_problem(cfg, plant, seed, noise_scale,
                                                       mismatch=mismatch,
                                                       friction=friction),
                                   config.baselines.luenberger_alpha)
      gain_alpha = g
      if gain_rows is not None:
        gain_rows += [dict(c, plant=plant, seed=seed, noise_scale=noise_scale,
                           mismatch=mismatch, friction=friction,
                           grid=list(config.baselines.luenberger_alpha)) for c in cands]
    chosen["gain_alpha"] = float(gain_alpha)
    prob = train.build_problem(cfg, plant, seed, noise_scale, gain_alpha=gain_alpha,
                               mismatch=mismatch, friction=friction)
    if trainer is None or not np.array_equal(trainer.prob.L, prob.L):
      trainer = train.Trainer(prob, width, cfg)
    base = dict(plant=plant, width=width, seed=seed, noise_scale=noise_scale,
                mismatch=mismatch, friction=friction)
    lin = train.linear_part_metrics(prob, "test")
    rows.append(dict(base, method="linear_part", **lin))
    if baselines:
      for name, m in train.tune_baselines(prob, config.baselines).items():
        rows.append(dict(base, method=name, **m))
    summaries = {}
    for method in methods:
      if method in chosen:
        row, trace, s = _one_run(config, trainer, prob, method, seed, chosen[method], base,
                                 total_steps, ckpt_root)
      else:
        run = lambda lr: _one_run(config, trainer, prob, method, seed, lr, base,  # noqa: E731
                                  total_steps, ckpt_root)
        lr_grid, cands, k = select_lr(run, lambda c: train.selection_score(method, c[2]),
                                      cfg.lrs, cfg.lr_extend)
        chosen[method] = float(lr_grid[k])
        for i, c in enumerate(cands):
          tuning.append(dict(c[0], part="lr_tuning", chosen=i == k))
        row, trace, s = cands[k]
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
  return rows, tuning, trainer, chosen


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
                                                       "margin_capped", "sdp_t_opt",
                                                       "time_to_matched", "val_nmse")})
    writer.write(counter[0], dict(m, method=row["method"]))
    counter[0] += 1

  if config.data.csv_path:  # fail on a bad file before any training
    from jaxpapers.papers.neural_observer import plants as plants_lib
    data_io.load_csv(config.data.csv_path, plants_lib.make_plant(config.data.plant),
                     config.data.dt)
  seeds = [config.seed + i for i in range(config.seeds)]
  methods = ("two_stage", "direct", "unconstrained")
  rows, tuning, trainer, chosen = run_plant(config, config.data.plant, config.model.width,
                                            methods, seeds, config.data.noise_scale, log=log)
  print("learning rates chosen on validation (first seed):", chosen)
  table = aggregate(rows, ["plant", "method"],
                    ["rmse_x", "rmse_d", "certified", "margin", "time_to_cert",
                     "time_to_matched", "total_s"])
  md = study_lib.write_table(workdir, "results", table,
                             header=f"commit {study_lib.git_commit(paths=PATHS)}")
  print(md)
  with open(os.path.join(workdir, "rows.json"), "w") as f:
    json.dump(dict(rows=rows, lr_tuning=tuning, chosen_lr=chosen), f, indent=1, default=str)
  if config.data.csv_path:
    _estimate_csv(config, trainer, workdir, chosen["two_stage"], chosen["gain_alpha"])
  return rows


def _estimate_csv(config, trainer, workdir, lr, gain_alpha):
  """Two-stage certified observer (first seed) run on the user's trajectories."""
  cfg = flat(config)
  prob = train.build_problem(cfg, config.data.plant, config.seed, config.data.noise_scale,
                             gain_alpha=gain_alpha)
  params, _, s = trainer.run("two_stage", config.seed, lr, prob, cfg.sdp_solver)
  if params is None:
    print("no verified certificate for the CSV run; using the last two-stage network")
    params = trainer.stage1_state[0]
  traj = data_io.load_csv(config.data.csv_path, prob.plant, cfg.dt)
  out = data_io.estimate(prob, trainer, params, traj)
  data_io.write_estimates(os.path.join(workdir, "estimates.csv"), traj, out["zhat"])
  print("estimates written to", os.path.join(workdir, "estimates.csv"),
        {k: v for k, v in out.items() if k != "zhat"})


def plan(config) -> planner.Plan:
  """One stage-1 update of every (seed, lr) run, the runs spread over the devices.

  Only the JAX stage is planned: the LMI stage alternates host-side cvxpy SDPs with
  updates, and an SDP's cost is not an XLA program. `steps` = stage1_steps updates per
  run. The trajectory rollout inside the loss is a `lax.scan`: XLA's cost analysis counts
  a loop body once, and core.planner adds the matmul FLOPs of the trips it skips (every
  lax.scan trip is counted), so the reported FLOPs include every RK4 step. Data
  and state are abstract (nothing is generated or allocated).
  """
  cfg = flat(config)
  plant = plants_lib.make_plant(config.data.plant, config.data.noise_scale)
  z_box = np.concatenate([plant.x_box, 1.5 * plant.d_amp * np.ones(plant.nd)])
  make = lambda k: plants_lib.make_dataset(plant, k, cfg.n_train, cfg.steps, cfg.dt,  # noqa: E731
                                           cfg.err_scale * z_box)
  train_data = jax.eval_shape(make, jax.random.PRNGKey(0))
  prob = train.build_problem(cfg, config.data.plant, config.seed, config.data.noise_scale,
                             data={"train": train_data})
  opt = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
  update = train.stage1_update(prob, cfg, opt)
  width = config.model.width

  def init(key):
    params = observer.init_params(key, plant.nz, plant.ny, width, config.model.out_scale)
    trainable = (params, jnp.eye(plant.nz))
    return trainable, opt.init(trainable)

  runs = config.seeds * len(config.train.lrs)
  lead = lambda a: jax.ShapeDtypeStruct((runs,) + a.shape, a.dtype)  # noqa: E731
  state = jax.tree.map(lead, jax.eval_shape(init, jax.random.PRNGKey(0)))
  keys = jax.ShapeDtypeStruct((runs, 2), jnp.uint32)
  trains = jax.tree.map(lead, train_data)
  fn, args = sharding.spread_plan(update, state, keys, jax.ShapeDtypeStruct((), jnp.float32),
                                  trains, in_axes=(0, 0, None, 0))
  label = (f"neural_observer stage 1 on {plant.name} (nz={plant.nz}), width {width}: "
           f"{config.seeds} seeds x {len(config.train.lrs)} lrs = {runs} runs, one update "
           f"({cfg.n_train} trajectories x {cfg.steps} RK4 steps + {cfg.n_points} "
           f"Lyapunov samples) x {cfg.stage1_steps} updates")
  return planner.Plan(fn, args, steps=cfg.stage1_steps, label=label)


def run_study(config, workdir):
  """The study in resumable units (study.py): systems x methods with per-method learning
  rates chosen on validation, the width sweep, the X-29 ablations."""
  from jaxpapers.papers.neural_observer import study  # study imports this module
  return study.run_study(config, workdir)
