"""LGS: the frame-spacing rule of the `close` setting (issue 41), measured before training.

For each family and dt_div d in DIVS, the persistence forecast's L2RE (the study's
definition: per trajectory and real channel, physical units) at 1, 5 and 20 steps on the
*training* split (8 trajectories, 24 frames, every start frame); the rule picks, per
family, the smallest d whose 1-step persistence L2RE is <= `target`. No model is
involved, so the choice cannot favour one.

  python -m jaxpapers.papers.lgs.frame_rule --target=0.05 --out=/tmp/lg41/frame_rule.json
  python -m jaxpapers.papers.lgs.frame_rule --families=kolmogorov --n=32 --split=finetune
  # the eight families at 32^2 (setting=families8), candidates up to 16:
  python -m jaxpapers.papers.lgs.frame_rule --families=adv_diff,burgers,ks,kdv,gray_scott,swift_hohenberg,navier_stokes,cahn_hilliard --n=32 --divs=1,2,4,8,16
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from jaxpapers.papers.lgs import pdes

DIVS = (1, 2, 4, 8, 16, 32)


def persistence_l2re(x, channels, steps):
  """Mean L2RE of u_{t+k} ~ u_t over trajectories and start frames t: {k: float}."""
  out = {}
  for k in steps:
    a, b = x[:, :-k, ..., :channels], x[:, k:, ..., :channels]
    num = np.sqrt(((a - b) ** 2).sum(axis=(2, 3)))
    den = np.maximum(np.sqrt((b ** 2).sum(axis=(2, 3))), 1e-8)
    out[k] = float((num / den).mean())
  return out


def choose(table, target):
  """{family: smallest d with 1-step persistence L2RE <= target (else the largest d)}."""
  pick = {}
  for fam, rows in table.items():
    ok = [int(d) for d, r in rows.items() if r[1] <= target]
    pick[fam] = min(ok) if ok else max(int(d) for d in rows)
  return pick


def measure(families, n=16, count=8, frames=24, divs=DIVS, split="train"):
  table = {}
  for fam in families:
    ch = pdes.family(fam).channels
    table[fam] = {}
    for d in divs:
      t0 = time.perf_counter()
      x = pdes.generate([fam], split, count, n, frames, progress=False, dt_div=[d])[fam]
      # the generation time (compile included) prices a corpus at this dt_div
      gen_s = time.perf_counter() - t0
      table[fam][d] = persistence_l2re(x, ch, (1, 5, 20))
      print(fam, d, {k: round(v, 4) for k, v in table[fam][d].items()},
            f"({count} trajectories in {gen_s:.1f} s)", flush=True)
  return table


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--families", default="adv_diff,burgers,cahn_hilliard,navier_stokes")
  ap.add_argument("--target", type=float, default=0.05)
  ap.add_argument("--n", type=int, default=16)
  ap.add_argument("--split", default="train")  # the held-out flow: finetune (n=32)
  ap.add_argument("--divs", default=",".join(map(str, DIVS)))  # the dt_div candidates
  ap.add_argument("--out", default="")
  a = ap.parse_args()
  divs = tuple(int(v) for v in a.divs.split(","))
  table = measure(a.families.split(","), a.n, split=a.split, divs=divs)
  pick = choose(table, a.target)
  print("rule: smallest dt_div with 1-step persistence L2RE <=", a.target, "->", pick)
  if a.out:
    with open(a.out, "w") as f:
      json.dump(dict(target=a.target, table=table, pick=pick), f, indent=1)


if __name__ == "__main__":
  main()
