"""FlowGDA: flow-matching gradual domain adaptation (abstract 10): the studies.

`study=main`: target accuracy of every method on every benchmark over the seeds
(hyper-parameters picked per seed by both selection rules), FlowGDA's ablations (each
loss term, the second stage, the OT pairing) and the sensitivity to the number of
intermediate domains; writes `flowgda_study.md` / `.json` (raw rows) / `.png`.
`study=rot_mnist`: rotating MNIST at 28 x 28 with a CNN encoder, our rows beside the
published numbers of the prior work; writes `flowgda_rot_mnist_study.*`.

Each (benchmark, number of domains) is a cell whose finished phases are stored in
`<workdir>/cells` after every phase, so a killed study resumes where it stopped (the
workdir's config check refuses a changed config).
"""
from __future__ import annotations

import os
import pickle
import time

import jax
import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.flowgda import experiment
from jaxpapers.papers.flowgda import pipeline

ABLATION_LABELS = {"flowgda": "FlowGDA (full)", "no_cons": "- left-to-right term",
                   "no_anchor": "- source-anchored term", "no_sem": "- semantic term",
                   "no_stage2": "- two stages (one joint stage)",
                   "no_ot": "- OT pairing (random pairs)",
                   "anchor_flow": "anchor along the integrated flow (2nd reading)"}
RULE_KEYS = {"proxy": "target acc", "rv": "target acc rv"}
# Published target accuracies (%) on rotating MNIST, 0-60 degrees, 28 x 28: NOT OURS.
# (method, number, source, setting); kept beside our rows in the rot_mnist study. Only
# numbers confirmed against a second source here (issue 44 quotes both); GOAT's and
# GGF's rotating-MNIST tables could not be read offline and are not copied from memory.
PUBLISHED = (
    ("source-only", "31.9 ± 1.7", "Kumar et al. 2020 (ICML), Table 1",
     "50k MNIST training images: source 0-5°, intermediate 5-60°, target 55-60°; "
     "3-layer CNN"),
    ("GST, regularised (gradual self-training)", "87.9 ± 1.2",
     "Kumar et al. 2020 (ICML), Table 1", "same"),
)


def _cell(workdir, config, bench, seeds, n_inter=None, **kw):
  """pipeline.run for one (benchmark, D), its finished phases stored in
  <workdir>/cells/<bench>_D<d>.pkl after each phase and passed back on a rerun."""
  d = (config.data.n_inter if n_inter is None else n_inter) + 2
  path = os.path.join(workdir, "cells", f"{bench}_D{d}.pkl")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  resume = None
  if os.path.exists(path):
    with open(path, "rb") as f:
      resume = pickle.load(f)
    if resume.pop("done", False):
      print(f"[study] {bench} D={d}: every phase restored from {path}")
      return resume["out"]

  def save(phase, src, out, done=False):
    del phase
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
      pickle.dump({"src": jax.tree.map(np.asarray, src), "out": out, "done": done}, f)
    os.replace(tmp, path)

  out = pipeline.run(config, bench, seeds, n_inter=n_inter, resume=resume, on_phase=save,
                     **kw)
  with open(path, "rb") as f:
    src = pickle.load(f)["src"]
  save(None, src, out, done=True)
  return out


def majority_row(config, bench, seeds):
  """The trivial model (DONE.md): per seed, the source's most frequent label predicted
  for every target test point. No lane, no selection: both rules report the same."""
  _, a, _ = pipeline.load(config, bench, seeds, config.data.n_inter)
  y_src, y_test = np.asarray(a["y"][:, 0]), np.asarray(a["y_test"])
  maj = [np.bincount(y).argmax() for y in y_src]
  acc = np.asarray([(yt == m).mean() for yt, m in zip(y_test, maj)], np.float32)
  zero = np.zeros_like(acc)
  res = {"val": zero, "test": acc, "lr": zero, "wd": zero, "rv": zero, "test_rv": acc,
         "lr_rv": zero, "wd_rv": zero, "seconds": 0.0}
  return experiment.result_row(bench, "majority", res, config.data.n_inter)


def _encoder(config):
  m = config.model
  if m.encoder == "cnn":
    return (f"CNN (3x3 stride-2 convs {tuple(m.conv)} channels, dense {tuple(m.hidden)} -> "
            f"{m.feat})")
  if m.encoder == "identity":
    return "identity (the inputs; the head is an MLP on them)"
  return f"MLP ({tuple(m.hidden)} -> {m.feat})"


def _fmt(rows, bench, method, d=None, rule="proxy"):
  acc = RULE_KEYS[rule]
  std = "std" if rule == "proxy" else "std rv"
  for r in rows:
    if r["benchmark"] == bench and r["method"] == method and (d is None or r["D"] == d):
      return f"{r[acc]:.3f} ± {r[std]:.3f}"
  return "n/a"


