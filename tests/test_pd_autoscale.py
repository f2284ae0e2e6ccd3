"""Tests for pd_autoscale: the PD simulator (queueing closed forms, a hand-traced case,
conservation), workloads and trace loader, baselines, masks and cooldowns, sharding."""
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.core import sharding
from jaxpapers.papers.pd_autoscale import baselines
from jaxpapers.papers.pd_autoscale import calibration
from jaxpapers.papers.pd_autoscale import episode
from jaxpapers.papers.pd_autoscale import policy
from jaxpapers.papers.pd_autoscale import simulator as sim
from jaxpapers.papers.pd_autoscale import traces
from jaxpapers.papers.pd_autoscale import workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _erlang_c(c, a):
  """Textbook Erlang C (probability of waiting in M/M/c), written out independently."""
  s = sum(a ** k / math.factorial(k) for k in range(c))
  top = a ** c / math.factorial(c) * c / (c - a)
  return top / (s + top)


def _queue_only_spec(c, window=64, dt=0.25):
  # One request per batch (budget 1 token), service = prompt tokens x 1 ms, no decode.
  return sim.Spec(dt=dt, ticks_per_epoch=1, window=window, max_prefill=c, max_decode=1,
                  token_budget=1.0, p0=0.0, p1=1.0, p2=0.0, kv_bytes_per_token=0.0,
                  transfer_latency=0.0)


def _mmc_waits(c, lam, n=700, reps=8, seed=0):
  spec = _queue_only_spec(c)
  rng = np.random.default_rng(seed)
  wls = []
  for _ in range(reps):
    arr = np.cumsum(rng.exponential(1 / lam, n))
    prompt = np.ceil(rng.exponential(1000.0, n))  # exp(1 s) service, 1 ms resolution
    wls.append(sim.make_workload(arr, prompt, np.ones(n), spec.window))
  wl = jax.tree.map(lambda *x: jnp.stack(x), *wls)
  ticks = int(n / lam * 1.3 / spec.dt)

  def one(w):
    st = sim.init_state(spec, w, c, 1)
    def body(s, _):
      s, _ = sim.tick(spec, s)
      return sim.compact(spec, w, s), None
    return jax.lax.scan(body, st, None, length=ticks)[0]
  st = jax.jit(jax.vmap(one))(wl)
  waits = []
  for r in range(reps):
    w = jax.tree.map(lambda x: x[r], wl)
    m = sim.request_metrics(jax.tree.map(lambda x: x[r], st), w, n)
    assert m["done"].all()
    waits.append((m["ttft"] - np.asarray(w.prompt)[:n] / 1000.0)[100:])  # after warm-up
  return np.concatenate(waits)


def test_mm1_sojourn_matches_closed_form():
  lam = 0.5  # mu = 1
  w = _mmc_waits(1, lam)
  assert np.min(w) > -1e-4  # nobody starts before arriving
  # E[W_q] = rho / (mu - lam) = 1.0; P(wait > 0) = rho.
  np.testing.assert_allclose(np.mean(w), 1.0, rtol=0.12)
  np.testing.assert_allclose(np.mean(w > 1e-4), 0.5, atol=0.04)


def _mmc_tail(c, lam, x):
  """Textbook M/M/c (mu = 1): P(wait > x) = C(c, a) exp(-(c - lam) x)."""
  return _erlang_c(c, lam) * math.exp(-(c - lam) * x) if c > lam else 1.0


def test_mmc_wait_matches_erlang_c():
  c, lam = 3, 2.1  # a = 2.1, rho = 0.7
  w = _mmc_waits(c, lam, seed=1)
  pw = _erlang_c(c, lam)
  np.testing.assert_allclose(np.mean(w > 1e-4), pw, atol=0.05)
  np.testing.assert_allclose(np.mean(w), pw / (c - lam), rtol=0.15)
  # The wait tail the Erlang-C planner sizes by: P(wait > 1 s) = 0.200 here.
  np.testing.assert_allclose(np.mean(w > 1.0), _mmc_tail(c, lam, 1.0), atol=0.04)
  got = baselines.erlang_wait_tail(jnp.arange(1.0, 6.0), jnp.float32(lam), jnp.float32(1.0),
                                   jnp.float32(1.0))
  np.testing.assert_allclose(got, [_mmc_tail(k, lam, 1.0) for k in range(1, 6)], rtol=1e-4)


