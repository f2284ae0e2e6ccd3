"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- study tables.

Turns per-run AUROCs into the paper's comparison: a dataset x detector AUROC table with
the average row, and a claims table checking the abstract's three statements against our
numbers (LPR improves every deep model; the best unsupervised AE with LPR beats the best
unsupervised non-AE detector; gains are largest on collective = clustered anomalies).
"""
from __future__ import annotations

import numpy as np

from jaxpapers.papers.lpr import detectors

PAPER = {"best_ae_before": 72.12, "best_ae_lpr": 83.06, "best_non_ae": 77.36}
# A claim over sets checked on fewer than two sets: no spread over sets, no s.e.
NOT_MEASURED = "not measured (fewer than 2 sets: no spread over sets)"


def column_names(kinds, classical_names):
  cols = []
  for k in kinds:
    cols += [k, k + "+lpr"]
  return cols + list(classical_names)


def auroc_table(results: dict, datasets: list[str], columns: list[str]) -> list[dict]:
  """results[column][dataset] = list of per-seed AUROCs -> rows of seed means (in %)."""
  rows = []
  for ds in datasets:
    row = {"dataset": ds}
    for c in columns:
      row[c] = 100 * float(np.mean(results[c][ds]))
    rows.append(row)
  avg = {"dataset": "**average**"}
  for c in columns:
    avg[c] = float(np.mean([r[c] for r in rows]))
  return rows + [avg]


def _sd(a) -> float:
  a = np.asarray(a, np.float64)
  return float(a.std(ddof=1)) if a.size > 1 else 0.0


def paired_gains(results: dict, datasets: list[str], kinds) -> list[dict]:
  """LPR - no LPR per dataset, paired by seed (same key, same split): mean +- s.d. over seeds.

  The last row averages the gain over datasets within each seed and gives the mean and
  the s.d. of that average over seeds.
  """
  rows = []
  per_seed = {k: [] for k in kinds}
  for ds in datasets:
    row = {"dataset": ds}
    for k in kinds:
      g = 100 * (np.asarray(results[k + "+lpr"][ds]) - np.asarray(results[k][ds]))
      per_seed[k].append(g)
      row[k] = f"{g.mean():+.2f} +- {_sd(g):.2f}"
    rows.append(row)
  avg = {"dataset": "**average** (s.d. over seeds)"}
  for k in kinds:
    m = np.mean(per_seed[k], axis=0)  # [seeds]: set-averaged gain of each seed
    avg[k] = f"{m.mean():+.2f} +- {_sd(m):.2f}"
  return rows + [avg]


def claims(rows: list[dict], kinds, classical_names, synthetic_sets,
           results: dict | None = None) -> list[dict]:
  """The abstract's claims, each with our measured numbers and whether it holds.

  With `results` (per-seed AUROCs), each gain also gives the s.d. over seeds of its
  dataset average (paired by seed).
  """
  avg = rows[-1]
  by_ds = {r["dataset"]: r for r in rows[:-1]}
  out = []
  for k in kinds:
    per_set = np.array([r[k + "+lpr"] - r[k] for r in rows[:-1]])
    gain = float(per_set.mean())
    # Paired standard error over datasets: is the mean gain distinguishable from 0?
    se = float(per_set.std(ddof=1) / np.sqrt(len(per_set))) if len(per_set) > 1 else 0.0
    seed_txt = ""
    if results is not None:
      g = np.mean([100 * (np.asarray(results[k + "+lpr"][d]) - np.asarray(results[k][d]))
                   for d in by_ds], axis=0)
      seed_txt = f"; s.d. over {g.size} seeds {_sd(g):.2f}"
    out.append({"claim": f"LPR improves {k}",
                "measured": f"{avg[k]:.2f} -> {avg[k + '+lpr']:.2f} ({gain:+.2f} +- {se:.2f} "
                            f"s.e. over sets{seed_txt}; better on "
                            f"{int((per_set > 0).sum())}/{len(per_set)} sets)",
                "paper": "improves all 10 deep models",
                "holds": (NOT_MEASURED if len(per_set) < 2 else "no" if gain <= 0
                          else "yes" if gain > 2 * se
                          else "not significant (gain < 2 s.e.)")})
  ae = [k for k in kinds if k in detectors.AE_KINDS]
  non_ae = [k for k in kinds if detectors.SUPERVISION[k] == "unsup" and k not in ae]
  if ae:
    cands = [c for k in non_ae for c in (k, k + "+lpr")] + list(classical_names)
    if cands:
      out.append(best_ae_claim(rows, ae, cands))
  present = [s for s in synthetic_sets if s in by_ds]
  if present and ae:
    gain = {s: float(np.mean([by_ds[s][k + "+lpr"] - by_ds[s][k] for k in ae]))
            for s in present}
    real = [r for d, r in by_ds.items() if d not in synthetic_sets]
    real_gain = (float(np.mean([r[k + "+lpr"] - r[k] for r in real for k in ae]))
                 if real else float("nan"))
    # Clustered against every other anomaly type present and the real sets' mean; with
    # nothing to compare (no clustered set, or clustered alone): not measured.
    others = [g for s, g in gain.items() if s != "clustered"] + ([real_gain] if real else [])
    out.append({
        "claim": "LPR gain of AE models largest on collective (clustered) anomalies",
        "measured": ", ".join(f"{s} {g:+.2f}" for s, g in gain.items())
                    + (f"; real sets {real_gain:+.2f}" if real else "; no real set"),
        "paper": "largest on collective anomalies",
        "holds": ("not measured (no clustered set or nothing to compare it with)"
                  if "clustered" not in gain or not others
                  else "yes" if gain["clustered"] > max(others) else "no")})
  return out


def _paired(rows: list[dict], a: str, b: str) -> tuple[float, float]:
  """Mean over sets of column a - column b and its paired s.e. over sets."""
  d = np.array([r[a] - r[b] for r in rows])
  return float(d.mean()), (float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0)


def best_ae_claim(rows: list[dict], ae, non_ae_columns) -> dict:
  """The abstract's "LPR lifts the best unsupervised AE above the best non-AE detector".

  It holds only when the lift comes from LPR and exceeds noise: the best AE-family
  column with LPR must beat both the best non-AE column and the best AE-family column
  without LPR, each by more than 2 paired s.e. over sets (differences of the two columns
  set by set). An AE with LPR above the best non-AE while LPR lowered the best AE is "no"
  (the AE was already above it); a positive margin within 2 s.e. is "not significant";
  fewer than 2 sets: not measured.
  """
  avg = rows[-1]
  sets = rows[:-1]
  best_ae = max(ae, key=lambda k: avg[k])
  best_lpr = max(ae, key=lambda k: avg[k + "+lpr"]) + "+lpr"
  best_non = max(non_ae_columns, key=lambda c: avg[c])
  over_ae, se_ae = _paired(sets, best_lpr, best_ae)
  over_non, se_non = _paired(sets, best_lpr, best_non)
  if len(sets) < 2:
    holds = NOT_MEASURED
  elif over_ae <= 0 or over_non <= 0:
    holds = "no"
  elif over_ae > 2 * se_ae and over_non > 2 * se_non:
    holds = "yes"
  else:
    holds = "not significant (margin < 2 paired s.e.)"
  return {
      "claim": "best unsup. AE with LPR > best unsup. non-AE (lift from LPR)",
      "measured": (f"best AE {best_ae} {avg[best_ae]:.2f} -> {best_lpr} {avg[best_lpr]:.2f} "
                   f"({over_ae:+.2f} +- {se_ae:.2f} paired s.e.); best non-AE {best_non} "
                   f"{avg[best_non]:.2f} ({best_lpr} {over_non:+.2f} +- {se_non:.2f})"),
      "paper": (f"{PAPER['best_ae_before']} -> {PAPER['best_ae_lpr']} vs "
                f"{PAPER['best_non_ae']}"),
      "holds": holds}


def auroc_se(a, n_pos: int, n_neg: int) -> float:
  """Hanley & McNeil (1982) standard error of an AUROC a from n_pos/n_neg test rows."""
  q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
  var = (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a))
  return float(np.sqrt(max(var, 0.0) / max(n_pos * n_neg, 1)))


def versus_linear(results: dict, datasets: list[str], counts: dict, kinds,
                  ref: str = "pca_recon") -> list[dict]:
  """Each AE-family detector (no LPR) minus PCA reconstruction, per set, with its noise.

  The test-split noise of a difference of two AUROCs on the same rows is taken as
  sqrt(se_1^2 + se_2^2) with Hanley-McNeil standard errors (`counts[ds]` = (anomalies,
  normals) of the test split): conservative, since it ignores the positive correlation
  of two detectors scored on the same rows. A set is "below" / "above" when the
  difference of the seed-mean AUROCs is beyond 2 of those s.e., else "within noise".
  """
  rows = []
  for ds in datasets:
    n_pos, n_neg = counts[ds]
    b = float(np.mean(results[ref][ds]))
    row = {"dataset": ds, ref: f"{100 * b:.1f}"}
    for k in kinds:
      a = float(np.mean(results[k][ds]))
      se = np.hypot(auroc_se(a, n_pos, n_neg), auroc_se(b, n_pos, n_neg))
      diff = a - b
      word = "below" if diff < -2 * se else "above" if diff > 2 * se else "within noise"
      row[k] = f"{100 * diff:+.1f} +- {100 * se:.1f} ({word})"
    rows.append(row)
  return rows
