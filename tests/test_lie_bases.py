"""lie_bases (abstract 6): quadrature, the low-rank skew generator and its closed-form group
maps against dense references, the structure-preserving integrator, targets against their
closed forms, the Stiefel baseline, the data loader, exact resume and bad input."""
import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.stats

from jaxpapers.papers.lie_bases import data as data_lib
from jaxpapers.papers.lie_bases import controls, experiment, generator, lowrank, methods
from jaxpapers.papers.lie_bases import quadrature
from jaxpapers.papers.lie_bases import targets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(arg):
  spec = importlib.util.spec_from_file_location(
      "lie_bases_config", os.path.join(ROOT, "configs", "lie_bases.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


# --- quadrature and reference bases -----------------------------------------------------

@pytest.mark.parametrize("kind", ["fourier", "legendre"])
@pytest.mark.parametrize("dim,n", [(1, 32), (2, 12)])
def test_reference_bases_orthonormal_under_quadrature(kind, dim, n):
  grid = quadrature.make_grid(n, -0.5, 1.5, dim)
  u = quadrature.reference_basis(grid, kind, 7)
  gram = u.T @ (grid.w[:, None] * u)
  np.testing.assert_allclose(gram, np.eye(7), atol=1e-10)
  assert grid.w.sum() == pytest.approx(2.0 ** dim)


def test_reference_functions_match_closed_forms():
  grid = quadrature.make_grid(9, 0.0, 2.0)
  x = grid.x[:, 0]
  f = quadrature.reference_basis(grid, "fourier", 4)
  np.testing.assert_allclose(f[:, 2], np.sin(np.pi * x), atol=1e-12)  # sqrt(2/L) = 1
  leg = quadrature.reference_basis(grid, "legendre", 3)
  s = x - 1.0
  np.testing.assert_allclose(leg[:, 2], np.sqrt(5 / 2) * 0.5 * (3 * s ** 2 - 1), atol=1e-12)


def test_legendre_interpolation_and_derivative_exact_on_polynomials():
  grid = quadrature.make_grid(8, -1.0, 3.0)
  coef = np.array([0.3, -1.0, 0.5, 2.0, 0.0, 0.1, -0.2])  # degree 6 < 8
  poly = np.polynomial.Polynomial(coef)
  pts = np.linspace(-1, 3, 11)[:, None]
  vals = poly(grid.x[:, 0])
  np.testing.assert_allclose(quadrature.legendre_interp(grid, pts) @ vals, poly(pts[:, 0]),
                             atol=1e-9)
  np.testing.assert_allclose(quadrature.legendre_interp(grid, pts, derivative=0) @ vals,
                             poly.deriv()(pts[:, 0]), atol=1e-8)


def test_bad_domain_and_basis_are_named():
  with pytest.raises(ValueError, match="empty interval"):
    quadrature.make_grid(8, 1.0, 1.0)
  with pytest.raises(ValueError, match="'wavelet'"):
    quadrature.reference_basis(quadrature.make_grid(8, 0, 1), "wavelet", 3)
  with pytest.raises(ValueError, match="dimension"):
    quadrature.make_grid(4, 0, 1, dim=3)


# --- the generator and its closed-form group maps ---------------------------------------

def _kernel_operator(a, b, x, w):
  """(K f)(x_i) = sum_j K(x_i, x_j) w_j f_j with K built pointwise from the kernel formula."""
  n = x.size
  k = np.zeros((n, n))
  for i in range(n):
    for j in range(n):
      k[i, j] = np.sum(a[i] * b[j] - b[i] * a[j])
  return k * w[None, :]


def test_generator_is_skew_adjoint_in_the_weighted_inner_product():
  rng = np.random.default_rng(0)
  grid = quadrature.make_grid(10, 0.0, 2.0)
  a, b = rng.normal(size=(10, 2)), rng.normal(size=(10, 2))
  kop = _kernel_operator(a, b, grid.x[:, 0], grid.w)
  f, g = rng.normal(size=10), rng.normal(size=10)
  inner = lambda u, v: np.sum(grid.w * u * v)  # noqa: E731
  assert inner(kop @ f, g) == pytest.approx(-inner(f, kop @ g), abs=1e-10)
  # The weighted-coordinate matrix of the method is the same operator.
  sw = grid.sqrt_w
  kw = np.asarray(lowrank.skew_matrix(sw[:, None] * a, sw[:, None] * b))
  np.testing.assert_allclose(kw @ (sw * f), sw * (kop @ f), atol=1e-10)
  np.testing.assert_allclose(kw, -kw.T, atol=1e-12)


@pytest.mark.parametrize("scheme", ["exp", "cayley"])
@pytest.mark.parametrize("r,h", [(1, 0.3), (2, 1.0), (3, 0.05)])
def test_lowrank_group_map_equals_dense_reference(scheme, r, h):
  rng = np.random.default_rng(r)
  n, m = 12, 4
  a, b = rng.normal(size=(n, r)) / 2, rng.normal(size=(n, r)) / 2
  u = np.linalg.qr(rng.normal(size=(n, m)))[0]
  k = a @ b.T - b @ a.T
  if scheme == "exp":
    ref = scipy.linalg.expm(h * k) @ u
  else:
    ref = np.linalg.solve(np.eye(n) - 0.5 * h * k, (np.eye(n) + 0.5 * h * k) @ u)
  got = lowrank.apply(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                      jnp.asarray(u, jnp.float32), h, scheme)
  np.testing.assert_allclose(np.asarray(got), ref, atol=2e-5)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 40.0, 500.0])