def test_erlang_planner_sizes_an_mmc_pool_by_the_closed_form():
  """The planner on the stream of test_mmc_wait_matches_erlang_c (Poisson 2.1/s, exp(1 s)
  prefill, one request per batch: exactly M/M/c): c = the smallest with P(wait > TTFT
  target - service) <= eps by the textbook formula, from the first observed interval on
  (the rate forecast skips interval 0, which has observed nothing)."""
  spec = sim.Spec(dt=0.25, ticks_per_epoch=20, window=64, max_prefill=8, max_decode=4,
                  token_budget=1.0, p0=0.0, p1=1.0, p2=0.0, kv_bytes_per_token=0.0,
                  transfer_latency=0.0, ttft_slo=2.0)  # x = 2 - 1 s = 1 s
  lam = 2.1
  eps = (0.25, 0.1, 0.01)
  wants = [min(k for k in range(1, 9) if _mmc_tail(k, lam, 1.0) <= e) for e in eps]
  ctrl = baselines.erlang(spec)
  params = dict(headroom=jnp.ones(3), delay=jnp.zeros(3), eps=jnp.asarray(eps))
  act = jax.jit(jax.vmap(ctrl.act, in_axes=(0, 0, None, None)))
  cs = jax.vmap(ctrl.init)(params)
  got = []
  for e in range(4):
    o = _obs(8, 0, 4, 0)
    o.update(epoch=jnp.float32(e), arrivals=jnp.float32(lam * spec.epoch_s * (e > 0)),
             arrived_tokens=jnp.float32(1000.0 * lam * spec.epoch_s * (e > 0)))
    cs, tp, _, _ = act(params, cs, o, None)
    got.append([int(t) for t in tp])
  assert got[1:] == [wants] * 3, (got, wants)
  assert wants == [3, 4, 5]  # by hand: P(wait > 1 s) = 0.200, 0.030, 0.004 at c = 3, 4, 5
  # The decode miss probability's average over exponential outputs against Monte Carlo.
  rng = np.random.default_rng(0)
  y = rng.exponential(150.0, 400_000)  # output - 1
  theta, b, t, cc = 0.05, 0.04, 0.5, 0.3
  mc = cc * np.mean(np.exp(-theta * np.maximum(b * y - t, 0.0)))
  short = math.exp(-t / (b * 150.0))
  np.testing.assert_allclose(cc * (1 - short + short / (1 + theta * b * 150.0)), mc, rtol=0.01)
  # No ready pod is drained below the plan while a pod of the pool is starting.
  hr = lambda *a: int(baselines.hold_ready(*(jnp.int32(v) for v in a)))
  assert hr(2, 2, 1) == 3 and hr(2, 3, 1) == 3 and hr(1, 3, 0) == 1 and hr(5, 2, 1) == 5


def test_vectorised_erlang_c_matches_textbook():
  for a in (0.5, 2.1, 7.3):
    got = np.asarray(baselines.erlang_c_all(jnp.float32(a), 12))
    for c in range(1, 13):
      want = 1.0 if a >= c else _erlang_c(c, a)
      np.testing.assert_allclose(got[c - 1], want, rtol=2e-4, atol=1e-6)
    assert baselines.erlang_c(3, 2.1) == pytest.approx(_erlang_c(3, 2.1))


def _hand_spec():
  return sim.Spec(dt=0.1, ticks_per_epoch=1, window=8, max_prefill=1, max_decode=1,
                  token_budget=1000.0, p0=10.0, p1=1.0, p2=0.0, d0=10.0, d_ctx=0.02,
                  d_b=1.0, kv_capacity=1e5, kv_bytes_per_token=1e6, bandwidth=1e9,
                  transfer_latency=0.0, startup_s=1.0)


def test_hand_traced_latencies():
  """A (t=0, 100 prompt, 3 output) and B (t=0.05, 50, 2) on one prefill + one decode pod.

  prefill(S) = 10 + S ms, transfer 1 ms/token, decode iteration 10 + 0.02 C + 1 b ms.
  A prefills alone on [0, 0.11] (B arrives after A's batch started), B on [0.11, 0.17].
  A's KV lands at 0.21, B's at 0.22; from tick [0.2, 0.3) both decode, batch 2 with C = 150
  context tokens: 15 ms per iteration. A needs 2 tokens: done 0.24; B 1 token: done 0.235.
  TTFT = 0.11 / 0.12; TPOT = (0.24 - 0.11) / 2 = 0.065 and (0.235 - 0.17) / 1 = 0.065.
  """
  spec = _hand_spec()
  wl = sim.make_workload([0.0, 0.05], [100, 50], [3, 2], spec.window)
  st = sim.init_state(spec, wl, 1, 1)
  st, _ = sim.run_ticks(spec, wl, st, 5)
  m = sim.request_metrics(st, wl, 2)
  assert m["done"].all()
  np.testing.assert_allclose(m["ttft"], [0.11, 0.12], atol=1e-5)
  np.testing.assert_allclose(m["finish"], [0.24, 0.235], atol=1e-5)
  np.testing.assert_allclose(m["tpot"], [0.065, 0.065], atol=1e-5)


