"""The fresh GST's rotating-MNIST row from lane chunks (issue 44: its picks inside its grid).

The fresh GST's full grid is too many lanes for one heavy job (a job may take 570 s of one
shared core), so its lanes run as chunks: each chunk is the rot_mnist study with
`methods=source_only+gst_fresh` and a `grids=` that gives the fresh GST a few learning
rates x the whole weight-decay axis (the source-only grid is the study's own, so every
chunk fits the same source model). Every lane is one member of a vmap with the seed's key
of the method, so a lane's numbers do not depend on the other lanes of its chunk. This
script concatenates the chunks' per-seed lane scores (lanes sorted as `lanes_of` orders
one grid: lr outer, weight decay inner), applies the study's selection
(`pipeline.pick`: per seed and rule the first best lane) and writes the row the study
would write (`rot_mnist_gst_fresh.json`, with every per-seed lane score kept so the picks
can be checked from the file):

  python jaxpapers/papers/flowgda/results/rot_mnist_gst_fresh.py build WORKDIR [WORKDIR ...]
  python jaxpapers/papers/flowgda/results/rot_mnist_gst_fresh.py check   # from the JSON
"""
import json
import os
import pickle
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", ".."))  # the repo root

from configs import flowgda as config_module  # noqa: E402
from jaxpapers.papers.flowgda import experiment  # noqa: E402
from jaxpapers.papers.flowgda import pipeline  # noqa: E402
from jaxpapers.papers.flowgda import study  # noqa: E402

OUT = os.path.join(HERE, "rot_mnist_gst_fresh.json")
SCORES = ("proxy", "rv", "test")


def _axis(values):
  return "+".join(f"{v:g}" for v in sorted(set(float(f"{x:.1e}") for x in values)))


def select(lanes):
  """{lr, wd: (L,), proxy, rv, test: (S, L)} -> the study's result dict (both rules)."""
  lr, wd = (np.asarray(lanes[k], np.float32) for k in ("lr", "wd"))
  order = np.lexsort((wd, lr))  # lr outer, weight decay inner: `lanes_of` order
  lr, wd = lr[order], wd[order]
  if len(set(zip(lr.tolist(), wd.tolist()))) != len(lr):
    raise ValueError("a lane occurs in two chunks")
  grid = [(float(a), float(b)) for a in sorted(set(lr.tolist())) for b in sorted(set(wd.tolist()))]
  if len(grid) != len(lr):
    raise ValueError(f"the chunks cover {len(lr)} of the {len(grid)} lanes of their grid")
  s = {k: np.asarray(lanes[k], np.float32)[:, order] for k in SCORES}
  res = {}
  for score, sfx in ((s["proxy"], ""), (s["rv"], "_rv")):
    res.update(zip(("val" if not sfx else "rv", "test" + sfx, "lr" + sfx, "wd" + sfx),
                   pipeline.pick(score, s["test"], lr, wd)))
  res["lanes"] = {"lr": lr, "wd": wd, **s}
  return res


def row(res, seconds):
  """The study's JSON row for the merged result (picks, edge picks, lane means)."""
  lanes = res["lanes"]
  cfg = config_module.get_config(
      f"study=rot_mnist,grids=gst_fresh:{_axis(lanes['lr'])}:{_axis(lanes['wd'])}")
  out = study._grid_row(cfg, experiment.result_row("rot_mnist", "gst_fresh",
                                                    dict(res, seconds=seconds), 4))
  out.update(study._lanes(res))
  out["lanes per seed"] = {k: np.round(np.asarray(lanes[k], float), 4).tolist()
                           for k in SCORES}
  return out


def build(workdirs):
  parts, seconds, sources = [], 0.0, []
  for w in workdirs:
    with open(os.path.join(w, "cells", "rot_mnist_D6.pkl"), "rb") as f:
      out = pickle.load(f)["out"]
    parts.append(out["gst_fresh"]["lanes"])
    seconds += float(out["gst_fresh"]["seconds"])
    sources.append(np.asarray(out["source_only"]["test"]))
  # every chunk fits the same source model (the same key and grid): its row must agree
  assert all(np.array_equal(sources[0], s) for s in sources), sources
  lanes = {k: np.concatenate([np.asarray(p[k]) for p in parts], axis=-1)
           for k in ("lr", "wd") + SCORES}
  r = row(select(lanes), seconds)
  with open(OUT, "w") as f:
    json.dump(r, f, indent=1)
  return r


def check():
  """Recomputes the picks from the per-seed lanes kept in the JSON; returns the row."""
  with open(OUT) as f:
    r = json.load(f)
  res = select({"lr": r["lane lr"], "wd": r["lane wd"], **r["lanes per seed"]})
  again = row(res, r["seconds"])
  for k in ("seeds", "seeds rv", "lr", "wd", "lr rv", "wd rv", "edge picks"):
    assert again[k] == r[k], (k, again[k], r[k])
  return r


if __name__ == "__main__":
  if sys.argv[1:2] == ["build"]:
    r = build(sys.argv[2:])
  else:
    r = check()
  print({k: r[k] for k in ("target acc", "std", "target acc rv", "std rv", "seeds",
                            "seeds rv", "lr", "wd", "lr rv", "wd rv", "edge picks")})
