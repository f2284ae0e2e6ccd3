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
from jaxpapers.core import config as config_lib
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
                        code_frac=o.code_frac, lr_decay=bool(o.lr_decay),
                        effort=o.effort, activity=o.activity, clip=o.clip,
                        tasks=tasks_lib.N_PRIMITIVES, fast_compile=t.fast_compile)


def kind_lrs(config, kind: str) -> tuple:
  """The stage-1 learning-rate grid of one kind (its own grid, else `optim.lrs`)."""
  own = config.optim.kind_lrs.get(kind, ()) if "kind_lrs" in config.optim else ()
  return tuple(own or ()) or tuple(config.optim.lrs)


def stage1_lanes(config) -> list:
  """(kind, seed, lr) of every stage-1 lane, kind-major."""
  seeds = [config.seed + i for i in range(config.train.seeds)]
  return [(k, s, lr) for k in config.model.kinds for s in seeds
          for lr in kind_lrs(config, k)]


def big_config(config):
  """The parameter-matched multitask baseline's run: the multitask kind alone at
  `model.big_hidden` units on its own grid (a different H is a different lane layout,
  so it is a second program), with nothing else changed."""
  return config_lib.lock(config_lib.override(config, {
      "model.kinds": ("multitask",), "model.hidden": config.model.big_hidden,
      "model.big_hidden": 0, "optim.kind_lrs.multitask": tuple(config.optim.big_lrs)}))


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


def _stage1_program(env, hp, states, n_tasks: int, trial: int):
  """(program, abstract args) of one stage-1 step of every lane on `trial`-step trials,
  spread as `training.train_chunk` spreads it (donating the states)."""
  e = env._replace(move_steps=trial, hold_steps=0)
  targets = jax.ShapeDtypeStruct((n_tasks, trial, 2), jnp.float32)
  return sharding.spread_plan(training.train_lane(e, hp, 1), states,
                              jax.ShapeDtypeStruct((), jnp.int32), targets,
                              in_axes=(0, None, None), donate_argnums=(0,))


def plan(config) -> planner.Plan:
  """One stage-1 step of every (kind, seed, lr) lane, spread over the devices as
  `training.train_chunk` spreads them, for `launch/plan.py` (nothing allocated).

  Stage 1 dominates the run (stage 2 drives the same frozen closed loop with a smaller
  batch and a quarter of the steps; not counted). The planned program is the study's
  step on full trials (its memory is the study's). The closed loop is a `lax.scan` over
  the trial's time steps; `core.planner` counts every trip of it (XLA's cost analysis
  alone counts a loop body once), so the plan's steps are the training steps.
  """
  _check(config)
  env, hp = make_env(config), make_hp(config)
  t = config.train
  lanes = stage1_lanes(config)
  n_tasks = tasks_lib.N_PRIMITIVES
  states = jax.eval_shape(lambda: training.init_lanes(lanes, env, hp, n_tasks))
  trial = env.move_steps + env.hold_steps
  fn, args = _stage1_program(env, hp, states, n_tasks, trial)
  label = (f"motor_adapters stage 1: {len(lanes)} lanes ({len(config.model.kinds)} kinds x "
           f"{t.seeds} seeds x per-kind lrs), GRU {hp['hidden']}, batch "
           f"{hp['batch']}, {trial}-step trials")
  return planner.Plan(fn, args, steps=t.steps, label=label)


def _run_chunks(fn, states, total: int, chunk: int, ckpt, writer, tag: str, names,
                stop_at: int | None = None, on_chunk=None):
  """Runs `fn(states, start) -> (states, metrics)` from the checkpointed step to total
  (or to `stop_at`, which simulates a killed run for the resume test). `on_chunk(states)`
  -> one dict per lane of extra numbers logged with the chunk's row (host-side)."""
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
    extra = on_chunk(states) if on_chunk else [{}] * len(names)
    row = {}
    for i, name in enumerate(names):
      for k, v in m.items():
        row[f"{tag}/{name}/{k}"] = float(v[i])
      for k, v in extra[i].items():
        row[f"{tag}/{name}/{k}"] = float(v)
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


def _batched_pr(mats) -> np.ndarray:
  """Participation ratio of each matrix in a stack (..., H, H)."""
  s2 = np.linalg.svd(np.asarray(mats, np.float64), compute_uv=False) ** 2
  den = np.sum(s2**2, -1)
  return np.where(den > 0, np.sum(s2, -1) ** 2 / np.where(den > 0, den, 1.0), 0.0)


