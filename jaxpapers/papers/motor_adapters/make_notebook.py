"""Builds colabs/motor_adapters.ipynb (run: python jaxpapers/papers/motor_adapters/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Motor primitives as adapters of a shared recurrent core (abstract 7)

A GRU core controls a planar two-joint arm driven by six Hill-type muscles (MotorNet's
arm26 geometry, Thelen 2003 muscles, 20 ms proprioceptive and 50 ms visual delays, motor
noise). A bank of residual adapters, one selected per movement by a discrete latent code,
is trained end-to-end on primitives (reaches, arcs, loops). A high-level policy over the
adapters, trained with the network frozen, then sequences them to draw letters. The
multitask baseline gets the task as an input instead; a rank-R adapter bank is the
low-rank reference. `JAXPAPERS_SMOKE=1` runs a tiny setting (the test suite does)."""

INSTALL = notebook.INSTALL_CELL

SETUP = """import os, tempfile
import jax, jax.numpy as jnp, numpy as np
import matplotlib.pyplot as plt
from jaxpapers.core import config as config_lib
from jaxpapers.papers.motor_adapters import arm, experiment

SMOKE = os.environ.get('JAXPAPERS_SMOKE') == '1'
# the tiny setting (as the test suite runs it), or one seed of the study's model with a
# tenth of its primitive steps and policy steps, at each kind's selected learning rate,
# without the parameter-matched baseline (a few minutes on a laptop CPU)
config = config_lib.load('configs/motor_adapters.py:' + (
    'smoke' if SMOKE else 'seeds=1,steps=200,policy_steps=100,policy_lrs=0.03,'
    'lrs_adapters=0.003,lrs_lowrank=0.01,lrs_multitask=0.01,big_hidden=0'))
print('primitive steps', config.train.steps, 'policy steps', config.train.policy_steps,
      'kinds', config.model.kinds)"""

TRAIN = """workdir = tempfile.mkdtemp()
summary = experiment.train_and_evaluate(config, workdir)
for r in summary['rows']:
  print(f"{r['kind']:10s} seed {r['seed']}: primitives {r['prim_test_cm']:.2f} cm, "
        f"letters (OOD) {r['letters_cm']:.2f} cm")
  if r['kind'] != 'multitask':  # the learned discrete code: primitive -> adapter
    print(f"{'':10s} code at init {r['code_init']}")
    print(f"{'':10s} learned code {r['task_to_option']} ({r['options_used']} distinct "
          f"adapters, {r['code_changed']} primitives moved)")"""

DRAW = """# The letters each model draws (black: target, blue: hand), with the arm at the end.
z = np.load(os.path.join(workdir, 'letters.npz'))
p = arm.ArmParams()
kinds = list(z['kinds'])
fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 4), squeeze=False)
seg = int(z['steps_per_segment'])
for ax, j in zip(axes[0], range(len(kinds))):
  for li, name in enumerate(z['names'][:4]):
    n = int(z['mask'][li].sum()) * seg
    off = np.array([0.3 * li, 0.0])
    ax.plot(*(z['target'][j, li, :n] + off).T, 'k-', lw=0.8)
    ax.plot(*(z['hand'][j, li, :n] + off).T, 'C0', lw=1.2)
  # the arm (shoulder at the origin) at its final posture for the first letter
  end = z['hand'][j, 0, int(z['mask'][0].sum()) * seg - 1]
  q = np.asarray(arm.inverse_kinematics(p, jnp.asarray(end)))
  elbow = np.array([p.l1 * np.cos(q[0]), p.l1 * np.sin(q[0])])
  ax.plot([0, elbow[0], end[0]], [0, elbow[1], end[1]], 'C7-o', lw=2)
  ax.set_aspect('equal'); ax.set_title(kinds[j])
plt.show()"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO), nbformat.v4.new_code_cell(INSTALL),
              nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(TRAIN),
              nbformat.v4.new_code_cell(DRAW)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "motor_adapters.ipynb"))


if __name__ == "__main__":
  main()
