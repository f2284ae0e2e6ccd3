"""Perturbed S-EG / S-OGDA (abstract 19): the primal-dual gap and distance metrics.

Gap(x, y) = max_{y' in Y} f(x, y') - min_{x' in X} f(x', y), the paper's convergence
measure. With P = Q = 0 both inner problems are linear, so the gap is a sum of support
functions (e.g. max_j (A'x)_j - min_i (Ay)_i on simplices; l1 norms on boxes). With a
quadratic part on l2 balls each inner problem is a convex trust-region problem
min_{|u| <= r} 1/2 u'Hu + g'u, solved exactly through the eigen-decomposition of H and
bisection on the multiplier of the secular equation |(H + lam I)^{-1} g| = r. For the
unconstrained game (d) the gap is infinite; the metric is the distance to the solution
set null(A') x null(A) and to the projection of the anchor onto it (where the perturbed
iterates are expected to converge: the Tikhonov path tends to the solution nearest z0).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.papers.perturbed_eg import problems, projections


def trust_region_min(eig, g, radius: float, iters: int = 80):
  """min_{|u| <= radius} 1/2 u'Hu + g'u for H = V diag(h) V' PSD; returns the value."""
  h, v = eig
  gt = v.T @ g
  # lam = 0 is optimal iff the minimum-norm stationary point is inside the ball and g has
  # no component in null(H) (otherwise the objective is unbounded below along it).
  safe_h = jnp.where(h > 0, h, 1.0)
  null_g = jnp.sum(jnp.where(h > 0, 0.0, gt**2))
  norm0 = jnp.sqrt(jnp.sum(jnp.where(h > 0, (gt / safe_h) ** 2, 0.0)))
  interior = (null_g <= 1e-12 * (1.0 + jnp.sum(gt**2))) & (norm0 <= radius)

  def norm_at(lam):
    return jnp.sqrt(jnp.sum(gt**2 / (h + lam) ** 2))

  def bisect(_, lo_hi):
    lo, hi = lo_hi
    mid = 0.5 * (lo + hi)
    too_long = norm_at(mid) > radius
    return jnp.where(too_long, mid, lo), jnp.where(too_long, hi, mid)

  hi0 = jnp.linalg.norm(g) / radius + 1e-12  # |u(hi0)| <= |g| / hi0 = radius
  _, lam = jax.lax.fori_loop(0, iters, bisect, (jnp.zeros_like(hi0), hi0))
  u_bd = -gt / (h + lam)
  u_in = jnp.where(h > 0, -gt / safe_h, 0.0)
  u = jnp.where(interior, u_in, u_bd)
  return 0.5 * jnp.sum(h * u**2) + jnp.sum(gt * u)


def gap(spec: problems.Spec, data: problems.Data, x, y):
  """The primal-dual gap max_y' f(x, y') - min_x' f(x', y) >= 0 of one point."""
  gy = x @ data.A - data.c  # f(x, y') = const + gy'y' (- 1/2 y'Qy')
  gx = data.A @ y + data.b  # f(x', y) = const + gx'x' (+ 1/2 x'Px')
  if not spec.quadratic:
    up = x @ data.b + projections.support(spec.y_set, gy, spec.radius)
    down = -projections.support(spec.x_set, -gx, spec.radius) - y @ data.c
    return up - down
  if spec.x_set != "ball" or spec.y_set != "ball":
    raise ValueError("exact gaps with a quadratic part are implemented for l2 balls only")
  up = (0.5 * x @ (data.P @ x) + x @ data.b
        - trust_region_min(data.q_eig, -gy, spec.radius))
  down = trust_region_min(data.p_eig, gx, spec.radius) - 0.5 * y @ (data.Q @ y) - y @ data.c
  return up - down


def distance_to_solutions(data: problems.Data, x, y):
  """dist((x, y), null(A') x null(A)) for the unconstrained bilinear game (b = c = 0)."""
  px = data.x_range @ (data.x_range.T @ x)
  py = data.y_range @ (data.y_range.T @ y)
  return jnp.sqrt(jnp.sum(px**2) + jnp.sum(py**2))


def anchor_projection(data: problems.Data):
  """The solution nearest the anchor z0: the limit of the Tikhonov path as mu -> 0."""
  xs = data.x0 - data.x_range @ (data.x_range.T @ data.x0)
  ys = data.y0 - data.y_range @ (data.y_range.T @ data.y0)
  return xs, ys


def metric(spec: problems.Spec, data: problems.Data, x, y):
  """The study's error measure: the gap, or the distance to solutions if unconstrained."""
  if spec.x_set == "free":
    return distance_to_solutions(data, x, y)
  return gap(spec, data, x, y)