def _pivot(rows, benches, methods, labels, d, rule):
  out = []
  for m in [m for m in methods if any(r["method"] == m for r in rows)]:
    row = {"method": labels.get(m, m)}
    for b in benches:
      row[b] = _fmt(rows, b, m, d, rule)
    out.append(row)
  return out


def _grid_row(config, row):
  """Adds the method's grids to a result row and whether every pick (per seed, both
  rules) lies strictly inside them (DONE.md: an edge pick is not a choice)."""
  m = row["method"] if row["method"] in pipeline.METHODS else "flowgda"
  lr, wd = pipeline.grid_of(config, m)
  row["lr grid"], row["wd grid"] = list(lr), list(wd)
  edges = []
  for name, grid in (("lr", lr), ("wd", wd)):
    if len(grid) < 2:
      continue
    for key in (name, name + " rv"):
      lo, hi = min(grid), max(grid)
      # weight decay 0 (no penalty) is the closed end of its axis, not an edge
      edges += [v for v in row[key] if (lo > 0 and np.isclose(v, lo, rtol=1e-3)) or
                np.isclose(v, hi, rtol=1e-3)]
  row["edge picks"] = len(edges)
  return row


def _lanes(res):
  """Per-lane mean over seeds of each score (JSON rows): the curve over the grid."""
  lanes = res.get("lanes")
  if lanes is None:
    return {}
  mean = lambda k: [round(float(v), 4) for v in np.asarray(lanes[k]).mean(0)]  # noqa: E731
  return {"lane lr": [float(f"{v:.1e}") for v in np.asarray(lanes["lr"])],
          "lane wd": [float(f"{v:.1e}") for v in np.asarray(lanes["wd"])],
          "lane proxy": mean("proxy"), "lane rv": mean("rv"), "lane test": mean("test")}


def _picks_table(rows, d, labels):
  out = []
  for r in rows:
    if r["D"] != d or r["method"] == "majority":
      continue
    fmt = lambda v: "/".join(f"{x:.0e}" for x in v)  # noqa: E731
    out.append({"benchmark": r["benchmark"],
                "method": labels.get(r["method"], ABLATION_LABELS.get(r["method"],
                                                                      r["method"])),
                "lr grid": fmt(r["lr grid"]), "wd grid": fmt(r["wd grid"]) or "-",
                "lr [proxy]": fmt(r["lr"]), "lr [rv]": fmt(r["lr rv"]),
                "wd [proxy]": fmt(r["wd"]) if r["wd grid"] else "-",
                "wd [rv]": fmt(r["wd rv"]) if r["wd grid"] else "-",
                "edge picks": r["edge picks"]})
  return out


