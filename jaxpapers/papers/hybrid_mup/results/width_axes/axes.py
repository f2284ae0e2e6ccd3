"""Claim 2 (issue 43 item 4): the optimum of SP and muP at width 64 (2x the muP base 32,
where the two differ) in a base cell and in a cell that changes one axis: sequence length
(T 64 -> 32), batch (8 -> 4), the attention:SSM ratio ('MA' 1:1 -> 'MMMA' 1:3) and the
Nemotron-H shape ('MA' -> 'M-M-M-*-'); the last two at T = 32 against the T = 32 'MA' cell
(half the cost). 'MA' -> 'MMMA' also doubles the depth (2 -> 4 blocks), so the ratio is
also read at the same depth: 'MAMA' (1:1, 4 blocks, T = 32) -> 'MMMA'. Every cell: 400 steps, 3 seeds (0-2), the 2^(1/2) grid, AdamW, decay 0.1
by MuAdamW's rule, 256 + 256 held-out windows (512 + 512 at T = 32: the same bytes).
`width_sweep.axis_shift` per axis: the shift of each method's optimum with its seed
bootstrap interval and the detectable shift, the gap at the transferred LR, and SP's shift
minus muP's. Writes axes_summary.md/json here from the committed rows.

  python jaxpapers/papers/hybrid_mup/results/width_axes/axes.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))
from jaxpapers.core import study as study_lib  # pylint: disable=wrong-import-position
from jaxpapers.papers.hybrid_mup import width_sweep as ws  # pylint: disable=wrong-import-position

WIDTH = 64
# axis -> (base cell, axis cell, what changes): result directories beside this one
AXES = {"sequence": ("width", "width_t32", "T 64 -> 32 ('MA', B 8)"),
        "batch": ("width", "width_b4", "B 8 -> 4 ('MA', T 64)"),
        "ratio": ("width_t32", "width_t32_mmma", "'MA' (1:1) -> 'MMMA' (1:3), T 32"),
        # the same ratio change at the same depth (4 blocks): separates it from depth
        "ratio_same_depth": ("width_t32_mama", "width_t32_mmma",
                             "'MAMA' (1:1) -> 'MMMA' (1:3), 4 blocks, T 32"),
        "nemotron": ("width_t32", "width_t32_nemotron", "'MA' -> 'M-M-M-*-', T 32")}


def load(name):
  p = os.path.join(HERE, "..", name, "width_rows.json")
  if not os.path.exists(p):
    return None
  with open(p) as f:
    return json.load(f)


def summary():
  table, headers = [], {}
  for axis, (base, cell, what) in AXES.items():
    b, c = load(base), load(cell)
    if b is None or c is None:
      continue
    for name, rows in ((base, b), (cell, c)):
      if name != "width":  # the committed sweep: its header is results/width's
        headers.setdefault(name, rows["header"])
    for r in ws.axis_shift(b["rows"], c["rows"], WIDTH):
      table.append({"axis": axis, "change": what, "cell": cell,
                    "bigram_test": c["bigram"]["test_bpb"], **r})
  return table, headers


if __name__ == "__main__":
  table, headers = summary()
  h = ("hybrid_mup, claim 2: SP and muP at width 64 (muP base 32) in a base cell and an "
       "axis cell each; 400 steps, 3 seeds, 2^(1/2) LR grid, AdamW, MuAdamW decay. Cells: "
       + " | ".join(f"{k}: {v}" for k, v in headers.items()))
  print(study_lib.write_table(HERE, "axes_summary", table, header=h, digits=3))
