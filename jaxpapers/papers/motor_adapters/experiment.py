"""Motor primitives as adapters of a shared recurrent core (abstract 7): entry points.

`train_and_evaluate` runs both stages for every (model kind, seed, learning rate) lane
as one vmapped program each, with checkpoints and exact resume:

1. primitives: train all lanes; pick each kind's learning rate on validation starts
   (held-out start postures and noise); report test-start errors per primitive;
2. high level: freeze the selected controllers, train one policy per (kind, seed,
   policy lr) on random multi-segment paths; pick the policy lr on held-out random paths;
   test on the letter-like drawings (and on user drawings when `data.drawings` is set).

It writes metrics.jsonl, `summary.json` (per-lane numbers) and `letters.npz` (drawn
trajectories). `run_study` runs it and turns the summary into the table, raw rows and
plots: adapter effective rank vs the low-rank reference, subspace overlap, OOD error vs
the multitask baseline.
"""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.motor_adapters import analysis
from jaxpapers.papers.motor_adapters import model as model_lib
from jaxpapers.papers.motor_adapters import rollout as rollout_lib
from jaxpapers.papers.motor_adapters import tasks as tasks_lib
from jaxpapers.papers.motor_adapters import training

PATHS = ["jaxpapers/papers/motor_adapters", "configs/motor_adapters.py"]
DENSE = 64  # points per stroke polyline (targets are interpolated along it)


def make_env(config) -> rollout_lib.Env:
  a, d = config.arm, config.data
  return rollout_lib.Env(dt=a.dt, substeps=a.substeps, prop_delay=a.prop_delay,
                         vis_delay=a.vis_delay, motor_noise=a.motor_noise,
                         prop_noise=a.prop_noise, vis_noise=a.vis_noise, radius=d.radius,
                         move_steps=d.move_steps, hold_steps=d.hold_steps,
                         start_spread=d.start_spread, damping=a.damping)


def make_hp(config) -> training.Hyper:
  m, o, t = config.model, config.optim, config.train
  return training.Hyper(batch=t.batch, policy_batch=t.policy_batch, hidden=m.hidden,
                        adapters=m.adapters, rank=m.rank, code_noise=m.code_noise,
                        tau_start=m.tau_start, tau_end=m.tau_end, steps=t.steps,
                        policy_tau=m.policy_tau, balance=o.balance, code_lr=o.code_lr,
                        code_frac=o.code_frac,
                        effort=o.effort, activity=o.activity, clip=o.clip,
                        tasks=tasks_lib.N_PRIMITIVES, fast_compile=t.fast_compile)


def _check(config):
  for k in config.model.kinds:
    model_lib.kind_id(k)
  if config.model.adapters < tasks_lib.N_PRIMITIVES:
    raise ValueError(f"model.adapters={config.model.adapters} < "
                     f"{tasks_lib.N_PRIMITIVES} primitives")
  if config.train.seeds < 1:
    raise ValueError("train.seeds must be >= 1")


def drawing_set(env, ids=None, dense=None, mask=None):
  """(features (N, S, 2 * points), targets (N, S, T, 2), mask (N, S)) from primitive ids
  (N, S) (-1 pads) or from dense user polylines (N, S, DENSE, 2)."""
  if dense is None:
    strokes = tasks_lib.stroke_points(env.radius, DENSE)
    mask = ids >= 0
    dense = strokes[np.maximum(ids, 0)] * mask[..., None, None]
  points = DENSE // 8
  feats = dense[:, :, points - 1::points] / env.radius  # 8 points per stroke
  targets = tasks_lib.polyline_targets(dense, env.move_steps, env.hold_steps)
  n, s = feats.shape[:2]
  return (jnp.asarray(feats.reshape(n, s, -1), jnp.float32), jnp.asarray(targets),
          jnp.asarray(mask))


def evaluation_paths(config, env):
  """The held-out random paths (validation) and the letters (test, from the home
  posture) in one set, padded to a common segment count with masked segments, so that
  every evaluation of multi-segment paths is one compiled program: (letter names,
  ids (N, S), (features, targets, mask, q0))."""
  d = config.data
  va_ids = tasks_lib.random_sequences(config.seed + 202, d.val_paths, d.segments)
  letter_names, letter_ids = tasks_lib.letters()
  s_max = max(letter_ids.shape[1], va_ids.shape[1])
  pad = lambda ids: np.pad(ids, ((0, 0), (0, s_max - ids.shape[1])),  # noqa: E731
                           constant_values=-1)
  ids = np.concatenate([pad(va_ids), pad(letter_ids)])
  va_q, _ = rollout_lib.random_starts(env, training.lane_key(config.seed, "pool_val"),
                                      d.val_paths)
  le_q, _ = rollout_lib.home_start(env, len(letter_names))
  return letter_names, ids, drawing_set(env, ids) + (jnp.concatenate([va_q, le_q]),)