def _geometry_hook(wh0):
  """on_chunk hook of stage 1: the effective rank over training of each lane's
  recurrent weight change (the candidate block W_hn - its initial value, the block the
  adapters perturb; every kind) and of its used adapters' A_k (adapter kinds)."""
  def hook(states):
    p = jax.device_get({"bank": states["params"]["bank"], "wh": states["params"]["core"]["wh"],
                        "code": states["params"]["code"], "kid": states["kid"]})
    hidden = p["wh"].shape[1]
    low = np.einsum("lkir,lkrh->lkih", p["bank"]["u"], p["bank"]["v"])[:, :, :hidden]
    a = p["bank"]["a"] + low
    pr_dw = _batched_pr((p["wh"] - wh0)[:, :, 2 * hidden:])
    pr_a = _batched_pr(a)  # (lanes, K)
    out = []
    for i, kid in enumerate(p["kid"]):
      e = {"pr_dw": pr_dw[i]}
      if kid != 2:
        e["pr_adapter"] = float(np.mean(pr_a[i, sorted(set(np.argmax(p["code"][i], -1)))]))
      out.append(e)
    return out
  return hook


def _curves(workdir: str, tag: str, name: str, keys) -> dict:
  """Per-chunk values of one lane from metrics.jsonl (the training curves)."""
  rows = [r for r in metrics_lib.read_metrics(workdir, tag) if f"{tag}/{name}/{keys[0]}" in r]
  out = {"step": [int(r["step"]) for r in rows]}
  for k in keys:
    out[k] = [r.get(f"{tag}/{name}/{k}", float("nan")) for r in rows]
  return out


