"""Success Visitation Matching (arXiv 2606.23640): the imperfect initial policy.

The paper fine-tunes a pre-trained robot policy. Here that policy is behaviour-cloned
(mean-squared error on the tanh mean) from a few episodes of the task's scripted
demonstrator with Gaussian action noise: few, noisy demonstrations and a short fit give
a policy that succeeds sometimes but far from always, which is the regime where the
sparse reward's credit assignment is the bottleneck.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.papers.visitation_reward import envs, networks


def demonstrations(task: envs.Task, key, episodes: int, noise: float):
  """(obs (N, O), actions (N, A)) from `episodes` noisy scripted episodes.

  The noisy action is both executed and recorded (the demonstrator's own mistakes are
  in the data).
  """
  def pol(obs, s, k):
    return task.expert(s, k) + noise * jax.random.normal(k, (task.act_dim,))
  states, actions = jax.vmap(lambda k: envs.rollout(task, pol, k))(
      jax.random.split(key, episodes))
  obs = jax.vmap(jax.vmap(task.obs))(states[:, :-1])
  return obs.reshape(-1, task.obs_dim), jnp.clip(actions, -1, 1).reshape(-1, task.act_dim)


def behaviour_clone(task: envs.Task, key, hidden: int, episodes: int, noise: float,
                    steps: int, lr: float = 1e-3, batch: int = 128):
  """Actor params fitted by Adam on MSE(tanh mean, demonstrated action)."""
  kd, ki, kb = jax.random.split(key, 3)
  obs, act = demonstrations(task, kd, episodes, noise)
  params = networks.mlp_init(ki, [task.obs_dim, hidden, hidden, task.act_dim], 0.01)
  opt = networks.adam()
  opt_state = opt.init(params)

  def loss(p, o, a):
    return jnp.mean((networks.actor_mean(p, o) - a) ** 2)

  def body(carry, k):
    p, s = carry
    idx = jax.random.randint(k, (batch,), 0, obs.shape[0])
    g = jax.grad(loss)(p, obs[idx], act[idx])
    p, s = networks.adam_step(opt, p, s, g, lr)
    return (p, s), None

  (params, _), _ = jax.lax.scan(body, (params, opt_state), jax.random.split(kb, steps))
  return params
