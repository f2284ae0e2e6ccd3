"""FlowGDA: flow-matching gradual domain adaptation (abstract 10): the study.

Target accuracy of every method on every benchmark over the seeds (learning rate picked
per seed on the validation proxy), FlowGDA's ablations (each loss term, the second
stage, the OT pairing) and the sensitivity to the number of intermediate domains. Writes
`flowgda_study.md` / `.json` (raw rows) and `flowgda_study.png` into the workdir.
"""
from __future__ import annotations

import os
import time

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


def _cell(rows, bench, method, d=None, rule="proxy"):
  acc = RULE_KEYS[rule]
  std = "std" if rule == "proxy" else "std rv"
  for r in rows:
    if r["benchmark"] == bench and r["method"] == method and (d is None or r["D"] == d):
      return f"{r[acc]:.3f} ± {r[std]:.3f}"
  return "n/a"


def _pivot(rows, benches, methods, labels, d, rule):
  out = []
  for m in methods:
    row = {"method": labels.get(m, m)}
    for b in benches:
      row[b] = _cell(rows, b, m, d, rule)
    out.append(row)
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
      out = pipeline.run(config, bench, seeds)
    except FileNotFoundError as e:
      skipped.append(f"{bench}: {e}")
      print(f"[study] skipped {bench}: {e}")
      continue
    benches.append(bench)
    for r in experiment.RESULTS:
      if r in out:
        rows.append(experiment.result_row(bench, r, out[r], config.data.n_inter))
        writer.write(len(rows), {"target_acc": rows[-1]["target acc"],
                                 "std": rows[-1]["std"]}, split=f"study/{bench}/{r}")
  sens_benches = [b for b in config.study.sensitivity_benchmarks if b in benches]
  for bench in sens_benches:
    for k in config.study.sensitivity:
      if k + 2 == d_main:
        continue  # the main run has it
      print(f"[study] {bench} with {k} intermediate domains", flush=True)
      out = pipeline.run(config, bench, seeds, n_inter=k,
                         methods=("source_only",) + tuple(config.study.sensitivity_methods),
                         variants=("flowgda",))
      for r in ("source_only",) + tuple(config.study.sensitivity_methods):
        rows.append(experiment.result_row(bench, r, out[r], k))
  wall = time.perf_counter() - start

  labels = dict(pipeline.LABELS)
  a = config.adapt
  head = (f"FlowGDA study (commit {commit}); seeds {seeds}; D = {d_main} domains "
          f"(source, {config.data.n_inter} intermediate, target), {config.data.n} points "
          f"per domain; learning rate per seed and method from {tuple(a.lr_grid)} (x weight "
          f"decay {tuple(a.wd_grid)} for the fresh-student methods), chosen by each of two "
          f"rules, named in every table: [proxy] = {pipeline.RULES['proxy']}; [rv] = "
          f"{pipeline.RULES['rv']}; the shared source model is chosen on the held-out "
          f"source split; target test accuracy, mean ± std over seeds; wall {wall:.0f} s.")
  if skipped:
    head += " Skipped: " + "; ".join(skipped)
  md = head + "\n"
  for rule in ("proxy", "rv"):
    md += (f"\n### Target accuracy, selection [{rule}]\n\n"
           + study_lib.markdown_table(_pivot(rows, benches, pipeline.METHODS, labels,
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
          row[f"{d - 2} inter."] = _cell(rows, bench, m, d, rule)
        sens.append(row)
    if sens:
      md += (f"\n### Sensitivity to the number of intermediate domains, selection "
             f"[{rule}]\n\n" + study_lib.markdown_table(sens))
  study_lib.write_table(workdir, "flowgda_study", rows, header=head)
  with open(os.path.join(workdir, "flowgda_study.md"), "w") as f:
    f.write(md)
  _plot(os.path.join(workdir, "flowgda_study.png"), rows, benches, sens_benches, d_main,
        config)
  print(md)
  return rows


def _plot(path, rows, benches, sens_benches, d_main, config):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2 + len(sens_benches),
                           figsize=(5 * (2 + len(sens_benches)), 4))
  for ax, keys, title in ((axes[0], pipeline.METHODS, "methods"),
                          (axes[1], list(pipeline.VARIANTS), "FlowGDA ablations")):
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
