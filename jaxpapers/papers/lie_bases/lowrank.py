"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): the
finite-rank skew-adjoint generator and its exact group maps in closed form.

The generator K(x, y) = sum_i a_i(x) b_i(y) - b_i(x) a_i(y) acts on f by
(K f)(x) = int K(x, y) f(y) dy ~ sum_j K(x, x_j) w_j f(x_j). In weighted coordinates
(A~ = W^{1/2} A, B~ = W^{1/2} B) it is the skew-symmetric matrix

    K~ = A~ B~^T - B~ A~^T = Z J Z^T,   Z = [A~, B~] (N x 2r),   J = [[0, I], [-I, 0]],

so <K f, g>_W = -<f, K g>_W (skew-adjoint). Because K~ factors through 2r dimensions, so
do its group maps, with G = Z^T Z (2r x 2r):

    exp(h K~)   = I + Z phi1(h J G) h J Z^T,       phi1(M) = (e^M - I) / M,
    cay(h K~)   = (I - h/2 K~)^{-1} (I + h/2 K~) = I + Z (I - h/2 J G)^{-1} h J Z^T
                  (Woodbury),

which cost O(N r m + r^3) to apply to an N x m block instead of the O(N^3) of a dense
expm. phi1 comes from the 4r x 4r augmented matrix [[M, I], [0, 0]], whose exponential
has phi1(M) in its top-right block. Both maps are exactly orthogonal in exact arithmetic;
in floating point they keep U~^T U~ = I to a few ulps per step.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def factors(a_w: jax.Array, b_w: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Z = [A~, B~] (N, 2r) and J (2r, 2r) with K~ = Z J Z^T."""
  r = a_w.shape[-1]
  eye, zero = jnp.eye(r, dtype=a_w.dtype), jnp.zeros((r, r), a_w.dtype)
  j = jnp.block([[zero, eye], [-eye, zero]])
  return jnp.concatenate([a_w, b_w], axis=-1), j


def skew_matrix(a_w: jax.Array, b_w: jax.Array) -> jax.Array:
  """The dense N x N generator (tests and small diagnostics only; the method never forms it)."""
  return a_w @ b_w.T - b_w @ a_w.T


def expm_small(a: jax.Array, order: int = 10, max_squarings: int = 24) -> jax.Array:
  """exp(A) of a small matrix: scaling to ||A / 2^s||_inf <= 1/2, Taylor of `order`
  (truncation < 1e-11), then s squarings (a fixed-length loop of `where`s, so it jits, vmaps
  and differentiates as one small program; jax.scipy's Pade expm compiles several
  branches under vmap)."""
  norm = jnp.max(jnp.sum(jnp.abs(a), axis=-1))
  s = jnp.clip(jnp.ceil(jnp.log2(jnp.maximum(norm, 1e-30))) + 1, 0, max_squarings)
  s = jax.lax.stop_gradient(s)
  x = a / 2.0 ** s
  eye = jnp.eye(a.shape[0], dtype=a.dtype)
  # Horner: I + X/1 (I + X/2 (I + ...)); both loops are scans, which keeps the compiled
  # program (and its gradient) small.
  out = jax.lax.fori_loop(0, order, lambda i, o: eye + (x @ o) / (order - i), eye)
  return jax.lax.fori_loop(0, max_squarings,
                           lambda i, o: jnp.where(i < s, o @ o, o), out)


def phi1(m: jax.Array) -> jax.Array:
  """(e^M - I) M^{-1} as a power series in M, via the augmented-matrix exponential."""
  k = m.shape[0]
  aug = jnp.block([[m, jnp.eye(k, dtype=m.dtype)], [jnp.zeros((k, 2 * k), m.dtype)]])
  return expm_small(aug)[:k, k:]


def core(a_w: jax.Array, b_w: jax.Array, h, scheme: str) -> tuple[jax.Array, jax.Array]:
  """(Z, C) such that the group map of h K~ is I + Z C Z^T, C (2r, 2r)."""
  z, j = factors(a_w, b_w)
  g = z.T @ z
  hj = h * j
  if scheme == "exp":
    return z, phi1(hj @ g) @ hj
  if scheme == "cayley":
    eye = jnp.eye(g.shape[0], dtype=g.dtype)
    return z, jnp.linalg.solve(eye - 0.5 * hj @ g, hj)
  raise ValueError(f"unknown integrator scheme {scheme!r}; known: exp, cayley")


def apply(a_w: jax.Array, b_w: jax.Array, u_w: jax.Array, h, scheme: str = "exp"
          ) -> jax.Array:
  """exp(h K~) U~ (or its Cayley counterpart) for U~ (N, m), never forming N x N."""
  z, c = core(a_w, b_w, h, scheme)
  return u_w + z @ (c @ (z.T @ u_w))