def test_small_expm_matches_scipy(scale):
  # The matrices phi1 sees: h J G (G = Z^T Z), similar to a skew matrix, so bounded e^M.
  rng = np.random.default_rng(1)
  z = rng.normal(size=(20, 8))
  j = np.block([[np.zeros((4, 4)), np.eye(4)], [-np.eye(4), np.zeros((4, 4))]])
  a = scale / 40 * j @ z.T @ z
  got = np.asarray(lowrank.expm_small(jnp.asarray(a, jnp.float32)))
  ref = scipy.linalg.expm(a)
  np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())


@pytest.mark.parametrize("scheme", ["cayley", "exp"])
def test_integrator_keeps_orthonormality_over_long_paths(scheme):
  grid = quadrature.make_grid(24, 0.0, 1.0)
  s = jnp.asarray(methods.normalized_coords(grid))
  sw = jnp.asarray(grid.sqrt_w, jnp.float32)
  u0 = jnp.asarray(grid.sqrt_w[:, None] * quadrature.reference_basis(grid, "fourier", 6),
                   jnp.float32)
  params = generator.init_mlp(jax.random.key(3), 1, 2, 16, 2, 3, out_scale=3.0)
  u1 = generator.integrate(params, s, sw, u0, 1000, 3, scheme)
  assert float(jnp.abs(u1 - u0).max()) > 0.3  # the path really moves the basis
  np.testing.assert_allclose(np.asarray(u1.T @ u1), np.eye(6), atol=1e-5)


def test_midpoint_integrator_is_second_order_against_dense_solution():
  grid = quadrature.make_grid(10, 0.0, 1.0)
  s = jnp.asarray(methods.normalized_coords(grid))
  sw = grid.sqrt_w
  u0 = np.linalg.qr(np.random.default_rng(0).normal(size=(10, 3)))[0]
  params = generator.init_mlp(jax.random.key(1), 1, 1, 8, 1, 2, out_scale=2.0)

  ab = jax.jit(lambda t: generator.ab(params, s, t, 2))

  def dense(n_sub):  # independent: products of dense expm of the midpoint generator
    u = u0.copy()
    for i in range(n_sub):
      a, b = ab((i + 0.5) / n_sub)
      k = np.asarray(lowrank.skew_matrix(sw[:, None] * np.asarray(a), sw[:, None] * np.asarray(b)),
                     np.float64)
      u = scipy.linalg.expm(k / n_sub) @ u
    return u

  truth = dense(256)
  run = jax.jit(lambda k: generator.integrate(  # one compile: steps is a traced lane value
      params, s, jnp.asarray(sw, jnp.float32), jnp.asarray(u0, jnp.float32), 16, 2, "exp",
      steps=k))
  errs = [np.abs(np.asarray(run(jnp.float32(k))) - truth).max() for k in (4, 8, 16)]
  assert errs[0] > 1e-4
  assert errs[0] / errs[1] > 3.0 and errs[1] / errs[2] > 3.0  # ~4x per halving


