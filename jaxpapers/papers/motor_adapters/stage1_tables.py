"""Stage-1 tables of every lane from a study workdir (host-side: no training, no rollouts).

  python jaxpapers/papers/motor_adapters/stage1_tables.py WORKDIR [CONFIG_ARGS]

Restores WORKDIR/primitives (the stage-1 checkpoint) and prints, for every kind and
learning rate of the grid (mean +- std over seeds): the training error of the last
logged chunk, distinct adapters, the participation ratio of the recurrent weight change
W_hn - W_hn(init) and of the used adapters' A_k, the adapters' top-r output-subspace
overlap, its fraction in the readout span and the overlap with that span projected out
(analysis.py, the functions the study applies to its selected lanes); then the training
curves logged every chunk. The study itself reports only the validation-selected lanes.
"""
from __future__ import annotations

import collections
import os
import sys

import jax
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.papers.motor_adapters import analysis, experiment, model, rollout, tasks
from jaxpapers.papers.motor_adapters import training

LABELS = {"adapters": "adapter bank (full rank)", "lowrank": "adapter bank (rank 2)",
          "multitask": "multitask GRU (same H)"}


def _ms(v):
  return f"{np.mean(v):.3g} +- {np.std(v):.2g}" if len(v) else ""


def lane_geometry(config, workdir: str) -> list[dict]:
  env, hp = experiment.make_env(config), experiment.make_hp(config)
  lanes = experiment.stage1_lanes(config)
  init = training.init_lanes(lanes, env, hp, tasks.N_PRIMITIVES)
  wh0 = np.array(init["params"]["core"]["wh"])
  states, step = checkpoint_lib.Checkpointer(os.path.join(workdir, "primitives"),
                                             keep=1).restore_or(init)
  if step != config.train.steps:
    raise ValueError(f"{workdir}/primitives holds step {step}, not {config.train.steps}")
  p = jax.device_get(states["params"])
  a, _ = jax.device_get(jax.vmap(
      lambda q: model.adapter_matrices(q, rollout.IN_DIM))(states["params"]))
  out = []
  for i, (kind, seed, lr) in enumerate(lanes):
    row = {"kind": kind, "seed": seed, "lr": lr}
    dw = p["core"]["wh"][i] - wh0[i]
    row["dw_pr"] = analysis.matrix_rank_stats(dw[:, 2 * dw.shape[0]:])["pr"]
    if kind != "multitask":
      used = sorted(set(np.argmax(p["code"][i], -1).tolist()))
      g = analysis.adapter_geometry(a[i], used, config.study.subspace_rank,
                                    readout=p["out"]["w"][i])
      row.update({f"geo_{k}": v for k, v in g.items() if k != "prs"})
    out.append(row)
  return out


def _lane_values(row, kind, lr, metric):
  return [v for k, v in row.items()
          if k.startswith(f"primitives/{kind}/") and k.endswith(f"/lr{lr:g}/{metric}")]


def main(workdir: str, arg: str = ""):
  config = config_lib.load("configs/motor_adapters.py" + (f":{arg}" if arg else ""))
  prim = metrics_lib.read_metrics(workdir, "primitives")
  geo = collections.defaultdict(list)
  for g in lane_geometry(config, workdir):
    geo[(g["kind"], g["lr"])].append(g)
  print("| model | lr | train error, last chunk (cm) | distinct adapters | core dW PR | "
        "adapter PR | adapter subspace overlap | in readout span | overlap, readout out |")
  print("|---|---|---|---|---|---|---|---|---|")
  for (kind, lr), gs in geo.items():
    f = lambda key: _ms([g[key] for g in gs]) if key in gs[0] else ""  # noqa: E731
    dist = _lane_values(prim[-1], kind, lr, "code_distinct") if kind != "multitask" else []
    print(f"| {LABELS[kind]} | {lr:g} | {_ms(_lane_values(prim[-1], kind, lr, 'err_cm'))} | "
          f"{_ms(dist)} | {f('dw_pr')} | {f('geo_pr')} | {f('geo_overlap')} | "
          f"{f('geo_readout_frac')} | {f('geo_overlap_noreadout')} |")
  steps = sorted(set(int(round(config.train.steps * x / config.train.chunk)) *
                     config.train.chunk for x in (0.05, 0.1, 0.25, 0.5, 0.75, 1.0)))
  by_step = {r["step"]: r for r in prim}
  print()
  print("| model (lr) | series | " + " | ".join(f"step {s}" for s in steps) + " |")
  print("|---|---|" + "---|" * len(steps))
  for kind in config.model.kinds:
    lrs = experiment.kind_lrs(config, kind)
    best = min(lrs, key=lambda lr: np.mean(_lane_values(prim[-1], kind, lr, "err_cm")))
    extra = [3e-3] if kind == "multitask" and best != 3e-3 and 3e-3 in lrs else []
    for lr in [best] + extra:
      for metric, name in (("err_cm", "train error (cm)"), ("pr_dw", "core dW PR"),
                           ("pr_adapter", "adapter PR")):
        vals = [_lane_values(by_step[s], kind, lr, metric) for s in steps if s in by_step]
        if vals and vals[0]:
          print(f"| {LABELS[kind]} ({lr:g}) | {name} | "
                + " | ".join(f"{np.mean(v):.3g}" for v in vals) + " |")


if __name__ == "__main__":
  main(*sys.argv[1:])
