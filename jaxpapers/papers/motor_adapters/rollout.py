"""Motor primitives as adapters of a shared recurrent core (abstract 7): closed loop.

One `lax.scan` runs network -> motor noise -> muscles -> skeleton -> delayed, noisy
proprioceptive (fibre lengths and velocities) and visual (hand position) feedback ->
network, for a movement of S segments of T steps. At each segment's first step the
network gets a go pulse and the segment's option (one-hot adapter code, or the task
input of the multitask baseline); its visual input is the hand position relative to the
segment's intended start (the drawing's vertex), scaled by the stroke size.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.motor_adapters import arm as arm_lib
from jaxpapers.papers.motor_adapters import feedback
from jaxpapers.papers.motor_adapters import model as model_lib

PROP_DIM, VIS_DIM = 12, 2
IN_DIM = PROP_DIM + VIS_DIM + 1  # + go pulse


class Env(NamedTuple):
  """Static settings of the closed loop (hashable: a jit static argument)."""
  dt: float = 0.01
  substeps: int = 1
  prop_delay: int = 2
  vis_delay: int = 5
  motor_noise: float = 0.01
  prop_noise: float = 0.01
  vis_noise: float = 0.01
  radius: float = 0.08
  move_steps: int = 50
  hold_steps: int = 10
  home: tuple = (float(np.deg2rad(45.0)), float(np.deg2rad(90.0)))
  start_spread: float = 0.04  # m: random starts uniform in a disc around the home hand
  damping: float = 0.1
  # Inner (time-step) scan unrolling (lax.scan's `unroll`); 1 in training.
  unroll: int | bool = 1

  @property
  def steps(self) -> int:
    return self.move_steps + self.hold_steps

  @property
  def arm(self) -> arm_lib.ArmParams:
    return arm_lib.ArmParams(damping=self.damping)


def random_starts(env: Env, key, n: int):
  """(q0 (n, 2), hand0 (n, 2)): rest postures with the hand in a disc around home."""
  p = env.arm
  home = arm_lib.fingertip(p, jnp.asarray(env.home))
  k1, k2 = jax.random.split(key)
  r = env.start_spread * jnp.sqrt(jax.random.uniform(k1, (n,)))
  th = 2 * jnp.pi * jax.random.uniform(k2, (n,))
  xy = home[None] + jnp.stack([r * jnp.cos(th), r * jnp.sin(th)], -1)
  q0 = arm_lib.inverse_kinematics(p, xy)
  return q0, jax.vmap(lambda q: arm_lib.fingertip(p, q))(q0)


def home_start(env: Env, n: int):
  q0 = jnp.broadcast_to(jnp.asarray(env.home, jnp.float32), (n, 2))
  return q0, jax.vmap(lambda q: arm_lib.fingertip(env.arm, q))(q0)


def rollout(params, kid, env: Env, options, targets, q0, key):
  """One movement. kid: model kind index (model.KINDS); options (S, K) one-hot (or
  straight-through) codes; targets (S, T, 2) relative to each segment's start; q0 (2,).
  Returns hand (S*T, 2), absolute targets (S*T, 2), excitations (S*T, 6), hidden
  states (S*T, H). Outer scan over segments (the adapter is contracted once per
  segment), inner scan over the segment's steps."""
  p = env.arm
  s, t = targets.shape[:2]
  hand0 = arm_lib.fingertip(p, q0)
  ends = jnp.cumsum(targets[:, -1], axis=0)
  origins = hand0[None] + jnp.concatenate([jnp.zeros((1, 2)), ends[:-1]], 0)  # (S, 2)
  segs = jax.vmap(lambda o: model_lib.segment_inputs(params, kid, o, IN_DIM))(options)
  state = arm_lib.rest_state(p, q0)
  hidden = params["core"]["wh"].shape[0]
  carry0 = (state, jnp.zeros((hidden,)),
            feedback.init(arm_lib.proprioception(p, state), env.prop_delay),
            feedback.init(hand0, env.vis_delay))

  def step(carry, inp, seg, origin):
    state, h, pbuf, vbuf = carry
    g, k = inp
    kp, kv, km = jax.random.split(k, 3)
    prop = arm_lib.proprioception(p, state) + env.prop_noise * jax.random.normal(kp, (PROP_DIM,))
    hand = arm_lib.fingertip(p, state.q)
    hand = hand + env.vis_noise * env.radius * jax.random.normal(kv, (VIS_DIM,))
    prop_d, pbuf = feedback.push(pbuf, prop)
    hand_d, vbuf = feedback.push(vbuf, hand)
    x = jnp.concatenate([prop_d, (hand_d - origin) / env.radius, g[None]])
    h, u = model_lib.controller_step(params, seg, h, x)
    u_noisy = u + env.motor_noise * jax.random.normal(km, u.shape)
    state = arm_lib.step(p, state, u_noisy, env.dt, env.substeps)
    return (state, h, pbuf, vbuf), (arm_lib.fingertip(p, state.q), u, h)

  go = (jnp.arange(t) == 0).astype(jnp.float32)

  def segment(carry, xs):
    seg, origin, k = xs
    return jax.lax.scan(lambda c, i: step(c, i, seg, origin), carry,
                        (go, jax.random.split(k, t)), unroll=env.unroll)

  _, (hand, u, hs) = jax.lax.scan(segment, carry0, (segs, origins, jax.random.split(key, s)))
  abs_targets = origins[:, None] + targets
  flat = lambda x: x.reshape((s * t,) + x.shape[2:])  # noqa: E731
  return flat(hand), flat(abs_targets), flat(u), flat(hs)


def tracking(hand, abs_targets, mask_steps):
  """(mean squared error in cm^2, mean distance in cm) over the unmasked steps."""
  d2 = jnp.sum((hand - abs_targets) ** 2, -1) * 1e4
  w = mask_steps / jnp.maximum(mask_steps.sum(), 1.0)
  return jnp.sum(w * d2), jnp.sum(w * jnp.sqrt(d2 + 1e-12))