def test_masked_rank_and_steps_lanes_equal_plain_runs():
  grid = quadrature.make_grid(12, 0.0, 1.0)
  s = jnp.asarray(methods.normalized_coords(grid))
  sw = jnp.asarray(grid.sqrt_w, jnp.float32)
  u0 = jnp.eye(12, 4)
  params = generator.init_mlp(jax.random.key(0), 1, 2, 8, 1, 2, out_scale=1.0)
  plain = generator.integrate(params, s, sw, u0, 5, 2, "cayley")
  padded = generator.integrate(params, s, sw, u0, 9, 2, "cayley", steps=jnp.float32(5))
  np.testing.assert_allclose(np.asarray(padded), np.asarray(plain), atol=1e-6)
  # rank=1 of a 2-pair network equals a network whose second pair is zeroed.
  zeroed = jax.tree.map(lambda x: x, params)
  last = zeroed["layers"][-1]
  keep = jnp.asarray([1.0, 0.0, 1.0, 0.0])  # outputs are [a_1, a_2, b_1, b_2]
  zeroed["layers"][-1] = {"w": last["w"] * keep[None, :], "b": last["b"] * keep}
  np.testing.assert_allclose(
      np.asarray(generator.integrate(params, s, sw, u0, 5, 2, "cayley", rank=1)),
      np.asarray(generator.integrate(zeroed, s, sw, u0, 5, 2, "cayley")), atol=1e-6)


# --- targets against closed forms ---------------------------------------------------------

def _target_cfg():
  return load_config("").target


@pytest.mark.parametrize("name", ["bm", "bridge"])
def test_kl_closed_form_is_eigenpair_of_the_sampled_covariance(name):
  p = targets.make_problem(name, _target_cfg(), 96)
  # int k(x, y) phi_k(y) dy = lambda_k phi_k(x), with k from the covariance formula.
  resid = p.cov_w @ p.truth_w - p.truth_w * p.eigvals
  assert np.abs(resid).max() < 2e-3 * p.eigvals[0]
  assert p.cov_w.trace() == pytest.approx(p.total_var, rel=1e-6)


def test_hermite_functions_are_oscillator_eigenfunctions():
  p = targets.make_problem("oscillator", _target_cfg(), 64)
  # Tiny tails at the box edge meet the large spectral derivative there: 1e-4 scale.
  np.testing.assert_allclose(p.op_w @ p.truth_w, p.truth_w * p.eigvals, atol=2e-4)
  np.testing.assert_allclose(np.linalg.eigvalsh(p.op_w)[:8], np.arange(8) + 0.5, atol=1e-8)


def test_schroedinger_simulation_is_unitary_and_conserves_energy():
  cfg = _target_cfg()
  p = targets.make_problem("schrodinger", cfg, 32)
  d = targets.sample_data(p, cfg, seed=0)["train"].astype(np.float64)
  psi = d[0] + 1j * d[1]  # (k, T, N)
  norms = np.sum(np.abs(psi) ** 2, -1)
  np.testing.assert_allclose(norms, 1.0, atol=1e-5)
  # Unitary and diagonal in H's eigenbasis: every mode's weight |<phi_k, psi_t>| (hence
  # the energy sum_k E_k |c_k|^2) is constant in time. Checked per mode: the data is
  # float32 and H's largest eigenvalues (~1e4) would swamp a direct energy sum.
  coeff = np.abs(psi @ p.truth_w)  # (k, T, 2m)
  np.testing.assert_allclose(coeff, np.repeat(coeff[:, :1], coeff.shape[1], 1), atol=2e-5)
  assert coeff[:, 0, 0].min() > 0.1  # the ground state is excited


def test_dynamics_objective_vanishes_exactly_on_modes():
  cfg = _target_cfg()
  p = targets.make_problem("schrodinger", cfg, 32)
  d = targets.sample_data(p, cfg, seed=1)["train"]
  lost, resid = targets.dynamics_terms(p.truth_w[:, :p.m].astype(np.float32), d)
  assert float(resid) < 1e-5 and float(lost) < 0.05
  mixed = p.truth_w[:, :p.m] @ scipy.stats.ortho_group.rvs(p.m, random_state=0)
  assert float(targets.dynamics_terms(mixed.astype(np.float32), d)[1]) > 10 * float(resid)


