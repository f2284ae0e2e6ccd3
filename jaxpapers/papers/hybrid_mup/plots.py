"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): the study's figures.

lr_curves: held-out (test) bits per byte vs peak LR, one line per width, one panel per
method (SP, muP, muP + global-second-moment Adam, muP + SGD), plus one panel of the
muP sweeps over depth / sequence length / batch / ratio / Nemotron-H pattern.
coord_check: activation RMS vs width per activation kind at several training steps.
"""
from __future__ import annotations

import os

import numpy as np


def _plt():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _curve(rows, cell, method):
  by = {}
  for r in rows:
    if r["cell"] == cell and r["method"] == method:
      by.setdefault(r["lr"], []).append(r["test_bpb"])
  lrs = sorted(by)
  mean = [np.nanmean(by[lr]) if np.isfinite(by[lr]).any() else np.nan for lr in lrs]
  std = [np.nanstd(by[lr]) if np.isfinite(by[lr]).any() else np.nan for lr in lrs]
  return lrs, np.array(mean), np.array(std)


def lr_curves(workdir, config, rows):
  plt = _plt()
  methods = ["sp", "mup", "mup_adam_global", "mup_sgd"]
  fig, axes = plt.subplots(1, len(methods) + 1, figsize=(4.2 * (len(methods) + 1), 3.6))
  widths = list(config.study.widths)
  colors = plt.cm.viridis(np.linspace(0, 0.9, len(widths)))
  for ax, method in zip(axes, methods):
    for w, col in zip(widths, colors):
      lrs, mean, std = _curve(rows, f"width{w}", method)
      if not lrs:
        continue
      ax.errorbar(lrs, mean, yerr=std, marker="o", ms=3, color=col, label=f"d={w}")
      if np.isfinite(mean).any():
        i = int(np.nanargmin(mean))
        ax.plot(lrs[i], mean[i], "*", color=col, ms=11)
    ax.set_xscale("log")
    ax.set_title(method)
    ax.set_xlabel("peak LR (global)")
    ax.set_ylabel("test bits per byte")
    ax.legend(fontsize=7)
  ax = axes[-1]
  mid = widths[1] if len(widths) > 1 else widths[0]
  for cell, label in [(f"width{mid}", f"base d={mid}"), ("depth2x", "depth x2"),
                      ("seq2x", "seq x2"), ("batch2x", "batch x2"),
                      ("ratio1to3", "attn:SSM 1:3"), ("nemotron", "Nemotron-H shape")]:
    lrs, mean, std = _curve(rows, cell, "mup")
    if lrs:
      ax.errorbar(lrs, mean, yerr=std, marker="o", ms=3, label=label)
  ax.set_xscale("log")
  ax.set_title("muP: other axes")
  ax.set_xlabel("peak LR (global)")
  ax.legend(fontsize=7)
  for a in axes:
    lo = np.nanmin([l.get_ydata().min() for l in a.get_lines() if len(l.get_ydata())] or [0])
    if np.isfinite(lo):
      a.set_ylim(lo - 0.05, lo + 1.0)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "lr_curves.png"), dpi=110)
  plt.close(fig)


def coord_check(workdir, config, coord):
  plt = _plt()
  methods = sorted({c["method"] for c in coord}, key=["sp", "mup", "mup_shape"].index)
  if not methods:
    return
  widths = list(config.study.widths)
  kinds = sorted({c["kind"] for c in coord})
  steps = sorted({c["step"] for c in coord})
  fig, axes = plt.subplots(len(methods), len(kinds), figsize=(2.3 * len(kinds),
                                                              2.3 * len(methods)),
                           squeeze=False)
  colors = plt.cm.plasma(np.linspace(0, 0.85, len(steps)))
  for i, m in enumerate(methods):
    for j, k in enumerate(kinds):
      ax = axes[i][j]
      for t, col in zip(steps, colors):
        c = [x for x in coord if x["method"] == m and x["kind"] == k and x["step"] == t]
        if c:
          ax.plot(widths[:len(c[0]["rms"])], c[0]["rms"], "o-", ms=3, color=col,
                  label=f"step {t}")
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_title(f"{m}: {k}", fontsize=8)
      ax.tick_params(labelsize=6)
      if i == len(methods) - 1:
        ax.set_xlabel("width", fontsize=7)
  axes[0][0].legend(fontsize=5)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "coord_check.png"), dpi=100)
  plt.close(fig)


def coord_protocol(workdir, rows, measure: str = "l1", name: str = "coord_protocol.png"):
  """study=coord: `measure` (seed mean, bars: min-max over seeds) vs width, one line per
  t = 1..steps, one panel per activation, one row per method (microsoft/mup's figure)."""
  plt = _plt()
  methods = sorted({r["method"] for r in rows}, key=lambda m: (m != "sp", m))
  names = [n for n in rows[0]["stats"] if "/" not in n]
  key = (lambda n: n) if measure == "rms" else (lambda n: f"{n}/{measure}")
  widths = sorted({r["dim"] for r in rows})
  steps = len(rows[0]["stats"][names[0]])
  # one y-range per activation (column), spanning at least a decade, so that a flat
  # line looks flat and SP's growth and muP's flatness are on the same scale
  fig, axes = plt.subplots(len(methods), len(names), figsize=(1.6 * len(names),
                                                              1.7 * len(methods)),
                           squeeze=False, sharex=True, sharey="col")
  colors = plt.cm.plasma(np.linspace(0, 0.85, steps))
  for i, m in enumerate(methods):
    for j, n in enumerate(names):
      ax = axes[i][j]
      for t, col in enumerate(colors):
        v = np.array([[r["stats"][key(n)][t] for r in rows if r["method"] == m and r["dim"] == w]
                      for w in widths])
        mean = v.mean(1)
        ax.errorbar(widths, mean, yerr=[mean - v.min(1), v.max(1) - mean], fmt="o-", ms=2.5,
                    lw=1, capsize=1.5, color=col, label=f"t={t + 1}")
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_title(f"{m}: {n}", fontsize=6)
      ax.tick_params(labelsize=5, which="both")
      ax.yaxis.set_minor_formatter(plt.NullFormatter())
      if i == len(methods) - 1:
        ax.set_xlabel("width", fontsize=6)
  for j in range(len(names)):
    lo, hi = axes[0][j].get_ylim()
    mid = np.sqrt(lo * hi)
    span = max(hi / lo, 10.0) ** 0.5
    axes[0][j].set_ylim(mid / span, mid * span)
  axes[0][0].set_ylabel(measure, fontsize=6)
  axes[0][0].legend(fontsize=5)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, name), dpi=70)
  plt.close(fig)


