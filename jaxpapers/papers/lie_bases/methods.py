"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): training of
the learned path and of the baselines.

* `path`: the paper's method. Adam on the MLP generator's parameters; the loss is the
  target's objective at the path's endpoint U~(1); gradients by differentiating through
  the scanned integrator.
* `stiefel`: direct optimization of the discretized basis X (N x m, X^T X = I) by
  Riemannian gradient descent with the Cayley retraction of Wen & Yin (2013):
  X <- (I + tau/2 W)^{-1} (I - tau/2 W) X, W = G X^T - X G^T, G the Euclidean gradient. W
  is the same rank-2m skew form as our generator, so the step reuses `lowrank.apply`.
* `radam`: Riemannian Adam (Becigneul & Ganea 2019) on the Stiefel manifold as geoopt
  defines it for one manifold-valued parameter: the Riemannian gradient is the tangent
  projection G - X sym(X^T G), the first moment is a tangent vector transported by
  re-projection, the second moment is one scalar (the squared Riemannian norm), and the
  retraction is the QR map with a positive R diagonal.
* `neural QR`: a resolution-independent neural competitor: an MLP f(x) with m outputs
  added to the reference basis, orthonormalised by QR of its weighted node values (=
  Gram-Schmidt under the quadrature), trained with Adam on the same objective.
* `lobpcg`: the preconditioned block eigen-solver of Knyazev (2001) (NumPy) for the
  operator target, from the same start, with no / Jacobi / shifted-kinetic
  preconditioning.
* `exact`: the eigendecomposition / SVD the objective is built on (ground truth of the
  discrete problem), and exact DMD for the simulation modes.

Both trainers are pure functions vmapped over (seed, learning rate) lanes, split over the
devices by `core.sharding.spread`, and run in `lax.scan` chunks, so the experiment can checkpoint between chunks and resume exactly.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import sharding
from jaxpapers.papers.lie_bases import generator, lowrank, targets


class PathSpec(NamedTuple):
  """Static description of the generator and its integrator (hashable, for jit)."""
  rank: int  # r: the generator has rank 2r
  width: int  # MLP hidden width
  depth: int  # MLP hidden layers
  features: int  # Fourier features per coordinate
  out_scale: float  # scale of the last layer at init
  steps: int  # integration steps on t in [0, 1]
  scheme: str  # exp (Magnus midpoint) | cayley
  unroll: bool = False  # unroll the integrator's scan (plan only: same numbers, full FLOPs)


def spec_from(model) -> PathSpec:
  return PathSpec(model.rank, model.width, model.depth, model.features, model.out_scale,
                  model.steps, model.scheme)


def normalized_coords(grid) -> np.ndarray:
  return (2.0 * (grid.x - grid.lo) / (grid.hi - grid.lo) - 1.0).astype(np.float32)


def path_endpoint(params, s, sqrt_w, u0_w, spec: PathSpec, rank=None, steps=None,
                  max_steps=None, path=False):
  return generator.integrate(params, s, sqrt_w, u0_w, max_steps or spec.steps, spec.features,
                             spec.scheme, rank=rank, steps=steps, path=path,
                             unroll=spec.unroll)


def init_path(seed_key, dim: int, spec: PathSpec):
  return generator.init_mlp(seed_key, dim, spec.rank, spec.width, spec.depth, spec.features,
                            spec.out_scale)


def path_state(params, lr):
  return {"params": params, "opt": optax.adam(lr).init(params)}


# The seed axis (state, data) goes over the devices; the variants of a seed (learning
# rates, ranks, steps, start bases: `hp`, shared by every seed) stay a vmap inside it. A
# flat seeds x variants axis would fill more devices but batches the kernels differently
# (float32 round-off ~1e-6 per chunk vs the committed study); this nesting is the
# study's own program, so 1 device gives its numbers bit for bit.
SEED_AXES = (0, None, None, None, 0, 0, None)


def path_step(st, h, tr, s, sqrt_w, coef, *, kind, spec):
  """One Adam step of one lane on its training data `tr`; returns (state, loss)."""
  end = lambda p: path_endpoint(p, s, sqrt_w, h["ref"], spec, h["rank"], h["steps"])  # noqa: E731
  loss, g = jax.value_and_grad(lambda p: targets.objective(kind, end(p), tr, coef))(
      st["params"])
  upd, opt_state = optax.adam(h["lr"]).update(g, st["opt"], st["params"])
  return {"params": optax.apply_updates(st["params"], upd), "opt": opt_state}, loss


