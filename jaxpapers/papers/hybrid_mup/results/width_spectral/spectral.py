"""Issue 43 item 5, the spectral form: ||W_t+1 - W_t||_2 / ||W_t||_2 (operator norms) beside
the Frobenius ratio, per parameter group and width, for SP and muP.

The same members as the width sweep's update-ratio table (`results/width`: 'MA', 8 x 64
bytes, AdamW, decay 0.1 by MuAdamW's rule, seeds 0-2; SP at LR 0.00354 (k = -3), muP at
0.0141 (k = 1)), trained for the first 50 steps of their 400-step warm-up + cosine
schedule (`sweep.train_members(schedule_steps=400)`): the phases t 0-10 (warm-up) and
10-50 (peak LR) of the full runs. The Frobenius ratios of these steps are compared with
the committed rows of the same members (a check that these are the same runs). One
saved file per width (`<out>/d<width>.json`): rerun to continue; `--analyse` only
rebuilds the tables from the saved files.

  python jaxpapers/papers/hybrid_mup/results/width_spectral/spectral.py --out=/tmp/hm_spec
  python jaxpapers/papers/hybrid_mup/results/width_spectral/spectral.py --out=<dir> --analyse
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, *[".."] * 5))
sys.path.insert(0, ROOT)
from jaxpapers.core import config as config_lib  # pylint: disable=wrong-import-position
from jaxpapers.core import study as study_lib  # pylint: disable=wrong-import-position
from jaxpapers.papers.hybrid_mup import experiment  # pylint: disable=wrong-import-position
from jaxpapers.papers.hybrid_mup import model as model_lib  # pylint: disable=wrong-import-position
from jaxpapers.papers.hybrid_mup import sweep  # pylint: disable=wrong-import-position
from jaxpapers.papers.hybrid_mup import width_sweep as ws  # pylint: disable=wrong-import-position

WIDTHS = (32, 64, 128, 256)
POINTS = (("sp", -3), ("mup", 1))     # the LRs of the Frobenius table (results/width)
STEPS, SCHEDULE = 50, 400
PHASES = ((0, 10), (10, 50))


def train(out, width, config, data):
  cc = ws._cell_config(config, width)
  cc = config_lib.override(cc, {"train.steps": STEPS})
  hybrid = model_lib.build(cc, data.vocab_size)
  s = config.width
  members = []
  for m, k in POINTS:
    variant, opt = ws.METHODS[m]
    num = model_lib.numerics(variant, opt, width, s.base_width, cc.model.n_heads,
                             d_state=cc.model.d_state, base_state=cc.model.d_state,
                             std=cc.model.init_std, d_conv=cc.model.d_conv)
    members += [{"method": m, "k": k, "lr": ws.lr_of(m, k), "seed": config.seed + i,
                 "num": {**num, "wd_scale": 1.0}} for i in range(s.seeds)]
  t0 = time.time()
  res = sweep.train_members(cc, data, hybrid, members, {},
                            update_groups=sweep.update_groups(hybrid), spectral=True,
                            schedule_steps=SCHEDULE)
  took = time.time() - t0
  print(f"[spectral] d={width}: {len(members)} members x {STEPS} steps: {took:.0f} s", flush=True)
  rows = []
  for i, mem in enumerate(members):
    r = {"method": mem["method"], "dim": width, "k": mem["k"], "lr": mem["lr"],
         "seed": mem["seed"], "program_s": round(took, 1)}
    for kind in ("upd", "spec"):
      r[kind] = {g[len(kind) + 1:]: [float(f"{np.mean(v[i, a:b]):.5g}") for a, b in PHASES]
                 for g, v in res["stats"].items() if g.startswith(kind + "/")}
    rows.append(r)
  with open(os.path.join(out, f"d{width}.json"), "w") as f:
    json.dump({"commit": COMMIT, "rows": rows}, f)


def analyse(rows, committed):
  """Per method, group and phase: the seed-mean Frobenius and spectral ratios over width
  and their log-log slopes; the largest relative difference of the Frobenius ratios from
  the committed full runs' (same members, same first 50 steps)."""
  table, diffs = [], []
  ref = {(r["method"], r["dim"], r["k"], r["seed"]): r["upd"] for r in committed}
  for r in rows:
    c = ref.get((r["method"], r["dim"], r["k"], r["seed"]))
    if c:
      diffs += [abs(r["upd"][g][j] / c[g][j] - 1) for g in r["upd"] for j in range(2)]
  for m, k in POINTS:
    rs = [r for r in rows if r["method"] == m]
    widths = sorted({r["dim"] for r in rs})
    for g in rs[0]["spec"]:
      for j, (a, b) in enumerate(PHASES):
        row = {"method": m, "lr": ws.lr_of(m, k), "group": g, "phase": f"t{a}-{b}",
               "widths": widths}
        for kind in ("upd", "spec"):
          y = [float(np.mean([q[kind][g][j] for q in rs if q["dim"] == w])) for w in widths]
          row[f"{kind}_ratio"] = [float(f"{v:.4g}") for v in y]
          row[f"{kind}_slope"] = (float(np.polyfit(np.log2(widths), np.log2(y), 1)[0])
                                  if len(widths) > 1 else None)
        table.append(row)
  return table, (max(diffs) if diffs else None), len(diffs)


if __name__ == "__main__":
  ap = argparse.ArgumentParser()
  ap.add_argument("--out", required=True)
  ap.add_argument("--analyse", action="store_true")
  ap.add_argument("--widths", default=",".join(map(str, WIDTHS)))
  args = ap.parse_args()
  os.makedirs(args.out, exist_ok=True)
  COMMIT = study_lib.git_commit(paths=("jaxpapers/papers/hybrid_mup", "configs/hybrid_mup.py",
                                       "jaxpapers/nn", "jaxpapers/data/text.py"))
  config = config_lib.load(os.path.join(ROOT, "configs/hybrid_mup.py") + ":study=width")
  widths = [int(w) for w in args.widths.split(",")]
  if not args.analyse:
    config = experiment.resolve_corpus(config)
    data = experiment.load_data(config)
    for w in widths:
      if not os.path.exists(os.path.join(args.out, f"d{w}.json")):
        train(args.out, w, config, data)
  rows, commits = [], set()
  for w in widths:
    p = os.path.join(args.out, f"d{w}.json")
    if os.path.exists(p):
      with open(p) as f:
        d = json.load(f)
      rows += d["rows"]
      commits.add(d["commit"])
  with open(os.path.join(ROOT, "jaxpapers/papers/hybrid_mup/results/width/width_rows.json")) as f:
    committed = json.load(f)["rows"]
  table, diff, n = analyse(rows, committed)
  h = (f"hybrid_mup, item 5's spectral ratio: ||dW||_2/||W||_2 (spec, mean over a group's "
       f"matrices) beside ||dW||_F/||W||_F (upd, pooled), seed means of seeds 0-2, 'MA', 8 x 64, "
       f"the first {STEPS} steps of the {SCHEDULE}-step schedule, SP at LR 0.00354, muP at "
       f"0.0141, widths {sorted({r['dim'] for r in rows})}; points at commit(s) "
       f"{sorted(commits)}. Frobenius ratios vs the committed full runs' (same members): "
       f"largest relative difference {diff if diff is None else f'{diff:.2g}'} over {n} values.")
  with open(os.path.join(args.out, "spectral_rows.json"), "w") as f:
    json.dump({"header": h, "rows": rows}, f)
  print(study_lib.write_table(args.out, "spectral", table, header=h, digits=3))
