"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- model selection.

One best-LR rule for both legs of the study (tiny-model grid and SmolLM2): the LR with the
highest validation exact match (mean over seeds), ties broken by the lower validation
answer-token loss. The test split is never looked at to choose; the peak reported is the
test exact match at the chosen LR, with a 95% bootstrap interval over test problems.
"""
from __future__ import annotations

import numpy as np


def best_lr_index(val_acc_SxR, val_loss_SxR) -> int:
  """Index of the best LR: max mean validation accuracy, ties by mean validation loss.

  Non-finite losses (diverged runs) count as +inf so they never win a tie.
  """
  acc = np.asarray(val_acc_SxR, np.float64).reshape(-1, np.shape(val_acc_SxR)[-1]).mean(0)
  loss = np.asarray(val_loss_SxR, np.float64).reshape(-1, np.shape(val_loss_SxR)[-1])
  loss = np.where(np.isfinite(loss), loss, np.inf).mean(0)
  return int(np.lexsort((loss, -acc))[0])


def bootstrap_ci(correct_SxN, n_boot: int = 2000, level: float = 0.95, seed: int = 0):
  """Percentile bootstrap interval of the mean accuracy, resampling problems.

  `correct_SxN` holds 0/1 per (seed, test problem); the statistic is the mean over seeds
  and problems, and each resample draws N problems with replacement (the same problems
  for every seed, since the seeds are scored on one test set).
  """
  c = np.asarray(correct_SxN, np.float64)
  per_problem = c.reshape(-1, c.shape[-1]).mean(0)
  n = per_problem.shape[0]
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, n, size=(n_boot, n))
  means = per_problem[idx].mean(1)
  lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
  return float(lo), float(hi)


def paired_bootstrap_diff(correct_a_SxN, correct_b_SxN, n_boot: int = 2000,
                          level: float = 0.95, seed: int = 0):
  """Mean accuracy of a minus b with a percentile bootstrap interval, paired.

  Both arrays hold 0/1 per (seed, test problem) for the same seeds and the same test
  problems (two methods at their own chosen LRs). The difference is taken per (seed,
  problem) pair, averaged over seeds per problem, and problems are resampled with
  replacement, so the problem-to-problem difficulty both methods share cancels: the
  interval is that of the difference, not two marginal intervals side by side.
  Returns (mean difference, lo, hi).
  """
  a, b = np.asarray(correct_a_SxN, np.float64), np.asarray(correct_b_SxN, np.float64)
  if a.shape != b.shape:
    raise ValueError(f"paired bootstrap needs the same (seeds, problems), got {a.shape} "
                     f"and {b.shape}")
  d = (a - b).reshape(-1, a.shape[-1]).mean(0)
  n = d.shape[0]
  rng = np.random.default_rng(seed)
  means = d[rng.integers(0, n, size=(n_boot, n))].mean(1)
  lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
  return float(d.mean()), float(lo), float(hi)


def wilson_ci(k: int, n: int, z: float = 1.959964):
  """Wilson score interval of a binomial proportion k / n (one seed, n problems)."""
  if n <= 0:
    raise ValueError(f"wilson_ci needs n > 0 problems, got {n}")
  p = k / n
  den = 1 + z * z / n
  centre = (p + z * z / (2 * n)) / den
  half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
  return float(centre - half), float(centre + half)


def bits(correct_N) -> str:
  """0/1 per problem as a compact string for the raw json ('0110...')."""
  return "".join("1" if c else "0" for c in np.asarray(correct_N).reshape(-1))


def unbits(s: str) -> np.ndarray:
  return np.frombuffer(s.encode(), np.uint8) == ord("1")


def cell_result(method, rank, lrs, seeds, scores, grid, seconds, trainable) -> dict:
  """The raw json of one (method, rank) cell, the same schema for both legs of the study:
  per (seed, LR) validation/test accuracy and loss, per-problem test correctness (bit
  strings), final training loss, and lambda_max per seed."""
  v, t = scores["val"], scores["test"]
  return {"method": method, "rank": int(rank), "lrs": [float(x) for x in lrs],
          "seeds": [int(s) for s in seeds],
          "val_acc": v["acc"].tolist(), "val_loss": v["loss"].tolist(),
          "test_acc": t["acc"].tolist(), "test_loss": t["loss"].tolist(),
          "test_correct": [[bits(c) for c in row] for row in t["correct"]],
          "n_val": int(v["correct"].shape[-1]), "n_test": int(t["correct"].shape[-1]),
          "train_loss_final": np.nan_to_num(grid.losses[:, :, -1], nan=np.inf).tolist(),
          "lambda": [float(x) for x in grid.lam], "seconds": float(seconds),
          "trainable_params": int(trainable)}


def merge_cells(a: dict, b: dict) -> dict:
  """One cell from two runs of the same (method, rank, seeds, splits) on disjoint LR grids
  (a grid extended past its edge in a later call): per-(seed, LR) fields concatenated along
  the LR axis, sorted by LR. Each (LR, seed) run is independent, and lambda_max depends
  only on the seed's init, so both calls must agree on it."""
  for k in ("method", "rank", "seeds", "n_val", "n_test", "trainable_params"):
    if a[k] != b[k]:
      raise ValueError(f"cells differ in {k}: {a[k]!r} vs {b[k]!r}")
  if set(a["lrs"]) & set(b["lrs"]):
    raise ValueError(f"cells share learning rates: {sorted(set(a['lrs']) & set(b['lrs']))}")
  if not np.allclose(a["lambda"], b["lambda"], rtol=1e-4):
    raise ValueError(f"cells disagree on lambda_max per seed: {a['lambda']} vs {b['lambda']}")
  lrs = a["lrs"] + b["lrs"]
  order = np.argsort(lrs)
  out = dict(a)
  out["lrs"] = [lrs[j] for j in order]
  for k in ("val_acc", "val_loss", "test_acc", "test_loss", "test_correct", "train_loss_final"):
    out[k] = [[(ra + rb)[j] for j in order] for ra, rb in zip(a[k], b[k])]
  out["seconds"] = a["seconds"] + b["seconds"]
  return out


