"""Motor primitives as adapters of a shared recurrent core (abstract 7): sensory delays.

Fixed transmission delays as shift registers: a buffer of the last `d` observations,
oldest first. Reading returns the observation from exactly `d` control steps ago
(the first observation before that many have arrived); d = 0 passes the current one
through. MotorNet's defaults are 20 ms proprioceptive and 50-70 ms visual delays at
10 ms steps; we use 2 and 5 steps (README "Choices").
"""
from __future__ import annotations

import jax.numpy as jnp


def init(obs, delay: int):
  """A buffer of `delay` copies of the first observation (shape (delay,) + obs.shape)."""
  if delay < 0:
    raise ValueError(f"feedback delay must be >= 0 steps, got {delay}")
  return jnp.broadcast_to(obs, (delay,) + obs.shape)


def push(buffer, obs):
  """(delayed observation, new buffer): returns obs from `delay` steps ago."""
  if buffer.shape[0] == 0:
    return obs, buffer
  return buffer[0], jnp.concatenate([buffer[1:], obs[None]], axis=0)
