"""How much of the training violations the dual step's cap (20) cuts off (review rev39c, F1).

Reads the study's PPO metrics (`<workdir>/ppo_grid/metrics.jsonl`, keys
`rl/viol/<family>/m<j>`: each member's per-iteration violating fraction of that family's
training episodes) for the selected members (main variant, lr 1e-3: members 6-8) over
iterations 21-120, and prints per member and family: the mean violating fraction, the share
of iterations above the cap's threshold (budget x (1 + cap) = 10.5%), the share of the
violating mass those iterations carry, and the mean dual step in units of lam_lr, capped as
run (min(frac / budget - 1, cap)) and uncapped (frac / budget - 1). A negative capped mean
with a positive uncapped one means the cap, not the constraint, sets where lambda settles.
usage: python dual_cap_share.py /tmp/pd39c/study/ppo_grid/metrics.jsonl
"""
import json
import sys

import numpy as np

BUDGET, CAP, FIRST = 0.005, 20.0, 21
MEMBERS = {"conversation": (6, 7, 8), "diurnal": (6, 7, 8)}

rows = [json.loads(line) for line in open(sys.argv[1])]
print("| family | member | mean violating fraction | share of iterations above 10.5% "
      "| share of violating mass in those | mean step, capped (as run) | mean step, uncapped "
      "| iterations |")
print("|---|---|---|---|---|---|---|---|")
for fam, members in MEMBERS.items():
  for j in members:
    key = f"rl/viol/{fam}/m{j}"
    # A family absent from an iteration's episodes has no row (or NaN): skip it.
    f = np.array([r[key] for r in rows if r["step"] >= FIRST and key in r], float)
    f = f[np.isfinite(f)]
    big = f > BUDGET * (1 + CAP)
    step = f / BUDGET - 1
    mass = f[big].sum() / f.sum() if f.sum() > 0 else float("nan")
    print(f"| {fam} | {j} | {100 * f.mean():.2f}% | {100 * big.mean():.0f}% | {100 * mass:.0f}% "
          f"| {np.minimum(step, CAP).mean():+.2f} | {step.mean():+.2f} | {len(f)} |")
