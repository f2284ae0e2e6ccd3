"""Learned autoscaling of PD-disaggregated LLM serving (abstract 12): baseline autoscalers.

Every baseline is an `episode.Controller` (pure JAX, vmapped over its hyper-parameter
grid) acting per pool every decision interval:

  kpa        AIBrix / Knative KPA: desired = ceil(window-average concurrency / target per
             pod) over a stable window (60 s) and a panic window (one 5 s interval, Knative's
             6 s rounded to the decision interval); panic mode when the panic desire is
             >= 2x the ready pods, no scale-down while panicking (desired = max panic
             desire), panic ends one stable window after the last trigger; max scale-down
             rate 2 (at most halve); scale-down delay (the max desire over that window).
  apa        AIBrix APA: ratio = metric per ready pod / target; outside the tolerance band
             [1 - 0.2, 1 + 0.1] desired = ceil(ready x ratio), bounded by max up/down rate 2;
             no scale-down within `cooldown` after the last scale-up. Metrics: prefill busy
             fraction, decode KV-cache utilisation.
  threshold  queue-length / utilisation heuristic: +1 pod when in-flight prefill requests
             per pod (or decode KV utilisation, or a waiting decode queue) exceed `hi`,
             -1 below `lo` = hi / 2, one action per pool per 30 s.
  static     fixed pool sizes (p, d).
  erlang     M/M/c (Erlang-C) planner: per pool the smallest c with P(miss) <= 1% at the
             window's forecast rate x headroom; prefill servers = pods at the mean
             prompt's prefill time, P(wait > TTFT target - service); decode servers =
             KV-limited token slots, P(wait > TPOT slack x (output - 1) - transfer)
             averaged over exponential outputs; scale-down stabilisation window and no
             ready pod drained while its replacement starts (see `erlang`).
  oracle     knows the future: sizes each pool at headroom x the fluid need (episode.
             fluid_demand with the full-batch decode iteration) over the next start-up
             delay + one interval, so pods are ready when the load arrives.

  KPA, APA and threshold do not scale down during the first start_hold intervals of an
  episode (`start_guard`; the study's config.study.start_hold_s = 60 s).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.pd_autoscale import episode
from jaxpapers.papers.pd_autoscale import simulator as sim


def _ceil(x):
  return jnp.ceil(x - 1e-6).astype(jnp.int32)


def prefill_inflight(obs):
  return obs["queue"] + obs["prefilling"]


def decode_inflight(obs):
  return obs["dqueue"] + obs["decoding"]


def hold_ready(plan, ready, starting):
  """The pool target for a plan when starting pods count towards the pool but cannot be
  cancelled (the simulator's, and the issue's, lifecycle rule): never drain a ready pod
  below the plan while a replacement is still starting (target = starting + min(ready,
  plan), or the plan when that is larger). Kubernetes gets the same effect by deleting
  not-ready pods first on a scale-down; every reactive baseline (KPA, APA, threshold,
  Erlang-C) uses it, as that guard: without it a plan that dips by one while a pod
  starts drains a ready pod, and a pool can sit with no ready pod for up to a start-up
  delay (seen on the Erlang-C planner: 30 s with no prefill pod ready)."""
  keep = starting + jnp.minimum(ready, plan)
  return jnp.maximum(plan, keep).astype(jnp.int32)


def _guard(desired, obs, start_hold: int = 0):
  """(prefill, decode) targets of a controller's desired pool sizes, `hold_ready` per pool,
  and no scale-down during the first `start_hold` decision intervals of an episode (the
  start guard of the reactive baselines, `make`)."""
  tp = hold_ready(desired[0], obs["p_ready"], obs["p_starting"])
  td = hold_ready(desired[1], obs["d_ready"], obs["d_starting"])
  return start_guard(tp, td, obs, start_hold)


def start_guard(tp, td, obs, start_hold: int):
  """No scale-down in the first `start_hold` intervals: target >= ready + starting pods.

  An episode starts with no request in flight and the full rate from t = 0, so a
  metric averaged over the first intervals describes a system still filling up: KPA
  halved the decode pool (4 -> 2) in the first seconds and the 60 s start-up of the pods
  it then needed built a decode backlog scored from 60 s on (README, Baselines).
  Knative's autoscaler likewise does not scale down before it has one stable window of
  data."""
  early = obs["epoch"] < start_hold
  ap = (obs["p_ready"] + obs["p_starting"]).astype(jnp.int32)
  ad = (obs["d_ready"] + obs["d_starting"]).astype(jnp.int32)
  return (jnp.where(early, jnp.maximum(tp, ap), tp).astype(jnp.int32),
          jnp.where(early, jnp.maximum(td, ad), td).astype(jnp.int32))


# ---------------------------------------------------------------------------- KPA

def kpa(spec: sim.Spec, stable_s: float = 60.0, panic_threshold: float = 2.0,
        max_delay_s: float = 600.0, start_hold: int = 0):
  stable = max(int(round(stable_s / spec.epoch_s)), 1)
  dmax = max(int(round(max_delay_s / spec.epoch_s)), 1)

  def init(params):
    del params
    z = jnp.zeros((2, stable))
    return dict(hist=z, n=jnp.int32(0), panic=jnp.full((2,), -1, jnp.int32),
                maxpanic=jnp.zeros((2,), jnp.int32),
                rec=jnp.zeros((2, dmax), jnp.int32))

  def act(params, cs, obs, key):
    del key
    m = jnp.stack([prefill_inflight(obs), decode_inflight(obs)])
    ready = jnp.maximum(jnp.stack([obs["p_ready"], obs["d_ready"]]), 1.0)
    target = jnp.stack([params["target_p"], params["target_d"]])
    hist = jnp.concatenate([cs["hist"][:, 1:], m[:, None]], axis=1)
    n = jnp.minimum(cs["n"] + 1, stable)
    filled = jnp.arange(stable)[None, :] >= stable - n  # the first epochs: fewer samples
    stable_avg = jnp.sum(jnp.where(filled, hist, 0.0), axis=1) / n
    e = obs["epoch"].astype(jnp.int32)
    lower = jnp.floor(ready / 2.0).astype(jnp.int32)
    upper = _ceil(1000.0 * ready)
    d_stable = jnp.clip(_ceil(stable_avg / target), lower, upper)
    d_panic = jnp.clip(_ceil(m / target), lower, upper)
    over = d_panic / ready >= panic_threshold
    in_panic = cs["panic"] >= 0
    start = over & ~in_panic
    end = in_panic & ~over & (e - cs["panic"] >= stable)
    panic = jnp.where(over, e, jnp.where(end, -1, cs["panic"]))  # a trigger extends it
    now_panic = panic >= 0
    maxpanic = jnp.where(start, ready.astype(jnp.int32), cs["maxpanic"])
    maxpanic = jnp.where(now_panic, jnp.maximum(maxpanic, d_panic), 0)
    desired = jnp.where(now_panic, maxpanic, d_stable)
    rec = jnp.concatenate([cs["rec"][:, 1:], desired[:, None]], axis=1)
    delay = jnp.stack([params["delay"], params["delay"]]).astype(jnp.int32)
    recent = jnp.arange(dmax)[None, :] >= dmax - jnp.maximum(delay, 1)[:, None]
    desired = jnp.max(jnp.where(recent, rec, 0), axis=1)
    cs = dict(hist=hist, n=n, panic=panic, maxpanic=maxpanic, rec=rec)
    return cs, *_guard(desired, obs, start_hold), {}

  return episode.Controller("kpa", init, act)


# ---------------------------------------------------------------------------- APA

def apa(spec: sim.Spec, up_tol: float = 0.1, down_tol: float = 0.2, max_up: float = 2.0,
        max_down: float = 2.0, start_hold: int = 0):
  def init(params):
    del params
    return dict(last_up=jnp.full((2,), -10 ** 6, jnp.int32))

  def act(params, cs, obs, key):
    del key
    ready = jnp.maximum(jnp.stack([obs["p_ready"], obs["d_ready"]]), 1.0)
    active = jnp.stack([obs["p_ready"] + obs["p_starting"], obs["d_ready"] + obs["d_starting"]])
    util_p = obs["prefill_busy"] / (spec.epoch_s * ready[0])
    metric = jnp.stack([util_p, obs["kv_util"]])
    target = jnp.stack([params["target_p"], params["target_d"]])
    ratio = metric / target
    want = _ceil(ready * ratio)
    hi = _ceil(active * max_up)
    lo = _ceil(active / max_down)
    want = jnp.clip(want, lo, jnp.maximum(hi, 1))
    act_i = active.astype(jnp.int32)
    e = obs["epoch"].astype(jnp.int32)
    cool = e - cs["last_up"] < params["cooldown"].astype(jnp.int32)
    up = (ratio > 1 + up_tol) & (want > act_i)
    down = (ratio < 1 - down_tol) & (want < act_i) & ~cool
    desired = jnp.where(up | down, want, act_i)
    last_up = jnp.where(up, e, cs["last_up"])
    return dict(last_up=last_up), *_guard(desired, obs, start_hold), {}

  return episode.Controller("apa", init, act)


# ---------------------------------------------------------------------------- threshold

def threshold(spec: sim.Spec, cooldown_s: float = 30.0, start_hold: int = 0):
  cool = max(int(round(cooldown_s / spec.epoch_s)), 1)

  def init(params):
    del params
    return dict(last=jnp.full((2,), -10 ** 6, jnp.int32))

  def act(params, cs, obs, key):
    del key
    ready = jnp.maximum(jnp.stack([obs["p_ready"], obs["d_ready"]]), 1.0)
    active = jnp.stack([obs["p_ready"] + obs["p_starting"],
                        obs["d_ready"] + obs["d_starting"]]).astype(jnp.int32)
    sig_p = prefill_inflight(obs) / ready[0]
    dq = obs["dqueue"] / ready[1]
    hi = jnp.stack([params["hi_p"], params["hi_d"]])
    sig = jnp.stack([sig_p, obs["kv_util"]])
    over = (sig > hi) | jnp.stack([False, dq > 1.0])
    under = (sig < 0.5 * hi) & jnp.stack([True, obs["dqueue"] < 0.5])
    e = obs["epoch"].astype(jnp.int32)
    ok = e - cs["last"] >= cool
    # A scale-down the start guard would cancel is not taken: it must not start the
    # 30 s cooldown, which would block a scale-up the load needs.
    step = jnp.where(ok & over, 1, jnp.where(ok & under & (e >= start_hold), -1, 0))
    last = jnp.where(step != 0, e, cs["last"])
    desired = active + step
    return dict(last=last), *_guard(desired, obs, start_hold), {}

  return episode.Controller("threshold", init, act)


# ---------------------------------------------------------------------------- static

def static(spec: sim.Spec):
  del spec

  def act(params, cs, obs, key):
    del obs, key
    return cs, params["p"].astype(jnp.int32), params["d"].astype(jnp.int32), {}

  return episode.Controller("static", lambda params: jnp.int32(0), act)


# ---------------------------------------------------------------------------- Erlang C

def erlang_c(c, a):
  """P(wait > 0) in M/M/c with offered load a = lambda / mu (NumPy reference)."""
  from math import factorial
  if a >= c:
    return 1.0
  top = a ** c / factorial(c) * c / (c - a)
  return top / (sum(a ** k / factorial(k) for k in range(c)) + top)


def erlang_c_all(a, kmax: int):
  """Erlang C for c = 1..kmax servers at load a, vectorised (log-space Erlang B)."""
  k = jnp.arange(kmax + 1, dtype=jnp.float32)
  lt = k * jnp.log(jnp.maximum(a, 1e-9)) - jax.lax.lgamma(k + 1.0)
  b = jnp.exp(lt - jax.lax.cumlogsumexp(lt))[1:]  # Erlang B, c = 1..kmax
  c = k[1:]
  rho = a / c
  cc = b / (1.0 - rho * (1.0 - b))
  return jnp.where(rho < 1.0, jnp.clip(cc, 0.0, 1.0), 1.0)


def erlang_wait_tail(c, lam, service, x):
  """P(wait > x) in M/M/c: C(c, lam s) exp(-(c / s - lam) x), for c = 1..len(c) servers.

  c: int array of server counts (1..), lam arrivals/s, service mean s, x >= 0 seconds."""
  kmax = int(c.shape[0])
  a = lam * service
  cc = erlang_c_all(a, kmax)
  return jnp.where(c > a, cc * jnp.exp(-jnp.maximum(c / service - lam, 0.0) * x), 1.0)


def erlang(spec: sim.Spec, window_s: float = 60.0, eps: float = 0.01,
           max_delay_s: float = 600.0, prior_prompt: float = 1000.0,
           prior_output: float = 200.0):
  """The textbook M/M/c (Erlang-C) capacity planner, one queue per pool.

  Forecast: the arrival rate, mean prompt and mean output over the last `window_s`
  (a running mean over the intervals seen so far during the first window, then an EMA
  with that horizon; interval 0 has no observation and is skipped). The forecast rate is
  multiplied by `headroom` (tuned on validation).
  Prefill: servers = pods, service = prefill(mean prompt) (a batch of one: at the
  planned utilisation most batches hold one request), P(wait > TTFT target - service)
  <= eps.
  Decode: servers = KV-limited token slots, pods x floor(KV capacity / (mean prompt +
  mean output)) (at most max_batch per pod), service = (output - 1) full-batch
  iterations; a request of output o misses the TPOT target when its decode-queue wait
  exceeds (TPOT target - iteration) (o - 1) - KV transfer. With M/M/c's exponential
  service (o - 1 ~ Exp(mean output - 1)) the miss probability averages to
      C(c, a) [1 - e^{-t/(bM)} + e^{-t/(bM)} / (1 + theta b M)],
  b = TPOT target - iteration, M = mean output - 1, t = transfer, theta = c mu - lambda
  (the exponential rate of the M/M/c wait tail); the smallest c with it <= eps.
  Scale-down: the max plan over the last `delay` intervals (Kubernetes HPA's scale-down
  stabilisation window; 0 = none) and `hold_ready` (no ready pod drained below the plan
  while a pod of the pool is starting).
  """
  alpha = min(spec.epoch_s / window_s, 1.0)
  kd = spec.max_decode * spec.max_batch
  dmax = max(int(round(max_delay_s / spec.epoch_s)), 1)

  def init(params):
    del params
    return dict(lam=jnp.float32(0.0), prompt=jnp.float32(prior_prompt),
                out=jnp.float32(prior_output), n=jnp.int32(0), npr=jnp.int32(0),
                rec=jnp.zeros((2, dmax), jnp.int32))

  def plan(params, lam, prompt, out):
    lam_h = lam * params["headroom"]
    s_p = sim.prefill_s(spec, prompt)
    x_p = jnp.maximum(spec.ttft_slo - s_p, 0.0)
    pods = jnp.arange(1, spec.max_prefill + 1, dtype=jnp.float32)
    e = jnp.asarray(params.get("eps", eps), jnp.float32)  # a param only in the tests
    ok = erlang_wait_tail(pods, lam_h, s_p, x_p) <= e
    cp = jnp.where(jnp.any(ok), jnp.argmax(ok) + 1, spec.max_prefill)
    slots = jnp.clip(jnp.floor(spec.kv_capacity / (prompt + out)), 1, spec.max_batch)
    tau = sim.decode_s(spec, slots * (prompt + 0.5 * out), slots)
    m = jnp.maximum(out - 1.0, 1e-3)
    s_d = m * tau
    b = jnp.maximum(spec.tpot_slo - tau, 1e-6)
    tr = prompt * spec.kv_bytes_per_token / spec.bandwidth + spec.transfer_latency
    servers = jnp.arange(1, kd + 1, dtype=jnp.float32)
    cc = erlang_c_all(lam_h * s_d, kd)
    theta = jnp.maximum(servers / s_d - lam_h, 0.0)
    short = jnp.exp(-tr / (b * m))  # P((o - 1) b > transfer)
    miss = jnp.where(servers > lam_h * s_d,
                     cc * (1.0 - short + short / (1.0 + theta * b * m)), 1.0)
    dpods = jnp.arange(1, spec.max_decode + 1)
    okd = miss[jnp.clip(dpods * slots.astype(jnp.int32), 1, kd) - 1] <= e
    cd = jnp.where(jnp.any(okd), jnp.argmax(okd) + 1, spec.max_decode)
    return jnp.stack([cp, cd]).astype(jnp.int32)

  def act(params, cs, obs, key):
    del key
    seen = obs["epoch"] >= 1  # interval 0 has observed nothing yet
    n = cs["n"] + seen.astype(jnp.int32)
    w = jnp.where(seen, jnp.maximum(1.0 / jnp.maximum(n, 1), alpha), 0.0)
    lam = (1 - w) * cs["lam"] + w * obs["arrivals"] / spec.epoch_s
    has_p = seen & (obs["arrivals"] > 0)
    npr = cs["npr"] + has_p.astype(jnp.int32)
    wp = jnp.where(has_p, jnp.maximum(1.0 / jnp.maximum(npr, 1), alpha), 0.0)
    prompt = (1 - wp) * cs["prompt"] + wp * obs["arrived_tokens"] / jnp.maximum(obs["arrivals"], 1)
    # Output lengths are known at completion only: the early finishers are the short
    # ones, so the mean starts from the prior and moves at the window's EMA rate.
    wo = jnp.where(obs["finished"] > 0, alpha, 0.0)
    out = (1 - wo) * cs["out"] + wo * obs["out_tokens"] / jnp.maximum(obs["finished"], 1)
    desired = plan(params, lam, prompt, out)
    rec = jnp.concatenate([cs["rec"][:, 1:], desired[:, None]], axis=1)
    delay = jnp.asarray(params.get("delay", 0.0)).astype(jnp.int32)
    recent = jnp.arange(dmax)[None, :] >= dmax - jnp.maximum(delay, 1)
    desired = jnp.max(jnp.where(recent, rec, 0), axis=1)
    tp, td = _guard(desired, obs)
    cs = dict(lam=lam, prompt=prompt, out=out, n=n, npr=npr, rec=rec)
    return cs, tp, td, dict(plan_p=desired[0].astype(jnp.float32),
                            plan_d=desired[1].astype(jnp.float32))

  return episode.Controller("erlang", init, act)


# ---------------------------------------------------------------------------- oracle

def oracle(spec: sim.Spec):
  def act(params, cs, obs, key):
    del key
    return (cs, _ceil(params["h_p"] * obs["future_p"]), _ceil(params["h_d"] * obs["future_d"]),
            {})

  return episode.Controller("oracle", lambda params: jnp.int32(0), act)


def oracle_future(spec: sim.Spec, arr, prompt, output, epochs: int):
  """[epochs, 2]: the max fluid need over [e, e + lead + 1], lead = start-up epochs."""
  tau_full = float(sim.decode_s(spec, jnp.float32(spec.kv_capacity),
                                jnp.float32(spec.kv_capacity / 1366.0)))
  base = episode.fluid_demand(spec, arr, prompt, output, epochs, tau=tau_full)
  lead = int(np.ceil(spec.startup_s / spec.epoch_s)) + 1
  out = np.stack([base[e:e + lead + 1].max(axis=0) for e in range(epochs)])
  return out.astype(np.float32)


BUILDERS = dict(kpa=kpa, apa=apa, threshold=threshold, static=static, erlang=erlang,
                oracle=oracle)
REACTIVE = ("kpa", "apa", "threshold")  # the baselines that get the start guard


def make(name: str, spec: sim.Spec, start_hold_s: float = 0.0):
  """A baseline controller; the reactive ones (KPA, APA, threshold) with no scale-down
  during the first `start_hold_s` seconds of an episode (config.study.start_hold_s;
  `start_guard`). Erlang-C has its own cold-start fix (its forecast), static and the
  oracle do not react."""
  if name in REACTIVE:
    return BUILDERS[name](spec, start_hold=int(round(start_hold_s / spec.epoch_s)))
  return BUILDERS[name](spec)
