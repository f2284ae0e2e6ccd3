"""Learned autoscaling of prefill/decode-disaggregated LLM serving (abstract 12): simulator.

A time-stepped simulator of one PD-disaggregated cluster in pure JAX, so that `jax.vmap`
runs many clusters (workloads, seeds, controller hyper-parameters) in one jitted program
and `lax.scan` walks the ticks. Each tick of `dt` seconds:

  1. pod lifecycle: starting pods count down their start-up delay and become ready (at
     the exact time inside the tick); draining prefill pods stop after their batch,
     draining decode pods once their last request finished;
  2. arrivals join the prefill queue (FCFS, by arrival time);
  3. prefill completions give the first token (TTFT = first token - arrival) and start
     the KV transfer (prompt tokens x bytes per token / bandwidth + setup latency);
  4. prefill dispatch: continuous batching with a token budget B. Queued requests are
     cut FCFS into batches, request i going to batch floor(tokens before i / B) (so a
     batch holds up to B tokens plus the request that crosses B, and a prompt longer than
     B runs alone); the r-th batch goes to the r-th earliest-free ready pod and starts at
     max(pod free time, first arrival in the batch); members that arrive inside the
     tick after that start wait for a later batch. Its length is the
     profile's prefill(S). Start times are event times, not tick-rounded (a pod starts
     at most one batch per tick, at its exact free time): a FCFS pool with one request
     per batch is the textbook M/M/c, which the tests check against closed forms;
  5. decode admission: transferred requests are admitted FCFS while their KV reservation
     (prompt + output tokens: no preemption) fits the pod's free KV memory and the pod's
     batch slots; pods are filled largest-free-memory first;
  6. decode progress: each ready decode pod runs iterations of decode(C, b) ms for its
     current batch (C = context tokens, b = requests); a request gains one token per
     iteration and finishes at the exact time its last token is due.
     TPOT = (finish - first token) / (output tokens - 1), so decode queueing, transfer
     and every iteration count, as DistServe and Splitwise define it.

Requests live in a slot table of `window` rows in arrival order; once per decision
interval finished rows are written to per-request result arrays and the table is
compacted and refilled with the next arrivals, so a tick's cost does not grow with the
trace. A request that arrived while the table was full waits, in order, for the next
compaction (counted in `overflow`; it is served late, never dropped).
GPUs: every pod that is starting, ready or draining holds one GPU.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.pd_autoscale import calibration

OFF, STARTING, READY, DRAINING = 0, 1, 2, 3
# Request phases.
WAIT, QUEUED, PREFILL, TRANSFER, DQUEUE, DECODE, DONE = 0, 1, 2, 3, 4, 5, 6
INF = 1e9


@dataclasses.dataclass(frozen=True)
class Spec:
  """Static description of the simulated cluster (hashable: closed over by jit)."""
  dt: float = 0.1  # tick, seconds
  ticks_per_epoch: int = 50  # controller decision interval = dt * ticks_per_epoch
  window: int = 512  # requests visible to one tick
  max_prefill: int = 8  # pod slots per pool (pool upper bound)
  max_decode: int = 16
  min_prefill: int = 1
  min_decode: int = 1
  token_budget: float = 2048.0  # prefill batch token budget
  max_batch: int = 128  # decode batch slots per pod
  p0: float = 16.46
  p1: float = 0.0926
  p2: float = 6.47e-6
  prefill_table: tuple = ()
  d0: float = 19.93
  d_ctx: float = 6.27e-4
  d_b: float = 0.0385
  decode_table: tuple = ()
  kv_capacity: float = 56000.0  # KV tokens per decode GPU
  kv_bytes_per_token: float = 819200.0
  bandwidth: float = calibration.TRANSFER_BANDWIDTH
  transfer_latency: float = calibration.TRANSFER_LATENCY_S
  startup_s: float = calibration.STARTUP_S
  ttft_slo: float = 2.0  # P99 targets, seconds
  tpot_slo: float = 0.1

  @property
  def epoch_s(self) -> float:
    return self.dt * self.ticks_per_epoch


def spec_from(config) -> Spec:
  """Spec from `config.sim` and its latency profile."""
  c = config.sim
  prof = calibration.profile(c.profile)
  return Spec(dt=c.dt, ticks_per_epoch=int(round(c.epoch_s / c.dt)), window=c.window,
              max_prefill=c.max_prefill, max_decode=c.max_decode, min_prefill=c.min_prefill,
              min_decode=c.min_decode, token_budget=c.token_budget, max_batch=c.max_batch,
              p0=prof["p0"], p1=prof["p1"], p2=prof["p2"],
              prefill_table=tuple(prof["prefill_table"] or ()),
              d0=prof["d0"], d_ctx=prof["d_ctx"], d_b=prof["d_b"],
              decode_table=tuple(prof["decode_table"] or ()),
              kv_capacity=float(prof["kv_capacity_tokens"] if c.kv_capacity <= 0
                                else c.kv_capacity),
              kv_bytes_per_token=float(prof["kv_bytes_per_token"]),
              bandwidth=c.bandwidth, transfer_latency=c.transfer_latency,
              startup_s=c.startup_s, ttft_slo=c.ttft_slo, tpot_slo=c.tpot_slo)


def prefill_s(spec: Spec, s):
  ms = spec.p0 + spec.p1 * s + spec.p2 * s * s
  if spec.prefill_table:
    xs, ys = zip(*spec.prefill_table)
    ms = ms + jnp.interp(s, jnp.asarray(xs, jnp.float32), jnp.asarray(ys, jnp.float32))
  return ms * 1e-3


def decode_s(spec: Spec, ctx, b):
  ms = spec.d0 + spec.d_ctx * ctx + spec.d_b * b
  if spec.decode_table:
    xs, ys = zip(*spec.decode_table)
    ms = ms + jnp.interp(b, jnp.asarray(xs, jnp.float32), jnp.asarray(ys, jnp.float32))
  return ms * 1e-3


class Workload(NamedTuple):
  """Requests sorted by arrival, padded with never-arriving rows (arrival = INF)."""
  arr: jax.Array  # [N + window] seconds
  prompt: jax.Array  # [N + window] prompt tokens (float)
  output: jax.Array  # [N + window] output tokens including the first (prefill) token


class State(NamedTuple):
  k: jax.Array  # tick counter
  nxt: jax.Array  # next request (index into the workload) not yet in the slot table
  # The slot table: `window` requests in arrival order (unfinished ones, then the next
  # arrivals); it is compacted and refilled once per decision interval (`compact`).
  idx: jax.Array  # [W] request index, -1 = empty
  arr: jax.Array  # [W] arrival time
  prompt: jax.Array  # [W]
  output: jax.Array  # [W]
  phase: jax.Array  # [W] int32
  t_ready: jax.Array  # [W] end of the current prefill batch / KV transfer
  t_first: jax.Array  # [W] first-token time
  t_done: jax.Array  # [W] last-token time
  pod: jax.Array  # [W] prefill pod during prefill, decode pod during decode
  gen: jax.Array  # [W] decode tokens produced (fluid within a tick)
  # Per-request results over the whole workload, written when a request leaves the table.
  res_first: jax.Array  # [N] first-token time
  res_done: jax.Array  # [N] last-token time
  res_flag: jax.Array  # [N] int32: 1 = finished
  p_state: jax.Array  # [max_prefill]
  p_timer: jax.Array  # start-up time left
  p_free: jax.Array  # time the pod's current batch ends
  d_state: jax.Array  # [max_decode]
  d_timer: jax.Array
  d_load: jax.Array  # requests decoding (last tick), for scale-down choice and features


def make_workload(arr, prompt, output, window: int) -> Workload:
  """Pads NumPy arrays with `window` never-arriving rows (so the window never clamps)."""
  arr, prompt, output = (np.asarray(x, np.float64) for x in (arr, prompt, output))
  if not (len(arr) == len(prompt) == len(output)):
    raise ValueError("workload arrays differ in length")
  if np.any(np.diff(arr) < 0):
    raise ValueError("workload arrival times must be sorted")
  pad = lambda x, v: np.concatenate([x, np.full(window, v)]).astype(np.float32)
  return Workload(jnp.asarray(pad(arr, INF)), jnp.asarray(pad(prompt, 1.0)),
                  jnp.asarray(pad(output, 2.0)))


def init_state(spec: Spec, wl: Workload, n_prefill, n_decode) -> State:
  """A cluster with n_prefill / n_decode pods already ready at t = 0."""
  W = spec.window
  n_total = wl.arr.shape[0]
  zw = jnp.zeros((W,), jnp.float32)
  zn = jnp.zeros((n_total,), jnp.float32)
  p_state = jnp.where(jnp.arange(spec.max_prefill) < n_prefill, READY, OFF).astype(jnp.int32)
  d_state = jnp.where(jnp.arange(spec.max_decode) < n_decode, READY, OFF).astype(jnp.int32)
  return State(k=jnp.int32(0), nxt=jnp.int32(W), idx=jnp.arange(W, dtype=jnp.int32),
               arr=wl.arr[:W], prompt=wl.prompt[:W], output=wl.output[:W],
               phase=jnp.zeros((W,), jnp.int32), t_ready=zw, t_first=zw, t_done=zw,
               pod=jnp.zeros((W,), jnp.int32), gen=zw, res_first=zn, res_done=zn,
               res_flag=jnp.zeros((n_total,), jnp.int32),
               p_state=p_state, p_timer=jnp.zeros((spec.max_prefill,)),
               p_free=jnp.zeros((spec.max_prefill,)), d_state=d_state,
               d_timer=jnp.zeros((spec.max_decode,)), d_load=jnp.zeros((spec.max_decode,)))


def compact(spec: Spec, wl: Workload, st: State) -> State:
  """Writes finished requests to the result arrays, keeps the unfinished ones in arrival
  order and refills the freed slots with the next requests of the workload."""
  W = spec.window
  n_total = wl.arr.shape[0]
  done = (st.phase == DONE) & (st.idx >= 0)
  at = jnp.where(done, st.idx, n_total)  # out of range: dropped
  res_first = st.res_first.at[at].set(st.t_first, mode="drop")
  res_done = st.res_done.at[at].set(st.t_done, mode="drop")
  res_flag = st.res_flag.at[at].set(1, mode="drop")
  keep = (st.idx >= 0) & ~done
  order = jnp.argsort(jnp.where(keep, st.idx, jnp.iinfo(jnp.int32).max), stable=True)
  k = jnp.sum(keep)
  pos = jnp.arange(W)
  old = pos < k
  fresh = jnp.clip(st.nxt + pos - k, 0, n_total - 1)
  valid = st.nxt + pos - k < n_total
  pick = lambda x, full, empty: jnp.where(old, x[order], jnp.where(valid, full[fresh], empty))
  return st._replace(
      nxt=jnp.minimum(st.nxt + (W - k), n_total), 
      idx=jnp.where(old, st.idx[order], jnp.where(valid, fresh, -1)).astype(jnp.int32),
      arr=pick(st.arr, wl.arr, INF), prompt=pick(st.prompt, wl.prompt, 1.0),
      output=pick(st.output, wl.output, 2.0),
      phase=jnp.where(old, st.phase[order], WAIT), t_ready=jnp.where(old, st.t_ready[order], 0.0),
      t_first=jnp.where(old, st.t_first[order], 0.0),
      t_done=jnp.where(old, st.t_done[order], 0.0), pod=jnp.where(old, st.pod[order], 0),
      gen=jnp.where(old, st.gen[order], 0.0), res_first=res_first, res_done=res_done,
      res_flag=res_flag)


# Summed over an epoch's ticks (counts and seconds); LEVEL_KEYS are averaged instead.
SUM_KEYS = ("arrivals", "arrived_tokens", "first_tokens", "finished", "ttft_viol",
            "tpot_viol", "ttft_sum", "tpot_sum", "out_tokens", "prefill_busy")
LEVEL_KEYS = ("gpus", "prefill_gpus", "decode_gpus", "queue", "queue_tokens", "prefilling",
              "dqueue", "decoding", "kv_util")


def tick(spec: Spec, st: State):
  """One tick of the slot table; returns (state, per-tick stats dict of scalars)."""
  W, dt = spec.window, spec.dt
  t0 = st.k.astype(jnp.float32) * dt
  t1 = t0 + dt
  arr, P, O = st.arr, st.prompt, st.output
  ph, tr, tf, td, pod, gen = st.phase, st.t_ready, st.t_first, st.t_done, st.pod, st.gen

  # 1. lifecycle
  p_state, p_timer, p_free = st.p_state, st.p_timer, st.p_free
  up = (p_state == STARTING) & (p_timer <= dt)
  p_free = jnp.where(up, t0 + p_timer, p_free)
  p_timer = jnp.where(p_state == STARTING, p_timer - dt, p_timer)
  p_state = jnp.where(up, READY, p_state)
  d_state, d_timer = st.d_state, st.d_timer
  dup = (d_state == STARTING) & (d_timer <= dt)
  d_timer = jnp.where(d_state == STARTING, d_timer - dt, d_timer)
  d_state = jnp.where(dup, READY, d_state)
  d_ready_at = jnp.where(dup, t0 + st.d_timer, t0)

  # 2. arrivals
  new = (ph == WAIT) & (arr < t1)
  ph = jnp.where(new, QUEUED, ph)

  # 3. prefill completions, then KV transfers
  pf_done = (ph == PREFILL) & (tr <= t1)
  tf = jnp.where(pf_done, tr, tf)
  xfer = P * spec.kv_bytes_per_token / spec.bandwidth + spec.transfer_latency
  tr = jnp.where(pf_done, tr + xfer, tr)
  ph = jnp.where(pf_done, TRANSFER, ph)
  x_done = (ph == TRANSFER) & (tr <= t1)
  single = x_done & (O <= 1.0)  # no decode token: done when the transfer would start
  td = jnp.where(single, tf, td)
  ph = jnp.where(x_done, jnp.where(O <= 1.0, DONE, DQUEUE), ph)

  # 4. prefill dispatch (continuous batching, token budget)
  Pm = spec.max_prefill
  queued = ph == QUEUED
  toks = jnp.where(queued, P, 0.0)
  before = jnp.cumsum(toks) - toks
  bid = jnp.where(queued, jnp.floor(before / spec.token_budget), -1.0)
  prev = jnp.concatenate([jnp.array([-1.0]), jax.lax.cummax(bid)[:-1]])
  first = queued & (bid > prev)
  rank = jnp.cumsum(first.astype(jnp.int32)) - 1
  avail = (p_state == READY) & (p_free <= t1)
  n_avail = jnp.sum(avail)
  order = jnp.argsort(jnp.where(avail, p_free, INF))  # earliest-free pod first
  go = queued & (rank < n_avail)
  rk = jnp.clip(rank, 0, Pm - 1)
  oh = go[:, None] & (rank[:, None] == jnp.arange(Pm)[None, :])
  first_arr = jnp.min(jnp.where(oh, arr[:, None], INF), axis=0)
  pod_of_rank = order  # rank r -> pod order[r]
  start = jnp.maximum(p_free[pod_of_rank], first_arr)
  # A batch starts when its pod is free and its first request is there; members that
  # arrive inside this tick after that start wait for a later batch (those queued before
  # the tick are always taken: they were waiting).
  late = go & (arr > jnp.maximum(start[rk], t0))
  go = go & ~late
  oh = (go[:, None] & (rank[:, None] == jnp.arange(Pm)[None, :])).astype(jnp.float32)
  batch_tokens = jnp.sum(toks[:, None] * oh, axis=0)  # [Pm] by rank
  end = start + prefill_s(spec, batch_tokens)
  used = jnp.sum(oh, axis=0) > 0
  busy_add = jnp.sum(jnp.where(used, end - start, 0.0))
  p_free = p_free.at[pod_of_rank].set(jnp.where(used, end, p_free[pod_of_rank]))
  tr = jnp.where(go, end[rk], tr)
  pod = jnp.where(go, pod_of_rank[rk], pod)
  ph = jnp.where(go, PREFILL, ph)

  # 5. decode admission (KV reservation = prompt + output tokens)
  Dm = spec.max_decode
  res = P + O
  run = ph == DECODE
  ohd = (run[:, None] & (pod[:, None] == jnp.arange(Dm)[None, :])).astype(jnp.float32)
  kv_used = jnp.sum(res[:, None] * ohd, axis=0)
  nrun = jnp.sum(ohd, axis=0)
  d_ok = d_state == READY
  free = jnp.where(d_ok & (nrun < spec.max_batch), spec.kv_capacity - kv_used, 0.0)
  dorder = jnp.argsort(-free)  # largest free memory first
  seg = free[dorder]
  F = jnp.cumsum(seg)
  dq = ph == DQUEUE
  rq = jnp.where(dq, res, 0.0)
  r_cum = jnp.cumsum(rq)
  r_start = r_cum - rq
  j = jnp.clip(jnp.searchsorted(F, r_start, side="right"), 0, Dm - 1)
  fits = dq & (r_start < F[Dm - 1]) & (r_cum <= F[j])
  # Batch slots only close a pod (nrun >= max_batch): KV memory binds long before 128
  # requests at these lengths, so admissions inside one tick are not counted per slot.
  adm = fits
  dpod = dorder[j]
  s_admit = jnp.maximum(jnp.maximum(tr, t0), d_ready_at[dpod])
  pod = jnp.where(adm, dpod, pod)
  ph = jnp.where(adm, DECODE, ph)

  # 6. decode progress (fluid inside the tick, exact finish time)
  run = ph == DECODE
  ohd = (run[:, None] & (pod[:, None] == jnp.arange(Dm)[None, :])).astype(jnp.float32)
  b = jnp.sum(ohd, axis=0)
  ctx = jnp.sum((P + gen)[:, None] * ohd, axis=0)
  tau = decode_s(spec, ctx, b)  # [Dm]
  tau_i = tau[jnp.clip(pod, 0, Dm - 1)]
  s_i = jnp.where(adm, s_admit, t0)
  s_i = jnp.where(run, jnp.maximum(s_i, d_ready_at[jnp.clip(pod, 0, Dm - 1)]), s_i)
  can = jnp.maximum(t1 - s_i, 0.0) / tau_i
  need = (O - 1.0) - gen
  fin = run & (need <= can)
  td = jnp.where(fin, s_i + need * tau_i, td)
  gen = jnp.where(run, jnp.minimum(gen + can, O - 1.0), gen)
  ph = jnp.where(fin, DONE, ph)
  d_load = b - jnp.sum(jnp.where(fin, 1.0, 0.0)[:, None] * ohd, axis=0)

  # 7. draining pods stop when empty
  p_state = jnp.where((p_state == DRAINING) & (p_free <= t1), OFF, p_state)
  d_state = jnp.where((d_state == DRAINING) & (d_load <= 0), OFF, d_state)

  # stats
  finished = fin | single
  ttft = tf - arr
  tpot = jnp.where(O > 1.0, (td - tf) / jnp.maximum(O - 1.0, 1.0), 0.0)
  p_gpus = jnp.sum(p_state != OFF)
  d_gpus = jnp.sum(d_state != OFF)
  stats = dict(
      arrivals=jnp.sum(new), arrived_tokens=jnp.sum(jnp.where(new, P, 0.0)),
      first_tokens=jnp.sum(pf_done), finished=jnp.sum(finished),
      ttft_viol=jnp.sum(pf_done & (ttft > spec.ttft_slo)),
      tpot_viol=jnp.sum(finished & (tpot > spec.tpot_slo)),
      ttft_sum=jnp.sum(jnp.where(pf_done, ttft, 0.0)),
      tpot_sum=jnp.sum(jnp.where(finished, tpot, 0.0)),
      out_tokens=jnp.sum(jnp.where(finished, O, 0.0)),
      gpus=p_gpus + d_gpus, prefill_gpus=p_gpus, decode_gpus=d_gpus, prefill_busy=busy_add,
      queue=jnp.sum(ph == QUEUED),
      queue_tokens=jnp.sum(jnp.where(ph == QUEUED, P, 0.0)),
      prefilling=jnp.sum(ph == PREFILL),
      dqueue=jnp.sum(ph == DQUEUE) + jnp.sum(ph == TRANSFER),
      decoding=jnp.sum(ph == DECODE),
      kv_util=(jnp.sum(kv_used) + jnp.sum(jnp.where(adm, res, 0.0))) / (
          spec.kv_capacity * jnp.maximum(jnp.sum(d_ok), 1)))
  stats = {k: jnp.asarray(v, jnp.float32) for k, v in stats.items()}

  st = st._replace(k=st.k + 1, phase=ph, t_ready=tr, t_first=tf, t_done=td, pod=pod,
                   gen=gen, p_state=p_state, p_timer=p_timer, p_free=p_free,
                   d_state=d_state, d_timer=d_timer, d_load=d_load)
  return st, stats


def run_ticks(spec: Spec, wl: Workload, st: State, n: int):
  """n ticks; returns (state, SUM_KEYS summed and LEVEL_KEYS averaged over the ticks)."""
  def body(s, _):
    return tick(spec, s)
  st, stats = jax.lax.scan(body, st, None, length=n)
  st = compact(spec, wl, st)
  out = {k: jnp.sum(stats[k]) for k in SUM_KEYS}
  out.update({k: jnp.mean(stats[k]) for k in LEVEL_KEYS})
  out["queue_max"] = jnp.max(stats["queue"])
  # Requests that arrived but found no slot (they wait, in order, for the next compaction).
  t1 = st.k.astype(jnp.float32) * spec.dt
  out["overflow"] = jnp.maximum(jnp.searchsorted(wl.arr, t1) - st.nxt, 0).astype(jnp.float32)
  return st, out


def pool_counts(states):
  """(starting, ready, draining) counts of one pool's pod states."""
  return (jnp.sum(states == STARTING), jnp.sum(states == READY),
          jnp.sum(states == DRAINING))


