"""Learned autoscaling of PD-disaggregated LLM serving (abstract 12): launcher entry points.

`train_and_evaluate` trains the recurrent PPO-Lagrangian controller (config.rl.seeds
members vmapped, checkpointed every `ckpt_every` iterations, resumed exactly from the
workdir), selects each member's snapshot on validation traces and scores it on held-out
test traces (and on a real trace CSV when `trace=` is given). `run_study` is the README's
study (study.py); `benchmark` measures the simulator's throughput; `plan` hands one PPO
iteration at the paper's sizes to launch/plan.py.
"""
from __future__ import annotations

import functools
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import population
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.core import validate as validate_lib
from jaxpapers.papers.pd_autoscale import baselines
from jaxpapers.papers.pd_autoscale import episode
from jaxpapers.papers.pd_autoscale import policy
from jaxpapers.papers.pd_autoscale import ppo
from jaxpapers.papers.pd_autoscale import simulator as sim
from jaxpapers.papers.pd_autoscale import traces as traces_lib
from jaxpapers.papers.pd_autoscale import workloads

PATHS = ["jaxpapers/papers/pd_autoscale", "configs/pd_autoscale.py",
         "tests/test_pd_autoscale.py", "colabs/pd_autoscale.ipynb"]
SPLIT_SEED = dict(train=100_000, val=1_000, test=2_000)


# ------------------------------------------------------------------ setup and data

def validate(config) -> None:
  """The launcher's pre-flight hook (core/validate.py): the real trace CSV, if given."""
  if config.data.trace:
    if not os.path.isfile(config.data.trace):
      raise FileNotFoundError(f"config field data.trace={config.data.trace!r}: no such "
                              "file (a trace CSV, or leave it empty for synthetic traces)")
    validate_lib.check_file("data.trace", config.data.trace)


def setup(config):
  spec = sim.spec_from(config)
  r = config.rl
  ps = policy.PolicySpec(hidden=r.hidden, cooldown_down_s=r.cooldown_down_s,
                         cooldown_up_s=r.cooldown_up_s,
                         rate_norm=workloads.AZURE["conversation"]["rate"] *
                         config.data.rate_scale,
                         gpu_norm=float(spec.max_prefill + spec.max_decode) / 2)
  pp = ppo.PPOSpec(envs=r.envs, update_epochs=r.update_epochs, minibatches=r.minibatches,
                   gamma=r.gamma, ent=r.ent, budget=r.budget, n_fam=len(r.train_families),
                   per_family=r.multiplier == "per_family", lam_lr=r.lam_lr,
                   step_cap=r.dual_cap, dual_log=r.dual == "log")
  return spec, ps, pp


def epochs_of(config, spec):
  return int(round(config.data.duration / spec.epoch_s))


def n_max(config) -> int:
  d = config.data
  expected = workloads.AZURE["conversation"]["rate"] * d.rate_scale * d.duration
  return int(math.ceil(expected * d.n_max_factor)) + 64


def make_traces(config, split: str, n_seeds: int, offset: int = 0):
  """[(family, seed, (arr, prompt, output))] for every family and seed of a split."""
  d = config.data
  out = []
  for s in range(n_seeds):
    for fam in d.families:
      seed = SPLIT_SEED[split] + config.seed * 10_000 + offset + s
      out.append((fam, seed, workloads.generate(fam, d.duration, seed, d.rate_scale)))
  return out


def real_trace(config):
  d = config.data
  arr, p, o = traces_lib.load(d.trace, d.trace_start, d.trace_duration or d.duration,
                              d.trace_speedup)
  arr, p, o = arr[arr < d.duration], p[arr < d.duration], o[arr < d.duration]
  return [("trace:" + os.path.basename(d.trace), 0, (arr, p, o))]


def batch(config, spec, traces, oracle: bool = False):
  """Stacked workloads [B, ...], oracle futures [B, E, 2] and true request counts."""
  E = epochs_of(config, spec)
  cap = max(n_max(config), max(len(t[2][0]) for t in traces))
  for _, _, (arr, p, o) in traces:
    if np.any(p + o > spec.kv_capacity):
      raise ValueError(f"a request needs {int(np.max(p + o))} KV tokens, more than a decode "
                       f"GPU holds ({int(spec.kv_capacity)})")
  arr, p, o = workloads.stack([t[2] for t in traces], spec.window, n_max=cap)
  wl = sim.Workload(jnp.asarray(arr), jnp.asarray(p), jnp.asarray(o))
  if oracle:
    fut = np.stack([baselines.oracle_future(spec, *t[2], E) for t in traces])
  else:
    fut = np.zeros((len(traces), E, 2), np.float32)
  return wl, jnp.asarray(fut), [len(t[2][0]) for t in traces]