def run_study(config, workdir: str) -> list[dict]:
  metrics_lib.write_config(workdir, config)
  commit = study_lib.git_commit(paths=experiment.PATHS)  # stamped before anything runs
  start = time.perf_counter()
  seeds = experiment.seeds_of(config)
  writer = metrics_lib.MetricsWriter(workdir)
  rows, skipped = [], []
  d_main = config.data.n_inter + 2
  benches = []
  for bench in config.study.benchmarks:
    print(f"[study] {bench}", flush=True)
    try:
      out = _cell(workdir, config, bench, seeds, methods=config.methods,
                  variants=config.flow.variants)
    except FileNotFoundError as e:
      skipped.append(f"{bench}: {e}")
      print(f"[study] skipped {bench}: {e}")
      continue
    benches.append(bench)
    rows.append(majority_row(config, bench, seeds))
    rows[-1].update({"lr grid": [], "wd grid": [], "edge picks": 0})
    for r in experiment.RESULTS:
      if r in out:
        rows.append(_grid_row(config, experiment.result_row(bench, r, out[r],
                                                            config.data.n_inter)))
        rows[-1].update(_lanes(out[r]))
        writer.write(len(rows), {"target_acc": rows[-1]["target acc"],
                                 "std": rows[-1]["std"]}, split=f"study/{bench}/{r}")
  sens_benches = [b for b in config.study.sensitivity_benchmarks if b in benches]
  for bench in sens_benches:
    for k in config.study.sensitivity:
      if k + 2 == d_main:
        continue  # the main run has it
      print(f"[study] {bench} with {k} intermediate domains", flush=True)
      out = _cell(workdir, config, bench, seeds, n_inter=k,
                  methods=("source_only",) + tuple(config.study.sensitivity_methods),
                  variants=("flowgda",))
      for r in ("source_only",) + tuple(config.study.sensitivity_methods):
        rows.append(_grid_row(config, experiment.result_row(bench, r, out[r], k)))
  wall = time.perf_counter() - start

  labels = dict(pipeline.LABELS, majority="majority class (source's most frequent label)")
  a = config.adapt
  head = (f"FlowGDA study (commit {commit}); seeds {seeds}; D = {d_main} domains "
          f"(source, {config.data.n_inter} intermediate, target), {config.data.n} points "
          f"per domain; learning rate per seed and method from {tuple(a.lr_grid)} (x weight "
          f"decay {tuple(a.wd_grid)} for the fresh-student methods; per-method grids in "
          f"the picks table where they differ), chosen by each of two rules, named in every "
          f"table: [proxy] = {pipeline.RULES['proxy']}; [rv] = "
          f"{pipeline.RULES['rv']}; the shared source model is chosen on the held-out "
          f"source split; target test accuracy, mean ± std over seeds; encoder "
          f"{_encoder(config)}; wall {wall:.0f} s (this invocation; cells restored from "
          f"the workdir are not timed again).")
  if skipped:
    head += " Skipped: " + "; ".join(skipped)
  md = head + "\n"
  for rule in ("proxy", "rv"):
    md += (f"\n### Target accuracy, selection [{rule}]\n\n"
           + study_lib.markdown_table(_pivot(rows, benches,
                                             ("majority",) + pipeline.METHODS, labels,
                                             d_main, rule)))
  for rule in ("proxy", "rv"):
    md += (f"\n### FlowGDA ablations, selection [{rule}]\n\n"
           + study_lib.markdown_table(_pivot(rows, benches, list(pipeline.VARIANTS),
                                             ABLATION_LABELS, d_main, rule)))
  for rule in ("proxy", "rv"):
    sens = []
    for bench in sens_benches:
      ds = sorted({r["D"] for r in rows if r["benchmark"] == bench})
      for m in ("source_only",) + tuple(config.study.sensitivity_methods):
        row = {"benchmark": bench, "method": labels.get(m, m)}
        for d in ds:
          row[f"{d - 2} inter."] = _fmt(rows, bench, m, d, rule)
        sens.append(row)
    if sens:
      md += (f"\n### Sensitivity to the number of intermediate domains, selection "
             f"[{rule}]\n\n" + study_lib.markdown_table(sens))
  md += ("\n### Picks per seed (both rules) and their grids; 'edge picks' counts the "
         "picks on a grid's end (seeds x rules x hyper-parameters; weight decay 0 is the "
         "closed end of its axis, not counted)\n\n"
         + study_lib.markdown_table(_picks_table(rows, d_main, labels)))
  if "rot_mnist" in benches:
    md += ("\n### Published numbers on rotating MNIST (NOT OURS: the authors' protocol "
           "and sizes, copied for scale)\n\n" + study_lib.markdown_table(
               [{"method": m, "target acc (%)": v, "source": src, "setting": how}
                for m, v, src, how in PUBLISHED]))
  name = ("flowgda_study" if config.study.name == "main"
          else f"flowgda_{config.study.name}_study")
  study_lib.write_table(workdir, name, rows, header=head)
  with open(os.path.join(workdir, f"{name}.md"), "w") as f:
    f.write(md)
  _plot(os.path.join(workdir, f"{name}.png"), rows, benches, sens_benches, d_main, config)
  print(md)
  return rows


def _plot(path, rows, benches, sens_benches, d_main, config):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2 + len(sens_benches),
                           figsize=(5 * (2 + len(sens_benches)), 4))
  present = lambda ks: [k for k in ks if any(r["method"] == k for r in rows)]  # noqa: E731
  for ax, keys, title in ((axes[0], present(pipeline.METHODS), "methods"),
                          (axes[1], present(pipeline.VARIANTS), "FlowGDA ablations")):
    if not keys:  # e.g. methods= without flowgda: no ablation lanes
      ax.set_axis_off()
      continue
    width = 0.8 / len(keys)
    for i, m in enumerate(keys):
      mean, err = [], []
      for b in benches:
        r = [x for x in rows if x["benchmark"] == b and x["method"] == m and x["D"] == d_main]
        mean.append(r[0]["target acc"] if r else np.nan)
        err.append(r[0]["std"] if r else 0)
      ax.bar(np.arange(len(benches)) + i * width, mean, width, yerr=err,
             label=pipeline.LABELS.get(m, ABLATION_LABELS.get(m, m)))
    ax.set_xticks(np.arange(len(benches)) + 0.4 - width / 2)
    ax.set_xticklabels(benches, rotation=20)
    ax.set_ylabel("target accuracy")
    ax.set_title(title)
    ax.legend(fontsize=7)
  for ax, bench in zip(axes[2:], sens_benches):
    for m in ("source_only",) + tuple(config.study.sensitivity_methods):
      r = sorted([x for x in rows if x["benchmark"] == bench and x["method"] == m],
                 key=lambda x: x["D"])
      ax.errorbar([x["D"] - 2 for x in r], [x["target acc"] for x in r],
                  yerr=[x["std"] for x in r], marker="o", capsize=3,
                  label=pipeline.LABELS[m])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("intermediate domains")
    ax.set_title(f"{bench}: sensitivity")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