def path_seed(kind, spec: PathSpec, n: int):
  """`one(st, hp, s, sqrt_w, train, val, coef)` of ONE seed, vmapped over its variants:
  n Adam steps per variant, then the endpoints and their validation loss."""
  def lane(st, h, tr, va, s, sqrt_w, coef):
    st, losses = jax.lax.scan(
        lambda st, _: path_step(st, h, tr, s, sqrt_w, coef, kind=kind, spec=spec), st,
        None, length=n)
    u = path_endpoint(st["params"], s, sqrt_w, h["ref"], spec, h["rank"], h["steps"])
    return st, losses, u, targets.objective(kind, u, va, coef)

  def one(st, hp, s, sqrt_w, tr, va, coef):
    return jax.vmap(lane, in_axes=(0, 0, None, None, None, None, None))(
        st, hp, tr, va, s, sqrt_w, coef)
  return one


@functools.lru_cache(maxsize=None)
def _path_program(kind, spec: PathSpec, n: int):
  return sharding.spread(path_seed(kind, spec, n), in_axes=SEED_AXES)


def path_chunk(state, hp, s, sqrt_w, train, val, coef, *, kind, spec, n):
  """n Adam steps on every (seed, variant) lane, then the endpoints and their val loss.

  state leaves: (seeds, V, ...); hp: variant hyper-parameters, leaves (V, ...): lr, rank
  (<= spec.rank), steps (<= spec.steps), ref (N, m) start basis; train, val: (seeds, ...).
  Seeds are split over every device (`core.sharding.spread`). Returns (state, train
  losses (seeds, V, n), U~(1) (seeds, V, N, m), val loss (seeds, V)).
  """
  return _path_program(kind, spec, n)(state, hp, s, sqrt_w, train, val, coef)


def stiefel_seed(kind, n: int):
  """`one(x, taus, train, coef)` of ONE seed, vmapped over its step sizes: n Riemannian
  GD steps with the Cayley retraction."""
  def lane(x, tau, data, coef):
    grad = jax.value_and_grad(lambda u: targets.objective(kind, u, data, coef))

    def step(x, _):
      loss, g = grad(x)
      # Cayley of -tau W with W = G X^T - X G^T: the skew form with a = G, b = X.
      return lowrank.apply(g, x, x, -tau, "cayley"), loss

    return jax.lax.scan(step, x, None, length=n)

  return lambda x, taus, data, coef: jax.vmap(lane, in_axes=(0, 0, None, None))(
      x, taus, data, coef)


@functools.lru_cache(maxsize=None)
def _stiefel_program(kind, n: int):
  return sharding.spread(stiefel_seed(kind, n), in_axes=(0, None, 0, None))


def stiefel_chunk(x, taus, train, coef, *, kind, n):
  """n Riemannian GD steps on every (seed, tau) lane; x: (seeds, taus, N, m); seeds
  split over every device."""
  return _stiefel_program(kind, n)(x, taus, train, coef)


@functools.partial(jax.jit, static_argnames=("kind",))
def stiefel_eval(x, data, coef, *, kind):
  f = lambda u, d: targets.objective(kind, u, d, coef)  # noqa: E731
  return jax.vmap(jax.vmap(f, in_axes=(0, None)), in_axes=(0, 0))(x, data)


