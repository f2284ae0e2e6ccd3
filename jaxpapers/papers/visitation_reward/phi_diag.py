"""Success Visitation Matching: does the potential Phi track progress? (issue 48)

The method's dense reward is only useful if Phi(s) = sigma(D(s, mu_0(s))) rises as an
episode gets closer to success. This diagnostic takes the discriminator exactly as the
method has it when fine-tuning starts (`ppo.init`: trained on the BC policy's
`prefill_rollouts` exploration rollouts), rolls out three policies on fresh start states
-- the scripted expert (noise-free), the BC policy (mean action) and uniform random
actions -- and reports per task, over seeds:

- Spearman rank correlation of Phi(s_t) with -distance(s_t) (the task's hand-shaped
  distance to completion), per rollout kind and pooled over the three kinds;
- Spearman of Phi(s_t) with t along each expert episode (does Phi rise as the expert
  progresses?), averaged over episodes;
- the AUROC of Phi(s_t) separating states of successful from failed episodes (pooled);
- the mean Phi on each kind (expert > BC > random if Phi orders behaviour by success).

Negative control: the same numbers for the untrained discriminator (its initial
weights): the diagnostic must be able to show no tracking. The positive control
(Phi = -distance gives Spearman 1) is in the tests.

  python -m jaxpapers.papers.visitation_reward.phi_diag --tasks=point_reach,push_block,mountain_car --seeds=5 --out=/tmp/phi_diag.json
"""
from __future__ import annotations

import argparse
import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxpapers.core import config as config_lib
from jaxpapers.papers.visitation_reward import envs, experiment, networks, ppo, rewards

KINDS = ("expert", "bc", "random")


def rollouts(task: envs.Task, actor0, key, episodes: int):
  """{kind: (states (E, H+1, S) pytree, distance (E, H+1), success per state (E, H+1))}."""
  pols = {"expert": lambda o, s, k: task.expert(s, k),
          "bc": lambda o, s, k: networks.actor_mean(actor0, o),
          "random": lambda o, s, k: jax.random.uniform(k, (task.act_dim,), minval=-1.0,
                                                       maxval=1.0)}
  out = {}
  for i, kind in enumerate(KINDS):
    states, _ = jax.vmap(lambda k, p=pols[kind]: envs.rollout(task, p, k))(
        jax.random.split(jax.random.fold_in(key, i), episodes))
    out[kind] = (states, jax.vmap(jax.vmap(task.distance))(states),
                 jax.vmap(jax.vmap(task.success))(states))
  return out


def auroc(score, label) -> float:
  """P(score of a positive > score of a negative) (ties count 1/2); nan without both."""
  score, label = np.asarray(score, np.float64), np.asarray(label, bool)
  n1, n0 = label.sum(), (~label).sum()
  if n1 == 0 or n0 == 0:
    return float("nan")
  r = stats.rankdata(score)
  return float((r[label].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def spearman(x, y) -> float:
  """Spearman rank correlation; nan when either side is constant."""
  x, y = np.ravel(np.asarray(x, np.float64)), np.ravel(np.asarray(y, np.float64))
  if np.ptp(x) == 0 or np.ptp(y) == 0:
    return float("nan")
  return float(stats.spearmanr(x, y).statistic)


def summarise(phi: dict, dist: dict, succ: dict) -> dict:
  """The diagnostic's numbers from {kind: (E, H+1)} arrays of Phi, distance, success."""
  out = {}
  for kind in phi:
    out[f"rho_{kind}"] = spearman(phi[kind], -dist[kind])
    out[f"phi_{kind}"] = float(np.mean(phi[kind]))
    out[f"success_{kind}"] = float(np.mean(np.asarray(succ[kind]).any(1)))
  cat = lambda d: np.concatenate([np.ravel(d[k]) for k in phi])  # noqa: E731
  out["rho_pooled"] = spearman(cat(phi), -cat(dist))
  if "expert" in phi:
    e = np.asarray(phi["expert"])
    t = np.arange(e.shape[1])
    out["rho_time_expert"] = float(np.nanmean([spearman(row, t) for row in e]))
  ep = {k: np.broadcast_to(np.asarray(succ[k]).any(1, keepdims=True), np.shape(succ[k]))
        for k in phi}
  out["auroc_episode_success"] = auroc(cat(phi), cat(ep))
  return out


@functools.partial(jax.jit, static_argnames=("task_name", "rc", "episodes"))
def _phis(task_name: str, rc: experiment.RunCfg, seed, episodes: int):
  """Phi under the trained and the untrained discriminator, distance and success, each
  {kind: (E, H+1)}, for one seed: one compiled program per task."""
  task = envs.make(task_name)
  key = experiment.seed_key(task_name, seed)
  actor0 = experiment.initial_actor(task, rc, key)
  carry, _ = ppo.init(task, rc, jax.random.fold_in(key, 1), actor0)  # the method's D at start
  untrained = rewards.aux_init(jax.random.fold_in(key, 3), task.obs_dim, task.act_dim,
                               rc.hidden)
  ro = rollouts(task, actor0, jax.random.fold_in(key, 7_777_777), episodes)
  obs = {k: jax.vmap(jax.vmap(task.obs))(v[0]) for k, v in ro.items()}
  phi = {name: {k: rewards.potential(aux, actor0, o, 1.0) for k, o in obs.items()}
         for name, aux in (("trained", carry.aux), ("untrained", untrained))}
  return phi, {k: v[1] for k, v in ro.items()}, {k: v[2] for k, v in ro.items()}


def diagnose(task_name: str, rc: experiment.RunCfg, seed: int, episodes: int) -> dict:
  """{"trained": numbers, "untrained": numbers} for one task and seed."""
  phi, dist, succ = jax.tree.map(np.asarray, _phis(task_name, rc, jnp.int32(seed), episodes))
  return {name: summarise(phi[name], dist, succ) for name in phi}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--tasks", default="point_reach,push_block,mountain_car")
  p.add_argument("--seeds", type=int, default=5)
  p.add_argument("--episodes", type=int, default=32)
  p.add_argument("--config", default="", help="args of configs/visitation_reward.py")
  p.add_argument("--out", default="")
  a = p.parse_args(argv)
  spec = "configs/visitation_reward.py" + (":" + a.config if a.config else "")
  rc = experiment.run_cfg(config_lib.load(spec))
  rows = []
  for t in a.tasks.split(","):
    per_seed = [diagnose(t, rc, s, a.episodes) for s in range(a.seeds)]
    for d in ("trained", "untrained"):
      keys = per_seed[0][d].keys()
      row = {"task": t, "discriminator": d, "seeds": a.seeds, "episodes": a.episodes}
      for k in keys:
        v = np.array([ps[d][k] for ps in per_seed], np.float64)
        row[k] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
        row[k + "_sd"] = float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else float("nan")
      rows.append(row)
      print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}),
            flush=True)
  if a.out:
    with open(a.out, "w") as f:
      json.dump(rows, f, indent=1)
  return rows


if __name__ == "__main__":
  main(sys.argv[1:])
  sys.exit(0)
