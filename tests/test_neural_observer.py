"""Tests for neural_observer: integrators, sector/Lipschitz bounds, certificates (accepted
ones verified independently, an unstable observer rejected), baseline gains, EKF, the
stage-1 guarantee computations and the CSV loader."""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from jaxpapers.papers.neural_observer import baselines
from jaxpapers.papers.neural_observer import data_io
from jaxpapers.papers.neural_observer import lmi
from jaxpapers.papers.neural_observer import observer
from jaxpapers.papers.neural_observer import plants


def _linear_plant(base):
  """`base` with its nonlinearity switched off (for closed-form references)."""
  return dataclasses.replace(base, G=np.zeros_like(base.G),
                             phi=lambda x: jnp.zeros((base.G.shape[1],)))


def test_rk4_matches_matrix_exponential():
  for name in ("flexible_joint", "x29"):
    p = _linear_plant(plants.make_plant(name))
    x0 = jnp.asarray(np.linspace(0.2, -0.3, p.nx), jnp.float32)
    dt, T = 0.04, 100
    xs = plants.simulate(p, x0, jnp.zeros((T, p.nu)), jnp.zeros((T, p.nd)), dt)
    ref = np.stack([scipy.linalg.expm(p.A * dt * k) @ np.asarray(x0) for k in range(T)])
    np.testing.assert_allclose(np.asarray(xs), ref, atol=2e-5)


def test_pendulum_small_angle_and_constant_input():
  # Undamped small-angle pendulum: theta(t) = theta0 cos(w t), w = sqrt(g/l) = 2.
  p = dataclasses.replace(plants.make_plant("pendulum"), A=np.array([[0.0, 1.0],
                                                                     [0.0, 0.0]]))
  x0 = jnp.array([1e-3, 0.0])
  T, dt = 200, 0.02
  xs = plants.simulate(p, x0, jnp.zeros((T, 1)), jnp.zeros((T, 1)), dt)
  t = np.arange(T) * dt
  np.testing.assert_allclose(np.asarray(xs[:, 0]), 1e-3 * np.cos(2.0 * t), atol=1e-8)


def test_tanh_slope_sector_bound_on_dense_grid():
  a, q = np.meshgrid(np.linspace(-6, 6, 601), np.linspace(-6, 6, 601))
  w = np.tanh(a + q) - np.tanh(a)
  assert np.max(w * (w - q)) <= 1e-12  # w in the sector [0, q]: w (w - q) <= 0
  # and the bound is tight near the origin (slope 1), so it is not vacuous
  assert np.min(w * (w - q)) < -1.0


@pytest.mark.parametrize("name", list(plants.PLANTS))
def test_plant_increment_bounds(name):
  p = plants.make_plant(name)
  rng = np.random.default_rng(0)
  box = p.x_box * (2.5 / 1.5 if name == "van_der_pol" else 3.0)
  x = rng.uniform(-1, 1, (5000, p.nx)) * box
  xh = rng.uniform(-1, 1, (5000, p.nx)) * box
  dphi = np.asarray(jax.vmap(p.phi)(x) - jax.vmap(p.phi)(xh))
  e = x - xh
  bound = np.einsum("na,jab,nb->nj", e, p.Q, e)
  assert np.all(dphi ** 2 <= bound + 1e-5)


def _certified_pendulum(width=6, alpha=0.1, scale=0.3):
  p = plants.make_plant("pendulum")
  L, _ = lmi.design_gain(p.Abar, p.Cbar, p.Gbar, p.Qbar, 0.5)
  params = observer.init_params(jax.random.PRNGKey(3), p.nz, p.ny, width, out_scale=scale)
  s_z, s_y = jnp.ones(p.nz), jnp.ones(p.ny)
  W2, K = (np.asarray(m, np.float64) for m in observer.lmi_weights(params, p.Cbar, s_y))
  A_L = p.Abar - L @ p.Cbar
  cert = lmi.CertificateSDP(p.nz, 1, width, p.Gbar, p.Qbar, alpha).solve(A_L, W2, K)
  return p, L, params, s_z, s_y, W2, K, A_L, cert