def width_sweep(workdir, res, name="width_sweep.png"):
  """study=width: validation bpb (seed mean, +- std) vs log2 LR per width and method, the
  fitted optimum marked; the best runs' training loss; the update-to-weight ratio of the
  Mamba in-projection and the attention over training per width."""
  plt = _plt()
  methods = [m for m in ("sp", "mup", "mup_adam_global", "mup_sgd", "mup_sgd_wd0")
             if any(r["method"] == m for r in res["lr_rows"])]
  widths = sorted({r["width"] for r in res["lr_rows"]})
  colors = dict(zip(widths, plt.cm.viridis(np.linspace(0, 0.9, len(widths)))))
  contrast = [u for u in res.get("upd_contrast", []) if u["phase"] == "t10-50"
              and u.get("decay_only")]
  n = len(methods) + 2 + bool(contrast)
  fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6))
  for ax, m in zip(axes, methods):
    for w in widths:
      rs = sorted([r for r in res["lr_rows"] if r["method"] == m and r["width"] == w],
                  key=lambda r: r["k"])
      if not rs:
        continue
      x = np.log2([r["lr"] for r in rs])
      ax.errorbar(x, [r["val_mean"] for r in rs], yerr=[r["val_std"] for r in rs],
                  color=colors[w], marker="o", ms=3, label=f"d={w}")
      t = next(r for r in res["table"] if r["method"] == m and r["width"] == w)
      ax.axvline(t["log2_lr_opt"], color=colors[w], ls=":", lw=1)
    ax.set_title(m)
    ax.set_xlabel("log2 peak LR")
    ax.set_ylabel("validation bits per byte")
    lo = min(r["val_mean"] for r in res["lr_rows"] if r["method"] == m)
    ax.set_ylim(lo - 0.02, lo + 0.4)
    ax.legend(fontsize=7)
  ax = axes[len(methods)]
  for t in res["table"]:
    if t.get("loss_bins") and t["method"] in ("sp", "mup"):
      ax.plot(np.arange(len(t["loss_bins"])) + 0.5, t["loss_bins"], color=colors[t["width"]],
              ls="-" if t["method"] == "mup" else "--", label=f"{t['method']} d={t['width']}")
  ax.set_title("training loss, best LR (bins of steps/10)")
  ax.set_ylim(1.7, 2.6)
  ax.legend(fontsize=6)
  ax = axes[len(methods) + 1]
  styles = {"sp": "--", "mup": "-", "mup_adam_global": "-.", "mup_sgd": ":",
            "mup_sgd_wd0": (0, (1, 3))}
  for u in res["upd_rows"]:
    if u["group"] == "mamba_in":
      ys = [v for k, v in u.items() if k.startswith("t")]
      ax.semilogy(range(len(ys)), ys, color=colors[u["width"]], ls=styles[u["method"]],
                  label=f"{u['method']} d={u['width']}")
  ax.set_title("||dW||/||W||, Mamba in_proj, best LR")
  ax.set_xlabel("phase of training")
  ax.legend(fontsize=6)
  if contrast:
    # item 5: each group's ratio over the decay-only ratio lr_t x wd (1 = moved by its
    # weight decay alone), steps 10-50, muP under AdamW / global Adam / SGD
    ax = axes[-1]
    groups = sorted({u["group"] for u in contrast})
    marks = {"mup": "o", "mup_adam_global": "s", "mup_sgd": "^"}
    for j, m in enumerate(marks):
      for u in contrast:
        if u["method"] != m:
          continue
        x = groups.index(u["group"]) + 0.25 * (j - 1)
        # filled: the smallest width, half: the middle ones, open: the largest
        fills = ["full"] + ["left"] * (len(u["widths"]) - 2) + ["none"]
        for w, y, fill in zip(u["widths"], u["ratio"], fills):
          ax.semilogy(x, y / u["decay_only"], marker=marks[m], fillstyle=fill, ls="",
                      color=f"C{j}", label=f"{m} d={w}" if u["group"] == groups[0] else None)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=60, fontsize=7)
    ax.set_title("||dW||/||W|| over decay-only lr_t wd, t 10-50")
    ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, name), dpi=80)
  plt.close(fig)
