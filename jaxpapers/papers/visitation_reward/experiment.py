"""Success Visitation Matching (arXiv 2606.23640): training entry and the study.

`train_and_evaluate` fine-tunes the behaviour-cloned policy of one task with one method
over several seeds (vmapped; checkpointed every `train.chunk` iterations, resumes
exactly) and writes the success rate per iteration. `run_study` runs, per task, every
method x actor-LR on validation seeds, picks each method's LR by its mean success over
training (area under the curve) on those seeds, runs the reported seeds at that LR, and
writes the AUC table with paired differences to the sparse baseline (Holm-corrected
p-values, stats.py), the deterministic-policy evaluation success, success-vs-env-steps
plots with 95% bands, and the tabular invariance check.
"""
from __future__ import annotations

import functools
import os
import time
import typing
import zlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.visitation_reward import bc, envs, plots, ppo, rewards, sac
from jaxpapers.papers.visitation_reward import stats as vr_stats
from jaxpapers.papers.visitation_reward import tabular

PATHS = ["jaxpapers/papers/visitation_reward", "configs/visitation_reward.py"]
VAL_SEED_OFFSET = 1000


class RunCfg(typing.NamedTuple):
  """The static (hashable) settings of one run, from the config."""
  num_envs: int
  iterations: int
  epochs: int
  minibatches: int
  gamma: float
  lam: float
  clip: float
  critic_lr: float
  init_std: float
  critic_warmup: int
  hidden: int
  buffer_rollouts: int
  prefill_rollouts: int
  aux_steps: int
  aux_init_steps: int
  aux_batch: int
  aux_lr: float
  bc_episodes: int
  bc_noise: float
  bc_steps: int
  bc_lr: float
  algo: str  # ppo | sac
  sac_updates: int
  sac_batch: int
  sac_buffer: int
  tau: float
  sac_alpha: float
  eval_episodes: int  # deterministic-policy evaluation episodes after every iteration
  # RLPD-style SAC (sac.py): symmetric demonstration / online replay, LayerNorm critics;
  # sac_utd > 0: gradient steps per environment step (replaces sac_updates)
  sac_rlpd: bool = False
  sac_utd: float = 0.0


def run_cfg(config, algo: str | None = None) -> RunCfg:
  p, r, b, s = config.ppo, config.reward, config.bc, config.sac
  algo = algo or config.train.algo
  if algo not in ("ppo", "sac"):
    raise ValueError(f"unknown algo {algo!r}; known: ppo, sac")
  return RunCfg(p.num_envs, p.iterations, p.epochs, p.minibatches, p.gamma, p.lam, p.clip,
                p.critic_lr, p.init_std, p.critic_warmup, p.hidden, r.buffer_rollouts,
                r.prefill_rollouts, r.aux_steps, r.aux_init_steps, r.aux_batch, r.aux_lr,
                b.episodes, b.noise, b.steps, b.lr, algo, s.updates, s.batch, s.buffer,
                s.tau, s.alpha, p.eval_episodes, bool(s.rlpd), float(s.utd))


def scales(config) -> dict:
  return {c: float(config.reward[c]) for c in rewards.COMPONENTS}


def seed_key(task_name: str, seed):
  """Every run's randomness: (task, seed). Methods and LRs share it (paired runs), and a
  run's numbers do not depend on which other runs share its program."""
  return jax.random.fold_in(jax.random.key(zlib.crc32(task_name.encode()) % (2**31)), seed)


def initial_actor(task, rc: RunCfg, key, demos=None):
  return bc.behaviour_clone(task, jax.random.fold_in(key, 0), rc.hidden, rc.bc_episodes,
                            rc.bc_noise, rc.bc_steps, rc.bc_lr, demos=demos)


def load_demos(config):
  """Recorded demonstrations from `config.bc.demos` (None: the scripted demonstrator)."""
  if not config.bc.get("demos", ""):
    return None
  task = envs.make(config.task.name)
  obs, act = bc.load_demonstrations(config.bc.demos, task.obs_dim, task.act_dim)
  return jnp.asarray(obs), jnp.asarray(act)


