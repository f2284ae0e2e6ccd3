"""Latent debate (arXiv 2512.01909): draws one statement's debate graph.

Top: the topic argument "the statement is True"; middle row: one argument per layer
(embedding first), green edge = supports the topic, red = attacks; bottom row: each
layer's attention (A) and MLP (M) sublayer arguments with their edges to their layer.
Node colour is the final strength (DF-QuAD unless asked otherwise), node size the
base score.
"""
from __future__ import annotations

import numpy as np

from jaxpapers.papers.latent_debate import debate


def draw(ax, dla_A, temp: float, semantics: str = "dfquad", title: str = ""):
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  dla_A = np.asarray(dla_A, np.float32)
  L = (len(dla_A) - 1) // 2
  base, att, sup = (np.asarray(x) for x in debate.build(dla_A[None], temp))
  base, att, sup = base[0], att[0], sup[0]
  _, s = debate.surrogate(dla_A[None], temp, semantics)
  s = np.asarray(s)[0]
  pos = {0: (L / 2, 2.0)}
  for l in range(L + 1):
    pos[1 + l] = (l, 1.0)
  for j in range(2 * L):
    pos[2 + L + j] = (1 + j // 2 + (-0.18 if j % 2 == 0 else 0.18), 0.0)
  for rel, col in ((sup, "tab:green"), (att, "tab:red")):
    for i, j in zip(*np.nonzero(rel)):
      (x0, y0), (x1, y1) = pos[j], pos[i]
      ax.plot([x0, x1], [y0, y1], color=col, lw=0.4 + 2.5 * base[j], alpha=0.6, zorder=1)
  cmap = plt.get_cmap("viridis")
  xy = np.array([pos[i] for i in range(len(s))])
  ax.scatter(xy[:, 0], xy[:, 1], c=s, cmap=cmap, vmin=0, vmax=1,
             s=30 + 220 * np.clip(base, 0, 1), edgecolors="k", linewidths=0.4, zorder=2)
  ax.annotate(f"topic: True\nstrength {s[0]:.2f}", pos[0], textcoords="offset points",
              xytext=(12, -4), ha="left", fontsize=8)
  for l in range(0, L + 1, max(1, L // 10)):
    ax.annotate("emb" if l == 0 else str(l), pos[1 + l], textcoords="offset points",
                xytext=(0, 9), ha="center", fontsize=7)
  ax.set_yticks([0, 1, 2], ["sublayers (A, M)", "layers", "topic"])
  ax.set_xticks([])
  ax.set_xlim(-0.6, L + 0.6)
  ax.set_ylim(-0.3, 2.3)
  ax.set_title(title, fontsize=9)
  return s