def n0_of(config, b):
  return jnp.tile(jnp.array([[config.sim.init_prefill, config.sim.init_decode]], jnp.int32),
                  (b, 1))


_RUNNERS = {}


def runner(spec, ctrl, epochs):
  """The spread (vmapped over clusters, split over devices) episode of a controller."""
  key = (spec, ctrl.name, epochs)
  if key not in _RUNNERS:
    _RUNNERS[key] = sharding.spread(episode.episode_fn(spec, ctrl, epochs))
  return _RUNNERS[key]


# The grid's arguments and each chunk of them as one small program (per shapes) each,
# instead of an eager tile / repeat / slice / pad per leaf: the same copies, few compiles.
@functools.partial(jax.jit, static_argnums=(3,))
def _grid_args(params, wl, fut, T):
  G = jax.tree.leaves(params)[0].shape[0]
  tile = lambda x: jnp.tile(x, (G,) + (1,) * (x.ndim - 1))
  rep = lambda x: jnp.repeat(x, T, axis=0)
  return jax.tree.map(rep, params), jax.tree.map(tile, wl), tile(fut)


# The chunk's offset `a` is traced (rows gathered at a + i), so one program serves every
# chunk; the rows past the end repeat the last row (as sharding.pad_leading).
@functools.partial(jax.jit, static_argnums=(2,))
def _chunk_of(args, a, C):
  return jax.tree.map(lambda x: x[jnp.minimum(a + jnp.arange(C), x.shape[0] - 1)], args)


def run_clusters(config, spec, ctrl, params, traces, oracle=False, seed=0):
  """Runs len(params-leading) x len(traces) episodes; returns summaries [G][T].

  params: a pytree whose leaves have a leading grid axis G."""
  E = epochs_of(config, spec)
  wl, fut, ns = batch(config, spec, traces, oracle)
  G = jax.tree.leaves(params)[0].shape[0]
  T = len(traces)
  args = _grid_args(params, wl, fut, T) + (
      n0_of(config, G * T), jax.random.split(jax.random.PRNGKey(seed), G * T))
  # Fixed-size chunks (the last one padded): every call of a controller reuses one
  # compiled program whatever the grid or trace count.
  C = config.sim.chunk
  n = G * T
  fn = runner(spec, ctrl, E)
  outs = []
  for a in range(0, n, C):
    outs.append(jax.device_get(fn(*_chunk_of(args, a, C))))
  st, rows = jax.tree.map(lambda *x: np.concatenate(x)[:n], *outs)
  d = config.data
  out = []
  for g in range(G):
    row = []
    for t in range(T):
      i = g * T + t
      s = episode.summarize(spec, jax.tree.map(lambda x: x[i], rows),
                            jax.tree.map(lambda x: x[i], st), jax.tree.map(lambda x: x[t], wl),
                            ns[t], warmup_s=d.warmup, until_s=d.duration - d.tail)
      row.append(s)
    out.append(row)
  return out, (st, rows)


# ------------------------------------------------------------------ PPO training

_ITERATIONS = {}


def _iteration(spec, ps, pp, epochs):
  """The spread PPO iteration, one callable per settings: a resumed or repeated
  training run in the same process reuses its compiled program (no retrace)."""
  key = (spec, ps, pp, epochs)
  if key not in _ITERATIONS:
    _ITERATIONS[key] = sharding.spread(ppo.make_iteration(spec, ps, pp, epochs))
  return _ITERATIONS[key]


def member_grid(config, variants, seeds, lrs):
  """[(variant name, flags dict, seed, lr)] in member order."""
  return [(name, fl, s, lr) for name, fl in variants for lr in lrs for s in seeds]


def val_score(spec, summaries, families):
  """(families meeting both P99 targets on every seed, -mean GPUs): larger is better."""
  fams = sorted(set(families))
  ok = sum(all(episode.meets(spec, s) for s, f in zip(summaries, families) if f == fam)
           for fam in fams)
  return float(ok), -float(np.mean([s["gpus"] for s in summaries]))


EVAL_MODES = ("greedy", "sampled")


def policy_state(config, members):
  """The PPO training state of `members` at iteration 0: the members' fresh train states
  (stacked), each mode's best snapshot and score, the iteration. Also the template a
  finished run's checkpoint restores into (`restore_policy`)."""
  _, ps, pp = setup(config)
  keys = [jax.random.PRNGKey(config.seed * 1000 + s) for _, _, s, _ in members]
  ts = population.stack([ppo.init_member(k, lr, fl, ps, pp)
                         for k, (_, fl, _, lr) in zip(keys, members)])
  return dict(ts=ts, best={m: ts.params for m in EVAL_MODES},
              score={m: jnp.full((len(members), 2), -1e9) for m in EVAL_MODES},
              it=jnp.int32(0))


