"""Online identification under parameter drift: the two linear-in-parameter systems.

Both are written as y_t = Phi_t theta*_t + noise with Phi_t in R^{p x d}, the form the
paper's analysis covers, and are generated step by step inside a `lax.scan`:

  regression  p = 1: y_t = phi_t^T theta*_t + sigma * eps_t, phi_t ~ N(0, I_d / d)
              (so E||phi_t||^2 = 1), theta*_t drifting on a sphere around `center`.
  lds         x_{t+1} = A_t x_t + B_t u_t + w_t with theta*_t = vec([A_t B_t]) (row-major),
              u_t ~ N(0, I_m) exciting input, w_t ~ N(0, sigma^2 I_n). Identifying row i of
              [A_t B_t] is a regression of x_{t+1,i} on z_t = [x_t; u_t], so
              Phi_t = I_n kron z_t^T and y_t = x_{t+1}. The drift sphere around the stable
              nominal [A_c B_c] has radius < 1 - ||A_c||_2, so every A_t is a contraction
              and the state stays bounded.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.drift_ident import drift


def lds_nominal(n: int, m: int):
  """A stable nominal [A_c B_c]: A_c = 0.5 I + a small fixed coupling, B_c fixed."""
  a = 0.5 * np.eye(n) + 0.1 * np.eye(n, k=1)
  b = np.zeros((n, m))
  b[np.arange(n), np.arange(n) % m] = 1.0
  return np.concatenate([a, b], axis=1).astype(np.float32)


def dims(system):
  """(d, p): parameter and observation dimensions of a system config."""
  if system.name == "regression":
    return system.dim, 1
  if system.name == "lds":
    return system.state_dim * (system.state_dim + system.input_dim), system.state_dim
  raise ValueError(f"unknown system {system.name!r}; known: regression, lds")


def center(system):
  """The known centre of the parameter ball (the nominal parameter)."""
  if system.name == "regression":
    return jnp.zeros((system.dim,), jnp.float32)
  return jnp.asarray(lds_nominal(system.state_dim, system.input_dim).reshape(-1))


def init(rng, system):
  d, _ = dims(system)
  state = dict(drift=drift.init(rng, d))
  if system.name == "lds":
    state["x"] = jnp.zeros((system.state_dim,), jnp.float32)
  return state


def draw(rng, system, n: int):
  """The Gaussian draws for n consecutive steps, made in one vectorised call.

  Drawing a chunk at a time (instead of one threefry call per step inside the scan)
  keeps the compiled program small and the step cheap; the stream is still a pure
  function of (seed, chunk index).
  """
  d, p = dims(system)
  r_drift, r_reg, r_noise = jax.random.split(rng, 3)
  reg_dim = system.dim if system.name == "regression" else system.input_dim
  return dict(xi=jax.random.normal(r_drift, (n, d)),
              reg=jax.random.normal(r_reg, (n, reg_dim)),
              eps=jax.random.normal(r_noise, (n, p)))


def step(state, system, drift_params, draws, t, noise):
  """One observation from one step of `draw`. Returns (state, (Phi, y, theta*, chord)).

  `noise` (the standard deviation sigma) is an argument rather than a config field so
  that runs at several noise levels can share one compiled, vmapped program.
  """
  theta = center(system) + system.radius * state["drift"]["u"]
  new_drift, chord = drift.step(state["drift"], drift_params, draws["xi"], t)
  new_state = dict(drift=new_drift)
  if system.name == "regression":
    phi = draws["reg"][None, :] / np.sqrt(system.dim)
    y = phi @ theta + noise * draws["eps"]
  else:
    n = system.state_dim
    z = jnp.concatenate([state["x"], draws["reg"]])
    phi = jnp.kron(jnp.eye(n), z[None, :])
    y = phi @ theta + noise * draws["eps"]
    new_state["x"] = y
  return new_state, (phi, y, theta, system.radius * chord)
