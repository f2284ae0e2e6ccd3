"""The README's study: every forecaster and explainer, lr tuned on validation, 3 seeds.

For each generator (markov: persistent regime gates, the setting STGIB assumes; flicker:
iid gates, which breaks it; switch: per-edge Markov gates that change inside a window yet
persist) and each trained method, the members (seeds x study.lrs) are trained vmapped;
the learning rate with the lowest mean validation MAE is selected (the grid and the
choice are printed; an edge choice is flagged) and its seeds are scored on the test
split. Explanations are scored on evenly spaced test windows against the simulator's
labels (open gates of values still pending at the window's end), also among the pending
entries alone and against the former labels. References: random scores (AUROC 0.5), the
labels themselves used as the explanation (the positive control for the fidelity
metrics), recency (the last input steps first: what position alone scores) and two
input-free rankings (`_static_refs`: each edge's training open rate, and the same per
time-of-day regime), beside which the AUROC within each edge is reported. The
backbone is explained post hoc (GNNExplainer with its Adam step tuned on validation fid+,
saliency, IG, occlusion), and STGIB's model also by occlusion and saliency (one common
model). `nograph`: the backbone with every message removed, the trivial model a graph
forecaster must beat. Ablation: STGIB with
kappa = 0 (an independent-step prior; the recursion in q stays). Each explanation's
consistency is also measured on its flicker control (explain.flicker_control), and the
feature masks (STGIB's; saliency, IG and GNNExplainer's feature mask of the backbone's
input) are scored against the simulator's feature truth (the distractor channel has no
effect). GIB's own weights (mi x pp) are tuned on seed 0 before its seeds run
(`_tune_gib`).
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.stgib import data as data_lib
from jaxpapers.papers.stgib import experiment as ex
from jaxpapers.papers.stgib import explain
from jaxpapers.papers.stgib import model as model_lib
from jaxpapers.papers.stgib import simulator as sim_lib
from jaxpapers.papers.stgib import train as train_lib

EXPLAINED = ("stgib", "stgib_kappa0", "gsat", "decoupled", "attention", "gib")
# The methods run on the flicker and switch generators (markov runs every method);
# `all_generators=true` runs every method under every generator (seventh run).
FLICKER_METHODS = ("stgnn", "stgib", "gsat", "nograph")


def methods_for(cfg, gen, log=print):
  """The methods of `study.methods` run under generator `gen`; the dropped ones are named
  in a log line (not silently skipped)."""
  keep = [m for m in cfg.study.methods
          if gen == "markov" or m in FLICKER_METHODS or cfg.study.all_generators]
  dropped = [m for m in cfg.study.methods if m not in keep]
  if dropped:
    log(f"[methods {gen}] not run under {gen}: {', '.join(dropped)} (only "
        f"{', '.join(FLICKER_METHODS)} run there; study.all_generators=true runs every method)")
  return keep


def _agg(rows, keys, group=("generator", "method")):
  out = []
  seen = []
  for r in rows:
    g = tuple(r[k] for k in group)
    if g not in seen:
      seen.append(g)
  for g in seen:
    rs = [r for r in rows if tuple(r[k] for k in group) == g]
    row = dict(zip(group, g), seeds=len(rs))
    for k in keys:
      v = np.array([r[k] for r in rs], np.float64)
      row[k] = float(np.nanmean(v))
      row[k + "_std"] = float(np.nanstd(v))
    out.append(row)
  return out


def run(config, workdir, commit, log=print):
  t_start = time.perf_counter()
  os.makedirs(workdir, exist_ok=True)
  S = config.study.seeds
  seeds = list(range(S))
  grids = {m: list(config.study.lrs) for m in config.study.methods}
  grids["gwnet"] = list(config.study.gwnet_lrs)
  frac = config.eval.sparsity
  T_in, T_out = config.data.t_in, config.data.t_out
  f_rows, e_rows, sel_rows, curves = [], [], [], {}
  for gen in config.study.generators:
    cfg = config_lib.override(config, {"data.generator": gen})
    tr = data_lib.load(cfg.data)
    w = data_lib.windows(tr, T_in, T_out)
    test = ex.even(w.split["test"], cfg.eval.test_windows)
    x, y = data_lib.gather(w, test, T_in, T_out)
    exw = ex.even(test, cfg.eval.explain_windows)
    xe, ye = data_lib.gather(w, exw, T_in, T_out)
    truth = sim_lib.window_truth(tr.sim, exw, T_in) if tr.sim is not None else None
    if truth is not None:  # the pending entries and the former labels, for two more AUROCs
      lab = dict(pending=sim_lib.pending_mask(tr.sim, exw, T_in),
                 former=sim_lib.window_truth(tr.sim, exw, T_in, pending=False))
    gnnexp_lr = None
    for name, fn in (("historical_average", ex.historical_average),
                     ("persistence", ex.persistence)):
      f_rows.append(dict(generator=gen, method=name, seed=0,
                         **ex.forecast_metrics(fn(w, test, T_out), y)))
    methods = methods_for(cfg, gen, log)
    if gen == "markov" and "stgib" in methods and config.study.ablation:
      methods.append("stgib_kappa0")
    for method in methods:
      kind = ("stgib" if method.startswith("stgib") else
              "stgnn" if method == "nograph" else method)
      over = (dict(kappa=0.0) if method == "stgib_kappa0" else
              dict(graph=False) if method == "nograph" else {})
      if method == "gib":
        over, rows = _tune_gib(cfg, tr, w, grids["gib"], workdir, gen, log)
        sel_rows.extend(rows)
      spec = ex.spec_of(cfg, tr, kind=kind, **over)
      lrs = grids.get(method, list(config.study.lrs))
      t0 = time.perf_counter()
      out = train_lib.train_members(spec, cfg, w, seeds, lrs, workdir, f"{gen}/{method}",
                                    log=log)
      lr, idx, grid = ex.select_lr(out, S)
      j = int(np.argmin(np.abs(np.asarray(lrs) - lr)))
      lr = lrs[j]
      edge = len(lrs) > 1 and j in (0, len(lrs) - 1)
      sel_rows.append(dict(generator=gen, method=method, lr=lr,
                           grid=" ".join(f"{a:g}:{v:.3f}" for a, v in zip(lrs, grid)),
                           edge="EDGE" if edge else "", train_s=time.perf_counter() - t0))
      log(f"[select {gen}/{method}] val MAE per lr {sel_rows[-1]['grid']} -> lr {lr:g}"
          + (" (on the grid's edge)" if edge else ""))
      curves[f"{gen}/{method}"] = out["curve"][:, idx].tolist()
      params = ex.take(out["best"], idx)
      r = out["r_final"]
      yhat, _ = ex.predict_members(spec, params, x, r, w)
      for i, s in enumerate(seeds):
        f_rows.append(dict(generator=gen, method=method, seed=s,
                           **ex.forecast_metrics(yhat[i], y)))
      if truth is None or kind in model_lib.NO_MASK or method == "nograph":
        continue
      feat = {}
      if method in EXPLAINED:
        named = {method: ex.predict_members(spec, params, xe, r, w)[1]}
        if kind == "stgib" and spec.feature_masks:
          feat[method] = ex.feature_scores(spec, params, xe, r)
        if method == "stgib":  # post-hoc explainers of STGIB's own model (one common model)
          for p in ("occlusion", "saliency"):
            named[f"{p} (stgib model)"] = ex.posthoc_scores(spec, params, xe, r, p, cfg)
      else:  # the backbone: post-hoc explainers and the references
        if gnnexp_lr is None:
          gnnexp_lr, row = _tune_gnnexp(cfg, spec, params, r, w, gen, log)
          sel_rows.append(row)
        named = {p: ex.posthoc_scores(spec, params, xe, r, p, cfg, gnnexp_lr=gnnexp_lr)
                 for p in ex.POSTHOC}
        feat = {p: ex.feature_scores(spec, params, xe, r, p, cfg.eval.gnnexp_steps)
                for p in ("saliency", "ig", "gnnexplainer")}
        feat["random"] = np.random.default_rng(2).random((S,) + xe.shape)
        rng = np.random.default_rng(0)
        named["random"] = rng.random((S,) + truth.shape)
        named["ground_truth"] = np.broadcast_to(truth.astype(np.float32) + 1e-3 * rng.random(
            truth.shape), (S,) + truth.shape)
        # Position alone: the last input steps first. The labels can only be positive in
        # the last d_e steps, so this is the AUROC that knowing nothing about gates gets.
        named["recency"] = np.broadcast_to(np.arange(T_in, dtype=np.float32)[None, :, None]
                                           + 1e-3 * rng.random(truth.shape), (S,) + truth.shape)
        named.update(_static_refs(tr.sim, w, exw, T_in, T_out, S))
      for en, scores in named.items():
        ms = ex.explanation_metrics(spec, params, r, w, xe, ye, np.asarray(scores), truth, frac,
                                    **lab)
        fa = ex.feature_auroc(feat[en]) if en in feat else [np.nan] * S
        for s, mrow, f in zip(seeds, ms, fa):
          mrow["feat_auroc"] = f
          e_rows.append(dict(generator=gen, method=en, model=method, seed=s, **mrow))
        log(f"[explain {gen}/{en}] " + " ".join(
            f"{k} {np.mean([m[k] for m in ms]):.3f}" for k in ms[0]))
    if truth is not None:
      # The gates' own persistence: adjacent-step Jaccard of the open-at-arrival edge sets
      # (the former labels, every step), and of their flicker control.
      f = lab["former"]
      e_rows.append(dict(generator=gen, method="(gates themselves)", model="-", seed=0,
                         auroc=1.0, auroc_pending=1.0, auroc_within_edge=1.0,
                         auroc_former=1.0, fid_plus=np.nan,
                         fid_minus=np.nan, consistency=explain.truth_consistency(f),
                         consistency_flicker=explain.truth_consistency(
                             explain.flicker_control(f, np.random.default_rng([7, 99]))),
                         feat_auroc=1.0))
  fkeys = [f"{m}_{h}" for h in ("15min", "30min", "60min") for m in ("mae", "rmse", "mape")]
  f_tab = _agg(f_rows, fkeys)
  ekeys = ["auroc", "auroc_pending", "auroc_within_edge", "auroc_former", "fid_plus",
           "fid_minus", "consistency", "consistency_flicker", "feat_auroc"]
  e_tab = _agg(e_rows, ekeys)
  hdr = f"commit {commit}; {S} seeds (mean, std); sparsity {frac}"
  md = "### Forecasts (test)\n\n" + study_lib.write_table(
      workdir, "forecast", f_tab, ["generator", "method", "seeds"] + sum(
          [[k, k + "_std"] for k in ("mae_15min", "mae_30min", "mae_60min", "rmse_60min",
                                      "mape_60min")], []), header=hdr, digits=3)
  md += "\n### Explanations (test windows vs the simulator's gates)\n\n" + study_lib.write_table(
      workdir, "explain", e_tab, ["generator", "method", "seeds"] + sum(
          [[k, k + "_std"] for k in ekeys], []),
      header=hdr, digits=3)
  md += "\n### Learning-rate selection (validation MAE per lr)\n\n" + study_lib.write_table(
      workdir, "selection", sel_rows, header=hdr, digits=3)
  with open(os.path.join(workdir, "stgib_rows.json"), "w") as f:
    json.dump(dict(commit=commit, forecast=f_rows, explain=e_rows, selection=sel_rows,
                   curves=curves, eval_every=config.train.eval_every,
                   wall_s=time.perf_counter() - t_start), f, indent=1, default=float)
  with open(os.path.join(workdir, "study.md"), "w") as f:
    f.write(md)
  _plot(workdir, curves, e_tab, config.train.eval_every)
  log(md)
  log(f"study wall time {time.perf_counter() - t_start:.0f} s")
  return dict(forecast=f_tab, explain=e_tab, selection=sel_rows)


def _static_refs(sim, w, exw, t_in, t_out, n_members):
  """Input-free references (review rev40b S1): scores that never look at the window.
  edge_rate: each edge's open rate over the training split's steps, one fixed ranking of
  the edges for every window and step. Under markov gates (each regime opens a fixed edge
  set) it already ranks the pending entries well, since within a window the labels say
  mostly which edges the regime opens; within each edge it is constant, so its
  auroc_within_edge is 0.5 exactly. regime_rate: each edge's training open rate in the
  time-of-day regime at the value's arrival (time of day is an input channel, so this is
  what the clock alone knows). No random draw: the other rows' scores are unchanged."""
  n_tr = int(w.split["train"].max()) + t_out + 1  # the training windows' steps
  gate = sim.gate[:n_tr]
  shape = (n_members, len(exw), t_in, gate.shape[1])
  rate = gate.mean(0).astype(np.float32)
  reg = sim_lib.regime_of(np.arange(n_tr))
  reg_rate = np.stack([gate[reg == k].mean(0) if np.any(reg == k) else gate.mean(0)
                       for k in range(4)]).astype(np.float32)  # regime_of's 4 regimes
  taus = exw[:, None] - t_in + 1 + np.arange(t_in)[None]
  arrive = taus[..., None] + sim.delay[None, None]  # [W, t_in, E]
  by_reg = reg_rate[sim_lib.regime_of(arrive), np.arange(gate.shape[1])[None, None]]
  return dict(edge_rate=np.broadcast_to(rate, shape),
              regime_rate=np.broadcast_to(by_reg, shape))