def restore_policy(config, ckpt_dir, members):
  """A PPO run's latest checkpoint in ckpt_dir (workdir/<tag>), for re-evaluation."""
  state, _ = checkpoint_lib.Checkpointer(ckpt_dir, keep=2).restore_or(
      policy_state(config, members))
  return state


def train_policy(config, workdir, members, tag="rl", log=print):
  """Trains the members (vmapped); returns, per evaluation mode (greedy = argmax actions,
  sampled = the stochastic policy it was trained as), each member's best snapshot on the
  validation traces and its score: dict(best={mode: params [M]}, score={mode: [M, 2]})."""
  spec, ps, pp = setup(config)
  E = epochs_of(config, spec)
  M = len(members)
  iteration = _iteration(spec, ps, pp, E)
  ctrls = dict(greedy=policy.controller(spec, ps, greedy=True),
               sampled=policy.controller(spec, ps, greedy=False))
  val = make_traces(config, "val", config.data.val_seeds)
  fams = [t[0] for t in val]
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, tag), keep=2)
  state, _ = ckpt.restore_or(policy_state(config, members))
  start = int(state["it"])
  if start:
    log(f"[{tag}] resumed at iteration {start}")
  # Rows every iteration, checkpoints every ckpt_every: drop this tag's rows past it.
  metrics_lib.truncate_after(workdir, start, splits=("train",), tag=tag)
  writer = metrics_lib.MetricsWriter(workdir, total_steps=config.rl.iterations, verbose=False)
  r = config.rl
  F = len(r.train_families)
  t0 = time.perf_counter()
  for it in range(start, r.iterations):
    tr, fam_idx = [], []
    for e in range(r.envs):
      f = (it * r.envs + e) % F
      fam = r.train_families[f]
      seed = SPLIT_SEED["train"] + config.seed * 10_000_000 + it * 1000 + e
      tr.append((fam, seed, workloads.generate(fam, config.data.duration, seed,
                                               config.data.rate_scale)))
      fam_idx.append(f)
    wl, _, _ = batch(config, spec, tr)
    wl_m = jax.tree.map(lambda x: jnp.broadcast_to(x, (M,) + x.shape), wl)
    n0 = jnp.broadcast_to(n0_of(config, r.envs), (M, r.envs, 2))
    fam_m = jnp.broadcast_to(jnp.asarray(fam_idx, jnp.int32), (M, r.envs))
    ks = jax.random.split(jax.random.PRNGKey(config.seed + 7), M)
    ts, m = iteration(state["ts"], wl_m, n0, ks, fam_m)
    m = jax.device_get(m)
    per_fam = {"lam_f", "viol_f", "gpus_f", "seen_f"}
    row = {f"{tag}/{k}": float(np.mean(v)) for k, v in m.items() if k not in per_fam}
    row.update({f"{tag}/gpus/m{j}": float(m["gpus"][j]) for j in range(M)})
    row.update({f"{tag}/viol_frac/m{j}": float(m["viol_frac"][j]) for j in range(M)})
    row.update({f"{tag}/lam/m{j}": float(np.mean(m["lam_f"][j])) for j in range(M)})
    # Per training family (mean over members): multiplier, violating fraction and GPUs
    # of this iteration's episodes of that family (absent families: no row).
    for f, fam in enumerate(r.train_families):
      row[f"{tag}/lam/{fam}"] = float(np.mean(m["lam_f"][:, f]))
      row.update({f"{tag}/lam/{fam}/m{j}": float(m["lam_f"][j, f]) for j in range(M)})
      if m["seen_f"][0, f]:
        row[f"{tag}/viol/{fam}"] = float(np.mean(m["viol_f"][:, f]))
        row[f"{tag}/gpus/{fam}"] = float(np.mean(m["gpus_f"][:, f]))
        row.update({f"{tag}/viol/{fam}/m{j}": float(m["viol_f"][j, f]) for j in range(M)})
        row.update({f"{tag}/gpus/{fam}/m{j}": float(m["gpus_f"][j, f]) for j in range(M)})
    state = dict(state, ts=ts, it=jnp.int32(it + 1))
    if (it + 1) % r.eval_every == 0 or it + 1 == r.iterations:
      params = dict(net=ts.params, flags=ts.flags)
      best, score = dict(state["best"]), dict(state["score"])
      for mode, ctrl in ctrls.items():
        summ, _ = run_clusters(config, spec, ctrl, params, val, seed=it)
        scores = np.array([val_score(spec, s, fams) for s in summ])
        old = np.asarray(score[mode])
        better = (scores[:, 0] > old[:, 0]) | (
            (scores[:, 0] == old[:, 0]) & (scores[:, 1] > old[:, 1]))
        sel = lambda new, prev: np.where(better.reshape((M,) + (1,) * (new.ndim - 1)), new, prev)
        best[mode] = jax.tree.map(sel, jax.device_get(ts.params), jax.device_get(best[mode]))
        score[mode] = np.where(better[:, None], scores, old)
        sfx = "" if mode == "greedy" else "_sampled"
        row.update({f"{tag}/val_feasible{sfx}/m{j}": float(scores[j, 0]) for j in range(M)})
        row.update({f"{tag}/val_gpus{sfx}/m{j}": float(-scores[j, 1]) for j in range(M)})
      state = dict(state, best=best, score=score)
    metrics_lib.check_finite(it + 1, row)
    writer.write(it + 1, row)
    el = time.perf_counter() - t0
    fam_txt = " ".join(
        f"{fam[:4]} lam {row[f'{tag}/lam/{fam}']:.1f}"
        + (f" viol {row[f'{tag}/viol/{fam}']:.3f} gpus {row[f'{tag}/gpus/{fam}']:.1f}"
           if f"{tag}/viol/{fam}" in row else "")
        for fam in r.train_families)
    log(f"[{tag} {it + 1}/{r.iterations}] gpus {row[f'{tag}/gpus']:.2f} viol "
        f"{row[f'{tag}/viol_frac']:.4f} ent {row[f'{tag}/ent']:.3f} | {fam_txt}"
        f" ({el / (it + 1 - start):.1f} s/it, ETA {el / (it + 1 - start) * (r.iterations - it - 1):.0f} s)")
    if (it + 1) % r.ckpt_every == 0 or it + 1 == r.iterations:
      ckpt.save(it + 1, state)
  ckpt.close()
  return dict(best=state["best"], flags=state["ts"].flags,
              score={m: np.asarray(v) for m, v in state["score"].items()},
              final=state["ts"].params)