def test_token_budget_batches_and_startup_delay():
  """Three 600-token prompts at t=0 with budget 1000: batches {1,2} and {3} (request 2
  crosses the budget and is included). The only prefill pod starts at t=0 with a 0.35 s
  start-up: batch 1 = 1200 tokens runs 0.35 + (10 + 1200) ms, then batch 2."""
  spec = _hand_spec()
  wl = sim.make_workload([0.0, 0.0, 0.0], [600, 600, 600], [1, 1, 1], spec.window)
  st = sim.init_state(spec, wl, 0, 1)
  st = sim.apply_targets(dataclass_replace(spec, startup_s=0.35), st, 1, 1)
  st, _ = sim.run_ticks(spec, wl, st, 40)
  m = sim.request_metrics(st, wl, 3)
  b1 = 0.35 + 1.21
  np.testing.assert_allclose(m["ttft"], [b1, b1, b1 + 0.61], atol=1e-5)


def dataclass_replace(spec, **kw):
  import dataclasses
  return dataclasses.replace(spec, **kw)


def _scripted(spec):
  """Alternates between large and minimal pools every two decisions."""
  def act(params, cs, obs, key):
    del params, key
    big = (obs["epoch"].astype(jnp.int32) // 2) % 2 == 0
    return cs, jnp.where(big, 4, 1), jnp.where(big, 8, 1), {}
  return episode.Controller("scripted", lambda p: jnp.int32(0), act)


def _small_spec(**kw):
  base = dict(dt=0.25, ticks_per_epoch=20, window=128, max_prefill=6, max_decode=8,
              startup_s=10.0)
  base.update(kw)
  return sim.Spec(**base)


def test_conservation_under_scale_down():
  """Every request finishes exactly once, none lost when pods drain mid-request."""
  spec = _small_spec()
  arr, p, o = workloads.generate("bursts", 80.0, 3, 1.0)
  n = len(arr)
  a, pp, oo = workloads.stack([(arr, p, o)], spec.window, n_max=n)
  wl = sim.Workload(*(jnp.asarray(x[0]) for x in (a, pp, oo)))
  epochs = 60  # 300 s: arrivals stop at 80 s, the rest drains
  st, rows = jax.jit(episode.episode_fn(spec, _scripted(spec), epochs))(
      {}, wl, jnp.zeros((epochs, 2)), jnp.array([2, 4]), jax.random.PRNGKey(0))
  flag = np.asarray(st.res_flag)
  assert flag[:n].sum() == n and flag[n:].sum() == 0
  assert int(np.sum(rows["finished"])) == n  # finish events: exactly one per request
  assert int(np.sum(rows["arrivals"])) == n
  assert np.sum(np.diff(np.asarray(rows["decode_gpus"])) < 0) >= 3  # pools did shrink
  m = sim.request_metrics(st, wl, n)
  assert np.all(m["ttft"] > 0) and np.all(np.asarray(st.res_done)[:n] >= np.asarray(st.res_first)[:n])


def test_kv_memory_limit_is_never_exceeded():
  spec = _small_spec(kv_capacity=6000.0)
  arr, p, o = workloads.generate("conversation", 60.0, 4, 1.5)
  a, pp, oo = workloads.stack([(arr, p, o)], spec.window)
  wl = sim.Workload(*(jnp.asarray(x[0]) for x in (a, pp, oo)))
  st = sim.init_state(spec, wl, 3, 2)

  def body(s, _):
    s, _ = sim.tick(spec, s)
    run = s.phase == sim.DECODE
    use = jnp.stack([jnp.sum(jnp.where(run & (s.pod == j), s.prompt + s.output, 0.0))
                     for j in range(spec.max_decode)])
    return sim.compact(spec, wl, s), jnp.max(use)
  _, use = jax.jit(lambda s: jax.lax.scan(body, s, None, length=240))(st)
  assert float(jnp.max(use)) <= 6000.0
  assert float(jnp.max(use)) > 3000.0  # the limit binds


def test_workload_fit_matches_published_statistics():
  arr, p, o = workloads.generate("conversation", 3600.0, 0, 1.0)
  d = workloads.describe(arr, p, o)
  assert d["rate"] == pytest.approx(5.5, rel=0.05)
  assert d["cv"] == pytest.approx(1.1, rel=0.1)
  assert d["prompt_mean"] == pytest.approx(1155, rel=0.05)
  assert d["prompt_median"] == pytest.approx(1020, rel=0.05)
  assert d["prompt_p99"] == pytest.approx(4142, rel=0.1)
  assert d["output_mean"] == pytest.approx(211, rel=0.05)
  assert d["output_median"] == pytest.approx(129, rel=0.05)
  assert d["output_p99"] == pytest.approx(601, rel=0.1)
  arr, p, o = workloads.generate("code", 3600.0, 0, 1.0)
  d = workloads.describe(arr, p, o)
  assert d["cv"] > 6  # very bursty (target 13; the sample CV of such a process is noisy)
  assert d["prompt_median"] == pytest.approx(1470, rel=0.05)
  assert d["output_median"] == pytest.approx(13, rel=0.1)
  # The diurnal rate follows its profile: the middle third is busier than the first.
  arr, _, _ = workloads.generate("diurnal", 3000.0, 0, 1.0)
  # Expected ratio of the mean rates: (1 + 0.6 x 0.827) / (1 - 0.6 x 0.413) = 1.99.
  assert 1.8 < np.sum((arr > 1000) & (arr < 2000)) / np.sum(arr < 1000) < 2.2


@pytest.mark.parametrize("layout", ["azure", "vidur"])
def test_trace_loader_reads_both_layouts(tmp_path, layout):
  arr, p, o = workloads.generate("conversation", 30.0, 1, 1.0)
  path = traces.write(str(tmp_path / f"{layout}.csv"), arr + 3.0, p, o, layout=layout)
  a, q, r = traces.load(path)
  np.testing.assert_allclose(a, arr - arr[0], atol=1e-6)
  np.testing.assert_array_equal(q, p)
  np.testing.assert_array_equal(r, np.maximum(o, 1))
  a2, _, _ = traces.load(path, start_s=5.0, duration_s=10.0, speedup=2.0)
  assert a2.min() >= 0 and a2.max() < 10.0
  assert len(a2) == np.sum(((arr - arr[0]) / 2 >= 5) & ((arr - arr[0]) / 2 < 15))


def test_trace_loader_rejects_malformed_files(tmp_path):
  bad = tmp_path / "bad.csv"
  bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1,abc,3\n")
  with pytest.raises(ValueError, match=r"bad.csv:3: malformed azure row"):
    traces.load(str(bad))
  hdr = tmp_path / "hdr.csv"
  hdr.write_text("time,prompt,output\n0,1,2\n")
  with pytest.raises(ValueError, match="has neither"):
    traces.load(str(hdr))
  with pytest.raises(FileNotFoundError):
    traces.load(str(tmp_path / "missing.csv"))
  # Through the launcher: one line on stderr, exit code 1, before any compilation.
  env = dict(os.environ, PYTHONPATH=ROOT)
  out = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "train.py"),
                        f"--config=configs/pd_autoscale.py:smoke,trace={bad}",
                        f"--workdir={tmp_path / 'wd'}"], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=120)
  assert out.returncode == 1
  lines = [l for l in out.stderr.strip().splitlines() if l.strip()]
  assert len(lines) == 1 and "malformed azure row" in lines[0]