def exact_basis(problem: targets.Problem, train: np.ndarray) -> np.ndarray:
  """The exact answer of the discrete problem from the training data (weighted coords).

  pca: leading eigenvectors of the empirical second-moment matrix (= right singular
  vectors of the data); operator: lowest eigenvectors of the discretized operator;
  dynamics: exact DMD (Tu et al. 2014) of rank m on the train trajectories, each complex
  mode rotated to its most real phase and normalized.
  """
  m = problem.m
  train = np.asarray(train, np.float64)
  if problem.kind == "pca":
    _, _, vt = np.linalg.svd(train, full_matrices=False)
    return vt[:m].T
  if problem.kind == "operator":
    return np.linalg.eigh(train)[1][:, :m]
  psi = train[0] + 1j * train[1]  # (k, T, N)
  x = psi[:, :-1].reshape(-1, psi.shape[-1]).T  # (N, pairs)
  y = psi[:, 1:].reshape(-1, psi.shape[-1]).T
  u, s, vh = np.linalg.svd(x, full_matrices=False)
  u, s, vh = u[:, :m], s[:m], vh[:m]
  a = u.conj().T @ y @ vh.conj().T / s
  _, w = np.linalg.eig(a)
  modes = y @ vh.conj().T @ np.diag(1.0 / s) @ w
  phase = np.exp(-0.5j * np.angle(np.sum(modes ** 2, 0)))
  real = (modes * phase).real
  return real / np.linalg.norm(real, axis=0)


# --- Riemannian Adam on the Stiefel manifold ---------------------------------------------

def _sym(a):
  return 0.5 * (a + a.T)


def stiefel_proj(x, u):
  """Tangent projection at X (embedded metric): u - X sym(X^T u)."""
  return u - x @ _sym(x.T @ u)


def qr_retract(y):
  """The QR retraction: the Q factor with a positive R diagonal (geoopt's EuclideanStiefel)."""
  q, r = jnp.linalg.qr(y)
  return q * jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0)[None, :]