def test_accepted_certificate_is_verified_independently():
  p, L, params, s_z, s_y, W2, K, A_L, cert = _certified_pendulum()
  alpha = 0.1
  assert cert["t"] > 0
  check = lmi.verify(cert, A_L, p.Gbar, W2, K, p.Qbar, alpha)
  assert check["valid"] and check["margin"] > 0
  # NumPy eigenvalues of the assembled matrix, written out again here.
  n = p.nz + 1 + W2.shape[1]
  F = np.zeros((n, n))
  P, mu, lam = cert["P"], cert["mu"], cert["lam"]
  F[:p.nz, :p.nz] = A_L.T @ P + P @ A_L + alpha * P + mu[0] * p.Qbar[0]
  F[:p.nz, p.nz:p.nz + 1] = P @ p.Gbar
  F[:p.nz, p.nz + 1:] = -P @ W2 + 0.5 * K.T @ np.diag(lam)
  F[p.nz, p.nz] = -mu[0]
  F[p.nz + 1:, p.nz + 1:] = -np.diag(lam)
  F = np.triu(F) + np.triu(F, 1).T
  np.testing.assert_allclose(-np.linalg.eigvalsh(F)[-1], check["margin"], rtol=1e-6)
  # The JAX assembly used by stage 2 is the same matrix.
  Fj = lmi.assemble_jax(*(jnp.asarray(m) for m in (P, mu, lam, A_L, p.Gbar, W2, K,
                                                   p.Qbar)), alpha)
  np.testing.assert_allclose(np.asarray(Fj), F, atol=1e-4)
  # What it certifies, checked on the real error dynamics: V' + alpha V <= 0 at random
  # states and errors (including large ones: the certificate is global in e).
  _assert_decays(p, L, params, P, s_z, s_y, alpha, n=4000, seed=1)


def _assert_decays(p, L, params, P, s_z, s_y, alpha, n, seed):
  """V = e^T P e decays at rate alpha along the true error dynamics at n random states
  and errors, large errors included (the certificate is global in e)."""
  rng = np.random.default_rng(seed)
  z = jnp.asarray(rng.uniform(-3, 3, (n, p.nz)), jnp.float32)
  e = jnp.asarray(rng.normal(size=(n, p.nz)) * rng.uniform(0.01, 5, (n, 1)), jnp.float32)
  q = observer.decrease_ratio(p, L, params, jnp.asarray(P, jnp.float32), s_z, s_y, z, e,
                              alpha)
  assert float(jnp.max(q)) < 0


def test_unstable_observer_is_rejected():
  p, L, params, s_z, s_y, W2, K, A_L, good = _certified_pendulum()
  A_bad = p.Abar + L @ p.Cbar  # sign-flipped output injection: unstable error dynamics
  assert np.max(np.linalg.eigvals(A_bad).real) > 0
  sdp = lmi.CertificateSDP(p.nz, 1, W2.shape[1], p.Gbar, p.Qbar, 0.1)
  bad = sdp.solve(A_bad, W2, K)
  assert bad["t"] <= 0
  assert not lmi.verify(bad, A_bad, p.Gbar, W2, K, p.Qbar, 0.1)["valid"]
  # The certificate of the stable observer does not certify the unstable one either.
  assert not lmi.verify(good, A_bad, p.Gbar, W2, K, p.Qbar, 0.1)["valid"]
  # A huge neural term destroys the certificate of the same L.
  big = sdp.solve(A_L, 1e3 * W2, 1e2 * K)
  assert not lmi.verify(big, A_L, p.Gbar, 1e3 * W2, 1e2 * K, p.Qbar, 0.1)["valid"]
  # and the unstable observer's error really grows (noise-free simulation).
  f = observer.field(dataclasses.replace(p, noise=0.0), -L, None, s_z, s_y)
  u, d = jnp.zeros((200, 1)), jnp.full((200, 1), 0.2)
  xs = plants.simulate(p, jnp.array([0.3, 0.0]), u, d, 0.04)
  y = xs @ jnp.asarray(p.C).T
  zh = observer.rollout(f, jnp.zeros(3), u, y, 0.04)
  err = np.linalg.norm(np.asarray(zh) - np.concatenate([np.asarray(xs), 0.2 * np.ones((200, 1))], 1), axis=1)
  assert err[-1] > 10 * err[0]


def test_high_gain_and_eso_gains_closed_form():
  p = plants.make_plant("pendulum")
  eps = 0.25
  L = baselines.high_gain_gain(p, eps)
  # poles all at -1/eps: characteristic polynomial (s + 1/eps)^3
  np.testing.assert_allclose(np.poly(p.Abar - L @ p.Cbar), np.poly(-np.ones(3) / eps),
                             rtol=1e-6)
  # chain of integrators: the classical [3/eps, 3/eps^2, 1/eps^3]
  chain = np.array([[0.0, 1, 0], [0, 0, 1], [0, 0, 0]])
  Lc = baselines.ackermann_observer(chain, np.array([[1.0, 0, 0]]), -np.ones(3) / eps)
  np.testing.assert_allclose(Lc.ravel(), [3 / eps, 3 / eps ** 2, 1 / eps ** 3], rtol=1e-8)
  px = plants.make_plant("x29")
  Lx = baselines.eso_gain(px, 2.0)
  np.testing.assert_allclose(np.sort(np.linalg.eigvals(px.Abar - Lx @ px.Cbar).real),
                             np.sort(-2.0 * (1 + 0.1 * np.arange(5))), rtol=1e-6)


