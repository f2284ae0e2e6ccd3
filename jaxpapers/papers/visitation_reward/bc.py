"""Success Visitation Matching (arXiv 2606.23640): the imperfect initial policy.

The paper fine-tunes a pre-trained robot policy. Here that policy is behaviour-cloned
(mean-squared error on the tanh mean) from a few episodes of the task's scripted
demonstrator with Gaussian action noise: few, noisy demonstrations and a short fit give
a policy that succeeds sometimes but far from always, which is the regime where the
sparse reward's credit assignment is the bottleneck.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

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
  obs = jax.vmap(jax.vmap(task.obs))(jax.tree.map(lambda x: x[:, :-1], states))
  return obs.reshape(-1, task.obs_dim), jnp.clip(actions, -1, 1).reshape(-1, task.act_dim)


def load_demonstrations(path: str, obs_dim: int, act_dim: int):
  """(obs (N, O), actions (N, A)) float32 from recorded demonstrations at `path`.

  Formats: robomimic-style HDF5 (`data/<demo>/obs` a (T, O) dataset, or a group of
  low-dimensional keys concatenated in sorted key order, and `data/<demo>/actions`
  (T, A), demos in sorted name order) or an `.npz` with `obs` (N, O) and `actions`
  (N, A). Actions must already be scaled to the task's [-1, 1] action box.
  """
  if not os.path.exists(path):
    raise FileNotFoundError(
        f"demonstrations not found at {path}: record episodes of the task's observation "
        "and [-1, 1] action (robomimic-style HDF5 data/<demo>/{obs,actions} or .npz with "
        "obs, actions), or leave bc.demos empty to use the scripted demonstrator")
  if path.endswith(".npz"):
    with np.load(path) as f:
      missing = {"obs", "actions"} - set(f.files)
      if missing:
        raise ValueError(f"{path} lacks arrays {sorted(missing)} (has {sorted(f.files)})")
      obs, act = f["obs"], f["actions"]
  else:
    import h5py  # pylint: disable=g-import-not-at-top
    obs, act = [], []
    with h5py.File(path, "r") as f:
      if "data" not in f or not len(f["data"]):
        raise ValueError(f"{path} has no demonstrations under data/ (robomimic layout)")
      for name in sorted(f["data"]):
        demo = f["data"][name]
        o = demo["obs"]
        o = (np.asarray(o) if not hasattr(o, "keys") else
             np.concatenate([np.asarray(o[k]).reshape(len(o[k]), -1) for k in sorted(o)], -1))
        obs.append(o)
        act.append(np.asarray(demo["actions"]))
    obs, act = np.concatenate(obs), np.concatenate(act)
  obs, act = np.asarray(obs, np.float32), np.asarray(act, np.float32)
  if obs.ndim != 2 or obs.shape[1] != obs_dim or act.shape != (obs.shape[0], act_dim):
    raise ValueError(f"demonstrations in {path} have obs {obs.shape} and actions {act.shape}; "
                     f"the task needs (N, {obs_dim}) and (N, {act_dim})")
  if not (np.isfinite(obs).all() and np.isfinite(act).all()):
    raise ValueError(f"demonstrations in {path} contain NaN or inf")
  return obs, np.clip(act, -1, 1)


def behaviour_clone(task: envs.Task, key, hidden: int, episodes: int, noise: float,
                    steps: int, lr: float = 1e-3, batch: int = 128, demos=None):
  """Actor params fitted by Adam on MSE(tanh mean, demonstrated action).

  `demos` (obs, actions) replaces the scripted demonstrator's noisy episodes.
  """
  kd, ki, kb = jax.random.split(key, 3)
  obs, act = demonstrations(task, kd, episodes, noise) if demos is None else demos
  obs, act = jnp.asarray(obs), jnp.asarray(act)
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
