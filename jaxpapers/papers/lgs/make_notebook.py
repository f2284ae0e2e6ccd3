"""Builds colabs/lgs.ipynb (run: python jaxpapers/papers/lgs/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# LGS: latent generative PDE solver (abstract 17, arXiv 2602.11229)

A PhyVAE compresses 2-D PDE states into an 8x8 latent grid; PFlowFT, a pyramidal
flow-forcing transformer, predicts the next latent by input-noised flow matching and
rolls out on its own predictions. Here: a small run on two exponax families (decaying
Navier-Stokes vorticity and advection-diffusion), a rollout beside the truth and its
relative L2 error per step. The study (every baseline, 8 families, 3 seeds) is
`python launch/study.py --config=configs/lgs.py`. `JAXPAPERS_SMOKE=1` runs a tiny setting."""

SETUP = """import os
import jax, jax.numpy as jnp, numpy as np
import matplotlib.pyplot as plt
from jaxpapers.core import config as config_lib
from jaxpapers.papers.lgs import experiment as E, train as T
SMOKE = os.environ.get('JAXPAPERS_SMOKE') == '1'
arg = ('smoke,families=navier_stokes+adv_diff' if SMOKE else
       'families=navier_stokes+adv_diff,n_train=6,n_val=1,n_test=1,frames=14,'
       'rollout_steps=10,val_steps=5,vae_steps=200,steps=200,seeds=1,width=48,depth=2')
config = config_lib.load('configs/lgs.py:' + arg)
workdir = '/tmp/lgs_notebook'
data, fams = E.corpus(config, workdir)
mean, std = E.stats(data['train'], len(fams))
xs = {s: E.normalize(v, mean, std) for s, v in data.items()}
print(fams, {s: v['x'].shape for s, v in data.items()})"""

TRAIN = """vae, _ = E.train_vae(config, None, xs['train'], data['train']['mask'], [0])
vp = jax.tree.map(lambda a: a[0], vae['params'])
z = {s: E.encode_all(config, vp, xs[s]) for s in xs}
z_std = float(z['train'].std())
lat = {s: z[s] / z_std for s in z}
res = E.residual_std(lat['train'])
# One member (seed 0) trained on its own VAE's latents, as the study's members are.
lgs, curve, _ = E.train_dynamics(config, None, 'lgs', lat['train'][None],
                                 data['train']['mask'], np.array([res], np.float32), [0],
                                 [config.train.lr], tag='lgs')"""

ROLL = """K, S = config.model.context, config.eval.rollout_steps
pred = E.rollout_members(config, 'lgs', lgs['params'], lat['test'][None, :, :K],
                         data['test']['mask'], np.array([res]), S,
                         vae=(vae['params'], np.array([z_std], np.float32)))
err = E.errors(pred, data['test'], mean, std, K)[0]
for f, name in enumerate(fams):
  print(name, 'L2RE per step:', np.round(err[data['test']['fam'] == f].mean(0), 3))
m, s = mean[data['test']['fam']], std[data['test']['fam']]
phys = pred[0] * s[:, None, None, None] + m[:, None, None, None]
i = 0  # first test trajectory (navier_stokes)
steps = [0, S // 2, S - 1]
fig, ax = plt.subplots(2, len(steps), figsize=(3 * len(steps), 6))
for j, k in enumerate(steps):
  truth = data['test']['x'][i, K + k, ..., 0]
  lim = np.abs(truth).max()
  ax[0, j].imshow(truth, cmap='RdBu', vmin=-lim, vmax=lim); ax[0, j].set_title(f'truth, step {k + 1}')
  ax[1, j].imshow(phys[i, k, ..., 0], cmap='RdBu', vmin=-lim, vmax=lim)
  ax[1, j].set_title(f'LGS, L2RE {err[i, k]:.3f}')
for a in ax.ravel():
  a.set_xticks([]); a.set_yticks([])
fig.tight_layout(); plt.show()"""


def build():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL),
              nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(TRAIN),
              nbformat.v4.new_code_cell(ROLL)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "lgs.ipynb"))


if __name__ == "__main__":
  build()