def test_ekf_is_the_kalman_filter_on_a_linear_plant():
  p = _linear_plant(plants.make_plant("flexible_joint"))
  dt, T, q = 0.04, 5, 0.1
  rng = np.random.default_rng(0)
  u = rng.normal(size=(T, 1)).astype(np.float32)
  y = rng.normal(size=(T, p.ny)).astype(np.float32)
  z0 = rng.normal(size=p.nz).astype(np.float32)
  s_z, p0 = jnp.ones(p.nz), jnp.full((p.nz,), 0.5)
  out = baselines.ekf(p, jnp.asarray(z0), jnp.asarray(u), jnp.asarray(y), dt, q, 1e-4,
                      p0, s_z)
  hA = dt * p.Abar
  Phi = sum(np.linalg.matrix_power(hA, k) / math.factorial(k) for k in range(5))
  Gam = sum(np.linalg.matrix_power(hA, k) / math.factorial(k + 1) for k in range(4)) * dt
  C, R = p.Cbar, (p.noise ** 2 + 1e-8) * np.eye(p.ny)
  Qd = np.diag(np.r_[1e-4 * np.ones(p.nx), q * np.ones(p.nd)]) * dt
  z, S = z0.astype(np.float64), np.diag(np.full(p.nz, 0.5))
  for k in range(T):
    Kk = S @ C.T @ np.linalg.inv(C @ S @ C.T + R)
    z = z + Kk @ (y[k] - C @ z)
    S = (np.eye(p.nz) - Kk @ C) @ S
    np.testing.assert_allclose(np.asarray(out[k]), z, rtol=2e-3, atol=2e-4)
    z = Phi @ z + Gam @ p.Bbar @ u[k]
    S = Phi @ S @ Phi.T + Qd


def test_coverage_and_local_radius():
  eps = observer.coverage_epsilon(1000, 0.01)
  np.testing.assert_allclose((1 - eps) ** 1000, 0.01, rtol=1e-9)
  e = np.array([[0.1, 0.0], [0.5, 0.2], [0.0, -0.8], [0.9, 0.9]])
  q = np.array([-1.0, -0.5, 0.3, 0.2])
  assert observer.local_radius(q, e, np.ones(2)) == pytest.approx(0.8)
  assert observer.local_radius(-np.ones(4), e, np.ones(2)) == 1.0


def test_neural_term_vanishes_at_zero_innovation_and_shapes():
  params = observer.init_params(jax.random.PRNGKey(0), 5, 3, 7, out_scale=1.0)
  zhat = jnp.arange(5.0)
  assert params["W2"].shape == (5, 7) and params["W1y"].shape == (7, 3)
  np.testing.assert_allclose(observer.correction(params, zhat, jnp.zeros(3), jnp.ones(5),
                                                 jnp.ones(3)), 0.0, atol=1e-7)
  assert float(jnp.abs(observer.correction(params, zhat, jnp.ones(3), jnp.ones(5),
                                           jnp.ones(3))).sum()) > 0


def test_csv_loader_roundtrip_and_errors(tmp_path):
  p = plants.make_plant("pendulum")
  t = np.arange(5) * 0.04
  path = str(tmp_path / "traj.csv")
  data_io.write_csv(path, t, np.ones((5, 1)), np.zeros((5, 1)), np.ones((5, 3)))
  traj = data_io.load_csv(path, p, 0.04)
  assert traj["u"].shape == (5, 1) and traj["y"].shape == (5, 1) and traj["z"].shape == (5, 3)
  with pytest.raises(FileNotFoundError, match="nope.csv"):
    data_io.load_csv(str(tmp_path / "nope.csv"), p, 0.04)
  with pytest.raises(ValueError, match="sampled every"):
    data_io.load_csv(path, p, 0.02)
  bad = str(tmp_path / "bad.csv")
  data_io.write_csv(bad, t, np.ones((5, 1)), np.zeros((5, 0)))
  with pytest.raises(ValueError, match="missing columns y0"):
    data_io.load_csv(bad, p, 0.04)


# Eigenvalues of the published X-29A lateral-directional A matrices (X29_LATERAL, from
# shahriarta/Ergodic-risk-Policy-Optimization risk-lqr-plots_ACC.py), computed once by us
# with numpy.linalg.eigvals from those matrices (no publication of the eigenvalues was
# found offline): roll subsidence, Dutch roll pair, a slightly divergent spiral.
X29_EIGS = {"x29": [-2.51264, complex(-0.165304, -2.794045), complex(-0.165304, 2.794045),
                    0.0178985],
            "x29_pa": [-1.60831, complex(-0.246203, -1.293961),
                       complex(-0.246203, 1.293961), 0.0324156]}


