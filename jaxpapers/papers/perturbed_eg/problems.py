"""Perturbed S-EG / S-OGDA (abstract 19): the convex-concave test problems and oracles.

Every problem is a saddle function on X x Y,

  f(x, y) = 1/2 x'Px + b'x + x'Ay - 1/2 y'Qy - c'y,   P, Q positive semidefinite,

so the monotone operator is F(x, y) = (grad_x f, -grad_y f) = (Px + b + Ay, Qy + c - A'x).
The stochastic oracle returns F plus independent Gaussian noise N(0, sigma^2 I) on each
call (the bounded-variance oracle of the paper's setting). Builders, one per family the
issue names: (a) matrix games x'Ay on simplices, random or structured (a weighted
generalised rock-paper-scissors with a known, non-uniform, fully mixed equilibrium);
(b) bilinear games with linear terms on boxes; (c) a quadratic with coupling on l2 balls
(P, Q rank deficient, so the problem is convex-concave but not strongly), in two named
versions: `quadratic_ball`, whose saddle point is built to be interior (the linear terms
are solved for from a chosen saddle (x*, y*) with |x*| = |y*| = 1/2), and
`quadratic_ball_boundary`, random linear terms of scale 0.2 whose unconstrained
stationary point lies outside the unit balls, so the constrained saddle is on the
spheres (this was the earlier `quadratic_ball`, kept as it was); (d) an
unconstrained bilinear game with a rank-deficient A (the solution set is a subspace).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.perturbed_eg import projections

PROBLEMS = ("game_random", "game_rps", "bilinear_box", "quadratic_ball",
            "quadratic_ball_boundary", "bilinear_free")


@dataclasses.dataclass(frozen=True)
class Spec:
  """Static description (hashable, closed over by jit)."""
  name: str
  x_set: str
  y_set: str
  radius: float
  quadratic: bool  # whether P, Q are nonzero (skips two matvecs per call otherwise)
  lipschitz: float  # ||[[P, A], [-A', Q]]||_2, the Lipschitz constant of F


class Data(NamedTuple):
  """Arrays of one instance. Eigen-decompositions and range bases serve the gaps."""
  A: jnp.ndarray
  P: jnp.ndarray
  Q: jnp.ndarray
  b: jnp.ndarray
  c: jnp.ndarray
  x0: jnp.ndarray  # anchor of the perturbation and starting point of every method
  y0: jnp.ndarray
  p_eig: tuple  # (eigenvalues, eigenvectors) of P
  q_eig: tuple
  x_range: jnp.ndarray  # orthonormal basis of range(A) (unconstrained case), n x r
  y_range: jnp.ndarray  # orthonormal basis of range(A'), m x r


def operator(spec: Spec, data: Data, x, y):
  """F(x, y) = (grad_x f, -grad_y f) for one point (vectors)."""
  gx = data.A @ y + data.b
  gy = data.c - x @ data.A
  if spec.quadratic:
    gx = gx + data.P @ x
    gy = gy + data.Q @ y
  return gx, gy


def value(spec: Spec, data: Data, x, y):
  out = x @ data.b + x @ (data.A @ y) - y @ data.c
  if spec.quadratic:
    out = out + 0.5 * x @ (data.P @ x) - 0.5 * y @ (data.Q @ y)
  return out


def project_x(spec: Spec, x):
  return projections.project(spec.x_set, x, spec.radius)


def project_y(spec: Spec, y):
  return projections.project(spec.y_set, y, spec.radius)


def _psd(rng, d, rank, scale):
  b = rng.normal(size=(d, rank))
  p = b @ b.T
  return scale * p / np.linalg.norm(p, 2)


def _orth_range(a, tol=1e-8):
  u, s, _ = np.linalg.svd(a)
  return u[:, : int(np.sum(s > tol * s[0]))]


def _eig(p):
  w, v = np.linalg.eigh(p)
  w = np.where(w < 1e-6 * max(w.max(), 1e-30), 0.0, w)  # exact zeros: true null space
  return w, v


def make(name: str, n: int, m: int, seed: int = 0, rank: int = 2) -> tuple[Spec, Data]:
  """Builds the named instance (see PROBLEMS); `rank` of P, Q (c) or of A (d)."""
  rng = np.random.default_rng(seed)
  P = np.zeros((n, n))
  Q = np.zeros((m, m))
  b = np.zeros(n)
  c = np.zeros(m)
  x_set = y_set = "simplex"
  radius = 1.0
  if name == "game_random":
    A = rng.uniform(-1.0, 1.0, size=(n, m))
  elif name == "game_rps":
    if n != m or n % 2 == 0:
      raise ValueError(f"game_rps needs n == m odd, got n={n}, m={m}")
    # Cyclic generalised rock-paper-scissors R (skew, unique uniform equilibrium for odd n),
    # reweighted so that x* ~ 1/v and y* ~ 1/w are fully mixed and not the anchor.
    R = np.zeros((n, n))
    for i in range(n):
      for k in range(1, n):
        R[i, (i + k) % n] = 1.0 if k <= n // 2 else -1.0
    v = np.linspace(1.0, 3.0, n)
    w = np.linspace(3.0, 1.0, n)
    A = np.diag(v) @ R @ np.diag(w) / 3.0
  elif name == "bilinear_box":
    A = rng.normal(size=(n, m)) / np.sqrt(m)
    b = 0.5 * rng.normal(size=n)
    c = 0.5 * rng.normal(size=m)
    x_set = y_set = "box"
  elif name in ("quadratic_ball", "quadratic_ball_boundary"):
    A = rng.normal(size=(n, m)) / np.sqrt(m)
    P = _psd(rng, n, rank, 1.0)
    Q = _psd(rng, m, rank, 1.0)
    if name == "quadratic_ball_boundary":
      # Random linear terms: for seed 0 at 7 x 7 the unconstrained stationary point has
      # |x| = 1.59, |y| = 1.48, so the constrained saddle sits on both spheres.
      b = 0.2 * rng.normal(size=n)
      c = 0.2 * rng.normal(size=m)
    else:
      # Interior saddle by construction: pick (x*, y*) with |x*| = |y*| = 1/2 and solve
      # F(x*, y*) = 0 for the linear terms. Inside the balls the projections are inactive
      # near the solution, and the null spaces of P and Q leave bilinear directions
      # where vanilla methods cycle under noise.
      xs = rng.normal(size=n)
      ys = rng.normal(size=m)
      xs, ys = 0.5 * xs / np.linalg.norm(xs), 0.5 * ys / np.linalg.norm(ys)
      b = -(P @ xs + A @ ys)
      c = A.T @ xs - Q @ ys
    x_set = y_set = "ball"
  elif name == "bilinear_free":
    u = np.linalg.qr(rng.normal(size=(n, n)))[0][:, :rank]
    vv = np.linalg.qr(rng.normal(size=(m, m)))[0][:, :rank]
    A = u @ np.diag(np.linspace(1.0, 0.5, rank)) @ vv.T
    x_set = y_set = "free"
  else:
    raise ValueError(f"unknown problem {name!r}; known: {', '.join(PROBLEMS)}")
  if x_set == "free":
    x0 = rng.normal(size=n)
    y0 = rng.normal(size=m)
  else:
    x0 = np.asarray(projections.center(x_set, n, radius))
    y0 = np.asarray(projections.center(y_set, m, radius))
  M = np.block([[P, A], [-A.T, Q]])
  spec = Spec(name, x_set, y_set, radius, bool(np.any(P) or np.any(Q)),
              float(np.linalg.norm(M, 2)))
  f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
  pw, pv = _eig(P)
  qw, qv = _eig(Q)
  data = Data(f32(A), f32(P), f32(Q), f32(b), f32(c), f32(x0), f32(y0),
              (f32(pw), f32(pv)), (f32(qw), f32(qv)),
              f32(_orth_range(A)), f32(_orth_range(A.T)))
  return spec, data


def stationary_point(data: Data) -> tuple[np.ndarray, np.ndarray]:
  """The unconstrained stationary point F(x, y) = 0 (least-squares if M is singular)."""
  A, P, Q = (np.asarray(a, np.float64) for a in (data.A, data.P, data.Q))
  M = np.block([[P, A], [-A.T, Q]])
  rhs = -np.concatenate([np.asarray(data.b, np.float64), np.asarray(data.c, np.float64)])
  z = np.linalg.lstsq(M, rhs, rcond=None)[0]
  return z[:A.shape[0]], z[A.shape[0]:]
