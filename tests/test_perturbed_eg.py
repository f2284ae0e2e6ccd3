"""Perturbed S-EG / S-OGDA (abstract 19): projections, gaps, methods, schedules, slopes."""
import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.papers.perturbed_eg import (analysis, experiment, gaps, methods, problems,
                                           projections, reference_numpy, schedules)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(arg):
  spec = importlib.util.spec_from_file_location(
      "perturbed_eg_config", os.path.join(ROOT, "configs", "perturbed_eg.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


# --- projections ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["simplex", "box", "ball"])
@pytest.mark.parametrize("d", [1, 3, 9, 200])
def test_projection_feasible_idempotent_nonexpansive(kind, d):
  rng = np.random.default_rng(d)
  v = jnp.asarray(3 * rng.normal(size=(64, d)), jnp.float32)
  w = jnp.asarray(3 * rng.normal(size=(64, d)), jnp.float32)
  pv, pw = projections.project(kind, v, 1.0), projections.project(kind, w, 1.0)
  if kind == "simplex":
    assert jnp.all(pv >= 0) and jnp.allclose(pv.sum(-1), 1.0, atol=1e-5)
  elif kind == "box":
    assert jnp.all(jnp.abs(pv) <= 1.0)
  else:
    assert jnp.all(jnp.linalg.norm(pv, axis=-1) <= 1.0 + 1e-6)
  np.testing.assert_allclose(projections.project(kind, pv, 1.0), pv, atol=1e-6)
  dist_p = jnp.linalg.norm(pv - pw, axis=-1)
  assert jnp.all(dist_p <= jnp.linalg.norm(v - w, axis=-1) + 1e-5)
  # Variational characterisation: <v - P(v), u - P(v)> <= 0 for every u in the set.
  assert jnp.all(jnp.sum((v - pv) * (pw - pv), axis=-1) <= 1e-4)


def test_simplex_projection_matches_sorting_reference_with_ties():
  v = jnp.asarray([[0.5, 0.5, 0.5, -1.0], [2.0, 2.0, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
  u = np.asarray(projections.simplex(v))
  np.testing.assert_allclose(u[0], [1 / 3, 1 / 3, 1 / 3, 0], atol=1e-6)
  np.testing.assert_allclose(u[1], [0.5, 0.5, 0, 0], atol=1e-6)
  np.testing.assert_allclose(u[2], [0.1, 0.2, 0.3, 0.4], atol=1e-6)


def test_unknown_set_is_named():
  with pytest.raises(ValueError, match="'sphere'"):
    projections.project("sphere", jnp.zeros(3))


# --- gaps against brute force ----------------------------------------------------------

def _lp_gap(spec, data, x, y):
  """max_y' f(x, y') - min_x' f(x', y) by two linear programs (P = Q = 0)."""
  A, b, c = (np.asarray(a, np.float64) for a in (data.A, data.b, data.c))
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  n, m = A.shape

  def lp_min(cost, d, kind):
    if kind == "simplex":
      r = scipy.optimize.linprog(cost, A_eq=np.ones((1, d)), b_eq=[1.0], bounds=(0, None))
    else:
      r = scipy.optimize.linprog(cost, bounds=(-1, 1))
    assert r.status == 0
    return r.fun

  up = x @ b - lp_min(-(A.T @ x - c), m, spec.y_set)
  down = lp_min(A @ y + b, n, spec.x_set) - c @ y
  return up - down


@pytest.mark.parametrize("name", ["game_random", "game_rps", "bilinear_box"])
def test_closed_form_gap_matches_linear_programs(name):
  spec, data = problems.make(name, 5, 5, seed=3)
  rng = np.random.default_rng(0)
  for _ in range(5):
    x = problems.project_x(spec, jnp.asarray(rng.normal(size=5), jnp.float32))
    y = problems.project_y(spec, jnp.asarray(rng.normal(size=5), jnp.float32))
    g = float(gaps.gap(spec, data, x, y))
    assert g >= -1e-6
    np.testing.assert_allclose(g, _lp_gap(spec, data, x, y), rtol=1e-4, atol=1e-5)


def test_gap_is_zero_at_the_known_rps_equilibrium():
  spec, data = problems.make("game_rps", 7, 7)
  v, w = np.linspace(1, 3, 7), np.linspace(3, 1, 7)
  x, y = (1 / v) / (1 / v).sum(), (1 / w) / (1 / w).sum()
  assert abs(float(gaps.gap(spec, data, jnp.asarray(x, jnp.float32),
                            jnp.asarray(y, jnp.float32)))) < 1e-5


def test_trust_region_gap_matches_numerical_optimisation():
  spec, data = problems.make("quadratic_ball", 3, 3, seed=1, rank=1)
  A, P, Q = (np.asarray(a, np.float64) for a in (data.A, data.P, data.Q))
  ball = {"type": "ineq", "fun": lambda u: 1.0 - u @ u}
  rng = np.random.default_rng(1)
  for scale in (0.1, 5.0):  # interior and boundary inner solutions
    b, c = np.asarray(data.b, np.float64) * scale, np.asarray(data.c, np.float64) * scale
    data_s = data._replace(b=jnp.asarray(b, jnp.float32), c=jnp.asarray(c, jnp.float32))

    def f(x, y):  # float64, so that SLSQP's finite differences are accurate
      return 0.5 * x @ P @ x + b @ x + x @ A @ y - 0.5 * y @ Q @ y - c @ y

    x = np.asarray(problems.project_x(spec, jnp.asarray(rng.normal(size=3), jnp.float32)))
    y = np.asarray(problems.project_y(spec, jnp.asarray(rng.normal(size=3), jnp.float32)))
    best_up = max(-scipy.optimize.minimize(lambda u: -f(x, u), s, constraints=[ball],
                                           method="SLSQP").fun
                  for s in rng.normal(size=(4, 3)) * 0.3)
    best_down = min(scipy.optimize.minimize(lambda u: f(u, y), s, constraints=[ball],
                                            method="SLSQP").fun
                    for s in rng.normal(size=(4, 3)) * 0.3)
    np.testing.assert_allclose(float(gaps.gap(spec, data_s, jnp.asarray(x), jnp.asarray(y))),
                               best_up - best_down, rtol=1e-4, atol=1e-4)


# --- methods ---------------------------------------------------------------------------

def _deterministic_run(name, algorithm, mu, steps, eta_scale=0.3, n=5, m=5):
  spec, data = problems.make(name, n, m, seed=0)
  eta = eta_scale / spec.lipschitz
  plan = methods.anytime_plan(steps, [steps // 2, steps], 100, eta, eta, mu)
  method = methods.Method(algorithm, sigma=0.0)
  snaps = methods.run_plan(spec, method, data, plan, jax.random.key(0), 1, 100)
  return spec, data, snaps


@pytest.mark.parametrize("algorithm", ["eg", "ogda"])
def test_noiseless_methods_converge_on_bilinear_games(algorithm):
  # Unconstrained bilinear (cycles under plain GDA): EG / Popov converge to a solution.
  spec, data, snaps = _deterministic_run("bilinear_free", algorithm, 0.0, 3000)
  dist = gaps.distance_to_solutions(data, snaps.x[0, 1, 0], snaps.y[0, 1, 0])
  assert float(dist) < 1e-3
  # Constrained bilinear on boxes: the last-iterate gap goes to zero.
  spec, data, snaps = _deterministic_run("bilinear_box", algorithm, 0.0, 3000)
  assert float(gaps.gap(spec, data, snaps.x[0, 1, 0], snaps.y[0, 1, 0])) < 1e-3


def test_regularised_solution_within_theory_distance():
  # Tikhonov facts used by the paper's bias bound, for z*_mu (computed by noiseless EG on
  # the strongly monotone regularised game): gap(z*_mu) <= mu D^2 / 2 with D the largest
  # distance from z0 to the feasible set, |z*_mu - z0| <= |z* - z0|, and z*_mu -> z*.
  spec, data = problems.make("game_rps", 7, 7)
  v, w = np.linspace(1, 3, 7), np.linspace(3, 1, 7)
  zs = np.concatenate([(1 / v) / (1 / v).sum(), (1 / w) / (1 / w).sum()])
  z0 = np.concatenate([data.x0, data.y0])
  d2 = (projections.diameter_from("simplex", data.x0) ** 2
        + projections.diameter_from("simplex", data.y0) ** 2)
  errors = []
  for mu in (0.3, 0.1, 0.03):
    eta = 0.4 / (spec.lipschitz + mu)
    plan = methods.anytime_plan(20000, [20000], 100, eta, eta, mu)
    snaps = methods.run_plan(spec, methods.Method("eg", 0.0), data, plan,
                             jax.random.key(0), 1, 100)
    x, y = snaps.x[0, 0, 0], snaps.y[0, 0, 0]
    z = np.concatenate([x, y])
    assert float(gaps.gap(spec, data, x, y)) <= mu * d2 / 2 + 1e-5
    assert np.linalg.norm(z - z0) <= np.linalg.norm(zs - z0) + 1e-5
    errors.append(np.linalg.norm(z - zs))
  assert errors[0] > errors[1] > errors[2]


def test_perturbed_unconstrained_limit_is_the_anchor_projection():
  # Unconstrained bilinear: z*_mu = mu (M + mu I)^-1 z0 in closed form tends to the
  # solution nearest z0 as mu -> 0; the noiseless perturbed iteration reaches z*_mu.
  spec, data = problems.make("bilinear_free", 5, 5, rank=2)
  n = 5
  A = np.asarray(data.A, np.float64)
  M = np.block([[np.zeros((n, n)), A], [-A.T, np.zeros((n, n))]])
  z0 = np.concatenate([data.x0, data.y0]).astype(np.float64)
  proj = np.concatenate([np.asarray(a) for a in gaps.anchor_projection(data)])
  mu = 0.05
  z_mu = mu * np.linalg.solve(M + mu * np.eye(2 * n), z0)
  assert np.linalg.norm(z_mu - proj) < np.linalg.norm(z0 - proj)
  assert np.linalg.norm(1e-4 * np.linalg.solve(M + 1e-4 * np.eye(2 * n), z0) - proj) < 1e-3
  _, _, snaps = _deterministic_run("bilinear_free", "eg", mu, 4000, eta_scale=0.5)
  z = np.concatenate([snaps.x[0, 1, 0], snaps.y[0, 1, 0]])
  np.testing.assert_allclose(z, z_mu, atol=1e-3)


def test_horizon_packing_covers_every_run_once():
  horizons = [125 * 2**k for k in range(8)]
  runs = [(g, t, 0.1, 0.1, 0.1 * g) for g in range(2) for t in horizons]
  plan = methods.horizon_plan(runs, 125)
  assert plan.eta.shape == (horizons[-1] // 125, 4)  # doubling grid: 2 full lanes each
  for g in range(2):
    assert sorted(plan.slot_steps[plan.slot_group == g]) == horizons
  assert (plan.reset.sum(0) == (plan.slot_group >= 0).sum(1)).all()
  with pytest.raises(ValueError, match="multiples"):
    methods.horizon_plan([(0, 130, 0.1, 0.1, 0.0)], 125)


def test_schedule_exponents_balance_the_three_errors():
  config = load_config("eps=0.05")
  a, b = schedules.exponents(config.schedule)
  np.testing.assert_allclose([a, b], [0.6, 0.2])
  assert a + b < 1  # optimisation error exp(-eta mu T) -> 0
  np.testing.assert_allclose((a - b) / 2, b)  # noise sqrt(eta/mu) ~ bias mu
  eta_of, mu_of = schedules.horizon_constants(config.schedule, 2.0, True)
  assert eta_of(1e6) < eta_of(1e2) and mu_of(1e6) < mu_of(1e2)
  assert eta_of(1.0) * (2.0 + mu_of(1.0)) <= config.schedule.eta_cap + 1e-9


# --- interior vs boundary quadratic, and the independent NumPy cross-check -------------

@pytest.mark.parametrize("n,seed", [(7, 0), (7, 1), (7, 2), (50, 0)])
def test_quadratic_ball_saddle_is_interior(n, seed):
  spec, data = problems.make("quadratic_ball", n, n, seed=seed)
  x, y = problems.stationary_point(data)
  assert np.linalg.norm(x) < 1 and np.linalg.norm(y) < 1
  # An interior stationary point of a convex-concave f is a saddle of the constrained
  # problem: the exact gap (trust-region computation) vanishes there.
  g = float(gaps.gap(spec, data, jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)))
  assert abs(g) < 1e-4
  # ... and it is not the anchor (the centre), so the methods have work to do.
  assert np.linalg.norm(x) > 0.4 and np.linalg.norm(y) > 0.4


def test_quadratic_ball_boundary_saddle_is_on_the_spheres():
  spec, data = problems.make("quadratic_ball_boundary", 7, 7, seed=0)
  x, y = problems.stationary_point(data)
  np.testing.assert_allclose([np.linalg.norm(x), np.linalg.norm(y)], [1.588, 1.478],
                             atol=2e-3)
  # Noiseless EG from the centre ends on both unit spheres.
  eta = 0.4 / spec.lipschitz
  plan = methods.anytime_plan(4000, [4000], 100, eta, eta, 0.0)
  snaps = methods.run_plan(spec, methods.Method("eg", 0.0), data, plan,
                           jax.random.key(0), 1, 100)
  np.testing.assert_allclose([float(jnp.linalg.norm(snaps.x[0, 0, 0])),
                              float(jnp.linalg.norm(snaps.y[0, 0, 0]))], [1.0, 1.0],
                             atol=1e-4)


@pytest.mark.parametrize("name", problems.PROBLEMS)
@pytest.mark.parametrize("algorithm", ["eg", "ogda"])
def test_jax_program_matches_numpy_reference(name, algorithm):
  # Noise off, 1000 steps, every variant of the algorithm as a lane of one JAX program
  # (vanilla, perturbed at the T = 1000 horizon constants, and constant two-timescale
  # steps gamma = 2 eta), against the float64 NumPy loop in reference_numpy.py.
  config = load_config("eps=0.05")
  spec, data = problems.make(name, 5, 5, seed=0)
  steps = 1000
  runs = []
  for g, perturbed in enumerate((False, True)):
    eta_of, mu_of = schedules.horizon_constants(config.schedule, spec.lipschitz, perturbed)
    runs.append((g, steps, eta_of(steps), eta_of(steps), mu_of(steps)))
  eta2 = 0.25 / spec.lipschitz
  runs.append((2, steps, eta2, 2 * eta2, 0.0))
  plan = methods.horizon_plan(runs, 125)
  snaps = methods.run_plan(spec, methods.Method(algorithm, 0.0), data, plan,
                           jax.random.key(0), 1, 125)
  for g, (_, _, eta, gamma, mu) in enumerate(runs):
    lane = int(np.nonzero((plan.slot_group == g).any(1))[0][0])
    x_ref, y_ref = reference_numpy.run(spec, data, algorithm, eta, mu, 0.0, steps, None,
                                       np.random.default_rng(0), gamma=gamma)
    np.testing.assert_allclose(np.asarray(snaps.x[lane, 0, 0]), x_ref, atol=2e-4)
    np.testing.assert_allclose(np.asarray(snaps.y[lane, 0, 0]), y_ref, atol=2e-4)
    # Not trivially equal to the start: the iterates moved.
    assert np.linalg.norm(x_ref - np.asarray(data.x0)) > 1e-3


def test_two_timescale_prior_runs_on_constrained_problems():
  config = load_config("smoke=true")
  spec, data = problems.make("bilinear_box", 5, 5)
  out = experiment.run_methods(config, spec, data, ["dseg"], list(config.run.horizons))
  assert list(out["dseg"]["steps"]) == list(config.run.horizons)
  assert np.all(np.isfinite(out["dseg"]["last"])) and np.all(out["dseg"]["last"] >= 0)


def test_tail_slope_uses_only_long_horizons():
  t = np.asarray([125 * 2**k for k in range(10)])
  vals = np.where(t[:, None] < 32_000, 1.0, 50.0 * t[:, None] ** -0.5) * np.ones((1, 3))
  s, _, _ = experiment.tail_slope({"steps": t, "last": vals}, 32_000)
  np.testing.assert_allclose(s, -0.5, atol=1e-9)


# --- slope estimator -------------------------------------------------------------------

def test_slope_estimator_on_synthetic_power_laws():
  t = np.asarray([125 * 2**k for k in range(10)], np.float64)
  exact = 3.0 * t[:, None] ** -0.25 * np.ones((1, 20))
  s, lo, hi = analysis.slope_ci(t, exact)
  np.testing.assert_allclose([s, lo, hi], -0.25, atol=1e-9)
  rng = np.random.default_rng(0)
  noisy = exact * np.exp(0.2 * rng.normal(size=exact.shape))
  s, lo, hi = analysis.slope_ci(t, noisy)
  assert lo < -0.25 < hi and hi - lo < 0.1
  s, lo, hi = analysis.slope_ci(t, 2.0 * t[:, None] ** (-1 / 7) * np.exp(
      0.2 * rng.normal(size=exact.shape)))
  assert lo < -1 / 7 < hi and hi < -0.05


# --- end to end ------------------------------------------------------------------------

def test_smoke_config_runs_and_is_deterministic(tmp_path):
  config = load_config("smoke=true,problem=game_rps,method=psogda")
  a = experiment.train_and_evaluate(config, str(tmp_path / "a"))
  b = experiment.train_and_evaluate(config, str(tmp_path / "b"))
  assert a["slope_last"] == b["slope_last"]
  rows = metrics_lib.read_metrics(str(tmp_path / "a"), split="eval")
  assert [r["step"] for r in rows] == list(config.run.horizons)
  assert all(np.isfinite(r["last_median"]) and r["last_median"] >= 0 for r in rows)


def test_resume_is_bitwise_exact(tmp_path):
  # Smoke: 8 blocks in chunks of 2, a checkpoint after each; stop after 4 blocks, resume.
  config = load_config("smoke=true,problem=quadratic_ball,method=pseg")
  full = experiment.train_and_evaluate(config, str(tmp_path / "a"))
  assert experiment.train_and_evaluate(config, str(tmp_path / "b"), stop_after=4) == {}
  resumed = experiment.train_and_evaluate(config, str(tmp_path / "b"))
  np.testing.assert_array_equal(resumed["last"], full["last"])
  assert resumed["slope_last"] == full["slope_last"]
  from tests import _runs  # pylint: disable=g-import-not-at-top
  _runs.assert_same_metrics(tmp_path / "b", tmp_path / "a")
  # The chunked, checkpointed run equals the one-program study runner bitwise.
  spec, data = experiment.build_problem(config)
  one = experiment.run_methods(config, spec, data, ["pseg"], list(config.run.horizons))
  np.testing.assert_array_equal(one["pseg"]["last"], full["last"])


def test_unknown_method_and_problem_are_named():
  with pytest.raises(ValueError, match="'adam'"):
    schedules.lookup("adam")
  with pytest.raises(ValueError, match="'tsp'"):
    problems.make("tsp", 3, 3)
  config = load_config("smoke=true")
  spec, data = problems.make("game_rps", 3, 3)
  with pytest.raises(ValueError, match="dseg"):
    experiment.run_methods(config, spec, data, ["seg", "dseg"], [125])


# --- scale: the lanes spread over devices ----------------------------------------------

def test_spread_lanes_equal_one_device_vmap():
  # One study cell (S-OGDA and perturbed S-OGDA on a 3 x 3 game, 3 lanes on 3 of the 8
  # forced devices) through sharding.spread equals the same lane program vmapped on one
  # device: the spread changes where lanes run, not what they compute.
  assert jax.device_count() == 8
  config = load_config("smoke=true,seeds=3,n=3,problem=game_rps,t_max=500")
  spec, data = experiment.build_problem(config)
  run_plan, method, rng, _ = experiment.build_run(config, spec, ["sogda", "psogda"],
                                                  list(config.run.horizons),
                                                  vanilla_t_max=250)
  arrays = tuple(jnp.asarray(a) for a in run_plan[:5]) + (jnp.asarray(run_plan.decay),)
  n_lanes, n_slots = run_plan.eta.shape[1], run_plan.slot_steps.shape[1]
  # Fewer lanes than devices: spread runs them on the first n_lanes devices, no padding
  # (its padding path, n >= D, is tests/test_core_sharding.py's).
  assert 1 < n_lanes < jax.device_count()
  carry = methods.init_carry(spec, data, n_lanes, n_slots, 3)
  args = methods.lane_args(arrays, carry) + (data, rng, jnp.asarray(0))
  fn = methods.lane_fn(spec, method, config.run.block, 3)
  spread = methods.lane_program(spec, method, config.run.block, 3)(*args)
  single = jax.jit(jax.vmap(fn, in_axes=methods.LANE_AXES))(*args)
  # one lane per device: spread puts n < 8 lanes on the first n devices
  assert len(spread[1].x.sharding.device_set) == min(spread[1].x.shape[0], 8) > 1
  for a, b in zip(jax.tree.leaves(spread), jax.tree.leaves(single)):
    assert a.shape == b.shape and a.dtype == b.dtype
    if jnp.issubdtype(a.dtype, jnp.integer):
      np.testing.assert_array_equal(a, b)
    else:
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # And the snapshots are real iterates (every written slot moved away from zeros).
  written = run_plan.slot_group >= 0
  assert np.all(np.abs(np.asarray(spread[1].x))[written].sum(-1) > 0)


def test_paper_plan_has_the_paper_sizes():
  config = load_config("paper")
  assert (config.problem.n, config.run.seeds, max(config.run.horizons)) == (50, 20, 1_024_000)
  p = experiment.plan(config)
  assert p.steps == 1_024_000
  # The planned arguments are the spread layout: n < 8 lanes on n devices, else padded
  # to a multiple of the device count.
  lanes = p.args[0].shape[0]
  assert lanes < jax.device_count() or lanes % jax.device_count() == 0
  with pytest.raises(ValueError, match="exclude each other"):
    load_config("paper,smoke")
