"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): targets.

Each target is a `Problem` at one quadrature resolution: the reference basis, the true
target basis where it is known, the objective's data, and metrics. Three kinds:

* `pca` (principal components of a functional data set): zero-mean Gaussian-process
  samples whose Karhunen-Loeve expansion is known in closed form. Brownian motion on
  [0, 1] (k(s, t) = min(s, t); phi_k = sqrt(2) sin((k - 1/2) pi x), lambda_k =
  1 / ((k - 1/2)^2 pi^2)), the Brownian bridge (min(s, t) - s t; sqrt(2) sin(k pi x),
  1 / (k pi)^2) and, on the square, the Brownian sheet (product kernel; products of the
  1-D eigenpairs). Samples are drawn from the covariance at the nodes (Cholesky), not from
  the expansion, so the expansion is an independent truth. Objective: Brockett-weighted
  explained variance sum_k c_k <u_k, C u_k> with c decreasing, maximal exactly at the
  ordered leading eigenfunctions.
* `operator` (eigenfunctions of a linear operator): the harmonic oscillator
  H = -1/2 d^2/dx^2 + x^2/2 on [-L, L] (Hermite functions, eigenvalues n + 1/2). The
  quadratic form <u, H u> = 1/2 ||u'||^2 + <u, V u> uses the spectral derivative of the
  interpolant; objective: Brockett-weighted Rayleigh quotients (minimal at the ordered
  lowest eigenfunctions).
* `dynamics` (modes of an energy-preserving simulation): the linear Schroedinger equation
  i psi_t = H psi with the anharmonic H = -1/2 d^2/dx^2 + x^2/2 + kappa x^4, simulated by
  Crank-Nicolson (unitary: norm and energy are conserved exactly) from random thermal
  initial states. The evolution is unitary, so its modes (the eigenfunctions of H) are
  orthonormal. Objective (ours): lost snapshot energy 1 - captured + the mean over basis
  functions and over lags l (1, 2, 4, ... snapshots) of the relative residual of the best
  diagonal l-step propagator (zero exactly when every basis function is a mode). A
  mixture of two modes with energies E1, E2 dephases by (E1 - E2) l dt, so one step of
  dt = 0.05 barely penalises it and the long lags separate the modes. Truth: the
  eigenvectors of the simulator's own H.
