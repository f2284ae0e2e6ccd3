"""motor_adapters: arm physics against independent references, delays, discrete codes,
the frozen network in the high-level stage, lane independence, exact resume, loaders."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.papers.motor_adapters import analysis, arm, experiment, feedback, model
from jaxpapers.papers.motor_adapters import curve_fits, plots, rollout, tasks, training

P = arm.ArmParams()


def _config(arg):
  return config_lib.load("configs/motor_adapters.py:" + arg)


# The tests use the smoke config's closed loop, hyper-parameters and lane shapes (three
# kinds, one seed, one learning rate), so the jitted training programs they compile are
# the ones the smoke run and the resume test use: XLA compilation of the differentiated
# closed loop is what costs time here, not the steps.
SMOKE = _config("smoke")
ENV, HP = experiment.make_env(SMOKE), experiment.make_hp(SMOKE)
PRIM = jnp.asarray(tasks.primitive_paths(ENV.radius, ENV.move_steps, ENV.hold_steps))
CHUNK = SMOKE.train.chunk


# ----------------------------------------------------------------- arm physics

def _skeleton_only(damping, steps=2000, dt=1e-3):
  """Free skeleton (no muscles) from a fast initial velocity; energy per step."""
  def body(s, _):
    q, qd = s
    tau = -damping * qd
    qd = qd + dt * arm.skeleton_accel(P, q, qd, tau)
    q = q + dt * qd
    return (q, qd), arm.kinetic_energy(P, q, qd)
  _, e = jax.lax.scan(body, (jnp.array([0.8, 1.2]), jnp.array([2.0, -3.0])), None,
                      length=steps)
  return np.asarray(e)


def test_energy_conserved_without_damping_and_decays_with_it():
  free = _skeleton_only(0.0)
  # Coriolis terms consistent with M(q): kinetic energy is conserved (to Euler error).
  assert np.max(np.abs(free / free[0] - 1)) < 2e-2
  damped = _skeleton_only(0.5)
  assert damped[-1] < 0.2 * damped[0]
  assert np.all(np.diff(damped) <= 1e-6 * damped[0])  # never grows


def test_skeleton_matches_euler_lagrange_by_autodiff():
  """Independent reference: qdd from d/dt dT/dqd - dT/dq = tau with T = 1/2 qd M qd."""
  def t_fn(q, qd):
    c2 = jnp.cos(q[1])
    # written from scratch with link-centre velocities, not from mass_matrix
    v1 = P.l1g * qd[0]
    e = jnp.array([P.l1 * jnp.cos(q[0]), P.l1 * jnp.sin(q[0])])
    del e, c2
    vx = -P.l1 * jnp.sin(q[0]) * qd[0] - P.l2g * jnp.sin(q[0] + q[1]) * (qd[0] + qd[1])
    vy = P.l1 * jnp.cos(q[0]) * qd[0] + P.l2g * jnp.cos(q[0] + q[1]) * (qd[0] + qd[1])
    return (0.5 * P.m1 * v1**2 + 0.5 * P.i1 * qd[0] ** 2 + 0.5 * P.m2 * (vx**2 + vy**2)
            + 0.5 * P.i2 * (qd[0] + qd[1]) ** 2)
  @jax.jit
  @jax.vmap
  def terms(q, qd, tau):  # one compiled program for all samples (op-by-op is slow)
    return (jax.hessian(t_fn, argnums=1)(q, qd),
            jax.jacfwd(jax.grad(t_fn, argnums=1), argnums=0)(q, qd),
            jax.grad(t_fn, argnums=0)(q, qd), arm.skeleton_accel(P, q, qd, tau))
  rng = np.random.default_rng(0)
  q, qd, tau = (rng.normal(size=(5, 2)).astype(np.float32) for _ in range(3))
  mm, mixed, dtdq, ours = (np.asarray(x, np.float64) for x in terms(q, qd, tau))
  for i in range(5):
    ref = np.linalg.solve(mm[i], tau[i] - mixed[i] @ qd[i] + dtdq[i])
    np.testing.assert_allclose(ours[i], ref, rtol=1e-4, atol=1e-4)


def test_joint_limits_hold_under_full_flexion():
  u = jnp.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])  # all flexors on
  s = arm.rest_state(P, jnp.array([1.0, 1.5]))
  def body(s, _):
    s = arm.step(P, s, u, 0.01, 1)
    return s, (s.q, s.qd)
  _, (q, qd) = jax.lax.scan(body, s, None, length=300)
  q, qd = np.asarray(q), np.asarray(qd)
  hi = np.asarray(P.q_hi)
  assert np.all(q <= hi + 1e-6) and np.all(q >= -1e-6)
  at = q >= hi - 1e-6
  assert at[-1].all()  # both joints driven to their upper limits
  assert np.all(qd[at] <= 0)  # no velocity pushing further past a limit


def test_moment_arm_signs_and_derivative_of_length():
  grid = np.stack(np.meshgrid(np.linspace(0, np.deg2rad(135), 7),
                              np.linspace(0, np.deg2rad(155), 7)), -1).reshape(-1, 2)
  for q in grid:
    q = jnp.asarray(q, jnp.float32)
    _, _, r = arm.musculotendon(P, q, jnp.zeros(2))
    r = np.asarray(r)
    for m in arm.FLEXORS_SHOULDER:
      assert r[0, m] < 0
    for m in arm.EXTENSORS_SHOULDER:
      assert r[0, m] > 0
    for m in arm.FLEXORS_ELBOW:
      assert r[1, m] < 0
    for m in arm.EXTENSORS_ELBOW:
      assert r[1, m] > 0
    assert np.all(r[0, 2:4] == 0)  # monoarticular elbow muscles: no shoulder moment
    # NumPy central differences of the length polynomial
    eps = 1e-3
    for j in range(2):
      dq = np.zeros(2, np.float32)
      dq[j] = eps
      lp = np.asarray(arm.musculotendon(P, q + dq, jnp.zeros(2))[0], np.float64)
      lm = np.asarray(arm.musculotendon(P, q - dq, jnp.zeros(2))[0], np.float64)
      np.testing.assert_allclose((lp - lm) / (2 * eps), r[j], atol=2e-4)
  # A flexor's force flexes: positive torque
  s = arm.ArmState(jnp.array([0.8, 1.2]), jnp.zeros(2), jnp.array([1.0, 0.001, 0.001,
                                                                    0.001, 0.001, 0.001]))
  tau, _ = arm.joint_torque(P, s)
  assert tau[0] > 0


def test_force_velocity_inverts_thelen_equation():
  a = 0.6
  w = (0.25 + 0.75 * a) * P.v_max
  v = np.linspace(-0.99, 3.0, 41) * w  # fibre velocity in optimal lengths / s
  f = np.asarray(arm.force_velocity(P, jnp.asarray(v, jnp.float32), a), np.float64)
  # Thelen (2003) eq. 6 evaluated forward (NumPy): V(f)
  conc = w * (f - 1) / (1 + f / P.a_f)
  ecc = w * (f - 1) * (P.f_len - 1) / ((2 + 2 / P.a_f) * (P.f_len - f))
  back = np.where(f <= 1, conc, ecc)
  np.testing.assert_allclose(back, v, rtol=2e-4, atol=2e-4 * w)
  np.testing.assert_allclose(arm.force_velocity(P, jnp.float32(0.0), a), 1.0, atol=1e-6)
  assert float(arm.force_velocity(P, jnp.float32(-w), a)) == pytest.approx(0.0, abs=1e-6)
  assert np.all(np.diff(f) >= 0) and f.max() < P.f_len


# ----------------------------------------------------------------- delays

@pytest.mark.parametrize("delay", [0, 1, 3, 5])
def test_delay_buffer_shifts_by_exactly_the_configured_steps(delay):
  obs = jnp.arange(20, dtype=jnp.float32)[:, None] * jnp.array([[1.0, -2.0]])
  buf = feedback.init(obs[0], delay)
  out = []
  for t in range(20):
    o, buf = feedback.push(buf, obs[t])
    out.append(np.asarray(o))
  expect = np.asarray(obs)[np.maximum(np.arange(20) - delay, 0)]
  np.testing.assert_array_equal(np.stack(out), expect)


def test_bad_delay_raises():
  with pytest.raises(ValueError, match="delay"):
    feedback.init(jnp.zeros(2), -1)


# ----------------------------------------------------------------- model

def _params(kind, seed=0):
  p = model.init(jax.random.key(seed), kind, rollout.IN_DIM, HP["hidden"], HP["adapters"],
                 tasks.N_PRIMITIVES, HP["rank"], HP["code_noise"])
  # give the banks non-zero content so the checks below are not vacuous
  k = jax.random.split(jax.random.key(seed + 1), 3)
  p["bank"]["a"] = 0.3 * jax.random.normal(k[0], p["bank"]["a"].shape) * (kind == "adapters")
  p["bank"]["v"] = 0.3 * jax.random.normal(k[1], p["bank"]["v"].shape) * (kind == "lowrank")
  return p


def test_selection_is_discrete_at_evaluation_and_only_that_adapter_matters():
  logits = jax.random.normal(jax.random.key(0), (5, HP["adapters"]))
  code = model.hard_code(logits)
  assert set(np.unique(np.asarray(code))) <= {0.0, 1.0}
  np.testing.assert_array_equal(np.asarray(code).sum(-1), 1.0)
  st = model.gumbel_straight_through(jax.random.key(1), logits, 1.0)
  np.testing.assert_allclose(np.asarray(st).sum(-1), 1.0, atol=1e-6)
  assert np.all(np.isclose(np.asarray(st), 0) | np.isclose(np.asarray(st), 1))
  # paths driven with adapter 3 throughout are bitwise unchanged when the other
  # adapters change (lanes: p, p with adapters 5 and 0 changed, p with adapter 3
  # changed), through the evaluation program of the smoke run (validation paths +
  # letters)
  p = _params("adapters")
  q = jax.tree.map(lambda x: x, p)
  q["bank"]["a"] = p["bank"]["a"].at[5].add(1.0)
  q["bank"]["c"] = p["bank"]["c"].at[0].add(1.0)
  r = jax.tree.map(lambda x: x, p)
  r["bank"]["a"] = p["bank"]["a"].at[3].add(0.1)
  lanes = jax.tree.map(lambda *x: jnp.stack(x), p, q, r)
  _, ids, (_, tg, m, q0) = experiment.evaluation_paths(SMOKE, ENV)
  opt = jnp.broadcast_to(jax.nn.one_hot(3, HP["adapters"]), (3,) + ids.shape + (HP["adapters"],))
  hand = np.asarray(training.eval_with_options_lanes(
      lanes, jnp.zeros(3, jnp.int32), opt, tg, m, q0, training.lane_key(0, "oracle"),
      env=ENV, hp=HP)["hand"])
  np.testing.assert_array_equal(hand[1], hand[0])
  assert not np.array_equal(hand[2], hand[0])


def test_code_starts_non_informative_and_is_balanced_by_the_switch_loss():
  for kind in ("adapters", "lowrank"):  # every adapter equally likely at the start
    code = np.asarray(_params(kind)["code"])
    assert code.shape == (tasks.N_PRIMITIVES, HP["adapters"])
    assert np.abs(code).max() < 0.2 and np.abs(code).max() > 0  # noise only breaks ties
  np.testing.assert_array_equal(_params("multitask")["code"], 0)
  # Switch-style load balancing with capacity one, against a NumPy evaluation of
  # K sum_k f_k P_k with f_k = max(n_k - 1, 0) / N
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(6, 4)).astype(np.float32)
  prob = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  over = np.maximum(np.eye(4)[logits.argmax(-1)].sum(0) - 1, 0) / 6
  assert over.sum() > 0  # six primitives on four adapters: some crowding
  assert float(model.balance_loss(jnp.asarray(logits))) == pytest.approx(
      4 * np.sum(over * prob.mean(0)), rel=1e-5)
  assert float(model.balance_loss(jnp.zeros((4, 4)))) == pytest.approx(0.75)  # all on 0
  distinct = 3 * jnp.eye(4)[:, ::-1][:3]  # three primitives, three different adapters
  assert float(model.balance_loss(distinct)) == 0.0
  np.testing.assert_array_equal(jax.grad(model.balance_loss)(distinct), 0)  # settled
  crowded = jnp.asarray(np.tile([3.0, 0.0, 0.0, 0.0], (4, 1)), jnp.float32)
  g = np.asarray(jax.grad(model.balance_loss)(crowded))
  assert np.all(g[:, 0] > 0) and np.all(g[:, 1:] < 0)  # descent leaves the crowded one
  # temperature anneals geometrically from tau_start to tau_end over stage 1
  hp = dict(HP, steps=100, tau_start=4.0, tau_end=0.25)
  assert float(training.temperature(hp, 0)) == pytest.approx(4.0)
  assert float(training.temperature(hp, 50)) == pytest.approx(1.0, rel=1e-5)
  assert float(training.temperature(hp, 100)) == pytest.approx(0.25, rel=1e-5)
  # the code's learning rate decays (cosine) to zero over stage 1
  hp = dict(hp, code_lr=0.2, code_frac=1.0)
  assert [float(training.code_lr(hp, s)) for s in (0, 50, 100)] == pytest.approx(
      [0.2, 0.1, 0.0], abs=1e-7)
  hp = dict(hp, code_frac=0.5)  # ... or over the first half, then frozen
  assert [float(training.code_lr(hp, s)) for s in (0, 25, 50, 80)] == pytest.approx(
      [0.2, 0.1, 0.0, 0.0], abs=1e-7)
  # the network's rate: cosine from 1x to 0 over stage 1 with lr_decay, else constant
  assert [float(training.lr_factor(dict(hp, lr_decay=True), s))
          for s in (0, 25, 50, 75, 100)] == pytest.approx(
              [1.0, (1 + np.sqrt(0.5)) / 2, 0.5, (1 - np.sqrt(0.5)) / 2, 0.0], abs=1e-6)
  assert float(training.lr_factor(dict(hp, lr_decay=False), 70)) == 1.0


def test_low_rank_bank_has_rank_at_most_r():
  p = _params("lowrank")
  a, b = model.adapter_matrices(p, rollout.IN_DIM)
  for k in range(a.shape[0]):
    s = analysis.singular_values(np.concatenate([a[k], b[k]], 0))
    assert np.sum(s > 1e-5 * s[0]) <= HP["rank"]


def test_effective_rank_and_overlap_closed_forms():
  s = np.array([1.0, 1.0, 0.0, 0.0])
  assert analysis.participation_ratio(s) == pytest.approx(2.0)
  assert analysis.participation_ratio(np.ones(7)) == pytest.approx(7.0)
  assert analysis.participation_ratio([2.0, 0.0]) == pytest.approx(1.0)
  assert analysis.rank_at([4.0, 1.0, 0.1], 0.9) == 1  # 16 / 17.01 > 0.9
  assert analysis.rank_at([3.0, 1.0, 0.1], 0.9) == 2  # 9 / 10.01 < 0.9
  assert analysis.rank_at([1.0, 1.0, 1.0], 0.9) == 3
  e = np.eye(6)
  assert analysis.overlap(e[:, :2], e[:, :2]) == pytest.approx(1.0)
  assert analysis.overlap(e[:, :2], e[:, 2:4]) == pytest.approx(0.0)
  m = np.outer(e[1], e[4]) * 3 + np.outer(e[0], e[2])
  u = analysis.output_subspace(m, 1)  # h @ m reaches e4 most strongly
  assert abs(u[4, 0]) == pytest.approx(1.0)


def test_readout_projection_activity_overlap_and_weight_change_closed_forms():
  # Issue 49's nulls. Two rank-one adapters whose outputs share a readout direction
  # (e0) and differ outside it (e2 vs e3): raw overlap (v1 . v2)^2 = 1/4, half of each
  # output direction lies in the readout span, and with the span projected out the
  # outputs are orthogonal (overlap 0).
  e = np.eye(8)
  v1, v2 = (e[0] + e[2]) / np.sqrt(2), (e[0] + e[3]) / np.sqrt(2)
  mats = np.stack([np.outer(e[5], v1), 2 * np.outer(e[6], v2)])
  readout = e[:, :2] @ np.array([[1.0, 2.0], [0.5, -1.0]])  # spans {e0, e1}, not orthonormal
  g = analysis.adapter_geometry(mats, [0, 1], 1, readout=readout)
  assert g["overlap"] == pytest.approx(0.25)
  assert g["readout_frac"] == pytest.approx(0.5)
  assert g["overlap_noreadout"] == pytest.approx(0.0, abs=1e-12)
  assert g["readout_frac_chance"] == pytest.approx(2 / 8)
  assert g["overlap_noreadout_chance"] == pytest.approx(1 / 6)
  # activity subspaces: task 0 varies along e0 + e2, task 1 along e0 + e3 (plus a
  # constant offset, which centring removes)
  t = np.linspace(-1, 1, 11)[:, None]
  hs = np.stack([t * v1 + 3 * e[7], t * v2 - 2 * e[7]])[:, None]  # (tasks, 1, T, H)
  a = analysis.activity_geometry(hs, 1, readout=readout)
  assert a["act_overlap"] == pytest.approx(0.25)
  assert a["act_overlap_noreadout"] == pytest.approx(0.0, abs=1e-12)
  assert a["act_pr"] == pytest.approx(1.0)
  same = analysis.activity_geometry(np.stack([hs[0], 2 * hs[0]]), 1)
  assert same["act_overlap"] == pytest.approx(1.0)
  # positive control (issue 49): planted subspaces overlap by shared^2 pairwise (from
  # the closed form U_i^T U_j = shared I_r); `replant` keeps the spectrum and writes the
  # top-r directions into the planted basis; the study's metrics read the planted value
  rng = np.random.default_rng(1)
  for shared in (0.0, 0.5, 1.0):
    bases = analysis.planted_bases(32, 5, 2, shared, seed=3)
    for i in range(5):
      np.testing.assert_allclose(bases[i].T @ bases[i], np.eye(2), atol=1e-12)
      for j in range(i + 1, 5):
        assert np.sum((bases[i].T @ bases[j]) ** 2) / 2 == pytest.approx(shared**2)
  m = rng.normal(size=(40, 32)) * 0.8 ** np.arange(32)
  re = analysis.replant(m, bases[0], seed=4)
  np.testing.assert_allclose(analysis.singular_values(re), analysis.singular_values(m),
                             rtol=1e-10)
  top = analysis.output_subspace(re, 2)
  assert analysis.overlap(top, bases[0]) == pytest.approx(1.0)
  mats = rng.normal(size=(6, 32, 32)) * 0.7 ** np.arange(32)
  hs6 = rng.normal(size=(5, 3, 20, 32)) * 0.7 ** np.arange(32)
  for shared in (0.0, 0.5):
    c = analysis.separated_control(mats, range(5), hs6, 2, shared=shared)
    assert c["overlap"] == pytest.approx(shared**2, abs=1e-9)
    assert c["act_overlap"] == pytest.approx(shared**2, abs=1e-9)
  assert set(analysis.separated_control(mats, range(5), hs6[:, :, :, :8], 2)) == {
      "planted"}  # H = 8 < (5 + 1) 2: no room for separate blocks
  # participation ratio of a weight change, against the closed form, and the batched
  # version the training-curve hook uses against the one-matrix version
  st = analysis.matrix_rank_stats(np.diag([3.0, 4.0, 0.0]))
  assert st["pr"] == pytest.approx(625 / 337) and st["rank90"] == 2
  rng = np.random.default_rng(0)
  stack = rng.normal(size=(2, 3, 5, 5)) * np.array([1.0, 0.1, 0.0, 0.0, 0.0])
  np.testing.assert_allclose(
      experiment._batched_pr(stack),
      [[analysis.participation_ratio(analysis.singular_values(m)) for m in row]
       for row in stack], rtol=1e-10)


def test_parameter_matched_baseline_and_per_kind_grids():
  cfg = _config("steps=100,chunk=100")
  lanes = experiment.stage1_lanes(cfg)
  for kind in cfg.model.kinds:
    grid = [lr for k, _, lr in lanes if k == kind and _ == cfg.seed]
    assert tuple(grid) == experiment.kind_lrs(cfg, kind) and len(grid) >= 3
  # the policy stage's grid too: a chosen rate can only be interior on >= 3 points
  assert len(cfg.optim.policy_lrs) >= 3
  r3 = _config("round3")  # the prepared round-3 study: every grid >= 3 points too
  assert r3.optim.lr_decay and r3.train.paired_eval and r3.model.big_hidden
  assert all(len(experiment.kind_lrs(r3, k)) >= 3 for k in r3.model.kinds)
  assert len(r3.optim.big_lrs) >= 3 and len(r3.optim.policy_lrs) >= 3
  # round 4: 5 seeds, round 3's (interior) stage-1 grids, longer stages, and the policy
  # grid extended past both of round 3's edges (its picks sat on both)
  r4 = _config("round4")
  assert r4.train.seeds == 5 and r4.optim.lr_decay and r4.train.paired_eval
  assert r4.train.steps > r3.train.steps and r4.train.policy_steps > r3.train.policy_steps
  assert all(experiment.kind_lrs(r4, k) == experiment.kind_lrs(r3, k)
             for k in r4.model.kinds) and r4.optim.big_lrs == r3.optim.big_lrs
  p3, p4 = sorted(r3.optim.policy_lrs), sorted(r4.optim.policy_lrs)
  assert len(p4) >= 5 and p4[0] < p3[0] and p4[-1] > p3[-1]
  assert _config("round4,seeds=1").train.seeds == 1  # explicit args still apply on top
  big = experiment.big_config(cfg)
  assert big.model.kinds == ("multitask",) and big.model.big_hidden == 0
  count = lambda c, kind: model.used_param_count(  # noqa: E731
      jax.eval_shape(lambda: model.init(jax.random.key(0), kind, rollout.IN_DIM,
                                        c.model.hidden, c.model.adapters, 14,
                                        c.model.rank, 0.01)), kind, 14, rollout.IN_DIM)
  n_adapters, n_big, n_small = (count(cfg, "adapters"), count(big, "multitask"),
                                count(cfg, "multitask"))
  assert abs(n_big / n_adapters - 1) < 0.01 and n_small < n_adapters / 4


def test_flatness_rule_reads_the_seed_mean_curve_and_policy_grid_marks_the_pick():
  """Round 4's rule: the fall of the seed-MEAN curve over the last 200 steps (hand
  values; the mean of the per-seed falls would read 0.375, not 1/3)."""
  step = [600, 700, 800, 900, 1000]
  a = {"kind": "adapters", "policy_lr": 0.01, "curve": {"step": step,
       "err_cm": [9.0, 9.0, 2.0, 1.5, 1.0]},
       "policy_val_all_lrs": {"0.001": 3.0, "0.01": 1.0, "0.1": 2.0}}
  b = {"kind": "adapters", "policy_lr": 0.01, "curve": {"step": step,
       "err_cm": [9.0, 9.0, 4.0, 3.5, 3.0]},
       "policy_val_all_lrs": {"0.001": 5.0, "0.01": 2.0, "0.1": 2.0}}
  assert plots.mean_tail_change([a, b]) == pytest.approx(1 / 3)
  assert plots.mean_tail_change([a, b], window=100) == pytest.approx(0.5 / 2.5)
  assert np.isnan(plots.mean_tail_change([a], window=1000))  # too short a curve
  (row,) = plots.policy_grid_rows([a, b])
  assert row["picked"] == "0.01" and list(row)[2:] == ["plr 0.001", "plr 0.01", "plr 0.1"]
  assert row["plr 0.001"] == "4 +- 1" and row["plr 0.1"] == "2 +- 0"


def test_flatness_line_fit_reads_slope_at_window_end():
  """The README's line fit (review rev49): on an exact line the fall per 200 steps is
  -200 * slope / (value at the window's end) with zero residual; points outside the
  window do not count; noise shows up in the residual sd, not only in the slope."""
  steps = np.arange(100, 3001, 100)
  y = 1.0 - 1e-4 * steps  # 0.7 at 3000; fall per 200 steps 0.02 / 0.7
  y_out = np.where(steps < 2500, 50.0, y)  # junk before the window
  fall, sd = curve_fits.tail_fit(steps, y_out, 2500, 3000)
  assert fall == pytest.approx(200e-4 / 0.7 * 100) and sd == pytest.approx(0, abs=1e-9)
  wiggle = y + np.where(steps % 200 == 0, 0.01, -0.01)
  fall_n, sd_n = curve_fits.tail_fit(steps, wiggle, 2500, 3000)
  assert sd_n > 0.5 and abs(fall_n - fall) < 1.0


# ----------------------------------------------------------------- training stages

def _lanes(spec):
  return training.init_lanes(spec, ENV, HP, tasks.N_PRIMITIVES)


def test_lanes_spread_over_8_devices_match_one_device():
  # Issue 51: train_chunk splits the lanes (kind x seed x lr) over every device with
  # core.sharding.spread. Three lanes (on 3 of the 8 devices) must give the numbers of the previous
  # 1-device program, jax.jit(jax.vmap(one lane)), compiled with the same options.
  assert jax.device_count() == 8
  st0 = _lanes([("adapters", 0, 1e-2), ("lowrank", 0, 1e-2), ("multitask", 1, 1e-2)])
  one = jax.jit(jax.vmap(training.train_lane(ENV, HP, CHUNK), in_axes=(0, None, None)))
  ref = one.lower(st0, jnp.int32(0), PRIM).compile(
      compiler_options=training._FAST)(st0, jnp.int32(0), PRIM)
  assert len(jax.tree.leaves(ref[0]["params"])[0].devices()) == 1
  out = training.train_chunk(st0, jnp.int32(0), PRIM, env=ENV, hp=HP, length=CHUNK)
  leaf = jax.tree.leaves(out[0]["params"])[0]
  assert leaf.shape[0] == 3 and len(leaf.devices()) == 3  # one lane per device
  for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(out)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
  assert np.ptp(np.asarray(ref[1]["loss"])) > 0   # three different lanes


def test_train_chunk_masks_unused_leaves_and_lanes_are_independent():
  spec = [("adapters", 0, 1e-2), ("lowrank", 0, 1e-2), ("multitask", 1, 1e-2)]
  st0 = _lanes(spec)
  before = jax.tree.map(np.asarray, st0["params"])
  st, m = training.train_chunk(st0, jnp.int32(0), PRIM, env=ENV, hp=HP, length=CHUNK)
  after = jax.tree.map(np.asarray, st["params"])
  assert np.all(np.isfinite(np.asarray(m["loss"])))
  bank_a, bank_u = after["bank"]["a"], after["bank"]["u"]
  np.testing.assert_array_equal(bank_u[0], before["bank"]["u"][0])  # full: u,v frozen
  np.testing.assert_array_equal(after["bank"]["v"][0], 0)
  np.testing.assert_array_equal(bank_a[1], 0)  # low rank: a, b stay zero
  np.testing.assert_array_equal(after["bank"]["b"][1], 0)
  for leaf in ("a", "b", "c", "u", "v"):  # multitask: no bank
    np.testing.assert_array_equal(after["bank"][leaf][2], before["bank"][leaf][2])
  np.testing.assert_array_equal(after["code"][2], before["code"][2])
  assert not np.array_equal(bank_a[0], 0)  # the full-rank bank did learn
  # the code logits are learned by both adapter kinds (and stay zero for multitask)
  for lane in (0, 1):
    assert not np.array_equal(after["code"][lane], before["code"][lane])
  np.testing.assert_array_equal(np.asarray(st["moves"])[2], 0)
  # the multitask lane gives the same numbers beside other lanes at another position
  # (same lane count: the smoke run's compiled program is reused)
  other = [("multitask", 1, 1e-2), ("lowrank", 3, 3e-2), ("adapters", 5, 1e-3)]
  moved, _ = training.train_chunk(_lanes(other), jnp.int32(0), PRIM, env=ENV, hp=HP,
                                  length=CHUNK)
  for x, y in zip(jax.tree.leaves(moved["params"]), jax.tree.leaves(st["params"])):
    np.testing.assert_allclose(np.asarray(x)[0], np.asarray(y)[2], rtol=1e-5, atol=1e-6)
  # ... and alone (one lane: another lane count, so a result that depended on the
  # population size would show here; costs one compile)
  alone, _ = training.train_chunk(_lanes(spec[2:]), jnp.int32(0), PRIM, env=ENV, hp=HP,
                                  length=CHUNK)
  for x, y in zip(jax.tree.leaves(alone["params"]), jax.tree.leaves(st["params"])):
    np.testing.assert_allclose(np.asarray(x)[0], np.asarray(y)[2], rtol=1e-5, atol=1e-6)


def test_frozen_network_gets_no_update_in_the_high_level_stage():
  spec = [("adapters", 0, 1e-2), ("lowrank", 0, 1e-2), ("multitask", 0, 1e-2)]
  net = _lanes(spec)["params"]
  net["bank"]["a"] = net["bank"]["a"] + 0.1  # a non-trivial network
  # the policy's training pool with the smoke run's shapes (same compiled program)
  ids = tasks.random_sequences(0, SMOKE.data.pool, SMOKE.data.segments)
  f, tg, m = experiment.drawing_set(ENV, ids)
  q0, _ = rollout.random_starts(ENV, jax.random.key(0), len(ids))
  ps = training.init_policy_lanes(spec, f.shape[-1], SMOKE.model.policy_hidden,
                                  HP["adapters"], 1.0)
  p0 = jax.tree.map(np.asarray, ps["params"])
  net_before = jax.tree.map(np.asarray, net)
  ps2, met = training.policy_chunk(ps, net, jnp.int32(0), f, tg, q0, env=ENV, hp=HP,
                                   length=CHUNK)
  # the gradient of the stage-2 loss with respect to the network is exactly zero at
  # every step (policy_chunk computes it beside the policy's gradient)
  np.testing.assert_array_equal(np.asarray(met["net_grad_max"]), 0.0)
  assert set(ps2) == {"params", "opt", "lr", "seed", "kid"}  # no network in the state
  for x, y in zip(jax.tree.leaves(net), jax.tree.leaves(net_before)):
    np.testing.assert_array_equal(np.asarray(x), y)
  assert any(not np.array_equal(np.asarray(x), y)
             for x, y in zip(jax.tree.leaves(ps2["params"]), jax.tree.leaves(p0)))
  assert np.all(np.isfinite(np.asarray(met["err_cm"])))
  # the multitask baseline's policy never picks the padding options, even when its
  # logits favour them
  pp = jax.tree.map(lambda x: x, ps2["params"])
  pp["b2"] = pp["b2"].at[:, HP["tasks"]:].add(100.0)
  opts = np.asarray(training.policy_options_lanes(pp, ps2["kid"], f, n_tasks=HP["tasks"]))
  assert np.all(opts[2].argmax(-1) < HP["tasks"])
  assert np.all(opts[0].argmax(-1) >= HP["tasks"])  # the adapter kinds may use them


# ----------------------------------------------------------------- data

def test_primitive_shapes_end_where_they_should():
  pp = tasks.primitive_paths(0.1, 20, 5)
  assert pp.shape == (tasks.N_PRIMITIVES, 25, 2)
  np.testing.assert_allclose(pp[tasks.NAMES.index("reach90"), -1], [0, 0.1], atol=1e-6)
  np.testing.assert_allclose(pp[tasks.NAMES.index("arc0"), -1], [0.1, 0], atol=1e-6)
  np.testing.assert_allclose(pp[tasks.NAMES.index("loop_cw"), -1], [0, 0], atol=1e-6)
  # arc0 bulges to the left of travel (+y); loop_ccw starts moving +x
  assert pp[tasks.NAMES.index("arc0"), :, 1].max() == pytest.approx(0.05, abs=1e-3)
  assert pp[tasks.NAMES.index("loop_ccw"), 3, 0] > 0


def test_drawings_loader_csv_npz_and_errors(tmp_path):
  path = tmp_path / "d.csv"
  with open(path, "w") as f:
    f.write("drawing,segment,x,y\n")
    for i in range(5):  # 'L': down 8 cm then right 8 cm
      f.write(f"L,0,0,{-0.02 * (i + 1)}\n")
    for i in range(5):
      f.write(f"L,1,{0.02 * (i + 1)},-0.1\n")
  names, dense, mask = tasks.load_drawings(str(path), 16)
  assert names == ["L"] and dense.shape == (1, 2, 16, 2) and mask.all()
  np.testing.assert_allclose(dense[0, 0, -1], [0, -0.1], atol=1e-6)
  np.testing.assert_allclose(dense[0, 1, -1], [0.1, 0.0], atol=1e-6)  # relative to start
  npz = tmp_path / "d.npz"
  np.savez(npz, paths=dense)
  n2, d2, m2 = tasks.load_drawings(str(npz), 16)
  np.testing.assert_allclose(d2, dense, atol=1e-6)
  with pytest.raises(FileNotFoundError, match="nope.csv"):
    tasks.load_drawings(str(tmp_path / "nope.csv"), 16)
  bad = tmp_path / "bad.csv"
  bad.write_text("a,b\n1,2\n")
  with pytest.raises(ValueError, match="drawing,segment,x,y"):
    tasks.load_drawings(str(bad), 16)
  np.savez(tmp_path / "bad.npz", paths=np.zeros((2, 3)))
  with pytest.raises(ValueError, match="shape"):
    tasks.load_drawings(str(tmp_path / "bad.npz"), 16)
  np.savez(tmp_path / "empty.npz", paths=np.zeros((0, 2, 3, 2)))
  with pytest.raises(ValueError, match="N, S, P >= 1"):
    tasks.load_drawings(str(tmp_path / "empty.npz"), 16)
  nan = dense.copy()
  nan[0, 1, 3, 0] = np.nan
  np.savez(tmp_path / "nan.npz", paths=nan)
  with pytest.raises(ValueError, match="NaN"):
    tasks.load_drawings(str(tmp_path / "nan.npz"), 16)
  (tmp_path / "broken.npz").write_bytes(b"not a zip archive")
  with pytest.raises(ValueError, match="not a readable npz"):
    tasks.load_drawings(str(tmp_path / "broken.npz"), 16)
  (tmp_path / "nan.csv").write_text("drawing,segment,x,y\nL,0,0,-0.02\nL,0,nan,-0.04\n")
  with pytest.raises(ValueError, match="line 3: x, y must be finite"):
    tasks.load_drawings(str(tmp_path / "nan.csv"), 16)
  (tmp_path / "binary.csv").write_bytes(bytes(range(128, 256)))
  with pytest.raises(ValueError, match="not a text CSV"):
    tasks.load_drawings(str(tmp_path / "binary.csv"), 16)
  with pytest.raises(ValueError, match="is not a file"):
    tasks.load_drawings(str(tmp_path), 16)


@pytest.mark.parametrize("name,error", [("missing.csv", FileNotFoundError),
                                        ("nan.csv", ValueError)])
def test_bad_drawings_file_fails_before_anything_trains(tmp_path, name, error):
  # Issue 49 item 5: the drawings file is read and checked first; a bad one used to
  # surface only after both training stages had run.
  if name == "nan.csv":
    (tmp_path / name).write_text("drawing,segment,x,y\nL,0,inf,0\n")
  work = tmp_path / "work"
  cfg = _config(f"smoke,drawings={tmp_path / name}")
  with pytest.raises(error, match=name):
    experiment.train_and_evaluate(cfg, str(work))
  assert not work.exists() or not any(work.iterdir())  # nothing trained or written


# ----------------------------------------------------------------- runs

def test_exact_resume(tmp_path):
  """The smoke run (every kind; 4 primitive and 4 policy steps, checkpoints every 2),
  killed after a checkpoint in stage 1 and again in stage 2, then resumed to the end."""
  from tests import _runs
  steps, total = SMOKE.train.steps, SMOKE.train.steps + SMOKE.train.policy_steps
  assert SMOKE.train.chunk < steps and SMOKE.train.chunk < SMOKE.train.policy_steps
  full, part = tmp_path / "full", tmp_path / "part"
  experiment.train_and_evaluate(SMOKE, str(full))
  for stop in (SMOKE.train.chunk, steps + SMOKE.train.chunk):
    assert "interrupted_at" in experiment.train_and_evaluate(SMOKE, str(part),
                                                             stop_after=stop)
  experiment.train_and_evaluate(SMOKE, str(part))
  for stage, n in (("primitives", steps), ("policy", total - steps)):
    s1, a = _runs.final_state(full / stage)
    s2, b = _runs.final_state(part / stage)
    assert s1 == s2 == n
    fa, fb = _runs.flat(a), _runs.flat(b)
    for k in fa:
      np.testing.assert_array_equal(fa[k], fb[k], err_msg=f"{stage}{k}")
  with open(full / "summary.json") as f:
    a = json.load(f)["rows"]
  with open(part / "summary.json") as f:
    b = json.load(f)["rows"]
  for key in ("letters_cm", "prim_test_cm", "task_to_option", "code_init", "code_moves"):
    assert [r[key] for r in a] == [r[key] for r in b], key
  _runs.assert_same_metrics(part, full)


def test_bad_config_values_raise():
  with pytest.raises(ValueError, match="multiple of chunk"):
    _config("steps=7,chunk=2")
  with pytest.raises(ValueError, match="unknown model kind"):
    experiment._check(_config("smoke,kinds=adapters+nope"))
