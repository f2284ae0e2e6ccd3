"""Coupled SAE sweep: selection over the union of several grids run on the same cells.

Each grid member trains independently (the vmapped grid), so rows of the same (cell,
seed) run with different (lr, beta) grids share every common member bit for bit (checked
here) and their union is one larger grid. Per (cell, seed) this keeps the row whose own
selection has the best validation r, flags an edge against the union grid, and writes
the rows and `sweep.table` / `sweep.maps_table` of them (with `--full`, the prediction
calls bounded by the reduction's measured bias, `sweep.reduction_bias`):

  python -m jaxpapers.papers.coupled_sae.sweep_union --out=/tmp/union \
      results/sweep_rows.jsonl results/sweep_ext_rows.jsonl results/sweep_review_rows.jsonl
"""
from __future__ import annotations

import argparse
import json

from jaxpapers.papers.coupled_sae import sweep


def union(rows) -> list:
  by = {}
  for r in rows:
    by.setdefault((r["generator"], r["dense_frac"], r["n_planted"], r["seed"]), []).append(r)
  out = []
  for key, rs in sorted(by.items()):
    grid = {}
    for r in rs:
      for m in r["grid"]:
        k = (round(m["lr"], 7), m["beta"])
        if k in grid and (grid[k]["val_r"], grid[k]["pct_dense"]) != (m["val_r"], m["pct_dense"]):
          raise ValueError(f"{key}: member {k} differs between runs; not one grid")
        grid[k] = m
      if r["pct_dense_two_stage"] != rs[0]["pct_dense_two_stage"]:
        raise ValueError(f"{key}: the runs' two-stage numbers differ; not the same cell")
    picked = lambda r: grid[(round(r["coupled_lr"], 7), r["coupled_beta"])]["val_r"]  # noqa: E731
    best = dict(max(rs, key=picked))
    lrs, betas = sorted({k[0] for k in grid}), sorted({k[1] for k in grid})
    best["grid"] = sorted(grid.values(), key=lambda m: (m["lr"], m["beta"]))
    best["edge_coupled"] = not (lrs[0] < round(best["coupled_lr"], 7) < lrs[-1]
                                and betas[0] < best["coupled_beta"] < betas[-1])
    best["union_of"] = len(rs)
    out.append(best)
  return out


def check(rows, checks) -> list:
  """Rows with the edge flags (coupled (lr, beta), and PCA k where a check reran the
  base k) judged over each row's grid plus its checks' grids (see the module doc);
  `checked_by` counts the checks of a row."""
  key = lambda r: (r["generator"], r["dense_frac"], r["n_planted"], r["seed"])  # noqa: E731
  pk = lambda lr, beta: (round(lr, 7), beta)  # noqa: E731
  out = {key(r): dict(r) for r in rows}
  for c in checks:
    if key(c) not in out:
      raise ValueError(f"check {key(c)}: no base row of this (cell, seed)")
    r = out[key(c)]
    base, got = pk(r["coupled_lr"], r["coupled_beta"]), pk(c["coupled_lr"], c["coupled_beta"])
    if base not in {pk(m["lr"], m["beta"]) for m in c["grid"]}:
      raise ValueError(f"check {key(c)}: its grid lacks the base pick {base}")
    if got != base:
      raise ValueError(f"check {key(c)}: the pick moved from {base} to {got}; "
                       "rerun the cell with one grid")
    keys = {pk(m["lr"], m["beta"]) for m in r["grid"]} | {pk(m["lr"], m["beta"])
                                                          for m in c["grid"]}
    lrs, betas = sorted({k[0] for k in keys}), sorted({k[1] for k in keys})
    r["edge_coupled"] = not (lrs[0] < base[0] < lrs[-1] and betas[0] < base[1] < betas[-1])
    # PCA k likewise, where the check's k grid holds the base pick: PCA -> ridge is a
    # host-side fit, so the shared k must be equal, and it must be picked again.
    ck = {g["k"]: g for g in c.get("pca_grid", [])}
    if "pca_k" in r and r["pca_k"] in ck:
      own = {g["k"]: g for g in r.get("pca_grid", [])}
      if r["pca_k"] in own and own[r["pca_k"]]["val_r"] != ck[r["pca_k"]]["val_r"]:
        raise ValueError(f"check {key(c)}: PCA k={r['pca_k']} differs from the base row")
      if c["pca_k"] != r["pca_k"]:
        raise ValueError(f"check {key(c)}: the PCA k pick moved from {r['pca_k']} to "
                         f"{c['pca_k']}; rerun the cell with one k grid")
      ks = sorted(set(own) | set(ck))
      r["edge_pca_k"] = not ks[0] < r["pca_k"] < ks[-1]
    r["checked_by"] = r.get("checked_by", 0) + 1
  return [out[k] for k in sorted(out)]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", required=True, help="writes OUT_rows.jsonl and OUT.md")
  ap.add_argument("--full", default="",
                  help="rows (jsonl) of cells run at full size: the prediction calls must "
                       "survive the measured full-minus-reduced gap range (else 'undecided')")
  ap.add_argument("--checks", default="",
                  help="comma-separated rows files (jsonl) of outward-grid pick checks")
  ap.add_argument("rows", nargs="+", help="sweep rows files (jsonl)")
  a = ap.parse_args(argv)
  read = lambda path: [json.loads(line) for line in open(path) if line.strip()]  # noqa: E731
  rows = []
  for path in a.rows:
    rows += read(path)
  got = union(rows)
  checks = [r for path in a.checks.split(",") if path for r in read(path)]
  if checks:
    got = check(got, checks)
  with open(a.out + "_rows.jsonl", "w") as f:
    for r in got:
      f.write(json.dumps(r) + "\n")
  shift = sweep.reduction_bias(got, read(a.full)) if a.full else None
  head = (("reduction bias (full - reduced gap, min / max over cells run both ways): " +
           ", ".join(f"{k} {lo:+.1f} / {hi:+.1f}" for k, (lo, hi) in shift.items()) + "\n\n")
          if shift else "")
  md = head + sweep.table(got, shift) + "\n\n" + sweep.maps_table(got)
  with open(a.out + ".md", "w") as f:
    f.write(md + "\n")
  print(md)


if __name__ == "__main__":
  main()
