"""Builds colabs/visitation_reward.ipynb (run: python jaxpapers/papers/visitation_reward/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Success Visitation Matching: dense rewards from a success/failure discriminator

arXiv 2606.23640. A behaviour-cloned point-mass policy (imperfect: noisy, few
demonstrations) is fine-tuned by PPO on the sparse success reward alone, and on the sparse
reward plus the potential-shaping term of a discriminator trained on earlier successful
vs failed state-action visitations. We show the success rate over training and rollouts
of the policy before and after fine-tuning. Set `JAXPAPERS_SMOKE=1` for a seconds-long
run (the tests do); the full numbers are in the paper's README."""

SETUP = """import os
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.visitation_reward import envs, experiment, networks

SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"
arg = "smoke" if SMOKE else "iterations=30,hidden=32"
config = config_lib.load("configs/visitation_reward.py:" + arg)
task = envs.make("point_reach")
print("task", task.name, "horizon", task.horizon, "episodes/iteration", config.ppo.num_envs)"""

RUN = """runs = {}
for method in ("sparse", "svm"):
  actor0, actor, curve = experiment.finetune_one(config, task.name, method, seed=0, lr=3e-4)
  runs[method] = (actor0, actor, np.asarray(curve))
  print(f"{method:7s} success per iteration: {np.round(runs[method][2], 2)}")"""

PLOT = """def trajectories(actor, n=6):
  pol = lambda obs, s, k: networks.actor_mean(actor, obs)
  return jax.vmap(lambda k: envs.rollout(task, pol, k)[0])(jax.random.split(jax.random.key(7), n))

fig, axes = plt.subplots(1, 3, figsize=(13, 4))
steps = config.ppo.num_envs * task.horizon
for method, (_, _, curve) in runs.items():
  axes[0].plot(np.arange(len(curve)) * steps, curve, label=method)
axes[0].set(xlabel="environment steps", ylabel="success rate", title="fine-tuning")
axes[0].legend()
for ax, (title, actor) in zip(axes[1:], [("before (BC policy)", runs["svm"][0]),
                                         ("after (SVM fine-tuned)", runs["svm"][1])]):
  S = np.asarray(trajectories(actor))
  for i in range(S.shape[0]):
    ax.plot(S[i, :, 0], S[i, :, 1], color=f"C{i}")
    ax.scatter(S[i, 0, 4], S[i, 0, 5], marker="*", s=120, color=f"C{i}")
    ax.scatter(S[i, 0, 0], S[i, 0, 1], marker="o", s=20, color=f"C{i}")
  ax.set(xlim=(-1.2, 1.2), ylim=(-1.2, 1.2), title=title, aspect="equal")
plt.tight_layout()
plt.show()"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL)]
  nb.cells += [nbformat.v4.new_code_cell(c) for c in (SETUP, RUN, PLOT)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "visitation_reward.ipynb"))


if __name__ == "__main__":
  main()
