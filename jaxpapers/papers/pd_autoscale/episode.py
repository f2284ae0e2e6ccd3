"""Learned autoscaling of PD-disaggregated LLM serving (abstract 12): closed-loop episodes.

An episode alternates a controller decision (every `spec.epoch_s` seconds) with the
simulator's ticks until the next one, inside one `lax.scan`, so a whole episode of a
controller on a cluster is one jitted function and `vmap` runs many (workloads x seeds x
hyper-parameters). A controller is three pure functions:

  init(params) -> cstate
  act(params, cstate, obs, key) -> (cstate, target_prefill, target_decode, aux)

`obs` is a dict of scalars: the last epoch's summary (simulator.SUM_KEYS / LEVEL_KEYS),
the pods per lifecycle state of each pool, the epoch index, and the oracle's future demand
(`future_p`, `future_d`: pods needed by the fluid bound `lead` epochs ahead); only the
offline oracle reads the future.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.pd_autoscale import simulator as sim


class Controller(NamedTuple):
  name: str
  init: Callable
  act: Callable


def zero_summary():
  keys = sim.SUM_KEYS + sim.LEVEL_KEYS + ("queue_max", "overflow")
  return {k: jnp.float32(0.0) for k in keys}


def observe(spec: sim.Spec, st: sim.State, summ: dict, e, future_p, future_d):
  obs = dict(summ)
  for pool, states in (("p", st.p_state), ("d", st.d_state)):
    s, r, d = sim.pool_counts(states)
    obs[f"{pool}_starting"] = s.astype(jnp.float32)
    obs[f"{pool}_ready"] = r.astype(jnp.float32)
    obs[f"{pool}_draining"] = d.astype(jnp.float32)
  obs["epoch"] = jnp.asarray(e, jnp.float32)
  obs["time"] = jnp.asarray(e, jnp.float32) * spec.epoch_s
  obs["future_p"] = future_p
  obs["future_d"] = future_d
  return obs


def run_episode(spec: sim.Spec, ctrl: Controller, epochs: int, params, wl: sim.Workload,
                future, n0, key):
  """One closed-loop episode. future: [epochs, 2] oracle demand; n0: (prefill, decode) pods
  ready at t = 0. Returns (final state, per-epoch dict of [epochs] arrays)."""
  st = sim.init_state(spec, wl, n0[0], n0[1])
  cs = ctrl.init(params)

  def epoch(carry, e):
    st, cs, summ = carry
    obs = observe(spec, st, summ, e, future[e, 0], future[e, 1])
    cs, tp, td, aux = ctrl.act(params, cs, obs, jax.random.fold_in(key, e))
    # Nothing has been observed before the first interval: every controller holds.
    tp = jnp.where(e == 0, obs["p_ready"] + obs["p_starting"], tp).astype(jnp.int32)
    td = jnp.where(e == 0, obs["d_ready"] + obs["d_starting"], td).astype(jnp.int32)
    st = sim.apply_targets(spec, st, tp, td)
    st, summ = sim.run_ticks(spec, wl, st, spec.ticks_per_epoch)
    row = dict(summ, target_p=jnp.asarray(tp, jnp.float32), target_d=jnp.asarray(td, jnp.float32))
    row.update(aux)
    return (st, cs, summ), row

  (st, _, _), rows = jax.lax.scan(epoch, (st, cs, zero_summary()), jnp.arange(epochs))
  return st, rows


def episode_fn(spec: sim.Spec, ctrl: Controller, epochs: int):
  """run_episode(params, wl, future, n0, key) for vmapping (spec/ctrl/epochs static)."""
  def fn(params, wl, future, n0, key):
    return run_episode(spec, ctrl, epochs, params, wl, future, n0, key)
  return fn


# ---------------------------------------------------------------- oracle demand (NumPy)

def fluid_demand(spec: sim.Spec, arr, prompt, output, epochs: int, tau: float | None = None):
  """Per-epoch pods a perfect fluid system needs: (prefill, decode), shape [epochs, 2].

  Prefill: the epoch's prompt tokens at the profile's best cost per token (batches of the
  most efficient size) divided by the epoch length. Decode: the KV reservation held over
  the epoch, each request holding prompt + output tokens for (output - 1) iterations of
  the fastest iteration (batch of one, empty context; or `tau` seconds), divided by a
  GPU's KV capacity.
  Queueing and start-up are ignored, so no policy that serves the load uses fewer GPUs on
  average: this is the lower bound the offline oracle is measured against.
  """
  from jaxpapers.papers.pd_autoscale import calibration  # pylint: disable=g-import-not-at-top
  prof = dict(p0=spec.p0, p1=spec.p1, p2=spec.p2, prefill_table=spec.prefill_table or None,
              d0=spec.d0, d_ctx=spec.d_ctx, d_b=spec.d_b,
              decode_table=spec.decode_table or None)
  per_tok = calibration.best_prefill_ms_per_token(prof, spec.token_budget) * 1e-3
  if tau is None:
    tau = float(calibration.decode_ms_np(prof, 0.0, 1.0)) * 1e-3
  E, L = epochs, spec.epoch_s
  arr = np.asarray(arr, np.float64)
  prompt, output = np.asarray(prompt, np.float64), np.asarray(output, np.float64)
  e_idx = np.clip((arr // L).astype(int), 0, E - 1)
  pre = np.bincount(e_idx, weights=prompt * per_tok, minlength=E)[:E] / L
  start, stop = arr, arr + np.maximum(output - 1, 0) * tau
  res = prompt + output
  edges = np.arange(E + 1) * L
  chunk = 4096
  cums = np.zeros(E + 1)
  for i in range(0, len(arr), chunk):
    sl = slice(i, i + chunk)
    cums += np.sum(res[None, sl] * np.clip(np.minimum(edges[:, None], stop[None, sl]) -
                                           start[None, sl], 0, None), axis=1)
  occ = np.diff(cums) / L / spec.kv_capacity
  return np.stack([pre, occ], axis=1).astype(np.float32)


def summarize(spec: sim.Spec, rows: dict, st: sim.State, wl: sim.Workload, n: int,
              warmup_s: float = 0.0, until_s: float = np.inf):
  """Episode metrics (NumPy) of one cluster: GPUs, P99 TTFT/TPOT, attainment, transitions.

  Latencies are over requests arriving in [warmup_s, until_s) (the last ones may still
  run when the episode ends); GPUs over the epochs from warmup_s on.
  """
  m = sim.request_metrics(st, wl, n)
  arr = np.asarray(wl.arr)[:n]
  keep = (arr >= warmup_s) & (arr < until_s)
  done = m["done"] & keep
  ttft, tpot = m["ttft"][done], m["tpot"][done]
  n_keep = int(keep.sum())
  # An unfinished request counts as a violation of both targets (it never met them).
  ok = (m["ttft"] <= spec.ttft_slo) & (m["tpot"] <= spec.tpot_slo) & m["done"]
  e0 = int(warmup_s // spec.epoch_s)
  gp = np.asarray(rows["prefill_gpus"])[e0:]
  gd = np.asarray(rows["decode_gpus"])[e0:]
  tp, td = np.asarray(rows["target_p"]), np.asarray(rows["target_d"])
  pct = lambda x, q: float(np.percentile(x, q)) if x.size else float("nan")
  unfinished = n_keep - int(done.sum())
  return dict(
      gpus=float(np.mean(gp + gd)), prefill_gpus=float(np.mean(gp)),
      decode_gpus=float(np.mean(gd)),
      p99_ttft=pct(ttft, 99) if unfinished <= 0.01 * n_keep else float("inf"),
      p99_tpot=pct(tpot, 99) if unfinished <= 0.01 * n_keep else float("inf"),
      p50_ttft=pct(ttft, 50), p50_tpot=pct(tpot, 50),
      attainment=float(ok[keep].mean()) if n_keep else float("nan"),
      unfinished=unfinished, requests=n_keep,
      scaling_events=int(np.sum(np.diff(tp) != 0) + np.sum(np.diff(td) != 0)),
      gpu_transitions=float(np.sum(np.abs(np.diff(tp))) + np.sum(np.abs(np.diff(td)))),
      overflow=float(np.max(np.asarray(rows["overflow"]))))


def meets(spec: sim.Spec, s: dict) -> bool:
  return bool(s["p99_ttft"] <= spec.ttft_slo and s["p99_tpot"] <= spec.tpot_slo)
