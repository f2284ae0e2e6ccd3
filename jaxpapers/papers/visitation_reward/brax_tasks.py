"""Success Visitation Matching (arXiv 2606.23640): brax reacher / pusher, sparse success.

brax's dense rewards are replaced by the sparse outcome reward 1[success(s')]:
reacher succeeds when the fingertip is within `radius` of the target (the last three
observation entries are fingertip - target), pusher when the object is within `radius`
of the goal in the table plane (observation entries 17:20 object, 20:23 goal). The
state is brax's own `State` pytree, which the PPO loop handles like the flat states of
the pure-JAX tasks. Measured on this CPU (README): the reacher step compiles in ~80 s
and runs at ~2k env steps/s for 16 vmapped environments, too slow for the study budget,
so only this wrapper and its success test are kept. There is no scripted demonstrator
for these tasks (an initial policy would have to come from a user's data).
brax is imported lazily: `pip install "brax==0.14.2"`.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxpapers.papers.visitation_reward import envs


@dataclasses.dataclass(frozen=True)
class BraxSparse(envs.Task):
  env_name: str = "reacher"
  radius: float = 0.02

  def _env(self):
    from brax import envs as brax_envs  # lazy: heavy import, optional dependency
    return brax_envs.get_environment(self.env_name)

  def reset(self, key):
    return self._env().reset(key)

  def step(self, state, action, key):
    del key
    return self._env().step(state, jnp.clip(action, -1.0, 1.0))

  def obs(self, state):
    return state.obs

  def distance(self, state):
    o = state.obs
    if self.env_name == "reacher":
      return jnp.linalg.norm(o[-3:-1])  # fingertip - target in the plane
    return jnp.linalg.norm(o[17:19] - o[20:22])  # object - goal on the table

  def success(self, state):
    return self.distance(state) < self.radius

  def expert(self, state, key):
    raise NotImplementedError(f"no scripted demonstrator for brax {self.env_name}")


def make(name: str) -> BraxSparse:
  if name == "brax_reacher":
    return BraxSparse(name=name, env_name="reacher", obs_dim=11, act_dim=2, horizon=50,
                      radius=0.02)
  if name == "brax_pusher":
    return BraxSparse(name=name, env_name="pusher", obs_dim=23, act_dim=7, horizon=100,
                      radius=0.05)
  raise ValueError(f"unknown brax task {name!r}; known: brax_reacher, brax_pusher")
