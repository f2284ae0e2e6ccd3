"""Held-out bpb during training of the 3000-step Shakespeare LMs (part 2a, flatness check).

  python jaxpapers/papers/llops/results/lm_3000steps_curves.py /tmp/ll37h/lm3000
reads the loop's evaluation on all 256 held-out windows (the `"split": "test"` lines of each
population's metrics.jsonl, every 250 steps) and writes lm_3000steps_curves.json and
lm_3000steps_curves.png next to this file: per method, the per-seed and seed-mean curves, the
drop over the last quarter (steps 2250 -> 3000) and over the last 250 steps, and part 2a's
1500-step curve (results/lm_curves.json) for comparison."""
import glob, json, os, sys
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
root = sys.argv[1]
old = json.load(open(os.path.join(here, "lm_curves.json")))["heldout_bpb_chosen_lr_seed_mean"]
out = {}
for d in sorted(glob.glob(os.path.join(root, "lm", "*", "s0+1+2_lr*"))):
  method = d.split(os.sep)[-2]
  per = {}
  for line in open(os.path.join(d, "metrics.jsonl")):
    r = json.loads(line)
    if r.get("split") == "test":
      per[r["step"]] = [r[k] for k in sorted(k for k in r if k.startswith("bpb/"))]
  steps = sorted(per)
  mean = {s: float(np.mean(per[s])) for s in steps}
  last = steps[-1]
  out[method] = {"steps": steps, "per_seed": {s: per[s] for s in steps}, "mean": mean,
                 "drop_last_quarter": mean[int(last * 0.75)] - mean[last],
                 "drop_last_250": mean[last - 250] - mean[last],
                 "rel_drop_last_250": (mean[last - 250] - mean[last]) / mean[last],
                 "part2a_1500": old.get(method)}
  print(method, " ".join(f"{s}:{mean[s]:.3f}" for s in steps),
        f"| last quarter -{out[method]['drop_last_quarter']:.4f}, last 250 "
        f"-{out[method]['drop_last_250']:.4f} ({100 * out[method]['rel_drop_last_250']:.2f}%)")
json.dump(out, open(os.path.join(here, "lm_3000steps_curves.json"), "w"), indent=1)

import matplotlib  # pylint: disable=g-import-not-at-top
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
fig, ax = plt.subplots(figsize=(6, 4))
for i, (m, c) in enumerate(out.items()):
  ax.plot(c["steps"], [c["mean"][s] for s in c["steps"]], marker="o", color=f"C{i}",
          label=f"{m}, 3000 steps")
  if c["part2a_1500"]:
    ax.plot([int(s) for s in c["part2a_1500"]], list(c["part2a_1500"].values()), ls="--",
            color=f"C{i}", label=f"{m}, 1500 steps (part 2a)")
ax.set_xlabel("step")
ax.set_ylabel("held-out bpb (256 windows, seed mean)")
ax.set_ylim(top=3.1)
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(os.path.join(here, "lm_3000steps_curves.png"), dpi=110)