def _tune_gib(cfg, tr, w, lrs, workdir, gen, log):
  """GIB's own weights (mi_weight x pp_weight, study.gib_mi x study.gib_pp) on seed 0
  over the lr grid: the cell whose best lr has the lowest validation MAE. Each cell's
  row also gives the subgraph's size on 64 validation windows (mean of m_e = S_src
  S_dst; 0 is the collapsed, empty subgraph). One cell: no tuning, nothing trained."""
  mis, pps = list(cfg.study.gib_mi), list(cfg.study.gib_pp)
  if len(mis) * len(pps) == 1:
    return dict(gib_mi=mis[0], gib_pp=pps[0]), []
  xv, _ = data_lib.gather(w, ex.even(w.split["val"], 64), cfg.data.t_in, cfg.data.t_out)
  cells = []
  for mi in mis:
    for pp in pps:
      spec = ex.spec_of(cfg, tr, kind="gib", gib_mi=mi, gib_pp=pp)
      out = train_lib.train_members(spec, cfg, w, [0], lrs, workdir,
                                    f"{gen}/gib_tune/mi{mi:g}_pp{pp:g}", log=log)
      lr, idx, grid = ex.select_lr(out, 1)
      edge = ex.predict_members(spec, ex.take(out["best"], idx), xv, out["r_final"], w)[1]
      cells.append(dict(mi=mi, pp=pp, lr=lr, val=float(np.min(grid)),
                        share=float(np.mean(edge))))
      log(f"[gib weights {gen}] mi {mi:g} pp {pp:g}: val MAE per lr " + " ".join(
          f"{a:g}:{v:.3f}" for a, v in zip(lrs, grid)) + f", subgraph m_e {cells[-1]['share']:.3f}")
  best = min(cells, key=lambda c: c["val"])
  edges = [n for n, v, g in (("mi", best["mi"], mis), ("pp", best["pp"], pps))
           if len(g) > 1 and v in (g[0], g[-1])]
  log(f"[select {gen}/gib weights] mi {best['mi']:g} pp {best['pp']:g} (lr {best['lr']:g}, "
      f"val {best['val']:.3f})" + (f" on the grid's edge in {' and '.join(edges)}" if edges else ""))
  rows = [dict(generator=gen, method=f"gib weights, seed 0: mi {best['mi']:g} pp {best['pp']:g}",
               lr=best["lr"],
               grid=" ".join(f"mi{c['mi']:g}/pp{c['pp']:g}:{c['val']:.3f}(m{c['share']:.2f})"
                             for c in cells),
               edge="EDGE " + "+".join(edges) if edges else "",
               train_s=float("nan"))]
  return dict(gib_mi=best["mi"], gib_pp=best["pp"]), rows


