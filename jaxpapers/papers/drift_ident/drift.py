"""Online identification under parameter drift: drift generators with a prescribed V_T.

The paper measures non-stationarity by the path variation
V_T = sum_{t=1}^{T-1} ||theta*_{t+1} - theta*_t||. Every generator here hits a requested
V_T exactly (up to float rounding), so regret-vs-T studies can set V_T = v0 * T^beta.

All three kinds move theta*_t = center + radius * u_t with u_t on the unit sphere, by
rotating u_t through an angle alpha in the plane of (u_t, w_t) for a unit tangent w_t.
Such a rotation moves theta* by the chord 2 * radius * sin(alpha / 2), so the path length
is controlled step by step and the parameter never leaves the ball of `radius` around
`center` (the known ball OGD projects onto is larger):
  smooth        w_t is the direction of travel (a great circle), alpha constant;
  random_walk   w_t is a fresh random tangent each step, alpha constant;
  switch        theta* is piecewise constant with K abrupt jumps of equal length
                V_T / K in random directions, at evenly spaced times.
The generator is a state machine (`init`, `step`) so a `lax.scan` over time produces
theta*_t on the fly without materialising a T x d path.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

KINDS = ("smooth", "switch", "random_walk")


def kind_index(name: str) -> int:
  if name not in KINDS:
    raise ValueError(f"unknown drift kind {name!r}; known: {', '.join(KINDS)}")
  return KINDS.index(name)


def target_variation(horizon, beta, scale):
  """V_T = scale * T^beta, the growth law of the regret-vs-T study."""
  return scale * jnp.asarray(horizon, jnp.float32) ** beta


def _chord_angle(chord, radius):
  # Rotation angle whose chord on a sphere of `radius` has length `chord`.
  return 2.0 * jnp.arcsin(jnp.clip(chord / (2.0 * radius), 0.0, 1.0))


def num_switches(variation, radius, min_switches):
  """K = max(K0, ceil(V_T / radius)): each jump is at most `radius` long (chord <= 2 r)."""
  k = jnp.ceil(variation / radius).astype(jnp.int32)
  return jnp.maximum(k, min_switches)


def make_params(kind, variation, horizon, radius, min_switches=4):
  """Per-run drift parameters (all arrays, so runs with different kinds/V_T vmap)."""
  kind = jnp.asarray(kind, jnp.int32)
  horizon = jnp.asarray(horizon, jnp.int32)
  variation = jnp.asarray(variation, jnp.float32)
  steps = jnp.maximum(horizon - 1, 1).astype(jnp.float32)
  k = num_switches(variation, radius, min_switches)
  return dict(
      kind=kind, horizon=horizon, switches=k,
      alpha_step=_chord_angle(variation / steps, radius),
      alpha_jump=_chord_angle(variation / k.astype(jnp.float32), radius))


def _tangent(xi, u):
  """The unit tangent at u along the Gaussian draw xi (its component orthogonal to u)."""
  xi = xi - jnp.dot(xi, u) * u
  return xi / jnp.maximum(jnp.linalg.norm(xi), 1e-12)


def init(rng, dim):
  """Random start u_0 on the sphere and an orthogonal direction of travel w_0."""
  r1, r2 = jax.random.split(rng)
  u = jax.random.normal(r1, (dim,))
  u = u / jnp.linalg.norm(u)
  return dict(u=u, w=_tangent(jax.random.normal(r2, (dim,)), u))


def is_switch(t, horizon, switches):
  """True on the K transitions t -> t+1 (t = 0..T-2) where a switch happens."""
  k1 = switches + 1
  return (t + 1) * k1 // horizon > t * k1 // horizon


def step(state, params, xi, t):
  """Moves u_t -> u_{t+1} given a N(0, I_d) draw xi (used by the random directions).

  Returns (new state, chord length actually travelled / radius).
  """
  u, w = state["u"], state["w"]
  kind = params["kind"]
  fresh = _tangent(xi, u)
  # smooth keeps its direction of travel; the other two draw a new one.
  direction = jnp.where(kind == 0, w, fresh)
  jump = jnp.where(is_switch(t, params["horizon"], params["switches"]),
                   params["alpha_jump"], 0.0)
  alpha = jnp.where(kind == 1, jump, params["alpha_step"])
  c, s = jnp.cos(alpha), jnp.sin(alpha)
  new_u = c * u + s * direction
  new_w = -s * u + c * direction
  # Renormalise so that float error does not accumulate over 1e5 rotations.
  new_u = new_u / jnp.linalg.norm(new_u)
  new_w = new_w - jnp.dot(new_w, new_u) * new_u
  new_w = new_w / jnp.maximum(jnp.linalg.norm(new_w), 1e-12)
  return dict(u=new_u, w=new_w), 2.0 * jnp.sin(alpha / 2.0)


def path(rng, kind, variation, horizon, dim, center, radius, min_switches=4):
  """Materialises theta*_{0..T-1} (T x d), for tests and plots."""
  params = make_params(kind, variation, horizon, radius, min_switches)
  r0, rs = jax.random.split(rng)
  state = init(r0, dim)

  def body(state, inputs):
    t, xi = inputs
    theta = center + radius * state["u"]
    state, _ = step(state, params, xi, t)
    return state, theta

  xis = jax.random.normal(rs, (horizon, dim))
  _, thetas = jax.lax.scan(body, state, (jnp.arange(horizon), xis))
  return thetas


def path_variation(thetas):
  """V_T = sum_t ||theta_{t+1} - theta_t|| of a (T, d) path."""
  return jnp.sum(jnp.linalg.norm(thetas[1:] - thetas[:-1], axis=-1))