def _take(tree, idx):
  return jax.tree.map(lambda x: x[np.asarray(idx)], tree)


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> dict:
  """Both stages, selection and evaluation (module docstring). `stop_after` ends the run
  after that many steps (primitive steps, then policy steps) as if it were killed; a
  second call on the same workdir resumes from the checkpoints."""
  _check(config)
  d = config.data
  # Every input file is read and checked before anything trains (a bad drawings file
  # used to surface only after both stages had run).
  user_drawings = tasks_lib.load_drawings(d.drawings, DENSE) if d.drawings else None
  try:
    from jaxpapers.core import workdir as workdir_lib
    workdir_lib.check_resume(workdir, config.to_dict())
  except ImportError:
    pass
  metrics_lib.write_config(workdir, config)
  env, hp = make_env(config), make_hp(config)
  t = config.train
  kinds = list(config.model.kinds)
  lanes = stage1_lanes(config)
  names = [f"{k}/s{s}/lr{lr:g}" for k, s, lr in lanes]
  writer = metrics_lib.MetricsWriter(workdir, total_steps=t.steps + t.policy_steps)
  prim = jnp.asarray(tasks_lib.primitive_paths(env.radius, env.move_steps, env.hold_steps))
  n_tasks = prim.shape[0]

  # ---- stage 1: primitives
  states = training.init_lanes(lanes, env, hp, n_tasks)
  code0 = np.argmax(np.array(states["params"]["code"]), -1)  # initial code (lanes, N)
  wh0 = np.array(states["params"]["core"]["wh"])  # initial recurrent weights (lanes)
  chunk = lambda st, s: training.train_chunk(  # noqa: E731
      st, s, prim, env=env, hp=hp, length=t.chunk)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, "primitives"), keep=1)
  states, sps1 = _run_chunks(chunk, states, t.steps, t.chunk, ckpt, writer, "primitives",
                             names, stop_after, on_chunk=_geometry_hook(wh0))
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
  val_err, _, _ = jax.device_get(ev(params, kids, q_val,
                                    training.lane_key(config.seed, "kv")))
  test_err, test_opt, test_hs = jax.device_get(ev(params, kids, q_test,
                                                  training.lane_key(config.seed, "kt")))
  best_lr = {}
  for k in kinds:
    by_lr = {lr: np.mean([val_err[i].mean() for i, l in enumerate(lanes)
                          if l[0] == k and l[2] == lr]) for lr in kind_lrs(config, k)}
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
  # paired_eval: the same noise key as the policy's evaluation (common random numbers),
  # so a path on which the policy chooses the right codes gets exactly the reference's
  # error (rounds 1-2: a key of its own).
  paired = bool(config.train.get("paired_eval", False))
  oracle = jax.device_get(training.eval_with_options_lanes(
      net, net_kids, oracle_opts, ev_t, ev_m, ev_q,
      training.lane_key(config.seed, "seq_eval" if paired else "oracle"), env=env, hp=hp))
  oracle = {k: v[:, nv:] for k, v in oracle.items()}
  user = None
  if user_drawings is not None:
    u_names, u_dense, u_mask = user_drawings
    u_f, u_t, u_m = drawing_set(env, dense=u_dense, mask=u_mask)
    u_q, _ = rollout_lib.home_start(env, len(u_names))
    user = jax.device_get(seq_eval(pp_sel, net_sel, kid_sel, u_f, u_t, u_m, u_q,
                                   training.lane_key(config.seed, "user")))

  # ---- per-lane summary
  a_mats, _ = jax.device_get(jax.vmap(
      lambda p: model_lib.adapter_matrices(p, rollout_lib.IN_DIM))(net))
  net_host = jax.device_get(net)
  r_sub = config.study.subspace_rank
  rows = []
  for j, i in enumerate(sel):
    kind, seed, lr = lanes[i]
    used = sorted(set(int(o) for o in test_opt[i]))
    readout = np.asarray(net_host["out"]["w"][j])  # (H, 6)
    geo = (analysis.adapter_geometry(a_mats[j], used, r_sub, readout=readout)
           if kind != "multitask" else {})
    # nulls for "low rank": the recurrent weight change every kind makes (the
    # candidate block W_hn, which the adapters perturb, and all three gates)
    dw = np.asarray(net_host["core"]["wh"][j], np.float64) - wh0[i]
    h_units = dw.shape[0]
    dw_c = analysis.matrix_rank_stats(dw[:, 2 * h_units:])
    dw_all = analysis.matrix_rank_stats(dw)
    # task representations: the primitives' hidden-activity subspaces (every kind)
    act = analysis.activity_geometry(test_hs[i], r_sub, readout=readout)
    # positive control for "disparate subspaces": this lane's own adapters and activity
    # rewritten into subspaces separate by design (planted overlap 0) and half shared
    # (planted 0.25), read by the same metrics
    ctl = {}
    for tag, shared in (("sep", 0.0), ("half", 0.5)):
      c = analysis.separated_control(a_mats[j] if kind != "multitask" else None, used,
                                     test_hs[i], r_sub, readout=readout, shared=shared,
                                     seed=seed)
      ctl.update({f"ctl_{tag}_{k}": v for k, v in c.items()})
    pj = psel[[planes[p][0:2] for p in psel].index((kind, seed))]
    crv = _curves(workdir, "primitives", names[i],
                  ["err_cm", "pr_dw"] + (["pr_adapter"] if kind != "multitask" else []))
    pcrv = _curves(workdir, "policy", pnames[pj], ["err_cm"])
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
           "letters_oracle_per_drawing": [float(x) for x in oracle["per_path"][j]],
           "dw_pr": dw_c["pr"], "dw_rank90": dw_c["rank90"], "dw_norm": dw_c["norm"],
           "dw_all_pr": dw_all["pr"], "dw_all_rank90": dw_all["rank90"],
           **act, "curve": crv, "policy_curve": pcrv,
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
    row.update(ctl)
    rows.append(row)
  summary = {"rows": rows, "best_lr": best_lr, "best_policy_lr": best_plr,
             "letters": letter_names, "steps_per_s": {"primitives": sps1, "policy": sps2},
             "lanes": len(lanes), "policy_lanes": len(planes)}
  main_kinds = np.array([r["kind"] for r in rows])  # the rows letters/adapters.npz hold
  for r in rows:
    writer.write(t.steps + t.policy_steps,
                 {k: v for k, v in r.items() if isinstance(v, (int, float))},
                 split=f"summary/{r['kind']}/s{r['seed']}")
  if metrics_lib.is_writer():
    # written before the parameter-matched run too, so the main rows survive its end
    with open(os.path.join(workdir, "summary.json"), "w") as f:
      json.dump(summary, f, indent=1, default=float)
    np.savez_compressed(os.path.join(workdir, "letters.npz"), hand=le["hand"],
                        target=le["target"], kinds=main_kinds,
                        seeds=np.array([r["seed"] for r in rows]),
                        names=np.array(letter_names),
                        steps_per_segment=env.steps, mask=np.asarray(le_m))
    np.savez_compressed(os.path.join(workdir, "adapters.npz"), a=a_mats, kinds=main_kinds)
  if config.model.big_hidden and "multitask" in kinds:
    # the parameter-matched baseline: both stages, selection and evaluation again for
    # the multitask kind alone at big_hidden units (its own workdir, checkpoints, resume)
    big = train_and_evaluate(big_config(config), os.path.join(workdir, "multitask_big"),
                             stop_after)
    if "interrupted_at" in big:
      return big
    for r in big["rows"]:
      r["kind"] = "multitask_big"
    summary["rows"] = rows + big["rows"]
    summary["best_lr"]["multitask_big"] = big["best_lr"]["multitask"]
    summary["best_policy_lr"]["multitask_big"] = big["best_policy_lr"]["multitask"]
    summary["steps_per_s"]["multitask_big"] = big["steps_per_s"]
    summary["lanes"] += big["lanes"]
    summary["policy_lanes"] += big["policy_lanes"]
    if metrics_lib.is_writer():
      with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=float)
  return summary