def test_sheet_samples_have_the_kronecker_covariance():
  cfg = _target_cfg()
  p = targets.make_problem("sheet", cfg, 6)
  f = np.concatenate([targets.sample_data(p, cfg, s)["train"] for s in range(8)]
                     ).astype(np.float64)
  emp = f.T @ f / f.shape[0]
  assert np.abs(emp - p.cov_w).max() < 0.1 * np.abs(p.cov_w).max()


def test_principal_angle_of_a_known_rotation():
  theta = 0.3
  u = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
  v = np.array([[1.0, 0.0], [0.0, np.cos(theta)], [0.0, np.sin(theta)]])
  assert targets.sin_max_angle(u, v) == pytest.approx(np.sin(theta), abs=1e-7)


# --- baselines -------------------------------------------------------------------------

def test_stiefel_cayley_finds_the_eigenvectors_of_a_small_operator():
  rng = np.random.default_rng(0)
  q = np.linalg.qr(rng.normal(size=(10, 10)))[0]
  evals = np.arange(1.0, 11.0)
  h = (q * evals) @ q.T
  coef = jnp.asarray(targets.brockett_weights(3))
  x0 = np.linalg.qr(rng.normal(size=(10, 3)))[0]
  x, losses = methods.stiefel_chunk(jnp.asarray(x0[None, None], jnp.float32),
                                    jnp.asarray([0.1]), jnp.asarray(h[None], jnp.float32),
                                    coef, kind="operator", n=3000)
  x = np.asarray(x[0, 0])
  # float32 round-off accumulates over the chunk (1.4e-5 seen in one CI run); a step that
  # leaves the manifold would be off by O(lr) = 1e-1, far above this bound.
  np.testing.assert_allclose(x.T @ x, np.eye(3), atol=1e-4)
  assert np.all(np.diff(np.asarray(losses[0, 0])[:50]) <= 1e-6)
  np.testing.assert_allclose(np.abs(np.sum(x * q[:, :3], 0)), 1.0, atol=1e-3)


def test_exact_dmd_and_pod_of_the_snapshots():
  cfg = _target_cfg()
  p = targets.make_problem("schrodinger", cfg, 32)
  d = targets.sample_data(p, cfg, seed=0)["train"]
  u = methods.exact_basis(p, d)
  # Rank-m DMD is not exact here (modes beyond m carry a little energy), but close.
  assert targets.metrics(p, u)["purity"] > 0.99
  assert targets.metrics(p, p.ref_w)["purity"] < 0.5
  # POD (eigh of the real second moment) = the leading left singular vectors of the real
  # and imaginary snapshots side by side (an independent NumPy route), orthonormal, and no
  # m-dimensional basis (DMD, the modes) captures more snapshot energy.
  pod = controls.pod_basis(p, d)
  snaps = np.concatenate([x.reshape(-1, p.grid.size) for x in d.astype(np.float64)]).T
  svd = np.linalg.svd(snaps, full_matrices=False)[0][:, :p.m]
  np.testing.assert_allclose(pod @ pod.T, svd @ svd.T, atol=1e-8)
  np.testing.assert_allclose(pod.T @ pod, np.eye(p.m), atol=1e-12)
  captured = lambda b: np.sum((snaps.T @ np.linalg.qr(b)[0]) ** 2)  # noqa: E731  (span's)
  assert captured(pod) >= max(captured(u), captured(p.truth_w[:, :p.m])) - 1e-9


def test_riemannian_gd_armijo_finds_the_eigenvectors_of_a_small_operator():
  rng = np.random.default_rng(1)
  q = np.linalg.qr(rng.normal(size=(10, 10)))[0]
  h = (q * np.arange(1.0, 11.0)) @ q.T
  coef = targets.brockett_weights(3).astype(np.float64)
  f = lambda x: np.sum(coef * np.sum(x * (h @ x), 0)) / coef.sum()  # noqa: E731
  vg = lambda x: (f(x), 2 * h @ x * coef[None, :] / coef.sum())  # noqa: E731
  x, losses, _, gnorm = controls.rgd_armijo(vg, f, np.linalg.qr(rng.normal(size=(10, 3)))[0],
                                            1000)
  assert np.all(np.diff(losses) <= 0)  # Armijo: every accepted step decreases f
  np.testing.assert_allclose(x.T @ x, np.eye(3), atol=1e-12)
  np.testing.assert_allclose(np.abs(np.sum(x * q[:, :3], 0)), 1.0, atol=1e-8)
  assert gnorm < 1e-6


