"""Perturbed S-EG / S-OGDA (abstract 19): log-log slope fits and the study's plot.

The paper's claim is a rate exponent: gap(z_T) = O(T^{-1/4+eps}). We estimate it per seed
by least squares of log gap on log T over the horizons, then report the mean slope over
seeds with a Student-t confidence interval (seeds are independent; horizons within a
seed share a noise stream, so the per-seed slope is the unit of replication).
"""
from __future__ import annotations

import numpy as np
import scipy.stats


def loglog_slopes(horizons, values) -> np.ndarray:
  """Per-seed OLS slopes of log(values) on log(horizons); values: (horizons, seeds)."""
  lx = np.log(np.asarray(horizons, np.float64))
  ly = np.log(np.maximum(np.asarray(values, np.float64), 1e-30))
  if ly.ndim == 1:
    ly = ly[:, None]
  if lx.shape[0] != ly.shape[0] or lx.shape[0] < 2:
    raise ValueError(f"need >= 2 horizons matching values, got {lx.shape} vs {ly.shape}")
  xc = lx - lx.mean()
  return (xc @ (ly - ly.mean(axis=0))) / (xc @ xc)


def slope_ci(horizons, values, level: float = 0.95) -> tuple[float, float, float]:
  """(mean slope, lower, upper): t-interval over the per-seed slopes."""
  s = loglog_slopes(horizons, values)
  mean = float(s.mean())
  if s.size < 2:
    return mean, mean, mean
  half = float(scipy.stats.t.ppf(0.5 + level / 2, s.size - 1) * s.std(ddof=1)
               / np.sqrt(s.size))
  return mean, mean - half, mean + half


def plot(path: str, panels: dict, title: str = "") -> None:
  """panels: {panel title: {label: (horizons, values (H, seeds))}} -> log-log figure."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  n = len(panels)
  cols = min(n, 3)
  rows = -(-n // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
  labels = sorted({label for curves in panels.values() for label in curves})
  colors = {label: f"C{i}" for i, label in enumerate(labels)}  # same colour in every panel
  for ax, (name, curves) in zip(axes.ravel(), panels.items()):
    t_all = []
    for label, (h, v) in curves.items():
      h = np.asarray(h, np.float64)
      v = np.asarray(v, np.float64)
      med = np.median(v, axis=1)
      line, = ax.loglog(h, med, marker="o", ms=3, label=label, color=colors[label],
                        ls="--" if "avg" in label else "-")
      ax.fill_between(h, np.quantile(v, 0.1, axis=1), np.quantile(v, 0.9, axis=1),
                      color=line.get_color(), alpha=0.15, lw=0)
      t_all.append(h)
    h = np.unique(np.concatenate(t_all))
    ref = [c for c in curves.values()][0][1]
    anchor = float(np.median(np.asarray(ref)[0]))
    for p, style in ((-0.25, ":"), (-1 / 7, "-.")):
      ax.loglog(h, anchor * (h / h[0]) ** p, color="gray", ls=style, lw=1,
                label=f"T^{p:.3g}")
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("iteration t (one decaying run)" if "distance" in name else "horizon T")
    ax.grid(True, which="both", alpha=0.3)
  for ax in axes.ravel()[n:]:
    ax.axis("off")
  for ax in axes.ravel()[:n]:
    ax.legend(fontsize=6)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
