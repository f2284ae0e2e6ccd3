"""Training length (issue 43 item 3: ">= 400 steps ... more if the curve has not flattened:
show it"): the width sweep's SP / muP rows at widths 32 and 128 ('MA', 8 x 64, 3 seeds,
2^(1/2) grid, the same 256 + 256 held-out windows) at 400 steps (`results/width`), 800
(`results/width_s800`) and 1600 (`results/width_s1600`, where present), analysed alike
(`width_sweep.length_summary`): per length the optimum, the drift 32 -> 128 with its
seed-bootstrap interval and the detectable drift, the best test bpb, the tail of the best
run's training-loss curve (fresh windows: a held-out estimate) and the flat verdict (rule
`width_sweep.FLAT_*`, fixed before the 800-step rows were seen and unchanged for the
1600-step rows); across lengths the optimum's shift at each (method, width) from 400
steps (`length_shift`) and from each length to the next (`length_shift_step`).
Writes length_summary.md/json, length_shift.md/json, length_shift_step.md/json and
length_curves.png here.

  python jaxpapers/papers/hybrid_mup/results/width_s800/length.py
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))
from jaxpapers.core import study as study_lib  # pylint: disable=wrong-import-position
from jaxpapers.papers.hybrid_mup import width_sweep as ws  # pylint: disable=wrong-import-position

DIRS = {400: "width", 800: "width_s800", 1600: "width_s1600"}
STYLE = {400: ":", 800: "--", 1600: "-"}


def load():
  return ws.load_committed_rows(os.path.join(HERE, ".."), DIRS)


def display(table):
  """The summary's md rows: the tail drops as 'drop ± se (span / averaged steps)'."""
  out = []
  for r in table:
    q = {k: v for k, v in r.items() if k not in ("tail", "loss_bins", "transferred_lr",
                                                 "n_seeds", "fitted", "gap_at_k",
                                                 "last_bin_drop")}
    for i, d in enumerate(r["tail"]):
      q[f"tail drop {i + 1}, nats ± se"] = (
          f"last {d['steps']:.0f} of {r['steps']}: {d['drop']:.4f} ± {d['se']:.4f}")
    out.append(q)
  return out


def plot(table, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
  for ax, w in zip(axes, (32, 128)):
    for r in table:
      if r["width"] != w or (w == 32 and r["method"] == "sp"):
        continue
      nb = len(r["loss_bins"])
      x = [(i + 0.5) * r["steps"] / nb for i in range(nb)]
      ax.plot(x, r["loss_bins"], STYLE[r["steps"]], marker=".", markersize=3,
              color="C0" if r["method"] == "sp" else "C1",
              label=f"{'sp = mup' if w == 32 else r['method']}, {r['steps']} steps, "
                    f"k = {r['best_k']}")
    ax.set_title(f"best run per cell, width {w} (seed mean)")
    ax.set_xlabel("step")
    lo = min(min(r["loss_bins"]) for r in table)
    ax.set_ylim(math.floor(lo * 20) / 20 - 0.05, 2.3)
    ax.legend(fontsize=7)
  axes[0].set_ylabel("training loss, fresh windows (nats)")
  fig.tight_layout()
  fig.savefig(path, dpi=110)


if __name__ == "__main__":
  rows, headers = load()
  res = ws.length_summary(rows, 32)
  h = ("hybrid_mup, training length: SP and muP at widths 32 and 128 (muP base 32), 'MA', "
       "8 x 64, 3 seeds, 2^(1/2) LR grid, warm-up 10% + cosine to 10% over the run, 256 "
       "val / 256 test windows, at " + ", ".join(f"{n} steps ({DIRS[n]})" for n in rows)
       + f". Flat (rule fixed before the 800-step rows were seen): drop over the last eighth <= {ws.FLAT_EIGHTH_NATS} nats and over the "
       f"last quarter <= {ws.FLAT_QUARTER_NATS} (each end a mean over steps / 16; 10-bin "
       "rows: the last fifth and tenth, one bin per end, no verdict).")
  study_lib.write_table(HERE, "length_summary", res["table"], header=h, digits=4)
  md = study_lib.markdown_table(display(res["table"]), digits=3)
  with open(os.path.join(HERE, "length_summary.md"), "w") as f:
    f.write(h + "\n\n" + md)
  print(md)
  print(study_lib.write_table(HERE, "length_shift", res["shift"], header=h, digits=3))
  # the shift from each length to the next (the same paired bootstrap, two lengths at a time)
  step = ws.length_shift_steps(rows, 32)
  print(study_lib.write_table(HERE, "length_shift_step", step, header=h, digits=3))
  plot(res["table"], os.path.join(HERE, "length_curves.png"))
