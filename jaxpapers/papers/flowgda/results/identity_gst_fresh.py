"""The input-space fresh GST (`study=identity`) on its lr grid grown past the top end.

  python jaxpapers/papers/flowgda/results/identity_gst_fresh.py build IDENTITY_WORKDIR EXT_WORKDIR
  python jaxpapers/papers/flowgda/results/identity_gst_fresh.py

The identity study's fresh GST picked lr 3e-2, the top of its grid (3e-5 .. 3e-2), on
moons and digits under the proxy rule; EXT_WORKDIR ran the same method on lr 1e-1 and
3e-1 (x the same weight decays). Every lane's randomness is keyed by (benchmark, seed,
method) and its reverse-validation classifier's by (benchmark, seed); the merge
concatenates the per-seed lanes and applies the study's selection (`pipeline.pick`, both
rules) to the union. Caveat (found later, README "FlowGDA's moons grid grown to lr 1"):
a lane's numbers can still change with the number of lanes in its vmapped program
(bitwise equal at lr <= 1e-3, up to ~0.1 per seed at lr >= 1e-2), so the grown lanes
(1e-1, 3e-1), run in a smaller program, are not guaranteed to equal what one program
holding the whole grid would give; that check was not run. `build` writes
`identity_gst_fresh.json` beside this file; without arguments it prints the rows from it.
"""
import json
import os
import pickle
import sys

import numpy as np

from jaxpapers.papers.flowgda import pipeline

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "identity_gst_fresh.json")
BENCHES = ("moons", "digits")


def _lanes(workdir, bench):
  with open(os.path.join(workdir, "cells", f"{bench}_D8.pkl"), "rb") as f:
    cell = pickle.load(f)["out"]
  return cell["source_only"], cell["gst_fresh"]["lanes"]


def build(first, ext):
  rows = []
  for b in BENCHES:
    src_a, a = _lanes(first, b)
    src_b, e = _lanes(ext, b)
    # the same source model in both runs (not used by the fresh GST, a check of the data)
    assert np.allclose(src_a["test"], src_b["test"]), b
    lanes = {k: np.concatenate([np.asarray(a[k]), np.asarray(e[k])], -1) for k in a}
    row = {"benchmark": b, "method": "gst_fresh", "encoder": "identity",
           "lane lr": lanes["lr"].tolist(), "lane wd": lanes["wd"].tolist()}
    for rule, key in (("proxy", "proxy"), ("rv", "rv")):
      score, test, lr, wd = pipeline.pick(lanes[key], lanes["test"], lanes["lr"],
                                          lanes["wd"])
      row[rule] = {"target acc": float(test.mean()), "std": float(test.std()),
                   "seeds": [round(float(t), 4) for t in test],
                   "lr": [float(f"{v:.1e}") for v in lr],
                   "wd": [float(f"{v:.1e}") for v in wd]}
    lo, hi = lanes["lr"].min(), lanes["lr"].max()
    row["edge picks (lr)"] = int(sum(np.isclose(v, lo) or np.isclose(v, hi)
                                     for r in ("proxy", "rv") for v in row[r]["lr"]))
    row["lane test mean over seeds"] = [round(float(v), 4)
                                        for v in np.asarray(lanes["test"]).mean(0)]
    rows.append(row)
  with open(OUT, "w") as f:
    json.dump(rows, f, indent=1)
  show()


def show():
  with open(OUT) as f:
    rows = json.load(f)
  for r in rows:
    p, v = r["proxy"], r["rv"]
    print(f"{r['benchmark']}: [proxy] {p['target acc']:.3f} ± {p['std']:.3f} lr {p['lr']} "
          f"wd {p['wd']}; [rv] {v['target acc']:.3f} ± {v['std']:.3f} lr {v['lr']} wd "
          f"{v['wd']}; lr edge picks {r['edge picks (lr)']}")


if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == "build":
    build(sys.argv[2], sys.argv[3])
  else:
    show()