def main_variant(config):
  r = config.rl
  return ("ppo", policy.flags(r.recurrent, r.masks, r.cooldowns))


def mean_score(score):
  """A set of members' validation scores [M, 2] -> (mean feasible families, mean -GPUs)."""
  return tuple(float(v) for v in np.mean(np.asarray(score), axis=0))


def pick_mode(score):
  """The evaluation mode (greedy / sampled) with the better mean validation score."""
  return max(EVAL_MODES, key=lambda m: mean_score(score[m]))


def aggregate(spec, summaries, families, methods):
  """Rows (method, family): mean and std over seeds of each metric."""
  rows = []
  for m, summ in zip(methods, summaries):
    for fam in sorted(set(families), key=list(families).index):
      ss = [s for s, f in zip(summ, families) if f == fam]
      row = dict(method=m, family=fam, seeds=len(ss),
                 meets=f"{sum(episode.meets(spec, s) for s in ss)}/{len(ss)}")
      for k in ("gpus", "prefill_gpus", "decode_gpus", "p99_ttft", "p99_tpot", "attainment",
                "scaling_events", "gpu_transitions"):
        v = np.array([s[k] for s in ss], np.float64)
        row[k] = float(np.mean(v))
        with np.errstate(invalid="ignore"):  # inf P99s (unfinished requests): std is nan
          row[k + "_std"] = float(np.std(v))
      rows.append(row)
  return rows


