"""LPR: Layer Precision Reduction for AE anomaly detection -- tuning the AE against PCA.

Issue 50: the plain AE must at least match its linear special case, the reconstruction
error of a k-component PCA (`classical.pca_recon`). This module tunes the AE's capacity
(hidden widths), bottleneck, training length, learning rate, code activation and input
scaling, and PCA's k, by one **validation rule that never sees a test row**: the training
split of every set is split again, stratified 70/30 (data seed), each candidate is
trained on the 70% and scored by AUROC on the 30% (using the labels of those training
rows only); the candidate with the best validation AUROC averaged over all sets and seeds
is chosen, one setting for all sets (per-set choices would rest on validation sets with
1-3 anomalies). The search is one round of one-factor-at-a-time changes from the
default, then a second round around the first one's choice. Every candidate is also
trained on the full training split and scored on the test split in the same vmapped
program, so the table shows how selection and test agree; the test numbers play no part
in the choice.

  python -m jaxpapers.papers.lpr.ae_tuning /tmp/ae_tuning.json [seeds] [sets] [rounds]
  python -m jaxpapers.papers.lpr.ae_tuning --merge OUT.json ROUND12.json ROUND3.json
  (sets and rounds joined by '+'; an empty sets argument '' means all 14 study sets)
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
from sklearn import metrics

from jaxpapers.papers.lpr import classical
from jaxpapers.papers.lpr import datasets as data_lib
from jaxpapers.papers.lpr import detectors
from jaxpapers.papers.lpr import selection

BASE = dict(hidden=(64, 32), latent=8, steps=400, lr=1e-3, code_relu=True, scaling="zscore",
            code_frac=0.0)
# One factor at a time from BASE.
VARIANTS = [
    {}, {"latent": 2}, {"latent": 4}, {"latent": 16},
    {"hidden": (32,)}, {"hidden": (128, 64)}, {"hidden": (256, 128)},
    {"steps": 100}, {"steps": 1600},
    {"lr": 3e-4}, {"lr": 3e-3}, {"lr": 1e-2},
    {"code_relu": False}, {"scaling": "minmax"},
    # Second round, around the first round's choice (code 16, on its grid's edge) and the
    # runner-up (hidden 32).
    {"latent": 32}, {"latent": 16, "hidden": (32,)}, {"latent": 32, "hidden": (32,)},
    # Third round (issue 50 review): a fixed code of 16 is no bottleneck on the 8-13
    # feature sets (wine, breastw, pima, glass, shuttle), so the code size relative to
    # the input width, round(code_frac * d) units (at least 1, at most 32).
    {"latent": 32, "code_frac": 0.0625}, {"latent": 32, "code_frac": 0.125},
    {"latent": 32, "code_frac": 0.25}, {"latent": 32, "code_frac": 0.5},
    {"latent": 32, "code_frac": 0.75},
]
ROUND = [1] * 14 + [2] * 3 + [3] * 5  # the search round of each entry of VARIANTS
PCA_KS = (1, 2, 4, 8, 16)
# PCA's k relative to the width too: round(frac * d) components, at least 1.
PCA_FRACS = (0.0625, 0.125, 0.25, 0.5)


# (fit, val) views of a set: the training rows split again, stratified; no test row.
validation_split = selection.validation_split


def _label(v: dict) -> str:
  return "default" if not v else ", ".join(f"{k}={val}" for k, val in v.items())


def run_variant(v: dict, sets, seeds, seed: int = 0) -> dict:
  """Validation and test AUROC [n_sets, n_seeds] of one AE setting (no LPR)."""
  p = {**BASE, **v}
  data = [data_lib.load(s, seed=seed, scaling=p["scaling"]) for s in sets]
  vals = [validation_split(d, seed) for d in data]
  cfg = detectors.DetectorConfig(kind="ae", hidden=tuple(p["hidden"]), latent=p["latent"],
                                 steps=p["steps"], lr=p["lr"], code_relu=p["code_relu"],
                                 code_frac=p["code_frac"])
  both = vals + data
  ds, sd = [a.ravel() for a in np.meshgrid(np.arange(len(both)), np.asarray(seeds),
                                           indexing="ij")]
  out = detectors.fit(cfg, detectors.pad_stack(both), ds, sd, np.zeros(len(ds)))
  auc = np.asarray(out["auroc"]).reshape(len(both), len(seeds))
  return {"val": auc[:len(sets)], "test": auc[len(sets):]}


def pca_rows(sets, seed: int = 0) -> list:
  """PCA reconstruction error for each k, validation and test AUROC per set."""
  data = [data_lib.load(s, seed=seed) for s in sets]
  rows = []
  for k, frac in [(k, 0.0) for k in PCA_KS] + [(1, f) for f in PCA_FRACS]:
    label = f"pca_recon k={k}" if not frac else f"pca_recon k=round({frac:g} d)"
    row = {"variant": label, "val": [], "test": []}
    for d in data:
      v = validation_split(d, seed)
      for part, (tr, te) in (("val", (v, v)), ("test", (d, d))):
        s = classical.score("pca_recon", tr.x_train, te.x_test, pca_k=k, pca_frac=frac)
        row[part].append(float(metrics.roc_auc_score(te.y_test, s)))
    rows.append(row)
  return rows


def per_set_selection(rows: list, sets) -> list:
  """Per set: the AE candidate and the PCA k with the best VALIDATION AUROC on that set
  (ties: the earlier row), and their test AUROCs. The per-set version of the rule: each
  set's choice rests on its own 1-50 validation anomalies, so it is noisier than the
  global choice, and it shows whether any AE setting of the grid reaches PCA per set."""
  ae = [r for r in rows if r["variant"].startswith("ae ")]
  pca = [r for r in rows if r["variant"].startswith("pca")]
  out = []
  for j, name in enumerate(sets):
    a = max(ae, key=lambda r: r["val"][j])
    p = max(pca, key=lambda r: r["val"][j])
    out.append({"dataset": name, "ae_choice": a["variant"], "ae_val": a["val"][j],
                "ae_test": a["test"][j], "pca_choice": p["variant"], "pca_val": p["val"][j],
                "pca_test": p["test"][j], "ae_minus_pca_test": a["test"][j] - p["test"][j]})
  return out


def merge(paths: list, out_path: str) -> dict:
  """Joins tuning files of separate rounds (same sets and seeds; later PCA rows win),
  re-applies the global rule to all rows and adds the per-set selection."""
  parts = [json.load(open(p)) for p in paths]
  sets, seeds = parts[0]["sets"], parts[0]["seeds"]
  assert all(p["sets"] == sets and p["seeds"] == seeds for p in parts), "sets/seeds differ"
  ae = [r for p in parts for r in p["rows"] if r["variant"].startswith("ae ")]
  pca = {r["variant"]: r for p in parts for r in p["rows"] if r["variant"].startswith("pca")}
  rows = ae + list(pca.values())
  out = {"sets": sets, "seeds": seeds, "rows": rows,
         "chosen_ae": max(ae, key=lambda r: r["val_mean"])["variant"],
         "chosen_pca": max(pca.values(), key=lambda r: r["val_mean"])["variant"],
         "per_set": per_set_selection(rows, sets)}
  with open(out_path, "w") as f:
    json.dump(out, f, indent=1)
  return out


def main(path: str, seeds: int = 3, sets: tuple = (), rounds: tuple = (1, 2, 3)) -> list:
  from configs import lpr as lpr_config  # pylint: disable=g-import-not-at-top
  sets = tuple(sets) or lpr_config.ALL_SETS
  rows = []
  for v, rnd in zip(VARIANTS, ROUND):
    if rnd not in rounds:
      continue
    t0 = time.time()
    r = run_variant(v, sets, list(range(seeds)))
    row = {"variant": "ae " + _label(v), "val_mean": 100 * float(r["val"].mean()),
           "test_mean": 100 * float(r["test"].mean()),
           "val": (100 * r["val"].mean(1)).round(2).tolist(),
           "test": (100 * r["test"].mean(1)).round(2).tolist(),
           "sec": round(time.time() - t0), "round": rnd}
    print({k: row[k] for k in ("variant", "val_mean", "test_mean", "sec")}, flush=True)
    rows.append(row)
  for r in pca_rows(sets):
    row = {"variant": r["variant"], "val_mean": 100 * float(np.mean(r["val"])),
           "test_mean": 100 * float(np.mean(r["test"])),
           "val": (100 * np.asarray(r["val"])).round(2).tolist(),
           "test": (100 * np.asarray(r["test"])).round(2).tolist(), "sec": 0}
    print({k: row[k] for k in ("variant", "val_mean", "test_mean")}, flush=True)
    rows.append(row)
  best_ae = max((r for r in rows if r["variant"].startswith("ae ")), key=lambda r: r["val_mean"])
  best_pca = max((r for r in rows if r["variant"].startswith("pca")), key=lambda r: r["val_mean"])
  out = {"sets": list(sets), "seeds": seeds, "rounds": list(rounds), "rows": rows,
         "chosen_ae": best_ae["variant"], "chosen_pca": best_pca["variant"],
         "per_set": per_set_selection(rows, sets)}
  print("chosen by validation:", out["chosen_ae"], "|", out["chosen_pca"], flush=True)
  with open(path, "w") as f:
    json.dump(out, f, indent=1)
  return rows


if __name__ == "__main__":
  if sys.argv[1:2] == ["--merge"]:  # --merge OUT.json IN1.json IN2.json ...
    merged = merge(sys.argv[3:], sys.argv[2])
    print("chosen by validation:", merged["chosen_ae"], "|", merged["chosen_pca"])
    for r in merged["per_set"]:
      print(r)
    sys.exit(0)
  main(sys.argv[1] if len(sys.argv) > 1 else "ae_tuning.json",
       int(sys.argv[2]) if len(sys.argv) > 2 else 3,
       tuple(s for s in sys.argv[3].split("+") if s) if len(sys.argv) > 3 else (),
       tuple(int(r) for r in sys.argv[4].split("+")) if len(sys.argv) > 4 else (1, 2, 3))