def _obs(p_ready, p_starting, d_ready, d_starting):
  o = {k: jnp.float32(0.0) for k in episode.zero_summary()}
  o.update(p_ready=jnp.float32(p_ready), p_starting=jnp.float32(p_starting),
           d_ready=jnp.float32(d_ready), d_starting=jnp.float32(d_starting),
           p_draining=jnp.float32(0), d_draining=jnp.float32(0), epoch=jnp.float32(0))
  return o


def test_action_masks_match_brute_force():
  spec = _small_spec()
  ps = policy.PolicySpec()
  never = jnp.full((2,), -10 ** 6, jnp.int32)
  for pr, pst, dr, dst in [(1, 0, 1, 0), (6, 0, 8, 0), (1, 3, 2, 5), (3, 0, 4, 1), (2, 4, 7, 1)]:
    m = np.asarray(policy.action_mask(spec, ps, _obs(pr, pst, dr, dst), never, never,
                                      jnp.int32(100)))
    for i, (ready, starting, lo, hi) in enumerate([(pr, pst, 1, 6), (dr, dst, 1, 8)]):
      for k, dl in enumerate(range(-2, 3)):
        # Brute force: the pool after the action holds [lo, hi] pods, and only ready
        # pods can be removed (a starting pod is never cancelled).
        after = ready + starting + dl
        want = dl == 0 or (lo <= after <= hi and -dl <= ready)
        assert m[i, k] == want, (pr, pst, dr, dst, i, dl)