@pytest.mark.parametrize("name", ["x29", "x29_pa"])
def test_x29_plant_linearises_to_the_published_model(name):
  p = plants.make_plant(name)
  cond = "ND-UA" if name == "x29" else "ND-PA"
  pub_A = np.array(plants.X29_LATERAL[cond]["A"])
  # the plant's Jacobian at the trim point (phi = 0): A + G dphi/dx
  J = np.asarray(jax.jacfwd(lambda x: p.f(x, jnp.zeros(2), jnp.zeros(1)))(
      jnp.zeros(4, jnp.float32)), np.float64)
  np.testing.assert_allclose(J, pub_A, atol=1e-6)
  np.testing.assert_array_equal(p.B, np.array(plants.X29_LATERAL[cond]["B"]))
  eig = np.sort_complex(np.linalg.eigvals(J))
  np.testing.assert_allclose(eig, np.sort_complex(np.array(X29_EIGS[name])), atol=2e-5)
  # Dutch roll: lightly damped (ND-UA zeta 0.059 at 2.80 rad/s; ND-PA 0.187 at 1.32)
  dr = eig[np.argmax(eig.imag)]
  wn, zeta = abs(dr), -dr.real / abs(dr)
  assert (wn, zeta) == (pytest.approx(2.799 if name == "x29" else 1.3172, abs=1e-3),
                        pytest.approx(0.0591 if name == "x29" else 0.1869, abs=1e-3))
  # the nonlinear term is the gravity entry g cos(theta0) / V of the published A
  assert p.G[0, 0] == pub_A[0, 3] and p.A[0, 3] == 0.0


def test_clopper_pearson_upper_bound_hand_cases():
  beta = 0.01
  # k = 0: the closed form 1 - beta^(1/n) (coverage_epsilon)
  assert observer.clopper_pearson_upper(0, 4000, beta) == pytest.approx(
      observer.coverage_epsilon(4000, beta), rel=1e-9)
  # n = 2, k = 1 by hand: P[Bin(2, u) <= 1] = 1 - u^2 = beta  =>  u = sqrt(1 - beta)
  assert observer.clopper_pearson_upper(1, 2, beta) == pytest.approx(math.sqrt(0.99),
                                                                     rel=1e-9)
  # n = 3, k = 2: 1 - u^3 = beta
  assert observer.clopper_pearson_upper(2, 3, beta) == pytest.approx(0.99 ** (1 / 3),
                                                                     rel=1e-9)
  # k = 40 of 4000: the binomial tail at the bound is beta, and the bound is above k/n
  import scipy.stats
  u = observer.clopper_pearson_upper(40, 4000, beta)
  assert scipy.stats.binom.cdf(40, 4000, u) == pytest.approx(beta, rel=1e-6)
  assert 0.01 < u < 0.02
  assert observer.clopper_pearson_upper(5, 5, beta) == 1.0
  with pytest.raises(ValueError, match="violations k=6"):
    observer.clopper_pearson_upper(6, 5, beta)


def test_uncapped_margin_is_the_solver_independent_optimum():
  p, L, params, s_z, s_y, W2, K, A_L, capped = _certified_pendulum()
  sdp = lmi.CertificateSDP(p.nz, 1, W2.shape[1], p.Gbar, p.Qbar, 0.1)
  assert capped["t"] == pytest.approx(1.0, abs=1e-6)  # the cap binds: many optima
  opt = sdp.solve(A_L, W2, K, cap=None)
  assert opt["t"] > 1.5  # the cap hid a larger margin
  check = lmi.verify(opt, A_L, p.Gbar, W2, K, p.Qbar, 0.1)
  # at the optimum F + t I <= 0 is tight: the verified margin is the optimal t
  assert check["valid"] and check["margin"] == pytest.approx(opt["t"], rel=1e-4)
  # another solver (another path) reaches the same optimum
  scs = lmi.CertificateSDP(p.nz, 1, W2.shape[1], p.Gbar, p.Qbar, 0.1, solver="SCS")
  assert scs.solve(A_L, W2, K, cap=None)["t"] == pytest.approx(opt["t"], rel=2e-2)


def test_gain_selection_picks_the_best_validation_decay_and_guards_the_trainer():
  train, prob, trainer = _tiny_trainer()
  grid = (0.1, 0.5, 2.0)
  g, rows = train.select_gain(prob, grid)
  run = train._linear_obs_eval(prob, True)
  vals = []
  for a in grid:  # each candidate's validation nmse, recomputed here
    L = lmi.design_gain(prob.plant.Abar, prob.plant.Cbar, prob.plant.Gbar, prob.plant.Qbar,
                        a)[0]
    vals.append(train.evaluate(prob, run(jnp.asarray(L, jnp.float32), prob.data["val"]),
                               "val")["nmse"])
  assert g == grid[int(np.argmin(vals))] and [r["chosen"] for r in rows].count(True) == 1
  np.testing.assert_allclose([r["val_nmse"] for r in rows], vals, rtol=1e-6)
  other = train.build_problem(trainer.cfg, "pendulum", 0, gain_alpha=2.0)
  with pytest.raises(ValueError, match="gain decay 2.0"):
    trainer.run("direct", 0, 3e-3, other)