def _tune_gnnexp(cfg, spec, params, r, w, gen, log):
  """GNNExplainer's Adam step over study.gnnexp_lrs on validation windows (half the test
  count): the lr with the highest mean fid+ over the members, chosen without ground
  truth. fid+ (removing the explanation's 20%) is the in-distribution fidelity (DropEdge
  0.2 in training); fid- keeps only 20% of the messages, an input the model never saw
  (README, Choices), and is logged beside it. One value: no tuning."""
  lrs = list(cfg.study.gnnexp_lrs)
  if len(lrs) == 1:
    return lrs[0], dict(generator=gen, method="gnnexplainer lr", lr=lrs[0], grid="", edge="",
                        train_s=float("nan"))
  xv, yv = data_lib.gather(w, ex.even(w.split["val"], max(1, cfg.eval.explain_windows // 2)),
                           cfg.data.t_in, cfg.data.t_out)
  fp, fm = [], []
  for lr in lrs:
    sc = ex.posthoc_scores(spec, params, xv, r, "gnnexplainer", cfg, gnnexp_lr=lr)
    ms = ex.explanation_metrics(spec, params, r, w, xv, yv, sc, None, cfg.eval.sparsity)
    fp.append(float(np.mean([m["fid_plus"] for m in ms])))
    fm.append(float(np.mean([m["fid_minus"] for m in ms])))
  j = int(np.argmax(fp))
  edge = j in (0, len(lrs) - 1)
  grid = " ".join(f"{a:g}:{v:.4f}(fid- {b:.4f})" for a, v, b in zip(lrs, fp, fm))
  log(f"[select {gen}/gnnexplainer lr] val fid+ per lr {grid} -> {lrs[j]:g}"
      + (" (on the grid's edge)" if edge else ""))
  return lrs[j], dict(generator=gen, method="gnnexplainer lr (val fid+)", lr=lrs[j],
                      grid=grid, edge="EDGE" if edge else "", train_s=float("nan"))


def _plot(workdir, curves, e_tab, eval_every):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(1, 2, figsize=(12, 4))
  for k, c in curves.items():
    c = np.asarray(c)
    steps = eval_every * (1 + np.arange(len(c)))
    ax[0].plot(steps, c.mean(1), label=k)
  ax[0].set_xlabel("step")
  ax[0].set_ylabel("validation MAE (selected lr, mean of seeds)")
  ax[0].legend(fontsize=7)
  rows = [r for r in e_tab if r["generator"] == "markov" and np.isfinite(r["fid_plus"])]
  names = [r["method"] for r in rows]
  ax[1].bar(names, [r["auroc"] for r in rows], yerr=[r["auroc_std"] for r in rows])
  ax[1].axhline(0.5, color="k", lw=0.5)
  ax[1].set_ylabel("explanation AUROC (markov)")
  ax[1].tick_params(axis="x", rotation=45)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "study.png"), dpi=100)
  plt.close(fig)
