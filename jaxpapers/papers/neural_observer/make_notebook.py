"""Builds colabs/neural_observer.ipynb (run: python jaxpapers/papers/neural_observer/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Two-stage training of LMI-certified neural network observers (abstract 4)

A neural observer zhat' = f(zhat, u) + L (y - C zhat) + N(zhat, y - C zhat) estimates the
pendulum's state and an unknown torque disturbance. Stage 1 pre-trains N on the estimation
loss plus a hinge on V' + alpha V <= 0 at sampled error states; stage 2 alternates an SDP
(cvxpy + Clarabel: P and S-procedure multipliers for the tanh slope bound) with network
updates until a global certificate holds, which NumPy re-checks by eigenvalues. The direct
method runs the SDP from the first update; `direct_sdp` puts the output weights into the SDP
(Y = P W2) and projects the network onto the certified set. `JAXPAPERS_SMOKE=1` runs a tiny
setting."""

INSTALL = notebook.INSTALL_CELL

SETUP = """import pathlib
import jax, numpy as np
import matplotlib.pyplot as plt
import jaxpapers
from jaxpapers.papers.neural_observer import direct_sdp, experiment, train

from jaxpapers.core import config as config_lib
SMOKE = os.environ.get('JAXPAPERS_SMOKE') == '1'
config = config_lib.load("configs/neural_observer.py:" + ('smoke' if SMOKE else 'total_steps=300'))
cfg = experiment.flat(config)
# L's decay and each method's learning rate as the study chose them on validation for the
# pendulum (README, "Every selection with its grid")
prob = train.build_problem(cfg, 'pendulum', 0, gain_alpha=2.0)
LRS = {'two_stage': 1e-2, 'direct': 3e-4, 'direct_sdp': 0.1, 'unconstrained': 1e-3}
trainer = train.Trainer(prob, config.model.width, cfg)
print('width', config.model.width, 'updates', cfg.total_steps, 'stage 1', cfg.stage1_steps)"""

TRAIN = """runs = {}
for method in ('two_stage', 'direct', 'direct_sdp', 'unconstrained'):
  if method == 'direct_sdp':  # direct LMI with the weights inside the SDP (Y = P W2)
    params, trace, s = direct_sdp.run(trainer, 0, LRS[method], prob)
  else:
    params, trace, s = trainer.run(method, 0, LRS[method], prob)
  runs[method] = (params, trace, s)
  m = train.evaluate(prob, trainer.predict(params, prob.data['test']), 'test') if params is not None else {}
  print(f"{method:>13}: certified={s['certified']} margin={s.get('margin', float('nan')):.3g} "
        f"wall-clock {s['total_s']:.1f}s, SDP solves {s['sdp_solves']}, test {m}")
print('linear part alone:', train.linear_part_metrics(prob, 'test'))"""

PLOT = """test = prob.data['test']
fig, axes = plt.subplots(1, 3, figsize=(14, 3.2))
t = np.arange(test['z'].shape[1]) * cfg.dt
for k, (ax, name) in enumerate(zip(axes[:2], ['theta', 'disturbance d'])):
  idx = 0 if k == 0 else 2
  ax.plot(t, test['z'][0, :, idx], 'k', label='true')
  for method in ('two_stage', 'unconstrained'):
    params = runs[method][0]
    if params is not None:
      ax.plot(t, trainer.predict(params, test)[0, :, idx], label=method)
  ax.set_title(name); ax.set_xlabel('t [s]'); ax.legend(fontsize=8)
for method in ('two_stage', 'direct', 'direct_sdp'):
  tr = runs[method][1]
  axes[2].plot([r['time_s'] for r in tr], [r['val_nmse'] for r in tr], 'o-', label=method)
  ok = [r for r in tr if r.get('valid')]
  axes[2].plot([r['time_s'] for r in ok], [r['val_nmse'] for r in ok], 'k*', ms=9)
axes[2].set_xlabel('wall-clock [s] (stars: verified certificate)'); axes[2].set_ylabel('val nmse')
axes[2].legend(fontsize=8)
plt.tight_layout(); plt.show()"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                               "name": "python3"}
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO), nbformat.v4.new_code_cell(INSTALL),
              nbformat.v4.new_code_cell(SETUP),
              nbformat.v4.new_markdown_cell("## Two-stage vs direct LMI vs unconstrained"),
              nbformat.v4.new_code_cell(TRAIN),
              nbformat.v4.new_markdown_cell("## Estimates and the certificate timeline"),
              nbformat.v4.new_code_cell(PLOT)]
  nbformat.write(nb, os.path.join(ROOT, "colabs", "neural_observer.ipynb"))


if __name__ == "__main__":
  main()