def _stage1_program(env, hp, states, n_tasks: int, trial: int, unroll=1):
  """(program, abstract args) of one stage-1 step of every lane on `trial`-step trials,
  spread as `training.train_chunk` spreads it (donating the states)."""
  e = env._replace(move_steps=trial, hold_steps=0, unroll=unroll)
  targets = jax.ShapeDtypeStruct((n_tasks, trial, 2), jnp.float32)
  return sharding.spread_plan(training.train_lane(e, hp, 1), states,
                              jax.ShapeDtypeStruct((), jnp.int32), targets,
                              in_axes=(0, None, None), donate_argnums=(0,))


def plan(config) -> planner.Plan:
  """One stage-1 step of every (kind, seed, lr) lane, spread over the devices as
  `training.train_chunk` spreads them, for `launch/plan.py` (nothing allocated).

  Stage 1 dominates the run (stage 2 drives the same frozen closed loop with a smaller
  batch and a quarter of the steps; not counted). The planned program is the study's
  step on full trials (its memory is the study's). Its FLOPs need a correction: the
  closed loop is a `lax.scan` over the trial's time steps and XLA's cost analysis counts
  a loop body once, while a step's other work (each sample's adapter contraction,
  K x H x H, the loss and the Adam update) runs once per step. So the same step is also
  compiled on 1- and 2-step trials with the time loop unrolled: their difference is one
  control step (forward and backward), the rest is the per-step work, and one step costs
  per_step + trial x control_step. `steps` is the training steps scaled by that cost over
  the FLOPs XLA counts for the planned program, so steps x counted FLOPs = the run.
  """
  _check(config)
  env, hp = make_env(config), make_hp(config)
  t = config.train
  lanes = [(k, config.seed + i, lr) for k in config.model.kinds for i in range(t.seeds)
           for lr in config.optim.lrs]
  n_tasks = tasks_lib.N_PRIMITIVES
  states = jax.eval_shape(lambda: training.init_lanes(lanes, env, hp, n_tasks))
  trial = env.move_steps + env.hold_steps
  fn, args = _stage1_program(env, hp, states, n_tasks, trial)
  flops = lambda *a: planner.compiled_costs(*a)["flops_per_device"]  # noqa: E731
  f1 = flops(*_stage1_program(env, hp, states, n_tasks, 1, unroll=True))
  f2 = flops(*_stage1_program(env, hp, states, n_tasks, 2, unroll=True))
  control, per_step = f2 - f1, 2 * f1 - f2
  scale = (per_step + trial * control) / flops(fn, args)
  label = (f"motor_adapters stage 1: {len(lanes)} lanes ({len(config.model.kinds)} kinds x "
           f"{t.seeds} seeds x {len(config.optim.lrs)} lrs), GRU {hp['hidden']}, batch "
           f"{hp['batch']}, {trial}-step trials; {t.steps} steps x {scale:.2f} (the "
           f"{trial} control steps XLA counts once)")
  return planner.Plan(fn, args, steps=int(round(t.steps * scale)), label=label)


def _run_chunks(fn, states, total: int, chunk: int, ckpt, writer, tag: str, names,
                stop_at: int | None = None):
  """Runs `fn(states, start) -> (states, metrics)` from the checkpointed step to total
  (or to `stop_at`, which simulates a killed run for the resume test)."""
  states, start = ckpt.restore_or(states) if ckpt else (states, 0)
  writer.truncate_after(start, splits=(tag,))  # rows at this stage's steps, split=tag
  t_run, n_run = 0.0, 0
  end = total if stop_at is None else min(total, max(stop_at, 0))
  for s in range(start, end, chunk):
    t0 = time.perf_counter()
    states, m = fn(states, jnp.int32(s))
    m = jax.device_get(m)
    dt = time.perf_counter() - t0
    if s > start:
      t_run, n_run = t_run + dt, n_run + chunk
    metrics_lib.check_finite(s + chunk, m)
    row = {}
    for i, name in enumerate(names):
      for k, v in m.items():
        row[f"{tag}/{name}/{k}"] = float(v[i])
    writer.write(s + chunk, row, split=tag)
    if ckpt:
      ckpt.save(s + chunk, states)
  if ckpt:
    ckpt.close()
  # The chunks leave the lanes split over every device; the evaluations are 1-device
  # programs that also take arrays built on one device, so hand back host copies.
  return jax.device_get(states), (n_run / t_run if t_run else float("nan"))