def test_unknown_plant_is_named():
  with pytest.raises(ValueError, match="unknown plant 'moon'"):
    plants.make_plant("moon")


@functools.lru_cache(maxsize=1)
def _tiny_trainer():  # one compiled Trainer shared by the tests that need one
  from jaxpapers.core import config as config_lib
  from jaxpapers.papers.neural_observer import experiment, train
  config = config_lib.load("configs/neural_observer.py:smoke,total_steps=20,stage1_steps=10,"
                           "sdp_every=5,width=4")
  cfg = experiment.flat(config)
  prob = train.build_problem(cfg, "pendulum", 0)
  return train, prob, train.Trainer(prob, 4, cfg)


def test_run_resumes_bit_for_bit_after_a_kill(tmp_path):
  train, prob, trainer = _tiny_trainer()
  ref_params, ref_trace, ref = trainer.run("two_stage", 0, 3e-3, prob)
  # killed after 3 chunks: 2 of stage 1 and the first LMI fine-tuning chunk
  params, trace, s = trainer.run("two_stage", 0, 3e-3, prob, ckpt_dir=str(tmp_path),
                                 stop_after=3)
  assert params is None and s["stopped"]
  params, trace, s = trainer.run("two_stage", 0, 3e-3, prob, ckpt_dir=str(tmp_path))
  assert s["certified"] == ref["certified"] and s["sdp_solves"] == ref["sdp_solves"]
  assert [r["step"] for r in trace] == [r["step"] for r in ref_trace]
  for key in ("val_nmse", "sdp_t", "margin"):
    assert [r[key] for r in trace] == [r[key] for r in ref_trace]
  assert ref["certified"]  # so the kept (certified) networks can be compared
  for k in ref_params:
    np.testing.assert_array_equal(np.asarray(params[k]), np.asarray(ref_params[k]))


def test_learning_rate_selection_prefers_certified_then_validation():
  from jaxpapers.papers.neural_observer import train
  cert_bad = dict(certified=True, best_val_nmse=0.5, last_val_nmse=0.5)
  cert_good = dict(certified=True, best_val_nmse=0.1, last_val_nmse=0.1)
  uncert = dict(certified=False, best_val_nmse=np.inf, last_val_nmse=0.01)
  runs = [uncert, cert_bad, cert_good]
  pick = min(range(3), key=lambda i: train.selection_score("direct", runs[i]))
  assert pick == 2  # a certified model beats a better uncertified one
  free = [dict(certified=False, best_val_nmse=v, last_val_nmse=1.0) for v in (0.3, 0.2)]
  assert min(range(2), key=lambda i: train.selection_score("unconstrained", free[i])) == 1


def test_stage1_spread_over_devices_equals_the_one_device_run_loop():
  # One study cell: stage 1 (point-guided pre-training, the JAX stage) of 4 runs (2 seeds
  # x 2 learning rates, on 4 of the 8 forced devices) through sharding.spread equals
  # each run's stage 1 on one device by the study's own path, Trainer.run's loop of
  # AOT-compiled chunks. Tolerance: Adam divides by sqrt(v), so on near-zero gradients
  # (the zero-initialised biases) float32 reordering shows up at ~1e-5 relative.
  train, prob0, trainer = _tiny_trainer()
  assert jax.device_count() == 8
  cfg = trainer.cfg
  seeds, lrs = (0, 1), (1e-3, 3e-3)
  probs = [prob0, train.build_problem(cfg, "pendulum", 1)]
  (params, R), aux = trainer.stage1_spread(probs, seeds, lrs)
  # one run per device: spread puts n < 8 rows on the first n devices
  assert len(params["W2"].sharding.device_set) == min(params["W2"].shape[0], 8) > 1
  n_chunks = cfg.stage1_steps // cfg.sdp_every
  assert aux["hinge"].shape == (4, n_chunks)
  i = 0
  for prob, seed in zip(probs, seeds):
    for lr in lrs:
      trainable = trainer.init(seed)
      state = (trainable, trainer.opt_init(trainable, lr))
      key = jax.random.fold_in(jax.random.PRNGKey(seed), 7)
      for c in range(n_chunks):  # as Trainer.run keys its chunks
        state, last = trainer.chunk1(state, jax.random.fold_in(key, c * cfg.sdp_every),
                                     cfg.w_hinge, prob.data["train"])
      for k in params:
        np.testing.assert_allclose(np.asarray(params[k][i]), np.asarray(state[0][0][k]),
                                   rtol=1e-4, atol=1e-6)
      np.testing.assert_allclose(np.asarray(R[i]), np.asarray(state[0][1]), rtol=1e-4,
                                 atol=1e-6)
      np.testing.assert_allclose(float(aux["est"][i, -1]), float(last["est"]), rtol=1e-4)
      # Training moved the weights (not a comparison of two initialisations).
      assert not np.allclose(np.asarray(params["W2"][i]), np.asarray(trainable[0]["W2"]))
      i += 1


