"""One table from study cells of the same model trained as several populations.

A cell's grid may have run in pieces (seed 0 alone, then seeds 1 and 2; an LR grid extended
past its edge in a later run, in its own workdir). This reads each piece's `cell.json`,
joins the members by (LR, seed), chooses the LR on the mean over seeds of the validation
number (as `study._cell` does), and prints per model: validation by LR, the choice (EDGE
when it is the grid's first or last), the test mean +- std over seeds, the chosen LR's
validation curve (mean over seeds), its change over the last quarter and last eighth of
training (per seed too: > 0 means still falling) and the margin under the add-k bigram (read
from the first piece's study_rows.json, for the cell's own corpus), then every pair's gap
(2 s.e. of the difference and the larger last-quarter drop; the models in the order given).
Nothing is trained.

  python -m jaxpapers.papers.lhdlm.combine --out=/tmp/rows.json \
      --cell=mdlm=/tmp/a/synthetic/mdlm,/tmp/b/synthetic/mdlm --cell=hdlm=/tmp/c/synthetic/hdlm
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np


def join(paths):
  """Rows and per-member validation curves of the pieces, keyed by (lr, seed)."""
  rows, curves, steps = {}, {}, None
  for p in paths:
    with open(os.path.join(p, "cell.json")) as f:
      c = json.load(f)
    s = c["curves"]["val_step"]
    if steps is not None and s != steps:
      raise ValueError(f"{p}: validation steps {s} differ from the first piece's {steps}")
    steps = s
    vb = np.asarray(c["curves"]["val_bpb"], float)    # points x members, member order = rows
    for i, r in enumerate(c["rows"]):
      k = (float(r["lr"]), int(r["seed"]))
      if k in rows:
        raise ValueError(f"{p}: member lr={k[0]:g} seed={k[1]} is in two pieces")
      rows[k], curves[k] = r, vb[:, i]
  return rows, curves, steps


def summarize(paths, bigram):
  rows, curves, steps = join(paths)
  lrs = sorted({k[0] for k in rows})
  seeds = sorted({k[1] for k in rows})
  missing = [(lr, s) for lr in lrs for s in seeds if (lr, s) not in rows]
  if missing:
    raise ValueError(f"members missing from the grid: {missing}")
  val = {lr: float(np.mean([rows[(lr, s)]["val_bpb"] for s in seeds])) for lr in lrs}
  best = min(val, key=val.get)
  test = np.array([rows[(best, s)]["test_bpb"] for s in seeds])
  cv = np.array([curves[(best, s)] for s in seeds])    # seeds x points
  P = len(steps)
  q = P - 1 - P // 4                                   # the point a quarter before the end
  e = P - 1 - max(1, P // 8)                           # ... an eighth before (8 points: the last but one)
  quarter, eighth = cv[:, q] - cv[:, -1], cv[:, e] - cv[:, -1]
  return {"lrs": lrs, "seeds": seeds, "val_by_lr": [val[lr] for lr in lrs], "best_lr": best,
          # one LR is a carried-over choice, not a tuned one: no edge to sit on
          "tuned": len(lrs) > 1, "edge": len(lrs) > 1 and best in (lrs[0], lrs[-1]),
          "test_bpb": float(test.mean()),
          "test_std": float(test.std()), "test_by_seed": test.tolist(),
          "mc_se": float(np.mean([rows[(best, s)]["test_mc_se"] for s in seeds])),
          "val_step": steps, "val_curve": cv.mean(0).tolist(),
          "val_curve_by_seed": cv.tolist(), "quarter_from_step": steps[q],
          "quarter_drop": float(quarter.mean()), "quarter_drop_by_seed": quarter.tolist(),
          "eighth_from_step": steps[e],
          "eighth_drop": float(eighth.mean()), "eighth_drop_by_seed": eighth.tolist(),
          "under_bigram": float(bigram - test.mean()), "pieces": list(paths)}


def _bigram(cell_path):
  """The add-k bigram of the cell's own corpus (a cell lives in WORKDIR/CORPUS/MODEL; the
  trivial rows are in WORKDIR/study_rows.json): Shakespeare's cells get Shakespeare's."""
  corpus_dir = os.path.dirname(os.path.normpath(cell_path))
  corpus = os.path.basename(corpus_dir)
  with open(os.path.join(os.path.dirname(corpus_dir), "study_rows.json")) as f:
    trivial = json.load(f)["trivial"]
  if corpus not in trivial:
    raise ValueError(f"{cell_path}: no trivial rows for corpus {corpus!r} (has {sorted(trivial)})")
  return trivial[corpus]["bigram"]


def gaps(summaries):
  """Every pair a - b (the names in the order given): the difference of the 3-seed test
  means, 2 s.e. of it (the per-seed MC s.e. / sqrt n and the seed std / sqrt n of both,
  combined), the larger last-quarter drop, and whether the gap is concluded (beyond both)."""
  out, names = {}, list(summaries)
  for i, a in enumerate(names):
    for b in names[i + 1:]:
      A, B = summaries[a], summaries[b]
      n_a, n_b = len(A["seeds"]), len(B["seeds"])
      d = A["test_bpb"] - B["test_bpb"]
      two_se = 2 * float(np.sqrt(A["mc_se"] ** 2 / n_a + B["mc_se"] ** 2 / n_b
                                 + A["test_std"] ** 2 / n_a + B["test_std"] ** 2 / n_b))
      qd = max(A["quarter_drop"], B["quarter_drop"])
      per_seed = ([x - y for x, y in zip(A["test_by_seed"], B["test_by_seed"])]
                  if A["seeds"] == B["seeds"] else [])
      out[f"{a}-{b}"] = {"diff": d, "two_se": two_se, "max_quarter_drop": qd,
                         "concluded": bool(abs(d) > two_se and abs(d) > qd),
                         "per_seed": per_seed}
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--cell", action="append", required=True,
                  help="model=cell_dir[,cell_dir...] (repeat for each model)")
  ap.add_argument("--out", default="", help="write the summaries here (JSON)")
  a = ap.parse_args(argv)
  out = {}
  for spec in a.cell:
    name, paths = spec.split("=", 1)
    paths = paths.split(",")
    r = out[name] = summarize(paths, _bigram(paths[0]))
    print(f"{name:12s} val by LR " + "/".join(f"{v:.3f}" for v in r["val_by_lr"])
          + " (" + "/".join(f"{x:g}" for x in r["lrs"]) + f") -> {r['best_lr']:g}"
          + (" (EDGE)" if r["edge"] else "") + ("" if r["tuned"] else " (one LR: not tuned)")
          + f": test {r['test_bpb']:.3f} +- {r['test_std']:.3f} (MC s.e. {r['mc_se']:.3f},"
          f" {len(r['seeds'])} seeds), {r['under_bigram']:.3f} under the bigram")
    print(f"{'':12s} val curve {r['val_step'][0]}..{r['val_step'][-1]}: "
          + " ".join(f"{v:.3f}" for v in r["val_curve"])
          + f"; drop from step {r['quarter_from_step']}: {r['quarter_drop']:.3f} (seeds "
          + "/".join(f"{v:.3f}" for v in r["quarter_drop_by_seed"])
          + f"), from step {r['eighth_from_step']}: {r['eighth_drop']:.3f} (seeds "
          + "/".join(f"{v:.3f}" for v in r["eighth_drop_by_seed"]) + ")", flush=True)
  if len(out) > 1:
    out["gaps"] = gaps({k: v for k, v in out.items()})
    for k, g in out["gaps"].items():
      print(f"{k:25s} {g['diff']:+.4f} (2 s.e. {g['two_se']:.4f}, larger last-quarter drop "
            f"{g['max_quarter_drop']:.4f}): {'concluded' if g['concluded'] else 'level'}"
            + ("; seeds " + "/".join(f"{v:+.3f}" for v in g["per_seed"]) if g["per_seed"] else ""))
  if a.out:
    with open(a.out, "w") as f:
      json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()