def in_groups(fn, group: int, *lane_args):
  """fn (jitted, vmapped over lanes) on lanes split into fixed-size groups of `group`.

  XLA compiles a different program for every lane count (other kernels, other orders of
  summation), and RL turns a last-bit difference into a different run: a lane's result
  then depended on how many lanes shared the call. Every call here has exactly `group`
  lanes (the last group padded with copies of lane 0, dropped after), so one compiled
  program runs every lane whatever else shares the study; `tests/test_visitation_reward.py`
  checks that a lane alone equals the same lane beside others at another position.
  """
  n = jax.tree.leaves(lane_args)[0].shape[0]
  outs = [fn(*_take_group(lane_args, lo, group)) for lo in range(0, n, group)]
  return _join_groups(outs, n)


# Slicing / padding a group out of every lane argument, and joining the groups' outputs,
# as ONE small program each (per shapes) instead of one eager slice, repeat and
# concatenate per leaf of the carry: the same copies, a few compiles instead of ~100.
# The group's offset `lo` is traced (rows gathered at lo + i), so one program serves every
# group; the rows past the end are copies of the group's lane 0.
@functools.partial(jax.jit, static_argnums=(2,))
def _take_group(lane_args, lo, group: int):
  def take(x):
    i = lo + jnp.arange(group)
    return x[jnp.where(i < x.shape[0], i, lo)]
  return jax.tree.map(take, lane_args)


@functools.partial(jax.jit, static_argnums=(1,))
def _join_groups(outs, n: int):
  return jax.tree.map(lambda *ys: jnp.concatenate(ys)[:n], *outs)


# The lane programs below are `core.sharding.spread` of one lane: the lanes of a group
# (seeds x methods x LRs x scales) are split over every device. One spread callable per
# (program, task, run settings), so repeated groups and chunks reuse one compile.
_SPREAD = {}


def _spread(name, make_lane, in_axes, *key):
  k = (name,) + key
  if k not in _SPREAD:
    _SPREAD[k] = sharding.spread(make_lane(), in_axes=in_axes)
  return _SPREAD[k]


def population_lane(task_name: str, rc: RunCfg):
  """(seed, lr, weights, demos) -> (initial {success, eval_success}, per-iteration
  metrics): one whole fine-tuning run, the program every study lane runs."""
  task = envs.make(task_name)

  def lane(seed, lr, w, demos):
    key = seed_key(task_name, seed)
    actor0 = initial_actor(task, rc, key, demos)
    algo = sac if rc.algo == "sac" else ppo
    run_key = jax.random.fold_in(key, 1)
    init_success, metrics, _ = algo.finetune(task, rc, run_key, actor0, lr, w)
    e0 = ppo.evaluate(task, actor0, ppo.eval_key(run_key), rc.eval_episodes)
    return {"success": init_success, "eval_success": e0}, metrics
  return lane


def _population_group(task_name: str, rc: RunCfg, seeds, lrs, weights, demos=None):
  fn = _spread("population", lambda: population_lane(task_name, rc), (0, 0, 0, None),
               task_name, rc, demos is None)
  return fn(seeds, lrs, weights, demos)


def population(task_name: str, rc: RunCfg, seeds, lrs, weights, group: int, demos=None):
  """Whole runs for lanes (seed, lr, weights): (initial {success, eval_success} (L,),
  metrics (L, I)),
  in fixed groups of `group` lanes (see `in_groups`), each group spread over the
  devices."""
  fn = functools.partial(_population_group, task_name, rc, demos=demos)
  return in_groups(fn, group, seeds, lrs, weights)


def _init_lane(task_name, rc):
  task = envs.make(task_name)

  def lane(seed, demos):
    key = seed_key(task_name, seed)
    actor0 = initial_actor(task, rc, key, demos)
    carry, s0 = ppo.init(task, rc, jax.random.fold_in(key, 1), actor0)
    e0 = ppo.evaluate(task, actor0, ppo.eval_key(jax.random.fold_in(key, 1)), rc.eval_episodes)
    return actor0, carry, s0, e0
  return lane


def _init_lanes(task_name, rc, seeds, demos=None):
  fn = _spread("init", lambda: _init_lane(task_name, rc), (0, None), task_name, rc,
               demos is None)
  return fn(seeds, demos)


def _run_lane(task_name, rc, n):
  task = envs.make(task_name)

  def lane(seed, c, a0, lr, weights, start):
    key = jax.random.fold_in(seed_key(task_name, seed), 1)
    return ppo.run(task, rc, c, key, a0, lr, weights, start, n)
  return lane


