"""Straight-line fits to the tails of the seed-mean training curves of a study's raw rows
(issue 49 review rev49: the 200-step flatness rule of section "Choices" works at the
level of the 100-step chunk noise, so the README also gives the slope of a fit).
usage: python jaxpapers/papers/motor_adapters/curve_fits.py results/round4/motor_adapters_raw.json

For each kind: the fitted fall per 200 steps as a percentage of the fitted value at the
window's end, the residual sd (percent of the window mean), the rule's own number (fall
of the seed mean over the last 200 steps) and the per-seed 200-step falls. Windows: the
last 500 stage-1 steps and the last 500 policy steps."""
import json
import sys

import numpy as np

KINDS = ("adapters", "multitask", "multitask_big")


def tail_fit(steps, y, lo, hi):
  """(fitted fall per 200 steps in % of the fit at `hi`, residual sd in % of the mean)."""
  m = (steps >= lo) & (steps <= hi)
  slope, icpt = np.polyfit(steps[m], y[m], 1)
  fit = icpt + slope * steps[m]
  return -200 * slope / fit[-1] * 100, (y[m] - fit).std(ddof=2) / y[m].mean() * 100


def main(path):
  with open(path) as f:
    rows = json.load(f)["summary"]["rows"]
  for key in ("curve", "policy_curve"):
    for kind in KINDS:
      rs = [r for r in rows if r["kind"] == kind]
      if not rs:
        continue
      steps = np.asarray(rs[0][key]["step"])
      per_seed = np.asarray([r[key]["err_cm"] for r in rs])
      y = per_seed.mean(0)
      hi = int(steps[-1])
      if steps[0] > hi - 500:  # too short for the window (e.g. a 100-step policy stage)
        print(f"{key:12s} {kind:14s} curve of {hi} steps: shorter than the 500-step window")
        continue
      fall, sd = tail_fit(steps, y, hi - 500, hi)
      i200 = int(np.flatnonzero(steps == hi - 200)[0])
      rule = (y[i200] - y[-1]) / y[i200] * 100
      seeds = (per_seed[:, i200] - per_seed[:, -1]) / per_seed[:, i200] * 100
      print(f"{key:12s} {kind:14s} seeds={len(rs)} fit {hi - 500}-{hi}: {fall:.2f}% per 200 "
            f"steps (resid sd {sd:.2f}%); rule (last 200) {rule:.2f}%; per seed "
            f"{np.round(seeds, 1).tolist()}; seed mean {np.round(y[steps >= hi - 500], 4).tolist()}")


if __name__ == "__main__":
  main(sys.argv[1])
