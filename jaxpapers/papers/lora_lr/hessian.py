"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- second-order analysis.

The paper explains each method's preferred learning-rate range by the largest
eigenvalue of the training-loss Hessian w.r.t. the adapter parameters at
initialization (classical theory: gradient descent is stable for lr < 2 / lambda_max).
Hessian-vector products are forward-over-reverse (`jax.jvp` of `jax.grad`), never
forming the Hessian; `lanczos_top` runs k Lanczos steps with full re-orthogonalisation
on the flattened parameter vector and returns the largest Ritz value (the authors'
`run-hessian/lanczos.py` does the same in PyTorch); `power_iteration` is the simpler
check.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def hvp(loss_fn, params, v):
  """H(params) @ v for a scalar loss, as jvp of grad."""
  return jax.jvp(jax.grad(loss_fn), (params,), (v,))[1]


def flat_hvp(loss_fn, params):
  """(x0, matvec) on flat vectors, so Lanczos can work on one array."""
  x0, unravel = ravel_pytree(params)

  def matvec(v):
    return ravel_pytree(hvp(loss_fn, params, unravel(v)))[0]

  return x0, matvec


def lanczos_top(loss_fn, params, key, iters: int = 20):
  """Largest eigenvalue of the Hessian by `iters` Lanczos steps (full re-orthogonalisation)."""
  x0, matvec = flat_hvp(loss_fn, params)
  n = x0.shape[0]
  k = min(iters, n)
  v = jax.random.normal(key, (n,), x0.dtype)
  v = v / jnp.linalg.norm(v)
  V = jnp.zeros((k, n), x0.dtype).at[0].set(v)
  alphas = jnp.zeros((k,), x0.dtype)
  betas = jnp.zeros((k,), x0.dtype)

  def body(i, carry):
    V, alphas, betas = carry
    w = matvec(V[i])
    a = jnp.dot(w, V[i])
    # Full re-orthogonalisation against every previous vector (rows > i are zero).
    w = w - V.T @ (V @ w)
    w = w - V.T @ (V @ w)
    b = jnp.linalg.norm(w)
    V = jnp.where(i + 1 < k, V.at[jnp.minimum(i + 1, k - 1)].set(w / jnp.maximum(b, 1e-30)), V)
    return V, alphas.at[i].set(a), betas.at[i].set(b)

  V, alphas, betas = jax.lax.fori_loop(0, k, body, (V, alphas, betas))
  T = jnp.diag(alphas) + jnp.diag(betas[:-1], 1) + jnp.diag(betas[:-1], -1)
  return jnp.max(jnp.linalg.eigvalsh(T))


def power_iteration(loss_fn, params, key, iters: int = 50, shift: float = 0.0):
  """Eigenvalue by power iteration on (H + shift I) (HVPs); returns v^T H v.

  With shift = 0 it finds the largest |eigenvalue|; a shift at least as large as the most
  negative eigenvalue's magnitude makes it find the largest (algebraic) eigenvalue,
  which is what matters for step-size stability.
  """
  x0, matvec = flat_hvp(loss_fn, params)
  v = jax.random.normal(key, x0.shape, x0.dtype)
  v = v / jnp.linalg.norm(v)

  def body(_, v):
    w = matvec(v) + shift * v
    return w / jnp.maximum(jnp.linalg.norm(w), 1e-30)

  v = jax.lax.fori_loop(0, iters, body, v)
  return jnp.dot(v, matvec(v))
