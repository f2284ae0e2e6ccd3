"""Claim 1's depth half (issue 43 item 3): the width sweep's SP / muP rows at depths 2
('MA', `results/width`), 4 ('MAMA', `results/width_d4`) and 8 ('MAMAMAMA',
`results/width_d8`, where present), widths 32 and 128, analysed alike
(`width_sweep.depth_summary`): per depth the optimum, the drift 32 -> 128 with its seed-
bootstrap interval and the detectable drift, the best test bpb; across depths the shift
of the optimum at a fixed width. Writes depth_summary.md/json and depth_across.md/json here.

  python jaxpapers/papers/hybrid_mup/results/width_depth/depth.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))
from jaxpapers.core import study as study_lib  # pylint: disable=wrong-import-position
from jaxpapers.papers.hybrid_mup import width_sweep as ws  # pylint: disable=wrong-import-position

DIRS = {2: "width", 4: "width_d4", 8: "width_d8"}


def load():
  return ws.load_committed_rows(os.path.join(HERE, ".."), DIRS)


if __name__ == "__main__":
  rows, headers = load()
  res = ws.depth_summary(rows, 32)
  h = ("hybrid_mup, claim 1's depth half: SP and muP at widths 32 and 128 (muP base 32), "
       "depths " + ", ".join(f"{d} ({DIRS[d]})" for d in rows) + "; 400 steps of 8 x 64, "
       "3 seeds, 2^(1/2) LR grid, 256 val / 256 test windows. Bigram on the same test "
       "windows " + "; ".join(sorted({h.split("Bigram ")[1] for h in headers.values()})))
  print(study_lib.write_table(HERE, "depth_summary", res["table"], header=h, digits=3))
  print(study_lib.write_table(HERE, "depth_across", res["across_depth"], header=h, digits=3))