def test_cooldowns_are_enforced_and_reversals_happen_without_them():
  spec = _small_spec()
  ps = policy.PolicySpec(cooldown_down_s=30.0, cooldown_up_s=20.0)
  net = policy.init_params(jax.random.PRNGKey(0), ps)
  net = jax.tree.map(lambda x: x, net)
  for head in ("pi_p", "pi_d"):  # a policy that likes to move: uniform deltas
    net[head]["b"] = jnp.zeros((5,))
  arr, p, o = workloads.generate("diurnal", 300.0, 2, 1.0)
  a, pp, oo = workloads.stack([(arr, p, o)], spec.window)
  wl = sim.Workload(*(jnp.asarray(x[0]) for x in (a, pp, oo)))
  E = 60
  reversals = {}
  for cool in (True, False):
    params = dict(net=net, flags=policy.flags(True, True, cool))
    fn = jax.jit(episode.episode_fn(spec, policy.controller(spec, ps), E))
    _, rows = fn(params, wl, jnp.zeros((E, 2)), jnp.array([3, 4]), jax.random.PRNGKey(1))
    delta = np.asarray(rows["delta"])  # [E, 2]
    n_rev = 0
    for i in range(2):
      last_up = last_down = -10 ** 6
      for e in range(E):
        if delta[e, i] < 0:
          if cool:
            assert (e - last_up) * spec.epoch_s >= 30.0
          n_rev += (e - last_up) * spec.epoch_s < 30.0
          last_down = e
        elif delta[e, i] > 0:
          if cool:
            assert (e - last_down) * spec.epoch_s >= 20.0
          n_rev += (e - last_down) * spec.epoch_s < 20.0
          last_up = e
      # Masks hold too: every taken action was allowed.
      assert np.all(np.take_along_axis(np.asarray(rows["mask"])[:, i], np.asarray(
          rows["a"])[:, i, None], -1))
    reversals[cool] = n_rev
  assert reversals[True] == 0 and reversals[False] > 0  # positive control


def test_kpa_follows_knative_rules_on_a_hand_case():
  spec = _small_spec(ticks_per_epoch=20)  # 5 s intervals: stable window 60 s = 12
  ctrl = baselines.kpa(spec)
  params = dict(target_p=jnp.float32(2.0), target_d=jnp.float32(10.0), delay=jnp.float32(0))
  cs = ctrl.init(params)
  desired = []
  # Steady 4 in-flight prefill requests on 2 ready pods, then a spike to 20 (10x per pod).
  act = jax.jit(ctrl.act)  # one compile instead of seven eager op-by-op calls
  for e, load in enumerate([4.0] * 3 + [20.0] + [4.0] * 3):
    o = _obs(2, 0, 2, 0)
    o.update(queue=jnp.float32(load), decoding=jnp.float32(20.0), epoch=jnp.float32(e))
    cs, tp, td, _ = act(params, cs, o, None)
    desired.append((int(tp), int(td)))
  # Stable: ceil(4 / 2) = 2. Spike: panic desire ceil(20 / 2) = 10 >= 2 x 2 ready -> panic,
  # desired 10, and no scale-down while panicking (60 s): it stays 10 afterwards.
  assert [d[0] for d in desired] == [2, 2, 2, 10, 10, 10, 10]
  assert all(d[1] == 2 for d in desired)  # decode: ceil(20 / 10) = 2


def test_apa_tolerance_band_and_rate_limits():
  spec = _small_spec()
  ctrl = baselines.apa(spec)
  params = dict(target_p=jnp.float32(0.5), target_d=jnp.float32(0.8), cooldown=jnp.float32(0))
  cs = ctrl.init(params)
  o = _obs(4, 0, 4, 0)
  # prefill busy 0.52 (ratio 1.04, inside the band) -> hold; KV 0.2 (ratio 0.25) -> the
  # max down rate 2 bounds ceil(4 x 0.25) = 1 to 2.
  o.update(prefill_busy=jnp.float32(0.52 * spec.epoch_s * 4), kv_util=jnp.float32(0.2))
  _, tp, td, _ = ctrl.act(params, cs, o, None)
  assert (int(tp), int(td)) == (4, 2)
  o.update(prefill_busy=jnp.float32(1.0 * spec.epoch_s * 4), kv_util=jnp.float32(0.9))
  _, tp, td, _ = ctrl.act(params, cs, o, None)
  # ratio 2.0 -> ceil(4 x 2) = 8 (= max up rate 2 x 4); KV ratio 1.125 -> ceil(4.5) = 5.
  assert (int(tp), int(td)) == (8, 5)