def _stroke_err(dist_steps, ids, steps: int, first: bool) -> float:
  """Mean distance over the first strokes of the drawings, or over the later ones."""
  d = np.asarray(dist_steps).reshape(ids.shape[0], ids.shape[1], steps)
  valid = ids >= 0
  pick = np.zeros_like(valid)
  if first:
    pick[:, 0] = valid[:, 0]
  else:
    pick[:, 1:] = valid[:, 1:]
  return float(d[pick].mean())


def _take(tree, idx):
  return jax.tree.map(lambda x: x[np.asarray(idx)], tree)


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> dict:
  """Both stages, selection and evaluation (module docstring). `stop_after` ends the run
  after that many steps (primitive steps, then policy steps) as if it were killed; a
  second call on the same workdir resumes from the checkpoints."""
  _check(config)
  try:
    from jaxpapers.core import workdir as workdir_lib
    workdir_lib.check_resume(workdir, config.to_dict())
  except ImportError:
    pass
  metrics_lib.write_config(workdir, config)
  env, hp = make_env(config), make_hp(config)
  t, d = config.train, config.data
  seeds = [config.seed + i for i in range(t.seeds)]
  kinds = list(config.model.kinds)
  lanes = [(k, s, lr) for k in kinds for s in seeds for lr in config.optim.lrs]
  names = [f"{k}/s{s}/lr{lr:g}" for k, s, lr in lanes]
  writer = metrics_lib.MetricsWriter(workdir, total_steps=t.steps + t.policy_steps)
  prim = jnp.asarray(tasks_lib.primitive_paths(env.radius, env.move_steps, env.hold_steps))
  n_tasks = prim.shape[0]

  # ---- stage 1: primitives
  states = training.init_lanes(lanes, env, hp, n_tasks)
  code0 = np.argmax(np.array(states["params"]["code"]), -1)  # initial code (lanes, N)
  chunk = lambda st, s: training.train_chunk(  # noqa: E731
      st, s, prim, env=env, hp=hp, length=t.chunk)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, "primitives"), keep=1)
  states, sps1 = _run_chunks(chunk, states, t.steps, t.chunk, ckpt, writer, "primitives",
                             names, stop_after)
  if stop_after is not None and stop_after < t.steps:
    return {"interrupted_at": stop_after}
  params, kids = states["params"], states["kid"]
  moves, last_move = jax.device_get((states["moves"], states["last_move"]))
  ev = lambda p, k, q, key: training.eval_primitives_lanes(  # noqa: E731
      p, k, prim, q, key, env=env, hp=hp)
  q_val, _ = rollout_lib.random_starts(env, training.lane_key(config.seed, "val"),
                                       t.eval_starts)
  q_test, _ = rollout_lib.random_starts(env, training.lane_key(config.seed, "test"),
                                        t.eval_starts)
  val_err, _ = jax.device_get(ev(params, kids, q_val, training.lane_key(config.seed, "kv")))
  test_err, test_opt = jax.device_get(ev(params, kids, q_test,
                                         training.lane_key(config.seed, "kt")))
  best_lr = {}
  for k in kinds:
    by_lr = {lr: np.mean([val_err[i].mean() for i, l in enumerate(lanes)
                          if l[0] == k and l[2] == lr]) for lr in config.optim.lrs}
    best_lr[k] = min(by_lr, key=by_lr.get)
  sel = [i for i, l in enumerate(lanes) if l[2] == best_lr[l[0]]]  # kind-major, seeds
  net = _take(params, sel)
  net_kids = kids[np.asarray(sel)]

  # ---- stage 2: high-level policy over options, network frozen
  tr_ids = tasks_lib.random_sequences(config.seed + 101, d.pool, d.segments)
  tr_f, tr_t, _ = drawing_set(env, tr_ids)
  tr_q, _ = rollout_lib.random_starts(env, training.lane_key(config.seed, "pool"), d.pool)
  plrs = list(config.optim.policy_lrs)
  plane_ids = [(j, plr) for j in range(len(sel)) for plr in plrs]
  planes = [(lanes[sel[j]][0], lanes[sel[j]][1], plr) for j, plr in plane_ids]
  pnames = [f"{k}/s{s}/plr{plr:g}" for k, s, plr in planes]
  pstates = training.init_policy_lanes(planes, tr_f.shape[-1], config.model.policy_hidden,
                                       config.model.adapters, config.optim.clip)
  net_rep = _take(net, [j for j, _ in plane_ids])
  pchunk = lambda st, s: training.policy_chunk(  # noqa: E731
      st, net_rep, s, tr_f, tr_t, tr_q, env=env, hp=hp, length=t.chunk)
  pckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, "policy"), keep=1)
  pstates, sps2 = _run_chunks(pchunk, pstates, t.policy_steps, t.chunk, pckpt, writer,
                              "policy", pnames,
                              None if stop_after is None else stop_after - t.steps)
  if stop_after is not None and stop_after < t.steps + t.policy_steps:
    return {"interrupted_at": stop_after}
  def seq_eval(pp, nt, k, f, tg, m, q, key):
    """The policies' argmax options, then the same rollout program as the oracle's."""
    options = training.policy_options_lanes(pp, k, f, n_tasks=hp["tasks"])
    out = training.eval_with_options_lanes(nt, k, options, tg, m, q, key, env=env, hp=hp)
    return {**out, "choice": jnp.argmax(options, -1)}
  pkids = pstates["kid"]
  letter_names, ev_ids, (ev_f, ev_t, ev_m, ev_q) = evaluation_paths(config, env)
  nv = d.val_paths  # the first nv paths are the validation paths, then the letters
  letter_ids = ev_ids[nv:]
  ev_all = jax.device_get(seq_eval(pstates["params"], net_rep, pkids, ev_f, ev_t, ev_m,
                                   ev_q, training.lane_key(config.seed, "seq_eval")))
  va = {"per_path": ev_all["per_path"][:, :nv]}
  best_plr = {}
  for k in kinds:
    by = {plr: np.mean([va["per_path"][i].mean() for i, pl in enumerate(planes)
                        if pl[0] == k and pl[2] == plr]) for plr in plrs}
    best_plr[k] = min(by, key=by.get)
  psel = [i for i, pl in enumerate(planes) if pl[2] == best_plr[pl[0]]]
  le = {k: ev_all[k][np.asarray(psel), nv:] for k in ("per_path", "choice", "hand",
                                                       "target")}
  le_m = ev_m[nv:]
  pp_sel, net_sel = _take(pstates["params"], psel), _take(net_rep, psel)
  kid_sel = pkids[np.asarray(psel)]
  # Oracle high level: each stroke gets its own primitive's code (adapter kinds: the
  # option that primitive selects; multitask: its task input). Separates how well the
  # frozen controllers chain strokes from how well the policy learned to choose.
  # Run on the validation paths and the letters together (the policy evaluation's
  # shapes: one compiled program when there is one policy learning rate); letters kept.
  t2o = np.asarray(test_opt)[np.asarray(sel)]  # (lanes, n_tasks) option per primitive
  oracle_opts = jax.nn.one_hot(t2o[:, np.maximum(ev_ids, 0)], config.model.adapters)
  oracle = jax.device_get(training.eval_with_options_lanes(
      net, net_kids, oracle_opts, ev_t, ev_m, ev_q, training.lane_key(config.seed, "oracle"),
      env=env, hp=hp))
  oracle = {k: v[:, nv:] for k, v in oracle.items()}
  user = None
  if d.drawings:
    u_names, u_dense, u_mask = tasks_lib.load_drawings(d.drawings, DENSE)
    u_f, u_t, u_m = drawing_set(env, dense=u_dense, mask=u_mask)
    u_q, _ = rollout_lib.home_start(env, len(u_names))
    user = jax.device_get(seq_eval(pp_sel, net_sel, kid_sel, u_f, u_t, u_m, u_q,
                                   training.lane_key(config.seed, "user")))

  # ---- per-lane summary
  a_mats, _ = jax.device_get(jax.vmap(
      lambda p: model_lib.adapter_matrices(p, rollout_lib.IN_DIM))(net))
  rows = []
  for j, i in enumerate(sel):
    kind, seed, lr = lanes[i]
    used = sorted(set(int(o) for o in test_opt[i]))
    geo = (analysis.adapter_geometry(a_mats[j], used, config.study.subspace_rank)
           if kind != "multitask" else {})
    pj = psel[[planes[p][0:2] for p in psel].index((kind, seed))]
    row = {"kind": kind, "seed": seed, "lr": lr, "policy_lr": planes[pj][2],
           "prim_val_cm": float(val_err[i].mean()), "prim_test_cm": float(test_err[i].mean()),
           "prim_test_per_task": [float(x) for x in test_err[i]],
           "options_used": len(used), "task_to_option": [int(o) for o in test_opt[i]],
           "code_init": [int(o) for o in code0[i]],
           "code_changed": int(np.sum(np.asarray(test_opt[i]) != code0[i])),
           "code_moves": int(moves[i]), "code_last_move": int(last_move[i]),
           "seq_val_cm": float(va["per_path"][pj].mean()),
           "letters_cm": float(le["per_path"][psel.index(pj)].mean()),
           "letters_per_drawing": [float(x) for x in le["per_path"][psel.index(pj)]],
           "letters_choices": np.asarray(le["choice"][psel.index(pj)]).tolist(),
           "policy_val_all_lrs": {f"{planes[i][2]:g}": float(va["per_path"][i].mean())
                                  for i in range(len(planes)) if planes[i][:2] == (kind, seed)},
           "prim_val_all_lrs": {f"{lanes[i2][2]:g}": float(val_err[i2].mean())
                                for i2 in range(len(lanes)) if lanes[i2][:2] == (kind, seed)},
           "letters_oracle_cm": float(oracle["per_path"][j].mean()),
           "letters_first_stroke_cm": float(_stroke_err(oracle["dist_steps"][j],
                                                        letter_ids, env.steps,
                                                        first=True)),
           "letters_later_strokes_cm": float(_stroke_err(oracle["dist_steps"][j],
                                                         letter_ids, env.steps,
                                                         first=False)),
           "policy_correct": float(np.mean(
               (np.asarray(le["choice"][psel.index(pj)]) ==
                t2o[j][np.maximum(letter_ids, 0)])[letter_ids >= 0])),
           "params": model_lib.used_param_count(_take(net, j), kind, n_tasks,
                                                rollout_lib.IN_DIM)}
    if user is not None:
      row["user_cm"] = float(user["per_path"][psel.index(pj)].mean())
    row.update({f"geo_{k}": v for k, v in geo.items()})
    rows.append(row)
  summary = {"rows": rows, "best_lr": best_lr, "best_policy_lr": best_plr,
             "letters": letter_names, "steps_per_s": {"primitives": sps1, "policy": sps2},
             "lanes": len(lanes), "policy_lanes": len(planes)}
  for r in rows:
    writer.write(t.steps + t.policy_steps,
                 {k: v for k, v in r.items() if isinstance(v, (int, float))},
                 split=f"summary/{r['kind']}/s{r['seed']}")
  if metrics_lib.is_writer():
    with open(os.path.join(workdir, "summary.json"), "w") as f:
      json.dump(summary, f, indent=1, default=float)
    np.savez_compressed(os.path.join(workdir, "letters.npz"), hand=le["hand"],
                        target=le["target"], kinds=np.array([r["kind"] for r in rows]),
                        seeds=np.array([r["seed"] for r in rows]),
                        names=np.array(letter_names),
                        steps_per_segment=env.steps, mask=np.asarray(le_m))
    np.savez_compressed(os.path.join(workdir, "adapters.npz"), a=a_mats,
                        kinds=np.array([r["kind"] for r in rows]))
  return summary


