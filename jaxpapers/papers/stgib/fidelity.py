"""Fidelity by the field's protocol: one fixed model, a sweep of sparsities (review rev40 S2).

The protocol of GraphFramEx (Amara et al. 2022, "GraphFramEx: towards systematic evaluation
of explainability methods for graph neural networks") and of PyG's `fidelity`
(torch_geometric.explain.metric): every explainer explains the same trained model, and
fid+ / fid- are read over a range of explanation sizes. For regression the prediction
change is an MAE change (data units), at each sparsity s (the top s of a window's
[t_in x E] (step, edge) entries, the same k for every explainer):

  fid+(s) = MAE(model without the top-s entries) - MAE(model)   higher: necessary
  fid-(s) = MAE(model with only the top-s entries) - MAE(model) lower: sufficient

and each curve is summarised by its normalised area over the sweep (trapezoid / range of
s: the mean fid over sparsity). PyG's `characterization_score` (the harmonic mean of fid+
and 1 - fid-) needs fidelities in [0, 1] (probability changes of a classifier); MAE changes
are unbounded, so it is not used.

Models (restored from a study's checkpoints, the study's selected lr and its seeds):
  stgnn     the common model (the backbone): GNNExplainer (the study's tuned step),
            saliency, IG, occlusion, random, the labels (ground truth) and recency; and,
            transferred, each trained-in method's masks of the same windows scored on the
            backbone (seed i's masks on backbone seed i). STGIB, GSAT, decoupled, attention
            and GIB cannot explain a given model: their masks are produced by, and trained
            with, their own predictor (they read its hidden states), so the transferred row
            asks only whether their ranking of (step, edge) entries is one the backbone
            relies on; their own rows follow
  stgib     STGIB's model, explained by its own masks and by occlusion, saliency, IG,
            random, the labels and recency (the review's "one common model" for STGIB)
  gsat, decoupled, attention, gib, stgib_kappa0
            each on its own model beside occlusion, random and the labels of that model

  python -m jaxpapers.papers.stgib.fidelity "<config arg>" <study workdir> <out dir> [method=lr+lr ...]

(`method=lr+lr`: that model's lr grid when it was trained on another grid than `lrs`.)

Results per model are saved as they finish (<out>/<model>.json; a rerun skips them).
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.stgib import data as data_lib
from jaxpapers.papers.stgib import experiment as ex
from jaxpapers.papers.stgib import explain
from jaxpapers.papers.stgib import simulator as sim_lib
from jaxpapers.papers.stgib import train as train_lib

FRACS = (0.05, 0.1, 0.2, 0.4)
TRAINED_IN = ("stgib", "gsat", "decoupled", "attention", "gib", "stgib_kappa0")


def fidelity_curve(predict, scores, y, fracs=FRACS):
  """fid+ and fid- [M, len(fracs)] of scores [M, W, t_in, E] on one model.

  predict(override) -> y_hat [M, W, t_out, N] in data units; override None is the full
  model, else [M, W, t_in, E] multiplies its messages (1 kept, 0 removed). y [W, t_out, N]
  with zeros masked (DCRNN)."""
  full = predict(None)
  base = np.array([ex.masked_mae(f, y) for f in full])
  plus = np.zeros((len(scores), len(fracs)))
  minus = np.zeros_like(plus)
  for j, s in enumerate(fracs):
    top = np.stack([explain.topk_mask(sc, s) for sc in scores])
    keep, drop = predict(top), predict(1.0 - top)
    plus[:, j] = [ex.masked_mae(d, y) for d in drop] - base
    minus[:, j] = [ex.masked_mae(k, y) for k in keep] - base
  return plus, minus


def curve_auc(fracs, vals):
  """Normalised area under a fidelity curve over the sparsity sweep (the mean fid over
  sparsity, trapezoid rule): [..., len(fracs)] -> [...]."""
  f = np.asarray(fracs, np.float64)
  v = np.asarray(vals, np.float64)
  return np.sum(0.5 * (v[..., 1:] + v[..., :-1]) * np.diff(f), -1) / (f[-1] - f[0])


def _restore(cfg, tr, w, method, workdir, grids=None):
  kind = "stgib" if method.startswith("stgib") else method
  over = (dict(kappa=0.0) if method == "stgib_kappa0" else
          dict(gib_mi=cfg.study.gib_mi[0], gib_pp=cfg.study.gib_pp[0]) if method == "gib"
          else {})
  spec = ex.spec_of(cfg, tr, kind=kind, **over)
  lrs = list(cfg.study.gwnet_lrs if method == "gwnet" else cfg.study.lrs)
  if grids and method in grids:  # a model trained on its own grid (the 3600-step runs)
    lrs = list(grids[method])
  seeds = list(range(cfg.study.seeds))
  out = train_lib.train_members(spec, cfg, w, seeds, lrs, workdir,
                                f"{cfg.data.generator}/{method}", log=print)
  if int(np.isnan(out["curve"]).sum()):
    raise SystemExit(f"{method}: the checkpoint in {workdir} is not a finished run")
  lr, idx, _ = ex.select_lr(out, len(seeds))
  return spec, ex.take(out["best"], idx), out["r_final"], lr


def _gnnexp_lr(workdir, gen):
  with open(os.path.join(workdir, "selection.json")) as f:
    rows = json.load(f)
  return [r["lr"] for r in rows if r["generator"] == gen
          and r["method"].startswith("gnnexplainer lr")][0]


def parse_grids(entries):
  """('method=lr+lr', ...) -> {method: (lr, ...)}: one lr grid per method, for models that
  were trained on different grids than `study.lrs`."""
  grids = {}
  for e in entries:
    if "=" not in e:
      raise SystemExit(f"fidelity: lr grid {e!r} is not 'method=lr+lr'")
    k, v = e.split("=", 1)
    grids[k] = tuple(float(x) for x in v.split("+"))
  return grids


def run(arg, workdir, outdir, *grid_entries):
  grids = parse_grids(grid_entries)
  cfg = config_lib.load(f"configs/stgib.py:{arg}")
  gen = cfg.data.generator
  T = cfg.data.t_in
  tr = data_lib.load(cfg.data)
  w = data_lib.windows(tr, T, cfg.data.t_out)
  exw = ex.even(ex.even(w.split["test"], cfg.eval.test_windows), cfg.eval.explain_windows)
  xe, ye = data_lib.gather(w, exw, T, cfg.data.t_out)
  truth = sim_lib.window_truth(tr.sim, exw, T)
  S = cfg.study.seeds
  os.makedirs(outdir, exist_ok=True)
  # The references, drawn as study.py draws them (same generator order).
  rng = np.random.default_rng(0)
  refs = dict(random=rng.random((S,) + truth.shape))
  refs["ground_truth"] = np.broadcast_to(truth.astype(np.float32) + 1e-3 * rng.random(
      truth.shape), (S,) + truth.shape)
  refs["recency"] = np.broadcast_to(np.arange(T, dtype=np.float32)[None, :, None]
                                    + 1e-3 * rng.random(truth.shape), (S,) + truth.shape)
  restored, own = {}, {}
  # Only methods the study trained: a missing checkpoint would silently start training.
  present = [m for m in ("stgnn",) + TRAINED_IN
             if os.path.isdir(os.path.join(workdir, gen, m, "checkpoints"))]
  if "stgnn" not in present:
    raise SystemExit(f"no backbone checkpoint {workdir}/{gen}/stgnn: run the study first")
  print(f"[fidelity] models found in {workdir}: {' '.join(present)}")
  for method in present:
    restored[method] = _restore(cfg, tr, w, method, workdir, grids)
    if method != "stgnn":
      spec, params, r, _ = restored[method]
      own[method] = ex.predict_members(spec, params, xe, r, w)[1]
  for method in present:
    path = os.path.join(outdir, f"{method}.json")
    if os.path.exists(path):
      print(f"[fidelity] {method}: done before ({path})")
      continue
    t0 = time.perf_counter()
    spec, params, r, lr = restored[method]
    predict = lambda o, spec=spec, params=params, r=r: ex.predict_members(
        spec, params, xe, r, w, override=o)[0]
    if method == "stgnn":
      glr = _gnnexp_lr(workdir, gen)
      named = {p: ex.posthoc_scores(spec, params, xe, r, p, cfg, gnnexp_lr=glr)
               for p in ex.POSTHOC}
      named.update(refs)
      named.update({f"{m} (transferred)": v for m, v in own.items()})
    elif method == "stgib":
      named = {"stgib": own[method]}
      named.update({p: ex.posthoc_scores(spec, params, xe, r, p, cfg)
                    for p in ("occlusion", "saliency", "ig")})
      named.update(refs)
    else:
      named = {method: own[method],
               "occlusion": ex.posthoc_scores(spec, params, xe, r, "occlusion", cfg)}
      named.update({k: refs[k] for k in ("random", "ground_truth")})
    rows = []
    for en, sc in named.items():
      plus, minus = fidelity_curve(predict, np.asarray(sc), ye)
      rows.append(dict(explainer=en, fid_plus=plus.tolist(), fid_minus=minus.tolist(),
                       auc_plus=curve_auc(FRACS, plus).tolist(),
                       auc_minus=curve_auc(FRACS, minus).tolist()))
      print(f"[fidelity {gen}/{method}] {en}: fid+ " + " ".join(
          f"{v:.4f}" for v in plus.mean(0)) + " fid- " + " ".join(
          f"{v:.4f}" for v in minus.mean(0)), flush=True)
    with open(path, "w") as f:
      json.dump(dict(model=method, generator=gen, lr=lr, fracs=FRACS, windows=len(exw),
                     seeds=S, rows=rows, wall_s=time.perf_counter() - t0), f, indent=1)
  table(outdir)


def table(outdir):
  """fidelity.md (mean ± std over seeds) and fidelity.png (the curves) from <out>/*.json."""
  res = {}
  for m in ("stgnn",) + TRAINED_IN:
    p = os.path.join(outdir, f"{m}.json")
    if os.path.exists(p):
      with open(p) as f:
        res[m] = json.load(f)
  pm = lambda v: f"{np.mean(v):.4f} ± {np.std(v):.4f}"
  hdr = " | ".join(f"{k}{int(100 * s)}%" for k in ("fid+ ", "fid- ") for s in FRACS)
  lines = [f"| model | explainer | {hdr} | AUC fid+ | AUC fid- |",
           "|" + "---|" * (4 + 2 * len(FRACS))]
  for m, d in res.items():
    for row in d["rows"]:
      p, q = np.asarray(row["fid_plus"]), np.asarray(row["fid_minus"])
      cells = [pm(p[:, j]) for j in range(len(FRACS))] + [pm(q[:, j]) for j in range(len(FRACS))]
      lines.append(f"| {m} | {row['explainer']} | " + " | ".join(cells) + " | "
                   f"{pm(row['auc_plus'])} | {pm(row['auc_minus'])} |")
  md = "\n".join(lines) + "\n"
  with open(os.path.join(outdir, "fidelity.md"), "w") as f:
    f.write(md)
  print(md)
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  shown = [m for m in ("stgnn", "stgib") if m in res]
  if not shown:
    return
  fig, ax = plt.subplots(len(shown), 2, figsize=(12, 4 * len(shown)), squeeze=False)
  for a in ax.ravel():  # 13 curves: more colours than the default cycle's 10
    a.set_prop_cycle(color=plt.get_cmap("tab20").colors)
  for i, m in enumerate(shown):
    for row in res[m]["rows"]:
      for j, k in enumerate(("fid_plus", "fid_minus")):
        v = np.asarray(row[k])
        ax[i, j].errorbar(np.asarray(FRACS) * 100, v.mean(0), yerr=v.std(0), marker="o",
                          label=row["explainer"], lw=2 if "stgib" == row["explainer"] else 1)
        ax[i, j].set_title(f"{k.replace('_', ' ')} on the {m} model "
                          f"({res[m]['generator']}, {np.shape(row[k])[0]} seeds)")
        ax[i, j].set_xlabel("sparsity: % of (step, edge) entries in the explanation")
        ax[i, j].set_ylabel("MAE change")
    ax[i, 0].legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(outdir, "fidelity.png"), dpi=90)
  plt.close(fig)


if __name__ == "__main__":
  run(*sys.argv[1:])