def test_start_guard_holds_every_reactive_baseline_then_lets_go():
  """No scale-down during the first start_hold_s (config.study.start_hold_s) of an
  episode, for KPA, APA and threshold; an idle system scales down without it (positive
  control) and after it."""
  spec = _small_spec()  # 5 s intervals
  params = dict(kpa=dict(target_p=2.0, target_d=10.0, delay=0.0),
                apa=dict(target_p=0.5, target_d=0.8, cooldown=0.0),
                threshold=dict(hi_p=1.0, hi_d=0.5))
  for name in baselines.REACTIVE:
    p = {k: jnp.float32(v) for k, v in params[name].items()}
    got = {}
    for hold_s in (0.0, 20.0):  # 20 s = 4 intervals
      ctrl = baselines.make(name, spec, hold_s)
      act = jax.jit(ctrl.act)
      cs, out = ctrl.init(p), []
      for e in range(8):  # idle: nothing in flight, 4 + 1 starting prefill, 6 decode
        o = _obs(4, 1, 6, 0)
        o.update(epoch=jnp.float32(e))
        cs, tp, td, _ = act(p, cs, o, None)
        out.append((int(tp), int(td)))
      got[hold_s] = out
    assert got[0.0][0] != (5, 6), (name, got[0.0])  # scales down at once without it
    assert all(tp >= 5 and td >= 6 for tp, td in got[20.0][:4]), (name, got[20.0])
    # ... and at the first interval after it (threshold: a cancelled scale-down did not
    # start its 30 s cooldown).
    assert got[20.0][4][0] < 5 or got[20.0][4][1] < 6, (name, got[20.0])


def test_fluid_bound_of_a_constant_load():
  spec = _small_spec()
  # 2 requests/s, 1000-token prompts, 101 output tokens, 100 s.
  arr = np.arange(0, 100, 0.5)
  p, o = np.full(arr.shape, 1000.0), np.full(arr.shape, 101.0)
  fd = episode.fluid_demand(spec, arr, p, o, 20)
  prof = calibration.profile("distserve_opt13b_a100")
  per_tok = calibration.best_prefill_ms_per_token(prof, spec.token_budget) * 1e-3
  np.testing.assert_allclose(fd[:, 0], 2 * 1000 * per_tok, rtol=1e-5)
  tau = (prof["d0"] + prof["d_b"]) * 1e-3
  occ = 2 * 1101 * 100 * tau / spec.kv_capacity  # Little's law in KV tokens
  np.testing.assert_allclose(fd[2:, 1], occ, rtol=1e-4)
  # The best prefill cost per token: argmin of (p0 + p1 S + p2 S^2) / S is sqrt(p0 / p2).
  s_star = math.sqrt(prof["p0"] / prof["p2"])
  want = (prof["p0"] + prof["p1"] * s_star + prof["p2"] * s_star ** 2) / s_star * 1e-3
  np.testing.assert_allclose(per_tok, want, rtol=1e-3)


def test_eight_devices_give_the_one_device_numbers():
  assert jax.device_count() == 8
  spec = _small_spec()
  E = 12
  tr = [workloads.generate(f, 60.0, s, 1.0) for s in range(2) for f in ("conversation", "bursts")]
  a, p, o = workloads.stack(tr + tr[:1], spec.window)  # 5 clusters: padding to 8 is used
  wl = sim.Workload(jnp.asarray(a), jnp.asarray(p), jnp.asarray(o))
  ctrl = baselines.kpa(spec)
  B = 5
  params = dict(target_p=jnp.linspace(1, 3, B), target_d=jnp.full((B,), 20.0),
                delay=jnp.zeros((B,)))
  args = (params, wl, jnp.zeros((B, E, 2)), jnp.tile(jnp.array([[2, 3]]), (B, 1)),
          jax.random.split(jax.random.PRNGKey(0), B))
  fn = episode.episode_fn(spec, ctrl, E)
  st8, rows8 = sharding.spread(fn)(*args)
  st1, rows1 = jax.jit(jax.vmap(fn))(*jax.device_put(args, jax.devices()[0]))
  for k in ("gpus", "finished", "ttft_sum", "target_p"):
    np.testing.assert_array_equal(np.asarray(rows8[k]), np.asarray(rows1[k]))
  # Finish times agree to float32 rounding (XLA fuses the two batch shapes differently).
  np.testing.assert_allclose(np.asarray(st8.res_done), np.asarray(st1.res_done), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(st8.res_flag), np.asarray(st1.res_flag))


def test_config_paper_preset_and_errors():
  cfg = config_lib.load("configs/pd_autoscale.py:paper")
  assert cfg.sim.max_decode == 32 and cfg.data.rate_scale == 4.0
  with pytest.raises(ValueError, match="families"):
    config_lib.load("configs/pd_autoscale.py:families=chat")
  with pytest.raises(ValueError, match="multiple of dt"):
    config_lib.load("configs/pd_autoscale.py:epoch_s=5.1")
  with pytest.raises(ValueError, match="latency profile"):
    sim.spec_from(config_lib.load("configs/pd_autoscale.py:profile=h200"))