def radam_seed(kind, n: int, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
  """`one(state, lrs, train, coef)` of ONE seed, vmapped over its learning rates: n steps
  of Riemannian Adam; state = dict(x (N, m), m (N, m), v (), t ())."""
  def lane(st, lr, data, coef):
    grad = jax.value_and_grad(lambda u: targets.objective(kind, u, data, coef))

    def step(st, _):
      x = st["x"]
      loss, g = grad(x)
      rg = stiefel_proj(x, g)
      mom = b1 * st["m"] + (1 - b1) * rg
      v = b2 * st["v"] + (1 - b2) * jnp.sum(rg * rg)  # one manifold: one scalar
      t = st["t"] + 1.0
      direction = (mom / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps)
      xn = qr_retract(x - lr * direction)
      return {"x": xn, "m": stiefel_proj(xn, mom), "v": v, "t": t}, loss

    return jax.lax.scan(step, st, None, length=n)

  return lambda st, lrs, data, coef: jax.vmap(lane, in_axes=(0, 0, None, None))(
      st, lrs, data, coef)


@functools.lru_cache(maxsize=None)
def _radam_program(kind, n: int):
  return sharding.spread(radam_seed(kind, n), in_axes=(0, None, 0, None))


def radam_chunk(state, lrs, train, coef, *, kind, n):
  """n Riemannian Adam steps on every (seed, lr) lane; state leaves (seeds, lrs, ...)."""
  return _radam_program(kind, n)(state, lrs, train, coef)


def radam_init(x0):
  return {"x": x0, "m": jnp.zeros_like(x0), "v": jnp.zeros(x0.shape[:-2], x0.dtype),
          "t": jnp.zeros(x0.shape[:-2], x0.dtype)}


# --- the neural basis orthonormalised by QR under the quadrature --------------------------

def qr_basis(params, s, sqrt_w, ref_w, features: int):
  """Q of W^1/2 (ref + f): Gram-Schmidt of the functions ref_k + f_k in the quadrature
  inner product (positive R diagonal, so Q is a smooth function of the parameters). The
  functions are defined at any x, so the same parameters give the basis on any grid."""
  f = generator.net(params, s, 0.0, features)
  return qr_retract(ref_w + sqrt_w[:, None] * f)


def qr_seed(kind, features: int, n: int):
  """`one(state, lrs, s, sqrt_w, ref, train, val, coef)` of ONE seed over its lrs: n Adam
  steps, then the bases and their validation loss."""
  def lane(st, lr, s, sqrt_w, ref, tr, va, coef):
    loss_of = lambda p, d: targets.objective(  # noqa: E731
        kind, qr_basis(p, s, sqrt_w, ref, features), d, coef)

    def step(st, _):
      loss, g = jax.value_and_grad(loss_of)(st["params"], tr)
      upd, opt = optax.adam(lr).update(g, st["opt"], st["params"])
      return {"params": optax.apply_updates(st["params"], upd), "opt": opt}, loss

    st, losses = jax.lax.scan(step, st, None, length=n)
    return st, losses, qr_basis(st["params"], s, sqrt_w, ref, features), loss_of(
        st["params"], va)

  return lambda st, lrs, s, sqrt_w, ref, tr, va, coef: jax.vmap(
      lane, in_axes=(0, 0, None, None, None, None, None, None))(
          st, lrs, s, sqrt_w, ref, tr, va, coef)


@functools.lru_cache(maxsize=None)
def _qr_program(kind, features: int, n: int):
  return sharding.spread(qr_seed(kind, features, n),
                         in_axes=(0, None, None, None, None, 0, 0, None))


def qr_chunk(state, lrs, s, sqrt_w, ref, train, val, coef, *, kind, features, n):
  """n Adam steps of the neural-QR basis on every (seed, lr) lane (seeds over devices)."""
  return _qr_program(kind, features, n)(state, lrs, s, sqrt_w, ref, train, val, coef)


def qr_init(key, dim: int, m: int, spec: PathSpec):
  return generator.init_mlp(key, dim, 0, spec.width, spec.depth, spec.features,
                            spec.out_scale, outputs=m)


# --- LOBPCG for the operator target ---------------------------------------------------------

def kinetic_form(problem) -> np.ndarray:
  """W^-1/2 (1/2 D^T W D) W^-1/2: the kinetic part of the oscillator's quadratic form."""
  from jaxpapers.papers.lie_bases import quadrature
  grid = problem.grid
  d = quadrature.legendre_interp(grid, grid.x, derivative=0)
  sw = grid.sqrt_w
  dw = sw[:, None] * d / sw[None, :]
  k = 0.5 * dw.T @ dw
  return 0.5 * (k + k.T)


def preconditioner(problem, kind: str):
  """None | "jacobi" (1 / diag H) | "kinetic" ((K + I)^-1, the shifted-Laplacian
  preconditioner of Schroedinger eigen-solvers), as a dense matrix."""
  if kind == "none":
    return None
  if kind == "jacobi":
    return np.diag(1.0 / np.diag(problem.op_w))
  if kind == "kinetic":
    return np.linalg.inv(kinetic_form(problem) + np.eye(problem.grid.size))
  raise ValueError(f"unknown preconditioner {kind!r}; known: none, jacobi, kinetic")


def lobpcg(problem, x0: np.ndarray, precond: str, maxiter: int, tol: float = 1e-9):
  """LOBPCG (Knyazev 2001) for the m lowest eigenvectors of the discretized operator.

  Float64 NumPy. Each iteration: residuals R = A X - X diag(X^T A X), preconditioned
  W = T R, Rayleigh-Ritz on span[X, W, P] orthonormalised by an SVD that drops
  directions below 1e-10 (the robust form of Hetmaniuk & Lehoucq 2006: scipy's Cholesky
  variant broke down at iteration 1 on this operator, lambda_max / gap ~ 2e4), P the part
  of the new X orthogonal to the old. Stops when every residual norm < tol * lambda_max.
  Returns (basis (N, m) by increasing Rayleigh quotient, objective per iteration).
  """
  coef = targets.brockett_weights(problem.m).astype(np.float64)
  a = np.asarray(problem.op_w, np.float64)
  t = preconditioner(problem, precond)
  scale = np.linalg.norm(a, 2)
  x = np.linalg.qr(np.asarray(x0, np.float64))[0]
  p, curve = None, []

  def ritz(basis, k):
    u, sv, _ = np.linalg.svd(basis, full_matrices=False)
    q = u[:, sv > 1e-10 * sv[0]]
    vals, vecs = np.linalg.eigh(q.T @ a @ q)
    return q @ vecs[:, :k], vals[:k]

  x, lam = ritz(x, problem.m)
  for _ in range(maxiter):
    curve.append(float(np.sum(coef * lam) / np.sum(coef)))
    r = a @ x - x * lam[None, :]
    if np.max(np.linalg.norm(r, axis=0)) < tol * scale:
      break
    w = r if t is None else t @ r
    blocks = [x, w] + ([] if p is None else [p])
    xn, lam = ritz(np.concatenate(blocks, 1), problem.m)
    p = xn - x @ (x.T @ xn)
    x = xn
  return x, np.asarray(curve)
