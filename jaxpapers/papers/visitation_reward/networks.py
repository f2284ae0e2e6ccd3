"""Success Visitation Matching (arXiv 2606.23640): small MLPs as plain pytrees.

Parameters are lists of (W, b) so that a whole population of runs (seeds x methods x
learning rates) is one `vmap` over a leading axis without any module state. The policy
mean is tanh(MLP(obs)) so the behaviour-cloned network is the initial actor of both PPO
(Gaussian around the mean, clipped by the task) and SAC (tanh-squashed Gaussian).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def mlp_init(key, sizes, last_scale: float = 1.0):
  """Scaled-normal init (std gain / sqrt(fan_in); gain 1 hidden, `last_scale` output).

  Not orthogonal: on CPU the QR of an orthogonal init costs seconds of compile time per
  layer, which dominated the smoke run's compilation.
  """
  params = []
  keys = jax.random.split(key, len(sizes) - 1)
  for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
    gain = last_scale if i == len(sizes) - 2 else 1.0
    w = gain * jax.random.normal(k, (n_in, n_out), jnp.float32) / jnp.sqrt(n_in)
    params.append((w, jnp.zeros((n_out,), jnp.float32)))
  return params


def lift(v, x):
  """v (d,) shaped to broadcast against x (..., d) without implicit rank promotion."""
  return v.reshape((1,) * (x.ndim - 1) + v.shape)


def mlp_apply(params, x):
  for w, b in params[:-1]:
    h = x @ w
    x = jnp.tanh(h + lift(b, h))
  w, b = params[-1]
  h = x @ w
  return h + lift(b, h)


def actor_mean(params, obs):
  return jnp.tanh(mlp_apply(params, obs))


def adam():
  """Adam whose step size is applied by the caller (a traced, per-run learning rate)."""
  return optax.chain(optax.clip_by_global_norm(1.0), optax.scale_by_adam())


def adam_step(opt, params, opt_state, grads, lr):
  updates, opt_state = opt.update(grads, opt_state, params)
  params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
  return params, opt_state


def gaussian_logp(mean, log_std, action):
  z = (action - mean) / lift(jnp.exp(log_std), mean)
  return jnp.sum(-0.5 * z**2 - lift(log_std, mean) - 0.5 * jnp.log(2 * jnp.pi), axis=-1)