def summarize(res: dict) -> dict:
  """One table row from a cell: the LR chosen on validation and the test score there,
  with its 95% bootstrap interval over test problems."""
  lrs = np.asarray(res["lrs"])
  best = best_lr_index(res["val_acc"], res["val_loss"])
  test_acc = np.asarray(res["test_acc"])            # (S, R)
  lo, hi = bootstrap_ci(chosen_correct(res))
  val_loss = np.asarray(res["val_loss"]).mean(0)
  return {"method": res["method"], "rank": res["rank"], "best_lr": float(lrs[best]),
          "val_acc": float(np.mean(np.asarray(res["val_acc"])[:, best])),
          "peak_acc": float(test_acc[:, best].mean()), "ci_lo": lo, "ci_hi": hi,
          "peak_acc_std": float(test_acc[:, best].std()),
          # the chosen LR is the grid's lowest or highest: the optimum may lie outside it
          "best_at_edge": bool(best in (0, len(lrs) - 1)),
          "best_lr_by_val_loss": float(lrs[int(np.argmin(val_loss))]),
          "min_val_loss": float(val_loss.min()),
          "lambda_max": float(np.mean(res["lambda"])),
          "trainable_params": res["trainable_params"], "seconds": res["seconds"],
          "acc_by_lr": " ".join(f"{a:.2f}" for a in test_acc.mean(0))}


def chosen_correct(res: dict) -> np.ndarray:
  """(seeds, test problems) 0/1 at the cell's validation-chosen LR."""
  best = best_lr_index(res["val_acc"], res["val_loss"])
  return np.array([unbits(row[best]) for row in res["test_correct"]])


