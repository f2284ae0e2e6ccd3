"""lhdlm's study figures: test bpb per model and corpus; LHDLM's map over training."""
from __future__ import annotations

import os

import numpy as np


def study_plots(workdir, summary, curves, val_curves=None):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  corpora = sorted({r["corpus"] for r in summary})
  fig, axes = plt.subplots(1, len(corpora) + 2, figsize=(4.2 * (len(corpora) + 2), 3.4))
  for ax, corpus in zip(axes, corpora):
    rows = [r for r in summary if r["corpus"] == corpus]
    ax.bar(range(len(rows)), [r["test_bpb"] for r in rows],
           yerr=[r["test_std"] for r in rows], color="tab:blue")
    ax.axhline(rows[0]["bigram"], color="k", ls="--", label="bigram")
    ax.axhline(rows[0]["unigram"], color="gray", ls=":", label="unigram")
    if rows[0].get("source") is not None:
      ax.axhline(rows[0]["source"], color="tab:green", ls="-.", label="source entropy")
    ax.set_xticks(range(len(rows)), [r["model"] for r in rows], rotation=40, ha="right")
    ax.set_ylabel("test NELBO / NLL (bits per byte)")
    ax.set_title(corpus)
    ax.legend(fontsize=7)
  for ax, key, label in ((axes[-2], "mi", "I(X; C) (nats)"),
                         (axes[-1], "col_entropy", "mean column entropy H(Gamma[:, x])")):
    for name, c in curves.items():
      if not name.endswith(("lhdlm", "lhdlm_noreg")) or not c.get(key) or c[key][0] is None:
        continue
      v = np.asarray([x for x in c[key]], float)
      ax.plot(c["step"], v.mean(1), label=name)
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "lhdlm_study.png"), dpi=110)
  plt.close(fig)
  fig, axes = plt.subplots(2, len(corpora), figsize=(4.5 * len(corpora), 6.2), squeeze=False)
  for j, corpus in enumerate(corpora):
    ax = axes[0, j]
    for name, c in curves.items():
      if name.startswith(corpus + "/") and c.get("loss"):
        v = np.asarray(c["loss"], float)
        ax.plot(c["step"], np.nanmin(v, 1), label=name.split("/")[1])
    ax.set_xlabel("step")
    ax.set_ylabel("training loss, best member (nats / token)")
    ax.set_title(corpus)
    ax.legend(fontsize=7)
    ax = axes[1, j]
    for name, c in (val_curves or {}).items():
      if name.startswith(corpus + "/") and c["step"]:
        ax.plot(c["step"], c["val_bpb"], marker=".", label=name.split("/")[1])
    ax.set_xlabel("step")
    ax.set_ylabel("validation bpb, chosen LR (mean over seeds)")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "lhdlm_curves.png"), dpi=110)
  plt.close(fig)