# --- data loader, training, resume and bad input --------------------------------------

def test_loader_reads_npz_and_csv_and_rejects_bad_files(tmp_path):
  rng = np.random.default_rng(0)
  x = np.linspace(0, 2, 30)
  f = rng.normal(size=(40, 1)) * np.sin(x) + 0.3 * rng.normal(size=(40, 1)) * np.cos(3 * x)
  np.savez(tmp_path / "c.npz", x=x, f=f)
  np.savetxt(tmp_path / "c.csv", np.vstack([x, f]), delimiter=",")
  cfg = _target_cfg()
  pa, sa = data_lib.file_problem(str(tmp_path / "c.npz"), cfg, 16)
  pb, sb = data_lib.file_problem(str(tmp_path / "c.csv"), cfg, 16)
  np.testing.assert_allclose(sa["train"], sb["train"], atol=1e-5)
  assert sa["train"].shape == (24, 16) and sa["test"].shape == (8, 16)
  # Two functions explain the data: the empirical KL's first two capture ~all variance.
  assert pa.eigvals[:2].sum() / pa.total_var > 0.99
  with pytest.raises(FileNotFoundError, match="nope.npz"):
    data_lib.read_curves(str(tmp_path / "nope.npz"))
  np.savez(tmp_path / "bad.npz", x=x, g=f)
  with pytest.raises(ValueError, match="'f'"):
    data_lib.read_curves(str(tmp_path / "bad.npz"))
  np.savez(tmp_path / "shape.npz", x=x[:-1], f=f)
  with pytest.raises(ValueError, match="do not match"):
    data_lib.read_curves(str(tmp_path / "shape.npz"))


def test_config_errors_are_named():
  with pytest.raises(ValueError, match="'moon'"):
    load_config("target=moon")
  with pytest.raises(ValueError, match="data_path"):
    load_config("target=file")


def test_training_resumes_exactly_and_learns(tmp_path):
  config = load_config("smoke")
  problem, data = experiment.setup(config, "oscillator", seeds=2)
  spec = methods.spec_from(config.model)
  hp = experiment.variants(problem, spec, (0.01,))
  from jaxpapers.core import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from tests import _runs  # pylint: disable=g-import-not-at-top
  w = lambda d: metrics_lib.MetricsWriter(str(tmp_path / d), verbose=False)  # noqa: E731
  full = experiment.fit_path(config, problem, data, spec, hp, 20, chunk=10,
                             workdir=str(tmp_path / "a"), writer=w("a"))
  experiment.fit_path(config, problem, data, spec, hp, 10, chunk=10,
                      workdir=str(tmp_path / "b"), writer=w("b"))
  resumed = experiment.fit_path(config, problem, data, spec, hp, 20, chunk=10,
                                workdir=str(tmp_path / "b"), writer=w("b"))
  _runs.assert_same_metrics(tmp_path / "b", tmp_path / "a")
  for x, y in zip(jax.tree.leaves(full["params"]), jax.tree.leaves(resumed["params"])):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  curve = full["curves"][:, 0]
  assert np.all(np.isfinite(curve)) and np.all(curve[:, -1] < curve[:, 0])
  assert full["u"].shape == (2, 1, problem.grid.size, problem.m)
  u = full["u"][0, 0]
  np.testing.assert_allclose(u.T @ u, problem.ref_w.T @ problem.ref_w, atol=1e-5)