"""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from jaxpapers.papers.lie_bases import quadrature

TARGETS = ("bm", "bridge", "sheet", "oscillator", "schrodinger")


@dataclasses.dataclass(frozen=True)
class Problem:
  name: str
  kind: str  # pca | operator | dynamics
  grid: quadrature.Grid
  m: int
  ref_w: np.ndarray  # (N, m) reference basis, weighted coordinates
  truth_w: np.ndarray  # (N, M >= m) target basis (weighted), ordered; M > m for dynamics
  ordered: bool  # whether the target basis functions are individually identified in order
  eigvals: np.ndarray  # (M,) target eigenvalues (covariance or operator)
  cov_w: np.ndarray | None = None  # pca: population covariance W^1/2 C W^1/2
  total_var: float = 0.0  # pca: int k(x, x) dx
  op_w: np.ndarray | None = None  # operator / dynamics: W^-1/2 H W^-1/2 quadratic form
  lags: tuple = (1,)  # dynamics: propagator lags (in snapshots) of the residual


def domain(name: str, cfg) -> tuple[float, float, int]:
  if name in ("bm", "bridge"):
    return 0.0, 1.0, 1
  if name == "sheet":
    return 0.0, 1.0, 2
  if name in ("oscillator", "schrodinger"):
    return -cfg.half_width, cfg.half_width, 1
  raise ValueError(f"unknown target {name!r}; known: {', '.join(TARGETS)}")


def _kl_1d(x: np.ndarray, count: int, bridge: bool):
  k = np.arange(1, count + 1)
  freq = (k if bridge else k - 0.5) * np.pi
  return np.sqrt(2.0) * np.sin(np.outer(x, freq)), 1.0 / freq ** 2


def _cov_1d(x: np.ndarray, bridge: bool) -> np.ndarray:
  c = np.minimum.outer(x, x)
  return c - np.outer(x, x) if bridge else c


def hermite_functions(x: np.ndarray, count: int) -> np.ndarray:
  """psi_0..psi_{count-1} by the stable normalized recurrence."""
  out = np.zeros((x.size, count))
  out[:, 0] = np.pi ** -0.25 * np.exp(-0.5 * x ** 2)
  if count > 1:
    out[:, 1] = np.sqrt(2.0) * x * out[:, 0]
  for n in range(1, count - 1):
    out[:, n + 1] = (np.sqrt(2.0 / (n + 1)) * x * out[:, n]
                     - np.sqrt(n / (n + 1)) * out[:, n - 1])
  return out


def schrodinger_operator(grid: quadrature.Grid, kappa: float) -> np.ndarray:
  """W^-1/2 (1/2 D^T W D + W V) W^-1/2: the form of -1/2 d^2 + x^2/2 + kappa x^4."""
  x = grid.x[:, 0]
  d = quadrature.legendre_interp(grid, grid.x, derivative=0)
  sw = grid.sqrt_w
  dw = sw[:, None] * d / sw[None, :]
  h = 0.5 * dw.T @ dw + np.diag(0.5 * x ** 2 + kappa * x ** 4)
  return 0.5 * (h + h.T)


def make_problem(name: str, cfg, n: int) -> Problem:
  """The target at n nodes per axis (cfg: the config's `target` group)."""
  lo, hi, dim = domain(name, cfg)
  grid = quadrature.make_grid(n, lo, hi, dim)
  m = cfg.m2d if dim == 2 else cfg.m
  ref_w = grid.sqrt_w[:, None] * quadrature.reference_basis(grid, cfg.reference, m)
  sw = grid.sqrt_w
  if name in ("bm", "bridge"):
    bridge = name == "bridge"
    x = grid.x[:, 0]
    phi, lam = _kl_1d(x, m, bridge)
    cov = sw[:, None] * _cov_1d(x, bridge) * sw[None, :]
    total = 1.0 / 6.0 if bridge else 0.5
    return Problem(name, "pca", grid, m, ref_w, sw[:, None] * phi, True, lam, cov, total)
  if name == "sheet":
    count = 2 * m
    pa, la = _kl_1d(grid.x[:, 0], count, False)
    pb, lb = _kl_1d(grid.x[:, 1], count, False)
    pairs = sorted(((lam_i * lam_j, i, j) for i, lam_i in enumerate(la)
                    for j, lam_j in enumerate(lb)), reverse=True)[:m]
    lam = np.array([p[0] for p in pairs])
    phi = np.stack([pa[:, i] * pb[:, j] for _, i, j in pairs], -1)
    c1 = _cov_1d(quadrature.gauss_legendre(n, lo, hi)[0], False)
    cov = sw[:, None] * np.kron(c1, c1) * sw[None, :]
    # Degenerate pairs lambda_ij = lambda_ji: only the subspace is identified.
    return Problem(name, "pca", grid, m, ref_w, sw[:, None] * phi, False, lam, cov, 0.25)
  if name == "oscillator":
    phi = hermite_functions(grid.x[:, 0], m)
    op = schrodinger_operator(grid, 0.0)
    return Problem(name, "operator", grid, m, ref_w, sw[:, None] * phi, True,
                   np.arange(m) + 0.5, op_w=op)
  if name == "schrodinger":
    op = schrodinger_operator(grid, cfg.kappa)
    evals, evecs = np.linalg.eigh(op)
    count = 2 * m
    # Fix each mode's sign (positive weighted sum of x * mode for odd, mode for even).
    vec = evecs[:, :count] * np.sign(np.sum(evecs[:, :count] * (1 + grid.x[:, :1]), 0))
    return Problem(name, "dynamics", grid, m, ref_w, vec, False, evals[:count], op_w=op,
                   lags=tuple(int(k) for k in cfg.lags))
  raise ValueError(f"unknown target {name!r}; known: {', '.join(TARGETS)}")


def _rng(name: str, seed: int) -> np.random.Generator:
  """Data randomness from (target, seed) only: a run alone equals the same run in a batch."""
  return np.random.default_rng([zlib.crc32(name.encode()), seed])


def sample_data(problem: Problem, cfg, seed: int) -> dict:
  """Per-seed train / val / test data in weighted coordinates, as float32 arrays."""
  rng = _rng(problem.name, seed)
  sw = problem.grid.sqrt_w
  if problem.kind == "pca":
    counts = dict(train=cfg.n_train, val=cfg.n_val, test=cfg.n_test)
    if problem.grid.dim == 1:
      x = problem.grid.x[:, 0]
      chol = np.linalg.cholesky(_cov_1d(x, problem.name == "bridge") + 1e-10 * np.eye(x.size))
      draw = lambda k: rng.standard_normal((k, x.size)) @ chol.T  # noqa: E731
    else:
      x1 = quadrature.gauss_legendre(problem.grid.n, problem.grid.lo, problem.grid.hi)[0]
      l1 = np.linalg.cholesky(_cov_1d(x1, False) + 1e-10 * np.eye(x1.size))
      draw = lambda k: np.einsum(  # noqa: E731
          "ia,kab,jb->kij", l1, rng.standard_normal((k, x1.size, x1.size)), l1
      ).reshape(k, -1)
    return {split: (draw(k) * sw).astype(np.float32) for split, k in counts.items()}
  if problem.kind == "operator":
    # No data: the objective is the operator itself, identical for every split.
    op = problem.op_w.astype(np.float32)
    return {"train": op, "val": op, "test": op}
  if problem.kind == "dynamics":
    evals, evecs = np.linalg.eigh(problem.op_w)
    dt, steps = cfg.dt, cfg.snapshots
    # Crank-Nicolson propagator (unitary): the simulator. Initial states: e^{-beta H/2} xi.
    n = problem.grid.size
    a = np.eye(n) + 0.5j * dt * problem.op_w
    b = np.eye(n) - 0.5j * dt * problem.op_w
    prop = np.linalg.solve(a, b)
    thermal = (evecs * np.exp(-0.5 * cfg.beta * evals)) @ evecs.T
    out = {}
    for split, k in dict(train=cfg.n_traj, val=cfg.n_traj_val, test=cfg.n_traj_test).items():
      xi = rng.standard_normal((k, n)) + 1j * rng.standard_normal((k, n))
      psi = xi @ thermal.T
      psi /= np.linalg.norm(psi, axis=1, keepdims=True)
      traj = [psi]
      for _ in range(steps - 1):
        psi = psi @ prop.T
        traj.append(psi)
      traj = np.stack(traj, 1)  # (k, T, N)
      out[split] = np.stack([traj.real, traj.imag], 0).astype(np.float32)  # (2, k, T, N)
    return out
  raise ValueError(f"unknown problem kind {problem.kind!r}")


def brockett_weights(m: int) -> np.ndarray:
  """Distinct decreasing positive weights: the Brockett cost orders the eigenfunctions."""
  return ((2.0 * m - np.arange(m)) / (2.0 * m)).astype(np.float32)


def loss_kind(problem: Problem) -> str:
  """The static objective key the trainers take: the kind, plus the lags for dynamics
  ("dynamics:1,2,4"), hashable so it can be a jit static argument."""
  if problem.kind == "dynamics":
    return "dynamics:" + ",".join(str(k) for k in problem.lags)
  return problem.kind


def objective(kind: str, u_w, data, coef):
  """The loss to minimize for basis u_w (N, m) on one split's data (jax or numpy).

  kind: "pca", "operator" or "dynamics[:lags]" (`loss_kind`)."""
  import jax.numpy as jnp
  kind, _, lags = kind.partition(":")
  if kind == "pca":
    c = data @ u_w
    var = jnp.mean(c * c, axis=0)
    total = jnp.mean(jnp.sum(data * data, axis=1))
    return -jnp.sum(coef * var) / total
  if kind == "operator":
    rq = jnp.sum(u_w * (data @ u_w), axis=0)
    return jnp.sum(coef * rq) / jnp.sum(coef)
  if kind == "dynamics":
    lost, resid = dynamics_terms(u_w, data, tuple(int(k) for k in lags.split(",")) if lags
                                 else (1,))
    return lost + resid
  raise ValueError(f"unknown problem kind {kind!r}")


def curvature(kind: str, data: np.ndarray, coef: np.ndarray) -> float:
  """L: the largest curvature of the objective's quadratic part, a scale for GD steps.

  pca: 2 c_0 lambda_max(F^T F / n) / total; operator: 2 c_0 lambda_max(H) / sum c;
  dynamics: 2 lambda_max(snapshot second moment) / energy (its lost-energy term).
  """
  data = np.asarray(data, np.float64)
  if kind == "pca":
    gram = data.T @ data / data.shape[0]
    return float(2 * coef[0] * np.linalg.eigvalsh(gram)[-1] / np.trace(gram))
  if kind == "operator":
    return float(2 * coef[0] * np.linalg.eigvalsh(data)[-1] / np.sum(coef))
  snaps = data.reshape(2, -1, data.shape[-1])
  gram = snaps[0].T @ snaps[0] + snaps[1].T @ snaps[1]
  return float(2 * np.linalg.eigvalsh(gram)[-1] / np.trace(gram))


def dynamics_terms(u_w, data, lags=(1,)):
  """(1 - captured energy, diagonal-propagator residual) of snapshots (2, k, T, N).

  For each lag l the best diagonal propagator c_k(t + l) ~ lambda_k c_k(t) (one lambda
  per trajectory and basis function) is fitted in closed form; its residual is relative
  to the function's own coefficient energy, so weakly excited modes count as much as
  strong ones; mean over basis functions and lags, summed over trajectories.
  """
  import jax.numpy as jnp
  c = data[0] @ u_w + 1j * (data[1] @ u_w)  # (k, T, m)
  energy = jnp.sum(data * data, axis=(0, 3))  # (k, T)
  resid = []
  for lag in lags:
    x, y = c[:, :-lag], c[:, lag:]
    lam = jnp.sum(y * jnp.conj(x), axis=1) / (jnp.sum(jnp.abs(x) ** 2, axis=1) + 1e-12)
    per_mode = (jnp.sum(jnp.abs(y - lam[:, None, :] * x) ** 2, axis=(0, 1))
                / (jnp.sum(jnp.abs(y) ** 2, axis=(0, 1)) + 1e-12))
    resid.append(jnp.mean(per_mode))
  lost = 1.0 - jnp.sum(jnp.abs(c) ** 2) / jnp.sum(energy)
  return lost, sum(resid) / len(resid)


def sin_max_angle(u_w: np.ndarray, v_w: np.ndarray) -> float:
  """Sine of the largest principal angle between span(u) and span(v) (weighted)."""
  qu, _ = np.linalg.qr(u_w)
  qv, _ = np.linalg.qr(v_w)
  s = np.linalg.svd(qu.T @ qv, compute_uv=False)
  return float(np.sqrt(max(0.0, 1.0 - float(np.min(s)) ** 2)))


def metrics(problem: Problem, u_w: np.ndarray, test=None) -> dict:
  """Orthonormality, subspace and per-function errors, and the objective's own measure."""
  u_w = np.asarray(u_w, np.float64)
  m = problem.m
  truth = problem.truth_w[:, :m]
  out = {"orth_err": float(np.abs(u_w.T @ u_w - np.eye(m)).max()),
         "sin_angle": sin_max_angle(u_w, truth)}
  if problem.ordered:
    dots = np.sum(u_w * truth, 0)
    err = np.sqrt(np.maximum(0.0, np.sum(u_w ** 2, 0) + np.sum(truth ** 2, 0)
                             - 2 * np.abs(dots)))
    out["func_err"] = float(err.mean())
  if problem.kind == "pca":
    var = np.sum(u_w * (problem.cov_w @ u_w), 0)
    # The optimum under the same quadrature (the kinked kernel makes the discrete value
    # differ from sum lambda_k by ~1e-3 at 64 nodes), so the truth scores exactly 0.
    best = float(np.sum(truth * (problem.cov_w @ truth)))
    out["ev_gap"] = (best - float(var.sum())) / best  # population, relative to optimum
    if test is not None:
      c = test @ u_w
      out["test_ev"] = float(np.sum(np.mean(c * c, 0)) / np.mean(np.sum(test ** 2, 1)))
  elif problem.kind == "operator":
    rq = np.sum(u_w * (problem.op_w @ u_w), 0)
    best = float(np.sum(problem.eigvals[:m]))
    out["rq_err"] = (float(rq.sum()) - best) / best
  else:
    # Mode purity: how much of each basis function lies in a single eigenmode (1 = pure).
    overlap = (u_w.T @ problem.truth_w) ** 2  # (m, 2m)
    out["purity"] = float(np.mean(overlap.max(1) / np.maximum(np.sum(u_w ** 2, 0), 1e-30)))
    if test is not None:
      lost, resid = dynamics_terms(u_w.astype(np.float32), test, problem.lags)
      out["test_lost"], out["test_resid"] = float(lost), float(resid)
  return out


def fine_truth_check(problem: Problem) -> float:
  """Largest |<v_i, v_j>_W - delta_ij| of the target basis under this quadrature."""
  v = problem.truth_w[:, :problem.m]
  return float(np.abs(v.T @ v - np.eye(problem.m)).max())


