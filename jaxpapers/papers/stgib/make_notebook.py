"""Builds colabs/stgib.ipynb (run: python jaxpapers/papers/stgib/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# STGIB: a spatio-temporal explanation trajectory (abstract 13)

A road-grid traffic simulator with known, time-varying causal gates (rush-hour regimes,
closures, incidents propagating along edges with delays); a graph-convolutional GRU
forecaster whose edge masks m_1..m_12 form a stochastic trajectory trained under the
recursive KL bound to a Markov prior. Below: one seed trained briefly, then one test
window's explanation trajectory animated over the road graph beside the simulator's
ground truth. The full comparison is `python launch/study.py --config=configs/stgib.py`.
`JAXPAPERS_SMOKE=1` runs a tiny setting."""

SETUP = """import os, tempfile
import jax, numpy as np
import matplotlib.pyplot as plt
from matplotlib import animation
from IPython.display import HTML, display
from jaxpapers.core import config as config_lib
from jaxpapers.papers.stgib import data, experiment, simulator, train
SMOKE = os.environ.get('JAXPAPERS_SMOKE') == '1'
config = config_lib.load('configs/stgib.py:' + ('smoke' if SMOKE else 'seeds=1,steps=300'))
tr = data.load(config.data)
w = data.windows(tr, 12, 12)
spec = experiment.spec_of(config, tr)
out = train.train_members(spec, config, w, [0], [config.train.lr], tempfile.mkdtemp(), 'nb')
last = experiment.even(w.split['test'], 200)
x, y = data.gather(w, last, 12, 12)
yhat, scores = experiment.predict_members(spec, out['best'], x, out['r_final'], w)
truth = simulator.window_truth(tr.sim, last, 12)  # the labels: open gates of values still pending
gates = simulator.window_truth(tr.sim, last, 12, pending=False)  # every open gate at arrival
print('test MAE 15/60 min:', [round(experiment.forecast_metrics(yhat[0], y)[k], 3)
                              for k in ('mae_15min', 'mae_60min')])
from jaxpapers.papers.stgib import explain
print('explanation AUROC vs the labels:', round(explain.mean_auroc(scores[0], truth), 3))"""

PLOT = """i = int(np.argmax(gates.reshape(len(gates), -1).std(1)))  # a window whose gates change
xy = tr.coords
def draw(ax, vals, title):
  ax.clear(); ax.set_title(title, fontsize=9); ax.axis('off')
  for e, (s, d) in enumerate(zip(tr.src, tr.dst)):
    off = 0.06 * np.array([-(xy[d] - xy[s])[1], (xy[d] - xy[s])[0]])  # two directions apart
    a, b = xy[s] + off, xy[d] + off
    ax.annotate('', b, a, arrowprops=dict(arrowstyle='->', lw=0.5 + 3 * vals[e],
                                          color=plt.cm.viridis(vals[e])))
  ax.scatter(xy[:, 0], xy[:, 1], s=60, c='k', zorder=3)
  ax.set_xlim(xy[:, 0].min() - .5, xy[:, 0].max() + .5)
  ax.set_ylim(xy[:, 1].min() - .5, xy[:, 1].max() + .5)
s = scores[0, i] / max(scores[0, i].max(), 1e-9)
fig, axes = plt.subplots(2, 4, figsize=(13, 6))
for k, t in enumerate([0, 4, 8, 11]):
  draw(axes[0, k], s[t], f'STGIB mask, input step {t + 1}')
  draw(axes[1, k], gates[i, t].astype(float), f'gates open at arrival, step {t + 1}')
fig.tight_layout(); plt.show()"""

ANIM = """fig, ax = plt.subplots(1, 2, figsize=(9, 4))
def frame(t):
  draw(ax[0], s[t], f'STGIB explanation, step {t + 1}/12')
  draw(ax[1], gates[i, t].astype(float), 'gates open at arrival (pending ones are the labels)')
anim = animation.FuncAnimation(fig, frame, frames=12, interval=500)
plt.close(fig)
display(HTML(anim.to_jshtml()))"""


def build():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL),
              nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(PLOT),
              nbformat.v4.new_code_cell(ANIM)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "stgib.ipynb"))


if __name__ == "__main__":
  build()