def _scale_pool(states, timer, target, load, startup_s, lo_b, hi_b):
  """Starts off pods or drains the least-loaded ready ones towards `target`.

  Starting pods are never cancelled and draining pods never revived, so the number of
  pods a command can remove is the number of ready pods; the target is clipped to the
  pool bounds.
  """
  n = states.shape[0]
  target = jnp.clip(target, lo_b, min(hi_b, n))
  active = jnp.sum((states == STARTING) | (states == READY))
  ready = states == READY
  add = jnp.maximum(target - active, 0)
  off = states == OFF
  off_rank = jnp.cumsum(off.astype(jnp.int32)) - 1
  start = off & (off_rank < add)
  remove = jnp.minimum(jnp.maximum(active - target, 0), jnp.sum(ready))
  key = jnp.where(ready, load, INF)
  drank = jnp.argsort(jnp.argsort(key))
  drain = ready & (drank < remove)
  states = jnp.where(start, STARTING, jnp.where(drain, DRAINING, states))
  timer = jnp.where(start, startup_s, timer)
  return states, timer


def apply_targets(spec: Spec, st: State, target_p, target_d) -> State:
  t0 = st.k.astype(jnp.float32) * spec.dt
  p_load = jnp.maximum(st.p_free - t0, 0.0)  # remaining batch time: idle pods go first
  p_state, p_timer = _scale_pool(st.p_state, st.p_timer, target_p, p_load, spec.startup_s,
                                 spec.min_prefill, spec.max_prefill)
  d_state, d_timer = _scale_pool(st.d_state, st.d_timer, target_d, st.d_load,
                                 spec.startup_s, spec.min_decode, spec.max_decode)
  return st._replace(p_state=p_state, p_timer=p_timer, d_state=d_state, d_timer=d_timer)


def request_metrics(st: State, wl: Workload, n: int):
  """Per-request TTFT and TPOT (NumPy) of the first n requests and whether they finished."""
  done = np.asarray(st.res_flag)[:n] == 1
  arr, O = np.asarray(wl.arr)[:n], np.asarray(wl.output)[:n]
  tf, td = np.asarray(st.res_first)[:n], np.asarray(st.res_done)[:n]
  ttft = np.where(done, tf - arr, np.nan)
  tpot = np.where(done & (O > 1), (td - tf) / np.maximum(O - 1, 1), 0.0)
  return dict(done=done, ttft=ttft, tpot=np.where(done, tpot, np.nan), finish=td)
