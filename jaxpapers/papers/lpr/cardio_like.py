"""LPR: Layer Precision Reduction for AE anomaly detection -- a generated stand-in for cardio.

ODDS cardio (1831 rows x 21 columns, 176 anomalies) is rank 20 of 21, which made PyOD's
PCA divide by a zero eigenvalue ("Input contains infinity", issue 50). The real file is
not on this machine, so this writes a table of cardio's shape with the same defect, in
both real-table layouts the README's command reads:

  python -m jaxpapers.papers.lpr.cardio_like OUT_DIR [seed]
  -> OUT_DIR/cardio_like.mat (ODDS: X [n, d], y [n, 1]) and OUT_DIR/6_cardio_like.npz
     (ADBench: X, y)

Normals lie near a 6-dimensional subspace of 19 columns (plus noise), anomalies are
pushed off it; column 19 duplicates column 3 and column 20 = col0 - 2 col1 + 0.5 col2,
so the centered table has rank 19 of 21.
"""
from __future__ import annotations

import os
import sys

import numpy as np
from scipy import io as sio


def table(seed: int = 0, n: int = 1831, n_anom: int = 176, d: int = 19):
  rng = np.random.default_rng(seed)
  basis = rng.normal(size=(6, d))
  x = rng.normal(size=(n, 6)) @ basis + 0.3 * rng.normal(size=(n, d))
  y = np.zeros(n, np.int64)
  y[:n_anom] = 1
  x[:n_anom] += 1.5 * rng.normal(size=(n_anom, d))  # off the normals' subspace
  return np.c_[x, x[:, 3], x[:, 0] - 2 * x[:, 1] + 0.5 * x[:, 2]], y


def write(out: str, seed: int = 0) -> tuple[str, str]:
  x, y = table(seed)
  os.makedirs(out, exist_ok=True)
  mat, npz = os.path.join(out, "cardio_like.mat"), os.path.join(out, "6_cardio_like.npz")
  sio.savemat(mat, {"X": x, "y": y[:, None].astype(np.float64)})
  np.savez(npz, X=x, y=y)
  return mat, npz


if __name__ == "__main__":
  paths = write(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
  x, _ = table(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
  print(*paths, "rank", np.linalg.matrix_rank(x - x.mean(0)), "of", x.shape[1])
