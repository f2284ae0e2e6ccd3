"""Success Visitation Matching (arXiv 2606.23640): success rate vs env steps, 95% bands.

Draws on a `matplotlib.figure.Figure` (no pyplot, no global backend switch), so
importing the package does not change a notebook's inline backend.
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure


def success_curves(path: str, results: dict, ci95) -> None:
  """One panel per task: mean success over seeds with a t-based 95% band per method."""
  n = len(results)
  fig = Figure(figsize=(4.2 * n, 3.4))
  axes = fig.subplots(1, n, squeeze=False)
  for ax, (task, res) in zip(axes[0], results.items()):
    for meth, c in res["curves"].items():
      x = np.arange(c.shape[1]) * res["steps_per_iteration"]
      mean, half = ci95(c)
      ax.plot(x, mean, label=f"{meth} (lr {res['chosen_lr'][meth]:g})")
      if np.all(np.isfinite(half)):
        ax.fill_between(x, mean - half, mean + half, alpha=0.2)
    ax.set(title=task, xlabel="environment steps", ylabel="success rate", ylim=(-0.02, 1.02))
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
