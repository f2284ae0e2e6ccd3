"""Success Visitation Matching (arXiv 2606.23640): the study table's statistics.

Per (task, method): the AUC of the success curve over the reported seeds with a t-based
95% interval, and for every method beside the sparse baseline a paired (by seed) t-test
of the AUC difference. The study makes many such tests (methods x tasks), so their
p-values are Holm-corrected over the whole table (Holm 1979: the family-wise error rate
stays at alpha under any dependence between the tests); a gain is called significant
only when its Holm-adjusted p is below 0.05.

Run on a study's raw curves to rebuild its table (also for the committed results):

  python -m jaxpapers.papers.visitation_reward.stats jaxpapers/papers/visitation_reward/results/study_a_curves.json

(several files: one table and one Holm family over all their tests). With `--merge`, the
files are pieces of one study (e.g. its methods run as separate invocations on the same
seeds: a lane's numbers do not depend on its neighbours, README): a task's methods are
joined across the files (a method in two files must have identical curves and choices,
else it is an error: how a shared sparse baseline is checked to be the same run) and the sparse baseline of
whichever file has it is every method's paired reference.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from jaxpapers.core import study as study_lib

ALPHA = 0.05


def ci95(x):
  """Mean and half-width of a t-based 95% interval over the first axis."""
  from scipy import stats
  x = np.asarray(x, np.float64)
  n = x.shape[0]
  half = stats.t.ppf(0.975, n - 1) * x.std(0, ddof=1) / np.sqrt(n) if n > 1 else np.nan * x[0]
  return x.mean(0), half


def paired_p(d) -> float:
  """Two-sided p of the one-sample t-test of paired differences d against 0.

  Differences that are all exactly 0 (two methods that ran identically, e.g. nothing
  ever succeeds) give p = 1, not scipy's nan: there is no evidence of a difference.
  """
  from scipy import stats
  d = np.asarray(d, np.float64)
  if d.shape[0] < 2 or not np.any(d != 0):
    return 1.0
  if np.all(d == d[0]):  # constant nonzero differences: the t statistic is infinite
    return 0.0
  return float(stats.ttest_1samp(d, 0.0).pvalue)


def holm(p) -> np.ndarray:
  """Holm step-down adjusted p-values, in the input order.

  Sorted ascending, p_(i) is multiplied by (m - i + 1) (i from 1), made monotone by a
  running maximum and capped at 1; a hypothesis is rejected at level alpha iff its
  adjusted p <= alpha.
  """
  p = np.asarray(p, np.float64)
  m = p.shape[0]
  order = np.argsort(p, kind="stable")
  adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
  out = np.empty(m)
  out[order] = adj
  return out


def table_rows(results: dict) -> list[dict]:
  """Table rows from {task: {"curves": {method: (seeds, I+1)}, "chosen_lr", "chosen_scale",
  optionally "eval_curves"}} (index 0 of a curve is the initial policy)."""
  rows = []
  for name, res in results.items():
    curves = {m: np.asarray(c, np.float64) for m, c in res["curves"].items()}
    evals = {m: np.asarray(c, np.float64) for m, c in res.get("eval_curves", {}).items()}
    base = curves.get("sparse")
    for meth, c in curves.items():
      auc = c[:, 1:].mean(1)
      mean, half = ci95(auc)
      row = {"task": name, "method": meth, "lr": f"{res['chosen_lr'][meth]:g}",
             "dense scale": f"{res['chosen_scale'][meth]:g}", "seeds": c.shape[0],
             "initial success": float(c[:, 0].mean()), "AUC success": float(mean),
             "AUC 95% CI": f"+-{half:.3f}", "final success": float(c[:, -1].mean())}
      if meth in evals:
        e = evals[meth]
        row["initial eval success"] = float(e[:, 0].mean())
        row["eval AUC"] = float(e[:, 1:].mean())
        row["final eval success"] = float(e[:, -1].mean())
      if base is not None and meth != "sparse":
        d = auc - base[:, 1:].mean(1)  # paired by seed
        d_mean, d_half = ci95(d)
        row["AUC - sparse (paired)"] = f"{d_mean:+.3f} +- {d_half:.3f}"
        row["p"] = paired_p(d)
      rows.append(row)
  tested = [r for r in rows if "p" in r]
  for r, a in zip(tested, holm([r["p"] for r in tested])):
    r["Holm p"] = float(a)
    r["significant (Holm)"] = "yes" if a <= ALPHA else "no"
  return rows


COLUMNS = ["task", "method", "lr", "dense scale", "seeds", "initial success", "AUC success",
           "AUC 95% CI", "AUC - sparse (paired)", "p", "Holm p", "significant (Holm)",
           "final success", "initial eval success", "eval AUC", "final eval success"]


def markdown(rows: list[dict]) -> str:
  """The rows as core.study's markdown table, p-values in 3 significant digits."""
  cols = [c for c in COLUMNS if any(c in r for r in rows)]
  shown = [{k: (f"{v:.3g}" if k in ("p", "Holm p") else v) for k, v in r.items()}
           for r in rows]
  return study_lib.markdown_table(shown, cols).rstrip("\n")


def merge(pieces: list[dict]) -> dict:
  """{task: result} pieces of one study joined per task (methods, choices, val AUCs)."""
  out = {}
  for piece in pieces:
    for task, res in piece.items():
      tgt = out.setdefault(task, {"chosen_lr": {}, "chosen_scale": {}, "val_auc": {},
                                  "curves": {}, "eval_curves": {}})
      for m in res["curves"]:
        if m in tgt["curves"] and not (
            np.array_equal(np.asarray(tgt["curves"][m]), np.asarray(res["curves"][m]))
            and tgt["chosen_lr"][m] == res["chosen_lr"][m]
            and tgt["chosen_scale"][m] == res["chosen_scale"][m]):
          raise ValueError(f"{task}: method {m!r} differs between two pieces")
      for k in ("chosen_lr", "chosen_scale", "val_auc", "curves", "eval_curves"):
        tgt[k].update(res.get(k, {}))
      for k, v in res.items():
        tgt.setdefault(k, v)
  for task, res in out.items():  # sparse first, as in a study's own table
    for k in ("curves", "eval_curves"):
      res[k] = dict(sorted(res[k].items(), key=lambda kv: kv[0] != "sparse"))
  return out


def main(argv):
  """One table, one Holm family, over every paired test in the given curves files (with
  several files each task name is tagged with its file's name)."""
  if not argv:
    print("usage: python -m jaxpapers.papers.visitation_reward.stats <curves.json> [...]",
          file=sys.stderr)
    return 2
  merging = "--merge" in argv
  argv = [a for a in argv if a != "--merge"]
  results, pieces = {}, []
  for path in argv:
    try:
      with open(path) as f:
        res = json.load(f)
    except (OSError, ValueError) as e:
      print(f"cannot read study curves {path}: {e}", file=sys.stderr)
      return 1
    if merging:
      pieces.append(res)
      continue
    tag = os.path.basename(path).removesuffix(".json").removesuffix("_curves")
    results.update({(f"{k} [{tag}]" if len(argv) > 1 else k): v for k, v in res.items()})
  if merging:
    try:
      results = merge(pieces)
    except ValueError as e:
      print(f"cannot merge: {e}", file=sys.stderr)
      return 1
  print(markdown(table_rows(results)))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
