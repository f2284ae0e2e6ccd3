"""LPR: Layer Precision Reduction for AE anomaly detection -- diagnosis of the AE baseline.

Issue 15: the AE scored far below ADBench-level detectors. Runs the AE (no LPR) on the
10 real sets, 3 seeds, under the candidate explanations (code ReLU vs linear code,
400 vs 2000 steps, z-score vs min-max scaling) and writes the rows to a JSON file:

  python -m jaxpapers.papers.lpr.ae_diagnosis /tmp/ae_diag.json
"""
import json
import sys
import time

import numpy as np
from jaxpapers.papers.lpr import datasets as D
from jaxpapers.papers.lpr import detectors as det

SETS = ("wbc", "wine", "optdigits", "breastw", "pima", "ionosphere", "glass",
        "satellite", "satimage2", "shuttle")
variants = [  # name, scaling, code_relu, steps, latent
    ("base: zscore, relu code, 400", "zscore", True, 400, 8),
    ("linear code, 400", "zscore", False, 400, 8),
    ("relu code, 2000", "zscore", True, 2000, 8),
    ("linear code, 2000", "zscore", False, 2000, 8),
    ("minmax, relu code, 400", "minmax", True, 400, 8),
    ("minmax, linear code, 2000", "minmax", False, 2000, 8),
]


def main(path: str) -> list:
  rows = []
  for name, scaling, relu, steps, latent in variants:
    t0 = time.time()
    data = [D.load(s, seed=0, scaling=scaling) for s in SETS]
    cfg = det.DetectorConfig(kind="ae", steps=steps, latent=latent, code_relu=relu)
    st = det.pad_stack(data)
    ds, sd = np.repeat(np.arange(len(SETS)), 3), np.tile(np.arange(3), len(SETS))
    out = det.fit(cfg, st, ds, sd, np.zeros(len(ds)))
    auc = np.asarray(out["auroc"]).reshape(len(SETS), 3).mean(1) * 100
    row = {"variant": name, **{s: round(float(a), 1) for s, a in zip(SETS, auc)},
           "mean": round(float(auc.mean()), 1), "sec": round(time.time() - t0)}
    print(row, flush=True)
    rows.append(row)
  with open(path, "w") as f:
    json.dump(rows, f, indent=1)
  return rows


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else "ae_diag.json")
