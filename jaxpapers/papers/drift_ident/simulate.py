"""Online identification under parameter drift: one run = one `lax.scan` over time.

A run draws its data stream (system + drift) on the fly, steps every estimator of
`estimators.METHODS` on the same stream and accumulates the dynamic regret against the
moving comparator,
  R_T = sum_t l_t(theta_t) - l_t(theta*_t),   l_t(theta) = 0.5 ||y_t - Phi_t theta||^2,
both as realised (noise included) and as its conditional expectation given the past,
the pseudo-regret sum_t 0.5 ||Phi_t (theta_t - theta*_t)||^2 (the noise cross term has
mean zero because theta_t does not see y_t). The time axis is a nested scan: the outer
scan over `n_records` chunks emits cumulative curves, so memory is O(n_records), not O(T).
Runs are vmapped over seeds, drift kinds, V_T growth exponents and noise levels, the batch
split over the devices (`core.sharding.spread`).
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import sharding
from jaxpapers.papers.drift_ident import drift
from jaxpapers.papers.drift_ident import estimators
from jaxpapers.papers.drift_ident import systems

M = len(estimators.METHODS)


def make_hp(system, steps, variation, horizon, noise):
  """Per-run step-rule constants. `variation` may be traced (vmapped over V_T)."""
  d, _ = systems.dims(system)
  variation = jnp.asarray(variation, jnp.float32)
  t = jnp.asarray(horizon, jnp.float32)
  r, g = steps.radius, steps.grad_bound
  eta_oracle = jnp.minimum(estimators.oracle_step(variation, t, r, g), steps.eta_max)
  restart = jnp.maximum(jnp.ceil(estimators.oracle_window(variation, t, r)), 1.0)
  return dict(
      radius=jnp.float32(r), grad_bound=jnp.float32(g),
      eta_fixed=jnp.float32(steps.eta_fixed), eta_oracle=eta_oracle,
      eta_min=jnp.float32(steps.eta_min), eta_max=jnp.float32(steps.eta_max),
      window_scale=jnp.float32(steps.window_scale),
      min_window=jnp.float32(steps.min_window), max_window=jnp.float32(steps.max_window), restart_len=restart.astype(jnp.int32),
      rls_lambda=jnp.float32(steps.rls_lambda), rls_delta=jnp.float32(steps.rls_delta),
      # Random-walk Kalman filter told the per-step drift (V_T/T)^2 spread over d
      # coordinates and the true noise variance: an oracle-informed baseline.
      kalman_q=(variation / t) ** 2 / d, kalman_r=jnp.asarray(noise, jnp.float32) ** 2,
      kalman_p0=jnp.float32(steps.radius ** 2))


def run(system, horizon: int, n_records: int, rng, kind, variation, noise, hp):
  """Simulates one stream of `horizon` steps; returns curves at `n_records` points."""
  if horizon % n_records:
    raise ValueError(f"horizon {horizon} must be a multiple of n_records {n_records}")
  chunk = horizon // n_records
  d, _ = systems.dims(system)
  center = systems.center(system)
  dparams = drift.make_params(kind, variation, horizon, system.radius)
  r_init, r_stream = jax.random.split(rng)
  carry = dict(sys=systems.init(r_init, system),
               est=estimators.init(d, center, hp),
               regret=jnp.zeros((M,)), pseudo=jnp.zeros((M,)),
               variation=jnp.zeros(()))

  def step(carry, inputs):
    t, draws = inputs
    sys_state, (phi, y, theta, chord) = systems.step(
        carry["sys"], system, dparams, draws, t, noise)
    preds = jnp.stack([carry["est"][m] for m in estimators.METHODS])  # M x d
    err = preds - theta[None, :]
    fit = (preds @ phi.T) - y[None, :]  # M x p residuals of the predictions
    loss = 0.5 * jnp.sum(fit ** 2, axis=1)
    loss_star = 0.5 * jnp.sum((phi @ theta - y) ** 2)
    pseudo = 0.5 * jnp.sum((err @ phi.T) ** 2, axis=1)
    est = estimators.update(carry["est"], phi, y, theta, t, center, hp)
    # The last transition's chord belongs to theta*_T, outside the horizon.
    chord = jnp.where(t < horizon - 1, chord, 0.0)
    carry = dict(sys=sys_state, est=est, regret=carry["regret"] + loss - loss_star,
                 pseudo=carry["pseudo"] + pseudo,
                 variation=carry["variation"] + chord)
    return carry, None

  def chunk_body(carry, c):
    draws = systems.draw(jax.random.fold_in(r_stream, c), system, chunk)
    carry, _ = jax.lax.scan(step, carry, (c * chunk + jnp.arange(chunk), draws))
    est = carry["est"]
    theta = center + system.radius * carry["sys"]["drift"]["u"]
    rec = dict(regret=carry["regret"], pseudo=carry["pseudo"],
               variation=carry["variation"], eta=est["eta"], vhat=est["vhat"],
               overhead=est["overhead"], theta_star=theta,
               theta=jnp.stack([est[m] for m in estimators.METHODS]))
    return carry, rec

  _, records = jax.lax.scan(chunk_body, carry, jnp.arange(n_records))
  records["t"] = (jnp.arange(n_records) + 1) * chunk
  return records


_CACHE = {}


def batch_fn(system, steps, horizon: int, n_records: int, scale: float):
  """A jitted function of flat arrays (seed, kind, beta, noise) -> stacked records.

  V_T = scale * T^beta; every run is independent, so the batch is one vmapped scan.
  Cached by value so that repeated calls (notebook, study) reuse the compiled program.
  """
  key = (json.dumps(system.to_dict(), sort_keys=True),
         json.dumps(steps.to_dict(), sort_keys=True), horizon, n_records, scale)
  if key not in _CACHE:
    _CACHE[key] = _batch_fn(system, steps, horizon, n_records, scale)
  return _CACHE[key]


def one_run(system, steps, horizon: int, n_records: int, scale: float):
  """`one(seed, kind, beta, noise)`: the records of ONE run (what the batch vmaps)."""
  def one(seed, kind, beta, noise):
    variation = drift.target_variation(horizon, beta, scale)
    hp = make_hp(system, steps, variation, horizon, noise)
    out = run(system, horizon, n_records, jax.random.PRNGKey(seed), kind, variation,
              noise, hp)
    out["eta_oracle"] = hp["eta_oracle"]
    out["target_variation"] = variation
    return out
  return one


def _batch_fn(system, steps, horizon, n_records, scale):
  # Runs are independent: the batch axis is split over every device (one device: the
  # plain jit(vmap)); a run never crosses devices, so its numbers do not change.
  return sharding.spread(one_run(system, steps, horizon, n_records, scale))


def run_batch(system, steps, horizon: int, n_records: int, seeds, kinds, betas, noises,
              scale: float):
  """Runs `batch_fn` once on flat per-run lists; returns numpy records."""
  fn = batch_fn(system, steps, horizon, n_records, scale)
  out = fn(jnp.asarray(seeds, jnp.int32), jnp.asarray(kinds, jnp.int32),
           jnp.asarray(betas, jnp.float32), jnp.asarray(noises, jnp.float32))
  return jax.tree.map(np.asarray, out)