def _run_lanes(task_name, rc, seeds, carry, actor0, lr, weights, start, n):
  fn = _spread("run", lambda: _run_lane(task_name, rc, n), (0, 0, 0, None, None, None),
               task_name, rc, n)
  return fn(seeds, carry, actor0, lr, weights, start)


def _groups(config) -> int:
  """How many lane groups the study runs per task (validation grid, then test seeds)."""
  st, g = config.study, config.train.lane_group
  val = sum(len(st.lrs) * (1 if m == "sparse" else len(st.scale_factors)) * st.val_seeds
            for m in st.methods)
  return -(-val // g) + -(-(len(st.methods) * st.test_seeds) // g)


def plan(config) -> planner.Plan:
  """One PPO minibatch update of every lane of a study group on each of `study.tasks`,
  spread over the devices as `population` spreads a group, for `launch/plan.py`
  (nothing allocated).

  The minibatch update (epochs x minibatches per iteration) is the bulk of a PPO
  iteration: the rollout is one forward pass of the same networks per sample against
  `epochs` forward + backward passes, and the discriminator / RND updates work on
  `aux_batch` samples. Planned alone because XLA's cost analysis counts a `lax.scan`
  body once: `steps` = groups x iterations x epochs x minibatches, the same count for
  every task. The study runs its tasks one after another; the planned program holds one
  update per task (their minibatches differ with the task's horizon), so its FLOPs are
  those of the tasks together and its memory the sum of theirs (an over-count: one task
  is resident at a time).
  """
  rc = run_cfg(config)
  g = config.train.lane_group
  names = tuple(config.study.tasks)
  states, batches, mbs, sims, sim_sizes = [], [], [], [], []
  updates_per_it = rc.epochs * rc.minibatches
  for name in names:
    task = envs.make(name)
    n = rc.num_envs * task.horizon
    if n % rc.minibatches:
      raise ValueError(f"{name}: num_envs x horizon = {n} is not a multiple of "
                       f"minibatches={rc.minibatches}")
    mb = n // rc.minibatches
    # brax tasks: the physics step is a real share of the cost (our pure-JAX tasks' step is
    # a few flops). An iteration steps (num_envs + eval_episodes) x horizon environments;
    # the planned step holds 1 / updates_per_it of them, one vmapped env step of B envs,
    # so `steps` stays the minibatch count.
    sim = None
    if name.startswith("brax_"):
      b = -(-(rc.num_envs + rc.eval_episodes) * task.horizon // updates_per_it)
      sim = (jax.eval_shape(lambda t=task, b=b: jax.vmap(jax.vmap(t.reset))(
          jax.random.split(jax.random.key(0), g * b).reshape(g, b))),
             jax.ShapeDtypeStruct((g, b, task.act_dim), jnp.float32))
      sim_sizes.append(f"{name} {b}")
    sims.append(sim)

    def lane_state(seed, task=task):
      carry, _ = ppo.init(task, rc, jax.random.fold_in(seed_key(task.name, seed), 1),
                          initial_actor(task, rc, seed_key(task.name, seed)))
      return carry.policy, carry.a_opt, carry.c_opt
    states.append(jax.eval_shape(jax.vmap(lane_state), jax.ShapeDtypeStruct((g,), jnp.int32)))
    f32 = lambda *shape: jax.ShapeDtypeStruct((g,) + shape, jnp.float32)  # noqa: E731
    batches.append((f32(mb, task.obs_dim), f32(mb, task.act_dim), f32(mb), f32(mb), f32(mb)))
    mbs.append(mb)

  tasks = [envs.make(name) for name in names]

  def updates(sts, bs, sim, lr):
    out = tuple(ppo.minibatch_update(rc, st, b, lr)[0] for st, b in zip(sts, bs))
    stepped = tuple(None if x is None else jax.vmap(t.step)(x[0], x[1], None)
                    for t, x in zip(tasks, sim))
    return out, stepped
  fn, args = sharding.spread_plan(updates, tuple(states), tuple(batches), tuple(sims),
                                  jax.ShapeDtypeStruct((g,), jnp.float32),
                                  in_axes=(0, 0, 0, 0))
  groups = _groups(config)
  label = (f"visitation_reward PPO on {'+'.join(names)}: a group of {g} lanes, "
           f"{rc.num_envs} envs per iteration, minibatches {'/'.join(map(str, mbs))}, MLP "
           f"{rc.hidden}; one minibatch update per task ({groups} groups x "
           f"{rc.iterations} iterations x {rc.epochs} epochs x {rc.minibatches} minibatches)")
  if sim_sizes:
    label += (f"; plus one brax env step of B environments per update (B = (envs + eval "
              f"episodes) x horizon / {updates_per_it} updates: {', '.join(sim_sizes)})")
  return planner.Plan(fn, args, steps=groups * rc.iterations * rc.epochs * rc.minibatches,
                      label=label)


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> dict:
  """One task and method over `train.seeds` seeds; success per iteration to metrics.jsonl.

  Checkpoints (policy, optimisers, discriminators, buffer) every `train.chunk`
  iterations; a restarted run resumes from the workdir to the same numbers.
  `stop_after` (an iteration) ends the run there as a kill would (resume test).
  """
  metrics_lib.write_config(workdir, config)
  rc = run_cfg(config)
  task = envs.make(config.task.name)
  seeds = jnp.arange(config.train.seeds) + config.seed
  weights = rewards.method_weights(config.train.method, scales(config))
  lr = jnp.float32(config.train.lr)
  if rc.algo == "sac":
    return _train_sac(config, workdir, rc, task, seeds, lr, weights)
  group = config.train.lane_group
  init = functools.partial(_init_lanes, task.name, rc, demos=load_demos(config))
  actor0, carry, s0, e0 = in_groups(init, group, seeds)
  ckpt = checkpoint_lib.Checkpointer(workdir, keep=1)
  hist = jnp.zeros((rc.iterations, config.train.seeds))
  state, start = ckpt.restore_or({"carry": carry, "success": hist, "eval_success": hist})
  carry, hist, ehist = state["carry"], state["success"], state["eval_success"]
  steps_per_it = rc.num_envs * task.horizon
  # Rows are written at environment-step counts, checkpoints at iterations: truncate in
  # the rows' unit, or a resumed run drops the rows between (issue 36).
  metrics_lib.truncate_after(workdir, start * steps_per_it,
                             drop_at_step=("summary",) if start == rc.iterations else ())
  writer = metrics_lib.MetricsWriter(workdir, total_steps=rc.iterations * steps_per_it)
  if start == 0:
    writer.write(0, {"success": float(s0.mean()), "eval_success": float(e0.mean())},
                 split="eval")
  it = start
  while it < rc.iterations:
    if stop_after is not None and it >= stop_after:
      ckpt.close()
      return {}
    n = min(config.train.chunk, rc.iterations - it)
    run = lambda sd, c, a0: _run_lanes(task.name, rc, sd, c, a0, lr, weights,  # noqa: E731
                                       jnp.int32(it), n)
    carry, m = in_groups(run, group, seeds, carry, actor0)
    succ = np.asarray(m["success"])  # (seeds, n)
    hist = hist.at[it:it + n].set(succ.T)
    ehist = ehist.at[it:it + n].set(np.asarray(m["eval_success"]).T)
    for j in range(n):
      row = {k: float(np.mean(np.asarray(v)[:, j])) for k, v in m.items()}
      metrics_lib.check_finite(it + j + 1, row)
      writer.write((it + j + 1) * steps_per_it, row)
    it += n
    ckpt.save(it, {"carry": carry, "success": hist, "eval_success": ehist})
  ckpt.close()
  hist, ehist = np.asarray(hist), np.asarray(ehist)
  out = {"initial_success": float(s0.mean()), "final_success": float(hist[-1].mean()),
         "auc_success": float(hist.mean()), "initial_eval_success": float(e0.mean()),
         "final_eval_success": float(ehist[-1].mean())}
  writer.write(rc.iterations * steps_per_it, out, split="summary")
  return {**out, "success": hist, "eval_success": ehist}


def _train_sac(config, workdir, rc, task, seeds, lr, weights) -> dict:
  """SAC runs in one program (no chunked checkpoints: a smoke-sized SAC run takes
  seconds; the study's SAC leg is deterministic and re-runnable)."""
  n = seeds.shape[0]
  init, m = population(task.name, rc, seeds, jnp.full((n,), lr),
                       jnp.broadcast_to(weights, (n, weights.shape[0])),
                       config.train.lane_group, demos=load_demos(config))
  hist = np.asarray(m["success"]).T  # (iterations, seeds)
  steps_per_it = rc.num_envs * task.horizon
  writer = metrics_lib.MetricsWriter(workdir, total_steps=rc.iterations * steps_per_it)
  writer.write(0, {k: float(np.mean(v)) for k, v in init.items()}, split="eval")
  for j in range(rc.iterations):
    row = {k: float(np.mean(np.asarray(v)[:, j])) for k, v in m.items()}
    metrics_lib.check_finite(j + 1, row)
    writer.write((j + 1) * steps_per_it, row)
  out = {"initial_success": float(np.mean(init["success"])),
         "final_success": float(hist[-1].mean()),
         "auc_success": float(hist.mean()),
         "initial_eval_success": float(np.mean(init["eval_success"])),
         "final_eval_success": float(np.mean(np.asarray(m["eval_success"])[:, -1]))}
  writer.write(rc.iterations * steps_per_it, out, split="summary")
  return {**out, "success": hist}


def _lanes(grid, config):
  """Lane arrays for grid entries (method, lr, scale factor, seed)."""
  sc = scales(config)
  return (jnp.asarray([g[3] for g in grid], jnp.int32),
          jnp.asarray([g[1] for g in grid], jnp.float32),
          jnp.stack([rewards.method_weights(g[0], sc) * g[2] for g in grid]))


def _curves(grid, init, success):
  """{(method, lr, factor): (seeds, I+1) success curves}, the initial policy at index 0."""
  out = {}
  for (m, lr, f, _), s0, s in zip(grid, np.asarray(init), np.asarray(success)):
    out.setdefault((m, lr, f), []).append(np.concatenate([[s0], s]))
  return {k: np.stack(v) for k, v in out.items()}


ci95 = vr_stats.ci95


def run_task(config, task_name: str, log=print, algo: str = "ppo",
             methods=None) -> dict:
  """Selection on validation seeds, then the reported seeds, for one task.

  Each method's actor LR and (dense methods) the scale of its dense term, as a factor of
  its configured scale, are chosen together by AUC on the validation seeds; the sparse
  baseline has no dense term, so only its LR is chosen.
  """
  rc = run_cfg(config, algo)
  st = config.study
  methods, lrs = list(methods or st.methods), list(st.lrs)
  factors = lambda m: (1.0,) if m == "sparse" else tuple(st.scale_factors)  # noqa: E731
  val = [VAL_SEED_OFFSET + config.seed + i for i in range(st.val_seeds)]
  t0 = time.perf_counter()
  grid = [(m, lr, f, s) for m in methods for lr in lrs for f in factors(m) for s in val]
  init, m = population(task_name, rc, *_lanes(grid, config), config.train.lane_group)
  val_curves = _curves(grid, init["success"], m["success"])
  chosen = {}
  for meth in methods:
    cands = [(lr, f) for lr in lrs for f in factors(meth)]
    aucs = [val_curves[(meth, lr, f)][:, 1:].mean() for lr, f in cands]
    chosen[meth] = cands[int(np.argmax(aucs))]
    log(f"[{task_name} {algo}] {meth}: val AUC per (lr, factor) "
        f"{dict(zip(cands, np.round(aucs, 3)))} -> {chosen[meth]}")
  t_val = time.perf_counter() - t0
  test = [config.seed + i for i in range(st.test_seeds)]
  grid = [(meth, *chosen[meth], s) for meth in methods for s in test]
  init, m = population(task_name, rc, *_lanes(grid, config), config.train.lane_group)
  curves = {k[0]: v for k, v in _curves(grid, init["success"], m["success"]).items()}
  evals = {k[0]: v for k, v in
           _curves(grid, init["eval_success"], m["eval_success"]).items()}
  sc = scales(config)
  return {"curves": curves, "eval_curves": evals, "chosen_lr": {k: v[0] for k, v in chosen.items()},
          "chosen_scale": {k: (sc[k] * v[1] if k in sc else 0.0) for k, v in chosen.items()},
          "val_auc": {f"{k[0]} lr={k[1]:g} x{k[2]:g}": float(v[:, 1:].mean())
                      for k, v in val_curves.items()},
          "val_seconds": t_val, "test_seconds": time.perf_counter() - t0 - t_val,
          "steps_per_iteration": rc.num_envs * envs.make(task_name).horizon}


def run_study(config, workdir: str) -> list[dict]:
  """Table `visitation_reward_study.md`, raw json, plot, tabular invariance."""
  metrics_lib.write_config(workdir, config)
  commit = study_lib.git_commit(paths=PATHS)  # stamped when the study starts
  start = time.perf_counter()
  writer = metrics_lib.MetricsWriter(workdir)
  tab = tabular.study(config.study.tabular_mdps, seed=config.seed)
  writer.write(0, tab, split="tabular")
  results = {}
  # PPO only: the SAC leg was removed from the study (README "Not done": it collapsed from
  # the BC actor with every reward and was never shown to improve on anything).
  for task_name in config.study.tasks:
    results[task_name] = run_task(config, task_name)
    rows = vr_stats.table_rows(results)
    for row in rows:
      if row["task"] == task_name:
        writer.write(0, {k: v for k, v in row.items() if isinstance(v, float)},
                     split=f"study/{task_name}/{row['method']}")
    _write(config, workdir, commit, start, rows, results, tab)
  return _write(config, workdir, commit, start, vr_stats.table_rows(results), results, tab)


def _write(config, workdir, commit, start, rows, results, tab):
  st = config.study
  header = (f"Success Visitation Matching study (commit {commit}); PPO fine-tuning of a BC "
            f"policy, {config.ppo.iterations} iterations x {config.ppo.num_envs} episodes, "
            f"{st.test_seeds} reported seeds (LR from {st.lrs} and dense-scale factor from "
            f"{st.scale_factors} chosen per method on {st.val_seeds} validation seeds by "
            "AUC); AUC = mean training-rollout success over iterations; p = paired t-test "
            "of the AUC difference to sparse, Holm-corrected over every test of the table; "
            f"eval = {config.ppo.eval_episodes} separate episodes of the deterministic policy "
            f"after each iteration; wall {time.perf_counter() - start:.0f} s. "
            f"Tabular invariance: {tab}.")
  columns = [c for c in vr_stats.COLUMNS if any(c in r for r in rows)]
  # p-values in 3 significant digits (a fixed 3 decimals would print 4e-5 as 0.000)
  shown = [{k: (f"{v:.3g}" if k in ("p", "Holm p") else v) for k, v in r.items()} for r in rows]
  md = study_lib.write_table(workdir, "visitation_reward_study", shown, columns, header)
  raw = {t: {"chosen_lr": r["chosen_lr"], "chosen_scale": r["chosen_scale"],
             "val_auc": r["val_auc"], "steps_per_iteration": r["steps_per_iteration"],
             "curves": {m: c.tolist() for m, c in r["curves"].items()},
             "eval_curves": {m: c.tolist() for m, c in r["eval_curves"].items()}}
         for t, r in results.items()}
  import json
  with open(os.path.join(workdir, "visitation_reward_curves.json"), "w") as f:
    json.dump(raw, f)
  plots.success_curves(os.path.join(workdir, "visitation_reward_study.png"), results, ci95)
  print(md, flush=True)
  return rows


@functools.partial(jax.jit, static_argnames=("task_name", "rc"))
def _finetune_one(task_name, rc, key, lr, w):
  task = envs.make(task_name)
  actor0 = initial_actor(task, rc, key)
  s0, m, carry = ppo.finetune(task, rc, jax.random.fold_in(key, 1), actor0, lr, w)
  return actor0, carry.policy.actor, jnp.concatenate([s0[None], m["success"]])


def finetune_one(config, task_name: str, method: str, seed: int = 0, lr: float | None = None):
  """One run for notebooks: (initial actor, fine-tuned actor, success curve (I+1,)).

  The method's weights are an argument of the jitted program: one compile for all.
  """
  w = rewards.method_weights(method, scales(config))
  lr = jnp.float32(config.train.lr if lr is None else lr)
  return _finetune_one(task_name, run_cfg(config), seed_key(task_name, seed), lr, w)
