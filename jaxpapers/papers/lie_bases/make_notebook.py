"""Builds colabs/lie_bases.ipynb (run: python jaxpapers/papers/lie_bases/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Neural orthonormal bases as paths on the orthogonal group (abstract 6)

A basis of L2([0, 1]) is the endpoint of a path U(t) on the orthogonal group that starts at
the Fourier basis and follows dU/dt = K_t U, where K_t(x, y) = sum_i a_i(x,t) b_i(y,t) -
b_i(x,t) a_i(y,t) is a finite-rank skew-adjoint integral operator whose a, b are a small MLP
of (x, t). Each step applies the Cayley map of the rank-2r operator in closed form, so the
basis stays orthonormal to float precision. Here the path learns the Karhunen-Loeve basis of
Brownian motion, sqrt(2) sin((k - 1/2) pi x), from sampled curves; then the same learned path
is re-integrated on a 4x finer grid. `JAXPAPERS_SMOKE=1` runs a tiny setting."""

INSTALL = notebook.INSTALL_CELL

SETUP = """import pathlib
import jax, numpy as np
import matplotlib.pyplot as plt
import jaxpapers
from jaxpapers.papers.lie_bases import experiment, methods

from jaxpapers.core import config as config_lib
SMOKE = os.environ.get('JAXPAPERS_SMOKE') == '1'
config = config_lib.load("configs/lie_bases.py:" + ('smoke,lrs=0.01' if SMOKE else 'steps=1500,lrs=0.003'))
spec = methods.spec_from(config.model)
problem, data = experiment.setup(config, 'bm')
print(problem.grid.size, 'nodes,', problem.m, 'basis functions, rank r =', spec.rank,
      ',', spec.steps, 'integration steps,', config.train.steps, 'Adam steps')"""

TRAIN = """hp = experiment.variants(problem, spec, config.optim.lrs)
fit = experiment.select(experiment.fit_path(config, problem, data, spec, hp,
                                            config.train.steps), hp)
for name, u in [('reference', np.stack([problem.ref_w] * fit['u'].shape[0])),
                ('learned', fit['u'])]:
  m = experiment.evaluate(problem, u, data['test'])
  print(f"{name:>9}: sin(max principal angle) {m['sin_angle'].mean():.3f}, "
        f"mean function error {m['func_err'].mean():.3f}, "
        f"explained-variance gap {m['ev_gap'].mean():.4f}, orth err {m['orth_err'].max():.1e}")"""

PATH = """# The path itself: U(t) for seed 0, re-integrated while recording every step.
import jax.numpy as jnp
params0 = jax.tree.map(lambda x: x[0], fit['params'])
s, sqrt_w, u0 = experiment.geometry(problem)
_, us = methods.path_endpoint(params0, s, sqrt_w, u0, spec, path=True)
us = np.concatenate([np.asarray(u0)[None], np.asarray(us)])
x, sw = problem.grid.x[:, 0], problem.grid.sqrt_w[:, None]
truth = problem.truth_w / sw
fig, axes = plt.subplots(1, 4, figsize=(16, 3.2), sharey=True)
for ax, n in zip(axes, np.linspace(0, spec.steps, 4).astype(int)):
  u = us[n] / sw
  for k in range(3):
    line, = ax.plot(x, u[:, k] * np.sign(np.sum(u[:, k] * truth[:, k] * problem.grid.w) or 1))
    ax.plot(x, truth[:, k], '--', color=line.get_color(), lw=1)
  err = np.abs(us[n].T @ us[n] - np.eye(problem.m)).max()
  ax.set_title(f't = {n / spec.steps:.2f}   |U^T W U - I| = {err:.1e}')
fig.suptitle('Fourier (t = 0) turning into the Brownian-motion KL basis (dashed)')
fig.tight_layout(); plt.show()"""

FINE = """# Resolution independence: the same a, b evaluated on a 4x finer quadrature grid.
fine, _ = experiment.setup(config, 'bm', factor=4, seeds=1)
m = experiment.evaluate(fine, experiment.path_on(fine, fit['params'], spec))
print(f"{fine.grid.size} nodes: sin angle {m['sin_angle'].mean():.3f}, function error "
      f"{m['func_err'].mean():.3f}, orth err {m['orth_err'].max():.1e}")"""


def build():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO), nbformat.v4.new_code_cell(INSTALL),
              nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(TRAIN),
              nbformat.v4.new_code_cell(PATH), nbformat.v4.new_code_cell(FINE)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "lie_bases.ipynb"))


if __name__ == "__main__":
  build()