def test_long_run_cut_by_its_time_budget_resumes_exactly(tmp_path):
  """The issue-47 long-run driver (Adam state + loss history in one checkpoint): a run
  stopped after its first chunk (exit 3) and resumed gives the uninterrupted run's rows
  and curves; a new cell forked from the cut run's lanes in another order (`--fork`)
  continues each lane to its own rows; a fork whose initialization differs from its
  source (1 (a, b) pair vs the source's 2), and a cap that is not a multiple of the
  chunk, are refused (exit 2)."""
  import json  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.lie_bases import longrun  # pylint: disable=g-import-not-at-top
  args = ["--config=configs/lie_bases.py:smoke,n=12,width=8,int_steps=2,n_train=16",
          "--target=bm", "--lrs=0.01", "--cap=20", "--chunk=10", "--tol=0"]
  run = lambda d, *extra: longrun.main(args + [f"--workdir={tmp_path / d}", *extra])  # noqa: E731
  assert run("cut", "--ranks=1,2", "--budget_s=0") == 3
  fork = f"--fork={tmp_path / 'cut'}"
  assert run("fork_bad", fork, "--ranks=1") == 2
  assert run("fork", fork, "--ranks=2,1") == 0  # lanes (r=2, r=1): the cut run's reversed
  assert run("cut", "--ranks=1,2") == 0 and run("straight", "--ranks=1,2") == 0
  cut, straight, forked = (json.load(open(tmp_path / d / "raw.json"))
                           for d in ("cut", "straight", "fork"))
  assert [r["steps"] for r in cut["rows"]] == [20, 20]
  for a, b in zip(cut["rows"], straight["rows"]):
    assert a["grid_func_err"] == b["grid_func_err"] and a["fine_orth_err"] == b["fine_orth_err"]
  assert cut["curves_geomspaced"] == straight["curves_geomspaced"]
  assert cut["selections"] == straight["selections"]
  assert cut["rows"][0]["grid_func_err"] != cut["rows"][1]["grid_func_err"]  # ranks differ
  for a, b in zip(forked["rows"][::-1], cut["rows"]):
    assert a["setting"] == b["setting"] and a["steps"] == 20
    np.testing.assert_allclose(a["grid_func_err"], b["grid_func_err"], rtol=1e-5)
    np.testing.assert_allclose(a["lanes"][0]["train_gap"], b["lanes"][0]["train_gap"],
                               rtol=1e-4, atol=1e-7)
  assert run("bad", "--cap=25") == 2


