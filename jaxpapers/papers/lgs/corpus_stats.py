"""LGS corpus check (issue 41): per-family statistics of a cached corpus split.

For each family: finite, max |u|, the study's persistence L2RE at 1 / 5 / 20 frames
(`frame_rule.persistence_l2re`), and per real channel the range over trajectories of the
last frame's spatial std over the first's (decay / growth), the centred field's
frame-to-frame change (min / median / max: frozen vs decorrelated) and the largest drift
of the spatial mean over the mean spatial std (conservation).

  python -m jaxpapers.papers.lgs.corpus_stats --corpus=/tmp/lgs_f8/corpus --split=train --n=32
"""
from __future__ import annotations

import argparse
import glob
import os

import numpy as np

from jaxpapers.papers.lgs import frame_rule, pdes


def family_rows(x, channels):
  """[(name, value)] for one family's trajectories x [N, T, H, W, C]."""
  steps = tuple(k for k in (1, 5, 20) if k < x.shape[1])  # horizons the frames allow
  p = frame_rule.persistence_l2re(x, channels, steps)
  rows = [("finite", bool(np.isfinite(x).all())), ("max|u|", float(np.abs(x).max())),
          (f"persistence@{'/'.join(map(str, steps))}", tuple(round(p[k], 3) for k in steps))]
  for c in range(channels):
    u = x[..., c].reshape(x.shape[0], x.shape[1], -1).astype(np.float64)
    uc = u - u.mean(-1, keepdims=True)
    sd = uc.std(-1)
    change = (np.linalg.norm(uc[:, 1:] - uc[:, :-1], axis=-1)
              / np.maximum(np.linalg.norm(uc[:, 1:], axis=-1), 1e-30))
    ratio = sd[:, -1] / sd[:, 0]
    drift = np.abs(u.mean(-1) - u.mean(-1)[:, :1]).max() / sd.mean()
    rows += [(f"c{c} std last/first", (round(float(ratio.min()), 3), round(float(ratio.max()), 3))),
             (f"c{c} change/frame min/med/max", (round(float(change.min()), 4),
                                                 round(float(np.median(change)), 3),
                                                 round(float(change.max()), 3))),
             (f"c{c} mean drift/std", float(f"{drift:.2e}"))]
  return rows


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--corpus", required=True)  # <workdir>/corpus
  ap.add_argument("--split", default="train")
  ap.add_argument("--n", type=int, default=32)
  a = ap.parse_args()
  for path in sorted(glob.glob(os.path.join(a.corpus, f"corpus_{a.split}_{a.n}_*.npz"))):
    print(path)
    with np.load(path) as z:
      for fam in z.files:
        rows = family_rows(z[fam], pdes.family(fam).channels)
        print(f"  {fam:16s} " + " | ".join(f"{k} {v}" for k, v in rows), flush=True)


if __name__ == "__main__":
  main()
