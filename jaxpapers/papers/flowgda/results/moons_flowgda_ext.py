"""FlowGDA's moons lr grid grown past 3e-2 (issue 44: its lane curve was still rising there).

The main study's moons cell (FlowGDA lanes lr 3e-6 .. 3e-2) against a rerun of the same
cell with FlowGDA's grid grown to 3e-6 .. 1 (12 lanes; `methods=source_only+flowgda`,
every FlowGDA variant, README "Main study on per-method grids"). The grown run's picks
are its own (`pipeline.pick` on its 12 lanes per seed and rule); lanes are NOT merged
across runs: a lane's numbers depend on the program's shape (how many variants and
learning rates share the vmap), since XLA's fusions change the float rounding and the
500 OT-paired flow steps and the head's steps amplify it. The same-lr lanes of the two
runs are compared to measure that (`shared_lane_diff`). The source model must be the same
in both runs (checked: the script refuses otherwise).

  python jaxpapers/papers/flowgda/results/moons_flowgda_ext.py build MAIN_WORKDIR GROWN_WORKDIR
  python jaxpapers/papers/flowgda/results/moons_flowgda_ext.py table   # from the JSON
"""
import json
import os
import pickle
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "moons_flowgda_ext.json")
METHODS = ("flowgda", "no_cons", "no_anchor", "no_sem", "no_stage2", "no_ot", "anchor_flow")
SCORES = ("proxy", "rv", "test")
RULES = {"proxy": ("test", "lr"), "rv": ("test_rv", "lr_rv")}


def _cell(workdir):
  with open(os.path.join(workdir, "cells", "moons_D8.pkl"), "rb") as f:
    return pickle.load(f)["out"]


def _f(a):
  return np.asarray(a, np.float64).round(6).tolist()


def build(main, grown):
  np.testing.assert_array_equal(main["source_only"]["test"], grown["source_only"]["test"],
                                err_msg="the two runs fit different source models")
  out = {}
  for m in METHODS:
    a, b = main[m]["lanes"], grown[m]["lanes"]
    la, lb = np.asarray(a["lr"], np.float32), np.asarray(b["lr"], np.float32)
    shared = [float(v) for v in la if v in lb]
    diff = [float(np.abs(np.asarray(a["test"])[:, la == v]
                         - np.asarray(b["test"])[:, lb == v]).max()) for v in shared]
    out[m] = {"lr grid": _f(lb), "lanes": {k: _f(b[k]) for k in SCORES},
              "shared_lane_diff": {"lr": shared, "max_abs_test_diff_per_seed": _f(diff)}}
    for rule, (tk, lk) in RULES.items():
      out[m][rule] = {"test": _f(grown[m][tk]), "lr": _f(grown[m][lk]),
                      "main_test": _f(main[m][tk]), "main_lr": _f(main[m][lk])}
  return out


def table(res):
  fmt = lambda v: f"{np.mean(v):.3f} ± {np.std(v):.3f}"  # noqa: E731
  lrs = lambda v: " / ".join(f"{x:.0e}" for x in v)  # noqa: E731
  lines = ["| lane | rule | main study (lr to 3e-2): picks | target acc | grown grid (lr "
           "to 1): picks | target acc |", "|---|---|---|---|---|---|"]
  for m in METHODS:
    for rule in RULES:
      r = res[m][rule]
      lines.append(f"| {m} | [{rule}] | {lrs(r['main_lr'])} | {fmt(r['main_test'])} | "
                   f"{lrs(r['lr'])} | {fmt(r['test'])} |")
  grid = res[METHODS[0]]["lr grid"]
  lines += ["", "| grown run, mean over seeds | " + " | ".join(f"{v:.0e}" for v in grid)
            + " |", "|---|" + "---|" * len(grid)]
  for m in METHODS:
    for k in ("test", "proxy"):
      lines.append(f"| {m} {k} | " + " | ".join(
          f"{v:.3f}" for v in np.mean(res[m]["lanes"][k], 0)) + " |")
  lines.append("")
  for m in METHODS:
    d = res[m]["shared_lane_diff"]["max_abs_test_diff_per_seed"]
    lines.append(f"- {m}: same-lr lanes of the two runs differ by up to {max(d):.3f} "
                 f"(median {np.median(d):.3f}) in one seed's target accuracy")
  return "\n".join(lines)


if __name__ == "__main__":
  if sys.argv[1] == "build":
    res = build(_cell(sys.argv[2]), _cell(sys.argv[3]))
    with open(OUT, "w") as f:
      json.dump(res, f, indent=1)
  else:
    with open(OUT) as f:
      res = json.load(f)
  print(table(res))