def test_seeds_spread_over_8_devices_equal_one_device():
  """One study cell (3 seeds x 2 learning rates; the learned path, the Stiefel-Cayley,
  Riemannian Adam and neural-QR baselines) spread over the 8 forced devices (one seed per
  device) gives the 1-device `jit(vmap)` numbers."""
  assert jax.device_count() == 8
  config = load_config("smoke,n=12,width=8,int_steps=2,n_train=16,seeds=3")
  problem, data = experiment.setup(config, "bm")
  spec = methods.spec_from(config.model)
  hp = experiment.variants(problem, spec, (3e-3, 1e-2))
  s, sqrt_w, _ = experiment.geometry(problem)
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  keys = jax.vmap(jax.random.key)(jnp.arange(3))
  params = jax.vmap(lambda k: methods.init_path(k, problem.grid.dim, spec))(keys)
  state = jax.vmap(jax.vmap(methods.path_state, (None, 0)), (0, None))(params, hp["lr"])
  train, val = jnp.asarray(data["train"]), jnp.asarray(data["val"])
  args = (state, hp, s, sqrt_w, train, val, coef)
  spread = methods.path_chunk(*args, kind=problem.kind, spec=spec, n=6)
  ref = jax.jit(jax.vmap(methods.path_seed(problem.kind, spec, 6),
                         in_axes=methods.SEED_AXES))(*args)
  # Over several devices (core.sharding.spread: all 8 with padding, or one seed per
  # device where it puts n < D rows on the first n devices).
  assert len(spread[2].sharding.device_set) > 1 and len(ref[2].sharding.device_set) == 1
  assert spread[1].shape == (3, 2, 6)
  for a, b in zip(jax.tree.leaves(spread), jax.tree.leaves(ref)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  assert not np.allclose(np.asarray(spread[1][0]), np.asarray(spread[1][1]))  # seeds differ
  x0 = jnp.broadcast_to(jnp.asarray(problem.ref_w, jnp.float32), (3, 2) + problem.ref_w.shape)
  taus = jnp.asarray([1e-2, 1e-1])
  sx = methods.stiefel_chunk(jnp.array(x0), taus, train, coef, kind=problem.kind, n=6)
  rx = jax.jit(jax.vmap(methods.stiefel_seed(problem.kind, 6), in_axes=(0, None, 0, None)))(
      jnp.array(x0), taus, train, coef)
  for a, b in zip(jax.tree.leaves(sx), jax.tree.leaves(rx)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  # Riemannian Adam and the neural-QR baseline: the same check.
  st0 = methods.radam_init(jnp.array(x0))
  sa = methods.radam_chunk(st0, taus, train, coef, kind=problem.kind, n=6)
  ra = jax.jit(jax.vmap(methods.radam_seed(problem.kind, 6), in_axes=(0, None, 0, None)))(
      st0, taus, train, coef)
  assert len(sa[1].sharding.device_set) > 1
  # QR in another batch layout: float32 round-off up to ~4e-6 after 6 steps.
  for a, b in zip(jax.tree.leaves(sa), jax.tree.leaves(ra)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=2e-5)
  qp = jax.vmap(lambda k: methods.qr_init(k, 1, problem.m, spec))(keys)
  qst = jax.vmap(jax.vmap(methods.path_state, (None, 0)), (0, None))(qp, taus)
  _, _, ref0 = experiment.geometry(problem)
  qargs = (qst, taus, s, sqrt_w, ref0, train, val, coef)
  sq = methods.qr_chunk(*qargs, kind=problem.kind, features=spec.features, n=6)
  rq = jax.jit(jax.vmap(methods.qr_seed(problem.kind, spec.features, 6),
                        in_axes=(0, None, None, None, None, 0, 0, None)))(*qargs)
  for a, b in zip(jax.tree.leaves(sq), jax.tree.leaves(rq)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=2e-5)


# --- the baselines added for issue 47 and the convergence rule ----------------------------

def _np_radam(x, g_fn, lr, steps, b1=0.9, b2=0.999, eps=1e-8):
  """Riemannian Adam on the Stiefel manifold written from Becigneul & Ganea (2019) / geoopt
  in float64 NumPy: projected gradient, scalar second moment, QR retraction, moment
  transported by projection."""
  proj = lambda x, u: u - x @ (0.5 * (x.T @ u + u.T @ x))  # noqa: E731
  m, v = np.zeros_like(x), 0.0
  for t in range(1, steps + 1):
    rg = proj(x, g_fn(x))
    m = b1 * m + (1 - b1) * rg
    v = b2 * v + (1 - b2) * np.sum(rg * rg)
    d = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    q, r = np.linalg.qr(x - lr * d)
    x = q * np.sign(np.diag(r))[None, :]
    m = proj(x, m)
  return x


def test_riemannian_adam_matches_numpy_and_finds_eigenvectors():
  rng = np.random.default_rng(0)
  q = np.linalg.qr(rng.normal(size=(10, 10)))[0]
  h = (q * np.arange(1.0, 11.0)) @ q.T
  coef = targets.brockett_weights(3)
  x0 = np.linalg.qr(rng.normal(size=(10, 3)))[0]
  grad = lambda x: 2 * h @ x * coef[None, :] / coef.sum()  # noqa: E731  (operator objective)
  run = lambda n: methods.radam_chunk(  # noqa: E731
      methods.radam_init(jnp.asarray(x0[None, None], jnp.float32)), jnp.asarray([0.05]),
      jnp.asarray(h[None], jnp.float32), jnp.asarray(coef), kind="operator", n=n)
  st, losses = run(5)
  np.testing.assert_allclose(np.asarray(st["x"][0, 0]), _np_radam(x0, grad, 0.05, 5), atol=1e-5)
  st, losses = run(1500)
  x = np.asarray(st["x"][0, 0])
  np.testing.assert_allclose(x.T @ x, np.eye(3), atol=1e-5)
  np.testing.assert_allclose(np.abs(np.sum(x * q[:, :3], 0)), 1.0, atol=1e-2)


def test_neural_qr_basis_is_gram_schmidt_under_the_quadrature_on_any_grid():
  config = load_config("smoke")
  spec = methods.spec_from(config.model)
  params = methods.qr_init(jax.random.key(0), 1, 4, spec._replace(out_scale=2.0))
  rs = []
  for n in (80, 160):  # a random 6-frequency MLP needs ~80 nodes to be integrated to 1e-3
    grid = quadrature.make_grid(n, 0.0, 1.0)
    s = jnp.asarray(methods.normalized_coords(grid))
    ref = grid.sqrt_w[:, None] * quadrature.reference_basis(grid, "fourier", 4)
    q = np.asarray(methods.qr_basis(params, s, jnp.asarray(grid.sqrt_w, jnp.float32),
                                    jnp.asarray(ref, jnp.float32), spec.features), np.float64)
    f = ref + grid.sqrt_w[:, None] * np.asarray(generator.net(params, s, 0.0, spec.features))
    # Independent classical Gram-Schmidt of the functions in the weighted inner product.
    gs = np.zeros_like(f)
    for k in range(4):
      v = f[:, k] - gs[:, :k] @ (gs[:, :k].T @ f[:, k])
      gs[:, k] = v / np.linalg.norm(v)
    np.testing.assert_allclose(q, gs, atol=2e-5)
    rs.append(gs.T @ f)  # R = the Gram-Schmidt coefficients: integrals of the functions
  # The same functions on both grids: the quadrature integrals (R) agree.
  np.testing.assert_allclose(rs[0], rs[1], atol=1e-3)


def test_lobpcg_finds_the_oscillator_eigenvalues():
  p = targets.make_problem("oscillator", _target_cfg(), 64)
  for pre in ("none", "kinetic"):
    u, curve = methods.lobpcg(p, p.ref_w, pre, 500)
    np.testing.assert_allclose(u.T @ u, np.eye(p.m), atol=1e-10)
    np.testing.assert_allclose(np.sum(u * (p.op_w @ u), 0), np.arange(p.m) + 0.5, atol=1e-6)
  assert curve[0] > curve[-1]


def test_multilag_residual_separates_mixtures_the_one_step_residual_misses():
  cfg = _target_cfg()
  p = targets.make_problem("schrodinger", cfg, 32)
  d = targets.sample_data(p, cfg, seed=0)["train"]
  modes = p.truth_w[:, :p.m].astype(np.float64)
  mixed = modes.copy()  # rotate modes 2 and 3 (E ~ 2.6, 4.3) by 45 degrees into each other
  mixed[:, 2], mixed[:, 3] = ((modes[:, 2] + modes[:, 3]) / np.sqrt(2),
                              (modes[:, 2] - modes[:, 3]) / np.sqrt(2))
  lags = tuple(cfg.lags)
  for lg in ((1,), lags):
    assert float(targets.dynamics_terms(modes.astype(np.float32), d, lg)[1]) < 1e-5
  one = float(targets.dynamics_terms(mixed.astype(np.float32), d, (1,))[1])
  many = float(targets.dynamics_terms(mixed.astype(np.float32), d, lags)[1])
  assert many > 10 * one
  # Closed form of one lag for a mixture of two modes whose coefficients turn at rates
  # th2, th3 per step with energy shares q, 1 - q: residual ~ 4 q (1 - q) sin^2((th2 - th3)
  # / 2) <= sin^2(...), for each of the 2 mixed functions, averaged over m (the others
  # are pure); finite trajectories add small cross terms, hence the 1.5 margin.
  th = 2 * np.arctan(0.5 * cfg.dt * p.eigvals[2:4])  # Crank-Nicolson phase per step
  assert 0 < one < 1.5 * 2 * np.sin(0.5 * (th[0] - th[1])) ** 2 / p.m


def test_until_flat_stops_when_the_gap_stops_falling():
  # gap(t) = 1 / t: its relative fall over a chunk of C ending at t is C / (t - C), below
  # 0.1 first at t > 110; chunks of 10 end at 120.
  t = {"n": 0}

  def advance(n):
    steps = np.arange(t["n"] + 1, t["n"] + n + 1)
    t["n"] += n
    return (0.5 + 1.0 / steps)[None, None, :].repeat(2, 0)

  curves, done = experiment.until_flat(advance, lambda: np.zeros((2, 1)), np.full(2, 0.5),
                                       1000, 10, 0.1)
  assert done == 120 and curves.shape == (2, 1, 120)
  t["n"] = 0
  assert experiment.until_flat(advance, lambda: np.zeros((2, 1)), np.full(2, 0.5), 50, 10,
                               None)[1] == 50