def paired_vs_lora(rows: list[dict], cells: list[dict]) -> list[dict]:
  """Adds diff_vs_lora, diff_lo, diff_hi (test accuracy minus LoRA's at the same rank,
  each at its own validation-chosen LR; paired bootstrap over seeds x test problems)."""
  by = {(c["method"], c["rank"]): c for c in cells}
  for r in rows:
    ref, own = by.get(("lora", r["rank"])), by.get((r["method"], r["rank"]))
    if ref is None or own is None or ref["seeds"] != own["seeds"]:
      continue   # no LoRA cell at this rank, or seeds that cannot be paired
    d, lo, hi = paired_bootstrap_diff(chosen_correct(own), chosen_correct(ref))
    r["diff_vs_lora"], r["diff_lo"], r["diff_hi"] = d, lo, hi
  return rows


def relative_to_lora(rows: list[dict]) -> list[dict]:
  """Adds lambda_vs_lora, best_lr_vs_lora and params_vs_lora (same rank) to each row."""
  by = {(r["method"], r["rank"]): r for r in rows}
  for r in rows:
    ref = by.get(("lora", r["rank"]))
    if ref:
      r["lambda_vs_lora"] = r["lambda_max"] / ref["lambda_max"]
      r["best_lr_vs_lora"] = r["best_lr"] / ref["best_lr"]
      r["params_vs_lora"] = r["trainable_params"] / ref["trainable_params"]
  return rows


# Columns of the study table (both the study and the rebuild from committed cells).
TABLE_COLUMNS = ["method", "rank", "best_lr", "val_acc", "peak_acc", "ci_lo", "ci_hi",
                 "diff_vs_lora", "diff_lo", "diff_hi", "peak_acc_std", "best_at_edge",
                 "best_lr_by_val_loss", "lambda_max", "lambda_vs_lora", "best_lr_vs_lora",
                 "trainable_params", "params_vs_lora"]


def table_rows(cells: list[dict]) -> list[dict]:
  """The study table's rows from raw cells: selection, ratios to LoRA, paired differences."""
  rows = relative_to_lora([summarize(c) for c in cells])
  return paired_vs_lora(rows, cells)


def by_lr_rows(cells: list[dict]) -> list[dict]:
  """Per (method, rank): "val / test" exact match (mean over seeds) at every LR of the
  union of the cells' grids ('-' where a cell did not run that LR), for the per-LR table."""
  key = lambda x: f"{x:.2g}"
  lrs = sorted({float(x) for c in cells for x in c["lrs"]})
  names = list(dict.fromkeys(key(x) for x in lrs))
  rows = []
  for c in cells:
    row = {"method": c["method"], "rank": c["rank"], **{n: "-" for n in names}}
    val, test = np.mean(c["val_acc"], 0), np.mean(c["test_acc"], 0)
    for j, x in enumerate(c["lrs"]):
      row[key(x)] = f"{val[j]:.3f} / {test[j]:.3f}"
    rows.append(row)
  return rows


if __name__ == "__main__":
  # Rebuilds the tables (and, given an output folder, the plot) from a committed raw-cells
  # json, with no training:
  #   python -m jaxpapers.papers.lora_lr.selection jaxpapers/papers/lora_lr/lora_lr_study_cells.json [OUT]
  import json
  import sys
  from jaxpapers.core import study as study_lib
  with open(sys.argv[1]) as f:
    cells = json.load(f)["cells"]
  rows = table_rows(cells)
  print(study_lib.markdown_table(rows, TABLE_COLUMNS, 4))
  print(study_lib.markdown_table(by_lr_rows(cells), None, 4))
  if len(sys.argv) > 2:
    from jaxpapers.core import config as config_lib  # pylint: disable=g-import-not-at-top
    from jaxpapers.papers.lora_lr import experiment  # pylint: disable=g-import-not-at-top
    import os  # pylint: disable=g-import-not-at-top
    os.makedirs(sys.argv[2], exist_ok=True)
    ranks = sorted({c["rank"] for c in cells})
    config = config_lib.load("configs/lora_lr.py:table_ranks=" + "+".join(map(str, ranks)))
    experiment._plots(sys.argv[2], {(c["method"], c["rank"]): c for c in cells}, rows, config)
