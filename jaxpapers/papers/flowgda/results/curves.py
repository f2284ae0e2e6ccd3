"""Training curves of DANN and FlowGDA's head over the classifier budget (issue 44).

  python jaxpapers/papers/flowgda/results/curves.py build OUT.json SPR=WORKDIR ...
  python jaxpapers/papers/flowgda/results/curves.py table curves.json

Each WORKDIR is one `launch/study.py` run of the main study's cells with
`methods=source_only+dann+flowgda,variants=flowgda` and `steps_per_round=SPR`: DANN and
FlowGDA's head then take (D - 1) x SPR classifier steps (the study's budget is SPR = 60);
FlowGDA's velocity field (its own 500 steps) and the source model do not depend on SPR.
Each budget re-selects the learning rate per seed under both rules (a curve of tuned
runs, not one run read at several steps). `build` collects the rows, checks that the
source model is the same in every run (same per-seed accuracies), and writes OUT.json;
`table` prints the README table from it.
"""
import json
import os
import sys

import numpy as np

METHODS = ("dann", "flowgda")
LABELS = {"dann": "DANN (textbook)", "flowgda": "FlowGDA (head along the flow)"}


def build(out_path, pairs):
  rows, src = [], {}
  for pair in pairs:
    spr, workdir = pair.split("=", 1)
    with open(os.path.join(workdir, "flowgda_study.json")) as f:
      study = [r for r in json.load(f) if r["method"] in ("source_only",) + METHODS]
    for r in study:
      if r["method"] == "source_only":  # the same source model whatever the budget
        prev = src.setdefault(r["benchmark"], r["seeds"])
        assert np.allclose(prev, r["seeds"]), (r["benchmark"], prev, r["seeds"])
        continue
      rows.append(dict(r, steps_per_round=int(spr), steps=int(spr) * (r["D"] - 1)))
  with open(out_path, "w") as f:
    json.dump({"source_only": src, "rows": rows}, f, indent=1)
  print(f"wrote {out_path}: {len(rows)} rows")


def table(path):
  with open(path) as f:
    d = json.load(f)
  rows = d["rows"]
  # benchmarks run at more than the study's budget only (the others have one point)
  benches = [b for b in dict.fromkeys(r["benchmark"] for r in rows)
             if len({r["steps"] for r in rows if r["benchmark"] == b}) > 1]
  steps = sorted({r["steps"] for r in rows})
  print("| method | benchmark | source-only | " + " | ".join(
      f"{s} steps [proxy] / [rv]" for s in steps) + " |")
  print("|---|---|---|" + "---|" * len(steps))
  for m in METHODS:
    for b in benches:
      cells = []
      for s in steps:
        r = [x for x in rows if x["method"] == m and x["benchmark"] == b and x["steps"] == s]
        cells.append(f"{r[0]['target acc']:.3f} ± {r[0]['std']:.3f} / "
                     f"{r[0]['target acc rv']:.3f} ± {r[0]['std rv']:.3f}" if r else "-")
      so = np.asarray(d["source_only"][b])
      print(f"| {LABELS[m]} | {b} | {so.mean():.3f} ± {so.std():.3f} | "
            + " | ".join(cells) + " |")


if __name__ == "__main__":
  if sys.argv[1] == "build":
    build(sys.argv[2], sys.argv[3:])
  else:
    table(sys.argv[2])