def run_study(config, workdir: str) -> list[dict]:
  """Runs train_and_evaluate and writes motor_adapters_study.{md,json} and plots."""
  from jaxpapers.papers.motor_adapters import plots
  commit = study_lib.git_commit(paths=PATHS)  # stamped before anything runs
  start = time.perf_counter()
  summary = train_and_evaluate(config, workdir)
  wall = time.perf_counter() - start
  rows = summary["rows"]
  a_mats = np.load(os.path.join(workdir, "adapters.npz"))["a"]
  ref = analysis.random_reference(config.model.hidden, 14, config.study.subspace_rank)
  table = plots.table_rows(rows, ref)
  header = (f"motor_adapters study (commit {commit}); seeds={config.train.seeds}, "
            f"H={config.model.hidden}, K={config.model.adapters}, rank R="
            f"{config.model.rank}, {config.train.steps} primitive steps x batch "
            f"{config.train.batch}, {config.train.policy_steps} policy steps; LR chosen on "
            f"validation starts: {summary['best_lr']}, policy LR on validation paths: "
            f"{summary['best_policy_lr']}; wall {wall:.0f} s. Errors are mean hand-target "
            "distance (cm); mean +- std over seeds.")
  md = study_lib.write_table(workdir, "motor_adapters_study", table, header=header)
  raw = os.path.join(workdir, "motor_adapters_raw.json")
  if metrics_lib.is_writer():
    with open(raw, "w") as f:
      json.dump({"commit": commit, "wall_s": wall, "summary": summary,
                 "random_reference": {k: v for k, v in ref.items() if k != "prs"}},
                f, indent=1, default=float)
    plots.study_figure(os.path.join(workdir, "motor_adapters_study.png"), rows, a_mats,
                       os.path.join(workdir, "letters.npz"))
  print(md)
  return table