def run_study(config, workdir: str) -> list[dict]:
  """Runs train_and_evaluate, saves the raw rows first, then writes the tables
  (motor_adapters_study.{md,json}, motor_adapters_ratios.md) and the figure
  (`study_report`, which rebuilds them from the raw rows alone)."""
  commit = study_lib.git_commit(paths=PATHS)  # stamped before anything runs
  if config.study.get("big_hidden", 0):  # the smoke study's parameter-matched baseline
    config = config_lib.lock(config_lib.override(
        config, {"model.big_hidden": config.study.big_hidden}))
  start = time.perf_counter()
  summary = train_and_evaluate(config, workdir)
  wall = time.perf_counter() - start
  ref = analysis.random_reference(config.model.hidden, 14, config.study.subspace_rank)
  raw = {"commit": commit, "wall_s": wall, "summary": summary,
         "random_reference": {k: v for k, v in ref.items() if k != "prs"}}
  if metrics_lib.is_writer():
    with open(os.path.join(workdir, "motor_adapters_raw.json"), "w") as f:
      json.dump(raw, f, indent=1, default=float)
  return study_report(config, workdir, raw)


def study_report(config, workdir: str, raw: dict) -> list[dict]:
  """Tables and figure from the raw rows (and the workdir's letters/adapters npz)."""
  from jaxpapers.papers.motor_adapters import plots
  summary = raw["summary"]
  rows = summary["rows"]
  ref = analysis.random_reference(config.model.hidden, 14, config.study.subspace_rank)
  table = plots.table_rows(rows, ref)
  header = (f"motor_adapters study (commit {raw['commit']}); seeds={config.train.seeds}, "
            f"H={config.model.hidden} (parameter-matched multitask: "
            f"{config.model.big_hidden}), K={config.model.adapters}, rank R="
            f"{config.model.rank}, {config.train.steps} primitive steps x batch "
            f"{config.train.batch}, {config.train.policy_steps} policy steps; LR chosen on "
            f"validation starts: {summary['best_lr']}, policy LR on validation paths: "
            f"{summary['best_policy_lr']}; wall {raw['wall_s']:.0f} s. Errors are mean "
            "hand-target distance (cm); mean +- std over seeds.")
  md = study_lib.write_table(workdir, "motor_adapters_study", table, header=header)
  ratios = study_lib.write_table(workdir, "motor_adapters_ratios",
                                 plots.ratio_rows(rows, summary["letters"]),
                                 header="Letters: baseline error / this model's error.")
  curves = study_lib.write_table(workdir, "motor_adapters_curves", plots.curve_rows(rows),
                                 header="Training curves (selected lanes, mean over seeds).")
  last = {}
  for kind, wd in (("multitask", workdir),
                   ("multitask_big", os.path.join(workdir, "multitask_big"))):
    if os.path.exists(os.path.join(wd, "metrics.jsonl")):
      prim = metrics_lib.read_metrics(wd, "primitives")
      if prim:
        last[kind] = prim[-1]
  val = {}
  for r in rows:
    for lr, v in r["prim_val_all_lrs"].items():
      val.setdefault(r["kind"], {}).setdefault(lr, []).append(v)
  val = {k: {lr: float(np.mean(v)) for lr, v in d.items()} for k, d in val.items()}
  grid = study_lib.write_table(
      workdir, "motor_adapters_grid", plots.grid_rows(last, val),
      header="Every learning rate at the last stage-1 step, mean +- std over seeds.")
  pgrid = study_lib.write_table(
      workdir, "motor_adapters_policy_grid", plots.policy_grid_rows(rows),
      header="Every policy learning rate: validation error on held-out random paths "
             "(cm), mean +- std over seeds.")
  curves = curves + "\n\n" + grid + "\n\n" + pgrid
  if metrics_lib.is_writer():
    a_mats = np.load(os.path.join(workdir, "adapters.npz"))["a"]
    plots.study_figure(os.path.join(workdir, "motor_adapters_study.png"), rows, a_mats,
                       os.path.join(workdir, "letters.npz"))
  print(md + "\n\n" + ratios + "\n\n" + curves)
  return table