def train_and_evaluate(config, workdir):
  real = real_trace(config) if config.data.trace else []  # bad files fail before training
  metrics_lib.write_config(workdir, config)
  spec, ps, _ = setup(config)
  name, fl = main_variant(config)
  members = member_grid(config, [(name, fl)], list(range(config.rl.seeds)), [config.rl.lr])
  out = train_policy(config, workdir, members)
  test = make_traces(config, "test", config.data.test_seeds)
  test = test + real
  fams = [t[0] for t in test]
  # Both evaluation modes on test; the validation-selected one is the "ppo" row.
  chosen = pick_mode(out["score"])
  print(f"[select] evaluation mode on validation: {chosen} "
        f"({ {m: mean_score(out['score'][m]) for m in EVAL_MODES} })", flush=True)
  rows, final = [], {}
  for mode in EVAL_MODES:
    ctrl = policy.controller(spec, ps, greedy=mode == "greedy")
    params = dict(net=out["best"][mode], flags=out["flags"])
    summ, _ = run_clusters(config, spec, ctrl, params, test, seed=1)
    name = "ppo" if mode == chosen else f"ppo_{mode}"
    rows += aggregate(spec, [[s for m in summ for s in m]],
                      [f for _ in summ for f in fams], [name])
  for r in rows:
    if r["method"] == "ppo":
      for k in ("gpus", "p99_ttft", "p99_tpot", "attainment"):
        final[f"test/{r['family']}/{k}"] = r[k]
  writer = metrics_lib.MetricsWriter(workdir, verbose=False)
  writer.write(config.rl.iterations, {k: (v if np.isfinite(v) else 1e9) for k, v in final.items()},
               split="eval")
  md = study_lib.write_table(workdir, "test", rows, columns=[
      "method", "family", "seeds", "meets", "gpus", "gpus_std", "p99_ttft", "p99_tpot",
      "attainment", "scaling_events"],
      header=f"### PPO controller on test traces (commit {study_lib.git_commit(PATHS)})")
  print(md, flush=True)
  return final


def run_study(config, workdir):
  from jaxpapers.papers.pd_autoscale import study  # pylint: disable=g-import-not-at-top
  if config.study.name != "main":
    raise ValueError(f"unknown study {config.study.name!r}; declared: main")
  metrics_lib.write_config(workdir, config)
  return study.run(config, workdir, commit=study_lib.git_commit(PATHS))


def benchmark(config, workdir):
  """Simulated requests/s and simulated seconds per wall second of the vmapped simulator."""
  del workdir
  cfg = config
  spec, _, _ = setup(cfg)
  ctrl = baselines.static(spec)
  B = cfg.bench.clusters
  dur = cfg.bench.duration
  tr = [(f, s, workloads.generate(f, dur, 5000 + s, cfg.data.rate_scale))
        for s in range(B) for f in ("conversation",)][:B]
  E = int(round(dur / spec.epoch_s))
  arr, p, o = workloads.stack([t[2] for t in tr], spec.window)
  wl = sim.Workload(jnp.asarray(arr), jnp.asarray(p), jnp.asarray(o))
  fn = sharding.spread(episode.episode_fn(spec, ctrl, E))
  params = dict(p=jnp.full((B,), 3), d=jnp.full((B,), 7))
  args = (params, wl, jnp.zeros((B, E, 2)), n0_of(cfg, B), jax.random.split(jax.random.PRNGKey(0), B))
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  first = time.perf_counter() - t0
  t0 = time.perf_counter()
  st, _ = jax.block_until_ready(fn(*args))
  sec = time.perf_counter() - t0
  done = int(np.sum(np.asarray(st.res_flag)))
  return dict(clusters=B, simulated_s_per_cluster=dur, ticks=E * spec.ticks_per_epoch,
              dt=spec.dt, window=spec.window, compile_and_first_call_s=first,
              wall_s=sec, simulated_requests_per_s=done / sec,
              simulated_s_per_wall_s=B * dur / sec,
              cluster_ticks_per_s=B * E * spec.ticks_per_epoch / sec,
              device=str(jax.devices()[0].platform), devices=jax.device_count(),
              note="shared 2-core CPU; timings are noisy")


def plan(config):
  """One PPO iteration (rollout of `envs` clusters + update) per member, members spread."""
  from jaxpapers.core import planner  # pylint: disable=g-import-not-at-top
  spec, ps, pp = setup(config)
  E = epochs_of(config, spec)
  M = config.rl.seeds
  N = n_max(config) + spec.window
  ts = jax.eval_shape(lambda: population.stack([
      ppo.init_member(jax.random.PRNGKey(i), config.rl.lr, policy.flags(), ps, pp)
      for i in range(M)]))
  f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
  wl = sim.Workload(f32(M, pp.envs, N), f32(M, pp.envs, N), f32(M, pp.envs, N))
  n0 = jax.ShapeDtypeStruct((M, pp.envs, 2), jnp.int32)
  keys = jax.ShapeDtypeStruct((M, 2), jnp.uint32)
  fam = jax.ShapeDtypeStruct((M, pp.envs), jnp.int32)
  fn, args = sharding.spread_plan(ppo.make_iteration(spec, ps, pp, E), ts, wl, n0, keys, fam)
  return planner.Plan(fn=fn, args=args, steps=config.rl.iterations,
                      label=f"pd_autoscale PPO iteration: {M} members x {pp.envs} clusters x "
                            f"{E * spec.ticks_per_epoch} ticks (window {spec.window})")
