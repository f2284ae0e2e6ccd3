"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): the neural
finite-rank generator and the structure-preserving integration of dU/dt = K_t U.

a_i(x, t), b_i(x, t) (i <= r) are one MLP of (x, t) with 2r outputs: it sees x through
Fourier features of the domain coordinate and t in [0, 1], so it can be evaluated at any
nodes and the learned path is defined for any quadrature grid (resolution independence).
The path U(t) starts at the reference basis and is advanced by S steps of the exponential
midpoint rule (second-order Magnus: U_{n+1} = exp(h K_{t_n + h/2}) U_n) or its Cayley
counterpart, each applied in closed form through the rank-2r factorization
(`lowrank.apply`), so U~^T U~ = I holds to float precision along the whole path.
Gradients are taken by differentiating through the `lax.scan` (discretize-then-optimize).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.lie_bases import lowrank


def init_mlp(rng: jax.Array, dim: int, rank: int, width: int, depth: int, features: int,
             out_scale: float, outputs: int | None = None) -> dict:
  """LeCun-normal MLP (d Fourier-featured coords + t) -> 2r; last layer scaled down so the
  path starts close to the reference basis (both a and b non-zero, so gradients flow).
  `outputs` overrides the 2r outputs (the neural-QR baseline's m functions)."""
  sizes = [dim * (1 + 2 * features) + 1] + [width] * depth + [outputs or 2 * rank]
  params = []
  keys = jax.random.split(rng, len(sizes) - 1)
  for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
    scale = (out_scale if i == len(sizes) - 2 else 1.0) / np.sqrt(n_in)
    params.append({"w": scale * jax.random.normal(k, (n_in, n_out), jnp.float32),
                   "b": jnp.zeros((n_out,), jnp.float32)})
  return {"layers": params}


def _features(s: jax.Array, t, features: int) -> jax.Array:
  """[s, sin(pi k s), cos(pi k s) (k = 1..F), t] for s in [-1, 1]^d."""
  k = jnp.arange(1, features + 1, dtype=s.dtype)
  ang = jnp.pi * s[:, :, None] * k[None, None, :]  # (N, d, F)
  n = s.shape[0]
  return jnp.concatenate([s, jnp.sin(ang).reshape(n, -1), jnp.cos(ang).reshape(n, -1),
                          jnp.full((n, 1), t, s.dtype)], axis=-1)


def net(params: dict, s: jax.Array, t, features: int) -> jax.Array:
  """The MLP's outputs (N, outputs) at normalized coordinates s (N, d) and time t."""
  h = _features(s, t, features)
  layers = params["layers"]
  for layer in layers[:-1]:
    h = jnp.tanh(h @ layer["w"] + layer["b"][None, :])
  return h @ layers[-1]["w"] + layers[-1]["b"][None, :]


def ab(params: dict, s: jax.Array, t, features: int) -> tuple[jax.Array, jax.Array]:
  """a(x, t), b(x, t): (N, r) each, at normalized coordinates s (N, d)."""
  out = net(params, s, t, features)
  r = out.shape[-1] // 2
  return out[:, :r], out[:, r:]


def integrate(params: dict, s: jax.Array, sqrt_w: jax.Array, u0_w: jax.Array,
              max_steps: int, features: int, scheme: str = "exp", rank=None, steps=None,
              path: bool = False, unroll: bool = False):
  """U~(1) from U~(0) = u0_w (N, m) in `steps` structure-preserving steps on t in [0, 1].

  `rank` (<= the network's r) and `steps` (<= max_steps) may be traced values, so runs with
  different ranks and step counts are lanes of one vmapped program: components i >= rank
  are masked to zero (a rank-2*rank generator) and scan iterations n >= steps take h = 0,
  which is exactly the identity. With `path`, also returns U~ after every iteration.
  `unroll` unrolls the scan (for the planner: XLA counts a rolled loop's body once).
  """
  steps = max_steps if steps is None else steps
  h = 1.0 / steps

  def step(u, n):
    a, b = ab(params, s, (n + 0.5) * h, features)
    if rank is not None:
      keep = (jnp.arange(a.shape[-1]) < rank).astype(a.dtype)
      a, b = a * keep[None, :], b * keep[None, :]
    h_n = jnp.where(n < steps, h, 0.0)
    u = lowrank.apply(sqrt_w[:, None] * a, sqrt_w[:, None] * b, u, h_n, scheme)
    return u, (u if path else None)

  u1, us = jax.lax.scan(step, u0_w, jnp.arange(max_steps, dtype=u0_w.dtype),
                        unroll=True if unroll else 1)
  return (u1, us) if path else u1
