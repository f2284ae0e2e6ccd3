"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): training of
the learned path and of the baselines.

* `path`: the paper's method. Adam on the MLP generator's parameters; the loss is the
  target's objective at the path's endpoint U~(1); gradients by differentiating through
  the scanned integrator.
* `stiefel`: direct optimization of the discretized basis X (N x m, X^T X = I) by
  Riemannian gradient descent with the Cayley retraction of Wen & Yin (2013):
  X <- (I + tau/2 W)^{-1} (I - tau/2 W) X, W = G X^T - X G^T, G the Euclidean gradient. W
  is the same rank-2m skew form as our generator, so the step reuses `lowrank.apply`.
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