def test_paper_plan_is_the_jax_stage_at_the_paper_width():
  from jaxpapers.core import config as config_lib
  from jaxpapers.papers.neural_observer import experiment
  config = config_lib.load("configs/neural_observer.py:paper")
  assert (config.data.plant, config.model.width) == ("x29", 256)
  p = experiment.plan(config)
  assert p.steps == config.train.stage1_steps
  runs = config.seeds * len(config.train.lrs)
  assert p.args[0][0][0]["W1x"].shape == (-(-runs // 8) * 8, 256, 5)


# ---------- model mismatch (issue 46 item 2) ----------

def test_true_plant_is_the_nominal_off_by_exactly_the_stated_fraction():
  # Pendulum, written out: theta'' = -(g/l) sin(theta) - b theta' + u + d with g/l = 4,
  # b = 0.2 nominal; the true plant's signs (crc32 of the name) are +1 for g/l, -1 for b.
  nom, true = plants.make_plant("pendulum"), plants.true_plant("pendulum", mismatch=0.2)
  assert plants.mismatch_signs("pendulum") == {"g_l": 1.0, "b": -1.0}
  x, u, d = jnp.array([0.7, -0.4]), jnp.array([0.3]), jnp.array([-0.2])
  hand = lambda g_l, b: np.array([-0.4, -g_l * np.sin(0.7) + b * 0.4 + 0.3 - 0.2])  # noqa
  np.testing.assert_allclose(np.asarray(nom.f(x, u, d)), hand(4.0, 0.2), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(true.f(x, u, d)), hand(4.8, 0.16), rtol=1e-6)
  # Van der Pol: mu enters A and the nonlinearity; both move with it (mu, k off by -20%).
  vdp = plants.true_plant("van_der_pol", mismatch=0.2)
  mu, k = (0.5 * (1 + 0.2 * s) for s in plants.mismatch_signs("van_der_pol").values())
  x1, x2 = 1.1, -0.6
  np.testing.assert_allclose(
      np.asarray(vdp.f(jnp.array([x1, x2]), jnp.zeros(1), jnp.zeros(1))),
      [x2, -k / 0.5 * x1 + mu * (1 - x1 ** 2) * x2], rtol=1e-6)
  # Every plant: each matrix entry is nominal x (1 + 0.2 s) for a physical parameter and
  # exactly nominal for the kinematic ones; the output map C stays exact.
  for name in plants.PLANTS:
    n_p, t_p = plants.make_plant(name), plants.true_plant(name, mismatch=0.2)
    for m in ("A", "B", "G", "E"):
      a, b = getattr(n_p, m), getattr(t_p, m)
      assert np.all((a == 0) == (b == 0))
      r = np.divide(b, a, out=np.ones_like(a), where=a != 0)
      assert np.allclose(np.abs(r - 1.0)[np.abs(r - 1.0) > 1e-12], 0.2)
    np.testing.assert_array_equal(n_p.C, t_p.C)
  ua, ta = plants.make_plant("x29").A, plants.true_plant("x29", mismatch=0.2).A
  for i, j in ((0, 1), (0, 2), (3, 1), (3, 2)):  # sin / cos alpha0, phi' = p + tan r
    assert ta[i, j] == ua[i, j]
  assert np.all(np.abs(ta[1:3, :3] / ua[1:3, :3] - 1) == pytest.approx(0.2))
  # unmodelled Coulomb friction: an extra -c tanh(omega / v0) on omega, nothing else
  fr = plants.true_plant("pendulum", friction=0.3)
  np.testing.assert_allclose(np.asarray(fr.f(x, u, d) - nom.f(x, u, d)),
                             [0.0, -0.3 * np.tanh(-0.4 / plants.FRICTION_V)], rtol=1e-6)
  with pytest.raises(ValueError, match="no friction model for 'x29'"):
    plants.true_plant("x29", friction=0.3)


def _np_rk4(f, x, dt):
  k1 = f(x)
  k2 = f(x + 0.5 * dt * k1)
  k3 = f(x + 0.5 * dt * k2)
  return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + f(x + dt * k3))


def test_mismatch_problem_has_true_data_and_a_nominal_observer():
  import ml_collections
  from jaxpapers.papers.neural_observer import train
  cfg = ml_collections.ConfigDict(dict(alpha_gain=2.0, err_scale=0.5, n_train=2, n_eval=2,
                                       steps=25, dt=0.04, alpha=0.1))
  nominal = train.build_problem(cfg, "pendulum", 0)
  prob = train.build_problem(cfg, "pendulum", 0, mismatch=0.2, friction=0.3)
  # The observers' model, gain and boxes are the nominal ones ...
  for m in ("A", "B", "G", "E", "C"):
    np.testing.assert_array_equal(getattr(prob.plant, m), getattr(plants.make_plant(
        "pendulum"), m))
  assert prob.plant.unmodelled is None
  np.testing.assert_array_equal(prob.L, nominal.L)
  # ... while the data follow the true plant: g/l = 4.8, b = 0.16 and friction 0.3,
  # integrated here by a NumPy RK4 of the hand-written vector field.
  tr = {k: np.asarray(v, np.float64) for k, v in prob.data["train"].items()}
  for i in range(2):
    x = tr["z"][i, 0, :2]
    for t in range(24):
      u, d = tr["u"][i, t, 0], tr["d"][i, t, 0]

      def f(s):
        return np.array([s[1], -4.8 * np.sin(s[0]) - 0.16 * s[1] + u + d
                         - 0.3 * np.tanh(s[1] / plants.FRICTION_V)])
      x = _np_rk4(f, x, 0.04)
      np.testing.assert_allclose(tr["z"][i, t + 1, :2], x, atol=2e-4)
  # same seed, same inputs, another plant: the trajectories differ
  np.testing.assert_array_equal(tr["u"], np.asarray(nominal.data["train"]["u"]))
  assert np.max(np.abs(tr["z"] - np.asarray(nominal.data["train"]["z"]))) > 0.05


# ---------- direct LMI with the weights in the SDP (issue 46 item 4) ----------

def test_weight_sdp_certifies_its_projection_and_grows_with_the_width():
  from jaxpapers.papers.neural_observer import direct_sdp
  p = plants.make_plant("pendulum")
  L, _ = lmi.design_gain(p.Abar, p.Cbar, p.Gbar, p.Qbar, 2.0)
  A_L, alpha, h = p.Abar - L @ p.Cbar, 0.1, 3
  s_z, s_y = jnp.ones(p.nz), jnp.asarray([0.7])
  M = np.asarray(p.Cbar) / 0.7
  sdp = direct_sdp.WeightSDP(p.nz, 1, h, p.ny, p.Gbar, p.Qbar, M, alpha, eps=1e-2)
  # a large random network, far from certifiable ...
  params = observer.init_params(jax.random.PRNGKey(5), p.nz, p.ny, h, out_scale=30.0)
  params = dict(params, W1y=10.0 * params["W1y"])
  W2t, Kt = (np.asarray(m, np.float64) for m in observer.lmi_weights(params, p.Cbar, s_y))
  assert lmi.CertificateSDP(p.nz, 1, h, p.Gbar, p.Qbar, alpha).solve(A_L, W2t, Kt)["t"] < 0
  out = sdp.solve(A_L, np.asarray(params["W2"]), np.asarray(params["W1y"]))
  W2, W1y, P, mu, lam = out["W2"], out["W1y"], out["P"], out["mu"], out["lam"]
  assert out["dist"] > 1.0  # ... is moved
  # Independent NumPy check of the certificate LMI at the projected weights
  # (K = W1y diag(1/s_y) Cbar), written out here from the S-procedure.
  K = W1y @ M
  n = p.nz + 1 + h
  F = np.zeros((n, n))
  F[:3, :3] = A_L.T @ P + P @ A_L + alpha * P + mu[0] * p.Qbar[0]
  F[:3, 3:4] = P @ p.Gbar
  F[:3, 4:] = -P @ W2 + 0.5 * K.T @ np.diag(lam)
  F[3, 3], F[4:, 4:] = -mu[0], -np.diag(lam)
  F = np.triu(F) + np.triu(F, 1).T
  assert np.linalg.eigvalsh(F)[-1] <= -1e-2 + 1e-6  # F + eps I <= 0
  assert np.linalg.eigvalsh(P)[0] >= 1 - 1e-6 and np.all(lam > 0)
  # What it claims: V = e^T P e decays at rate alpha along the true error dynamics of the
  # projected network (any W1x, b), at random states and errors.
  proj = dict(params, W2=jnp.asarray(W2, jnp.float32), W1y=jnp.asarray(W1y, jnp.float32))
  _assert_decays(p, L, proj, P, s_z, s_y, alpha, n=3000, seed=2)
  # a network that is already certified is (nearly) left where it is
  small = observer.init_params(jax.random.PRNGKey(6), p.nz, p.ny, h, out_scale=1e-2)
  o2 = sdp.solve(A_L, np.asarray(small["W2"]), np.asarray(small["W1y"]))
  assert o2["dist"] < 1e-4
  np.testing.assert_allclose(o2["W2"], np.asarray(small["W2"]), atol=1e-4)
  # Sizes: the LMI is (nz + n_phi + h)-square for both SDPs; the weight SDP carries
  # (nz + ny) h weight variables more (Y = P W2, Zy = Lam W1y).
  for w in (3, 6, 12):
    ws = direct_sdp.WeightSDP(p.nz, 1, w, p.ny, p.Gbar, p.Qbar, M, alpha)
    cs = lmi.CertificateSDP(p.nz, 1, w, p.Gbar, p.Qbar, alpha)
    assert ws.n_vars == p.nz ** 2 + 1 + w * (1 + p.nz + p.ny)
    assert sum(v.size for v in cs.problem.variables()) == p.nz ** 2 + 1 + w + 1
    assert ws.problem.constraints[0].args[0].shape == (p.nz + 1 + w,) * 2


def test_direct_sdp_run_keeps_a_verified_projection():
  from jaxpapers.papers.neural_observer import direct_sdp
  train, prob, trainer = _tiny_trainer()
  params, trace, s = direct_sdp.run(trainer, 0, 3e-3, prob)
  cfg = trainer.cfg
  assert s["sdp_solves"] == len(trace) == cfg.total_steps // cfg.sdp_every + 1
  assert s["certified"] and all(r["valid"] for r in trace)
  assert s["sdp_vars"] == 3 ** 2 + 1 + 4 * (1 + 3 + 1)
  # the kept network is the best-on-validation projection, evaluated again here
  val = train.evaluate(prob, trainer.predict(params, prob.data["val"]), "val")["nmse"]
  assert val == pytest.approx(s["best_val_nmse"], rel=1e-5)
  assert val == pytest.approx(min(r["val_nmse"] for r in trace), rel=1e-5)
  # and its weights pass the certificate SDP of train.py's methods
  W2, K = trainer.lmi_weights(params)
  cert = lmi.CertificateSDP(3, 1, 4, trainer.G, trainer.Q, prob.alpha).solve(
      trainer.A_L, W2, K)
  assert lmi.verify(cert, trainer.A_L, trainer.G, W2, K, trainer.Q, prob.alpha)["valid"]


def test_select_lr_extends_an_edge_choice_until_interior():
  """A learning rate chosen on an edge of the grid is not a choice: the grid grows outward
  (the outer ratio of that side) until the choice is interior, each rate run once."""
  from jaxpapers.papers.neural_observer import experiment
  calls = []

  def run(lr):
    calls.append(lr)
    return lr

  def score(opt):
    return lambda lr: abs(np.log(lr / opt))
  grid = (3e-4, 1e-3, 3e-3, 1e-2)
  # optimum inside: no extension
  g, c, k = experiment.select_lr(run, score(2e-3), grid, extend=3)
  assert len(calls) == 4 and 0 < k < len(g) - 1 and c == g
  # optimum below: 9e-5, then 2.7e-5 (ratio 10/3 on the low side); 9e-5 is interior
  calls.clear()
  g, c, k = experiment.select_lr(run, score(5e-5), grid, extend=3)
  np.testing.assert_allclose(g[:2], [2.7e-5, 9e-5], rtol=1e-9)
  assert k == 1 and len(calls) == len(set(calls)) == 6
  # optimum above: 3e-2 (ratio 10/3), 1e-1 ... capped after 2 extensions: still an edge
  calls.clear()
  g, c, k = experiment.select_lr(run, score(10.0), grid, extend=2)
  np.testing.assert_allclose(g[-2:], [1e-2 * 10 / 3, 1e-2 * (10 / 3) ** 2], rtol=1e-9)
  assert k == len(g) - 1 and len(calls) == 6


@pytest.mark.parametrize("name", ["pendulum", "van_der_pol", "flexible_joint", "x29"])
def test_textbook_luenberger_places_the_poles_of_the_linearisation(name):
  """The pole-placement Luenberger baseline: eig(A_lin - L C) at the bandwidth poles,
  A_lin the extended model's Jacobian at the origin, checked against a central finite
  difference of the plant's own field (not jax.jacfwd)."""
  plant = plants.make_plant(name)
  A_lin = baselines.linearisation(plant)
  h, fd = 1e-4, np.zeros((plant.nz, plant.nz))
  for j in range(plant.nz):
    e = np.zeros(plant.nz)
    e[j] = h
    fp = np.asarray(plant.fbar(jnp.asarray(e, jnp.float32), jnp.zeros(plant.nu)), np.float64)
    fm = np.asarray(plant.fbar(jnp.asarray(-e, jnp.float32), jnp.zeros(plant.nu)), np.float64)
    fd[:, j] = (fp - fm) / (2 * h)
  np.testing.assert_allclose(A_lin, fd, atol=2e-2 * max(1.0, np.abs(fd).max()))
  L = baselines.luenberger_pp_gain(plant, 3.0)
  poles = np.sort_complex(np.linalg.eigvals(A_lin - L @ plant.Cbar))
  want = np.sort_complex(baselines.bandwidth_poles(plant.nz, 3.0, plant.ny > 1) + 0j)
  np.testing.assert_allclose(poles, want, rtol=1e-5, atol=1e-5)