def test_training_resumes_exactly(tmp_path):
  from jaxpapers.papers.pd_autoscale import experiment as ex
  cfg = config_lib.load("configs/pd_autoscale.py:smoke,iterations=2,ckpt_every=1,"
                        "eval_every=2")
  members = ex.member_grid(cfg, [ex.main_variant(cfg)], [0], [cfg.rl.lr])
  full = ex.train_policy(cfg, str(tmp_path / "a"), members, log=lambda *a: None)
  cfg1 = config_lib.load("configs/pd_autoscale.py:smoke,iterations=1,ckpt_every=1,"
                         "eval_every=2")
  ex.train_policy(cfg1, str(tmp_path / "b"), members, log=lambda *a: None)
  resumed = ex.train_policy(cfg, str(tmp_path / "b"), members, log=lambda *a: None)
  for a, b in zip(jax.tree.leaves(full["final"]), jax.tree.leaves(resumed["final"])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  rows = [json.loads(l) for l in open(tmp_path / "b" / "metrics.jsonl")]
  assert [r["step"] for r in rows if "rl/gpus" in r] == [1, 2]
  # The 1-iteration run validated at its end, so its row at 1 also holds validation keys
  # the full run's lacks; the full run's keys there and every later row are equal.
  from tests import _runs  # pylint: disable=g-import-not-at-top
  _runs.assert_same_metrics(tmp_path / "b", tmp_path / "a", keep=lambda r: r["step"] > 1)
  (cut1,), (full1,) = ([r for r in _runs.metrics_rows(tmp_path / d) if r["step"] == 1]
                       for d in "ba")
  assert {k: cut1.get(k) for k in full1} == full1


def test_per_family_multipliers_update_from_their_own_family_only():
  from jaxpapers.papers.pd_autoscale import ppo
  pp = ppo.PPOSpec(n_fam=3, per_family=True, budget=0.01, lam_lr=0.5)
  # One compiled program each (eager dispatch of the small ops is the slow part).
  dual = jax.jit(ppo.dual_update, static_argnums=4)
  ladv = jax.jit(ppo.lagrangian_advantage, static_argnums=4)
  lam = jnp.array([5.0, 5.0, 5.0])
  fam = jnp.array([0, 0, 1, 1])  # family 2 absent from this batch
  arr = jnp.full((4, 6), 10.0)  # 60 arrivals per env
  viol = jnp.zeros((4, 6)).at[2:, 0].set(3.0)  # family 1: 5% (> budget), family 0: 0
  new, frac, frac_f = dual(lam, viol, arr, fam, pp)
  np.testing.assert_allclose(frac_f, [0.0, 0.05, 0.0])
  np.testing.assert_allclose(frac, 6.0 / 240.0)
  # Down by lam_lr (0 violations), up by lam_lr (5% / 1% - 1) = 2.0, unchanged (absent).
  np.testing.assert_allclose(new, [4.5, 7.0, 5.0])
  # Family 0's multiplier ignores family 1's violations, however large.
  new2, _, _ = dual(lam, viol.at[2:].set(100.0), arr, fam, pp)
  np.testing.assert_allclose(new2[0], new[0])
  # Shared: one fraction (2.5% > 1%) moves every entry alike.
  shared, _, _ = dual(lam, viol, arr, fam, pp._replace(per_family=False))
  np.testing.assert_allclose(shared, [5.75, 5.75, 5.75])
  # The step tracks the MEAN violating fraction: three clean iterations and one at 4x the
  # budget (mean = the budget) leave lambda where it was (a step clipped to [-1, 1], the
  # first version, lowered it by 2 lam_lr: it tracked the median).
  one = lambda lam, v: dual(lam, jnp.zeros((4, 6)).at[:, 0].set(v), arr, fam, pp)[0]
  lam_t = lam
  for v in (0.0, 0.0, 0.0, 2.4):  # 2.4 / 60 = 4% = 4x the budget
    lam_t = one(lam_t, v)
  np.testing.assert_allclose(lam_t[:2], [5.0, 5.0], atol=1e-5)
  # The safety cap: all requests violating moves lambda by at most lam_lr x step_cap.
  capped = dual(lam, jnp.full((4, 6), 10.0), arr, fam, pp._replace(step_cap=10.0))[0]
  np.testing.assert_allclose(capped, [10.0, 10.0, 5.0])
  # Advantages: each env uses its family's lambda and is standardised within its family
  # (NumPy reference), so family 1's multiplier cannot rescale family 0's advantages.
  rng = np.random.default_rng(0)
  ar, ac = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
  lam3 = jnp.array([2.0, 100.0, 7.0])
  got = np.asarray(ladv(jnp.asarray(ar), jnp.asarray(ac), lam3, fam, pp))
  for f, rows in ((0, [0, 1]), (1, [2, 3])):
    a = ar[rows] - float(lam3[f]) * ac[rows]
    np.testing.assert_allclose(got[rows], (a - a.mean()) / (a.std() + 1e-8), rtol=1e-4,
                               atol=1e-5)
  got_b = ladv(jnp.asarray(ar), jnp.asarray(ac), lam3.at[1].set(1.0), fam, pp)
  np.testing.assert_allclose(np.asarray(got_b)[:2], got[:2], rtol=1e-6)
  # Shared: one standardisation over the batch.
  gs = np.asarray(ladv(jnp.asarray(ar), jnp.asarray(ac), jnp.full(3, 2.0),
                                           fam, pp._replace(per_family=False)))
  a = ar - 2.0 * ac
  np.testing.assert_allclose(gs, (a - a.mean()) / (a.std() + 1e-8), rtol=1e-4, atol=1e-5)


def test_log_space_dual_step_by_hand():
  from jaxpapers.papers.pd_autoscale import ppo
  pp = ppo.PPOSpec(n_fam=3, per_family=True, budget=0.01, lam_lr=0.1, dual_log=True,
                   step_cap=20.0, lam_min=0.01, lam_max=100.0)
  dual = jax.jit(ppo.dual_update, static_argnums=4)
  lam = jnp.array([5.0, 5.0, 5.0])
  fam = jnp.array([0, 0, 1, 1])  # family 2 absent
  arr = jnp.full((4, 6), 10.0)
  viol = jnp.zeros((4, 6)).at[2:, 0].set(3.0)  # family 0: 0%, family 1: 5% (5x budget)
  new = dual(lam, viol, arr, fam, pp)[0]
  # Clean: x exp(-0.1) = 4.5242; 5x the budget: x exp(0.1 x 4) = 7.4591; absent: kept.
  np.testing.assert_allclose(new, [4.524187, 7.459123, 5.0], rtol=1e-5)
  # Mean-tracking in log lambda: three clean iterations and one at 4x the budget (mean =
  # the budget) return lambda to where it was.
  lam_t = lam
  for v in (0.0, 0.0, 0.0, 2.4):
    lam_t = dual(lam_t, jnp.zeros((4, 6)).at[:, 0].set(v), arr, fam, pp)[0]
  np.testing.assert_allclose(lam_t[:2], [5.0, 5.0], rtol=1e-5)
  # The cap (all requests violating: 100x the budget) gives x exp(0.1 x 20) = x 7.389,
  # clipped at lam_max; the floor lam_min holds after many clean iterations.
  capped = dual(lam, jnp.full((4, 6), 10.0), arr, fam, pp)[0]
  np.testing.assert_allclose(capped, [36.945282, 36.945282, 5.0], rtol=1e-5)
  np.testing.assert_allclose(dual(jnp.full(3, 90.0), jnp.full((4, 6), 10.0), arr, fam, pp)[0],
                             [100.0, 100.0, 90.0])
  low = dual(jnp.full(3, 0.0105), jnp.zeros((4, 6)), arr, fam, pp)[0]
  np.testing.assert_allclose(low, [0.01, 0.01, 0.0105], rtol=1e-6)


def test_judge_counts_only_families_where_a_heuristic_is_feasible():
  from jaxpapers.papers.pd_autoscale import study
  row = lambda m, f, meets, g: dict(method=m, family=f, meets=meets, gpus=g)
  base = [row("static", "a", "3/3", 6.0), row("kpa", "a", "3/3", 5.0),
          row("erlang", "a", "2/3", 4.0),  # cheaper but misses: not the bar
          row("static", "b", "0/3", 20.0), row("kpa", "b", "0/3", 19.0)]
  v = lambda ppo_rows: study.judge(None, base + ppo_rows, ["a", "b"])[0]
  # Family b: no heuristic feasible, not judged; PPO wins a -> holds.
  win = v([row("ppo", "a", "9/9", 4.5), row("ppo", "b", "0/9", 10.0)])
  assert win["verdict"] == "holds"
  assert [x["judged"] for x in win["per_family"]] == [True, False]
  # Fewer GPUs than the best feasible heuristic (5.0) but a miss, or a tie: no.
  assert v([row("ppo", "a", "8/9", 4.5), row("ppo", "b", "0/9", 1.0)])["verdict"] == (
      "does not hold at our scale")
  assert v([row("ppo", "a", "9/9", 5.0), row("ppo", "b", "9/9", 1.0)])["verdict"] == (
      "does not hold at our scale")
  only_b = study.judge(None, base[3:] + [row("ppo", "b", "9/9", 1.0)], ["b"])[0]
  assert only_b["verdict"] == "not judged (no heuristic feasible)"
