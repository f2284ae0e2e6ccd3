"""Rebuilds the README's rotating-MNIST tables from the committed raw rows.

  python jaxpapers/papers/flowgda/results/rot_mnist_tables.py

Rows: `flowgda_rot_mnist_study.json` (round 2: the study config as committed, every
method except the fresh GST and the oracle), `results/rot_mnist_round1.json` (round 1:
every method; its source-only and oracle grids are round 2's),
`results/rot_mnist_gst_fresh.json` (round 3: the fresh GST on its extended grid, run in
lane chunks and merged by `results/rot_mnist_gst_fresh.py`, which is checked here) and
`results/rot_mnist_source_reg.json` (the regularised shared source model, `source_reg`),
`results/rot_mnist_dann_textbook.json` (round 4: the textbook DANN, issue 44; round 2's
DANN row is the first study's reading, source start and pooled domains, kept as history).
"""
import json
import os

import numpy as np

import rot_mnist_gst_fresh  # beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = {"round 2": os.path.join(HERE, "..", "flowgda_rot_mnist_study.json"),
         "round 1": os.path.join(HERE, "rot_mnist_round1.json"),
         "source_reg": os.path.join(HERE, "rot_mnist_source_reg.json"),
         "round 4": os.path.join(HERE, "rot_mnist_dann_textbook.json")}
FROM_ROUND1 = ("source_only", "oracle")  # their grids did not change
LABELS = {"source_only": "source-only", "oracle": "target oracle (target labels)",
          "gst_fresh": "GST, fresh regularised student", "gst_linear": "linear GST",
          "dann": "DANN (textbook: fresh network, source vs target)",
          "dann_old": "DANN, old reading (source start, pooled domains; superseded)",
          "goat": "GOAT, continued head", "goat_fresh": "GOAT on fresh GST",
          "ggf": "GGF", "flowgda": "FlowGDA", "no_anchor": "FlowGDA - source-anchored term",
          "anchor_flow": "FlowGDA, anchor along the integrated flow"}


def _load(name):
  with open(FILES[name]) as f:
    return {r["method"]: r for r in json.load(f)}


def _g(v):
  return "/".join(f"{x:.0e}".replace("e-0", "e-").replace("e+00", "") for x in v)


def _acc(r, rv=False):
  k = " rv" if rv else ""
  return f"{r['target acc' + k]:.3f} ± {r['std' + k]:.3f}"


def main():
  r1, r2 = _load("round 1"), _load("round 2")
  rows = {m: (r1[m], "1") for m in FROM_ROUND1}
  rows.update({m: (r, "2") for m, r in r2.items() if m not in FROM_ROUND1})
  rows["gst_fresh"] = (rot_mnist_gst_fresh.check(), "3")  # picks recomputed from its lanes
  r4 = _load("round 4")
  rows["dann_old"] = rows.pop("dann")
  rows["dann"] = (r4["dann"], "4")
  print("| method | target acc [proxy] | target acc [rv] | round |")
  print("|---|---|---|---|")
  for m in LABELS:
    if m in rows:
      r, k = rows[m]
      print(f"| {LABELS[m]} | {_acc(r)} | {_acc(r, True)} | {k} |")
  print("\n| method | lr grid | wd grid | lr [proxy] | lr [rv] | wd [proxy] | wd [rv] | "
        "edge picks | lane target acc (min-max of seed means) |")
  print("|---|---|---|---|---|---|---|---|---|")
  for m in LABELS:
    if m not in rows:
      continue
    r, _ = rows[m]
    wd = bool(r["wd grid"])
    lanes = (f"{min(r['lane test']):.3f}-{max(r['lane test']):.3f}" if "lane test" in r
             else "not kept")
    print(f"| {LABELS[m]} | {_g(r['lr grid'])} | {_g(r['wd grid']) if wd else '-'} | "
          f"{_g(r['lr'])} | {_g(r['lr rv'])} | {_g(r['wd']) if wd else '-'} | "
          f"{_g(r['wd rv']) if wd else '-'} | {r['edge picks']} | {lanes} |")
  if os.path.exists(FILES["source_reg"]):
    reg = _load("source_reg")
    print("\n| method (regularised shared source model) | target acc [proxy] | "
          "target acc [rv] | lr / wd picks [proxy] | lr / wd picks [rv] | edge picks |")
    print("|---|---|---|---|---|---|")
    for m in LABELS:
      if m in reg:
        r = reg[m]
        wd = bool(r["wd grid"])
        pick = lambda a, b: _g(r[a]) + (" / " + _g(r[b]) if wd else "")  # noqa: E731
        print(f"| {LABELS[m]} | {_acc(r)} | {_acc(r, True)} | {pick('lr', 'wd')} | "
              f"{pick('lr rv', 'wd rv')} | {r['edge picks']} |")
  # the same seeds, the same source model: round 2 must repeat round 1's source-only row
  assert np.allclose(r1["source_only"]["seeds"], r2["source_only"]["seeds"])
  assert np.allclose(r1["source_only"]["seeds"], r4["source_only"]["seeds"])


if __name__ == "__main__":
  main()
