"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): user data.

Functional data sets come as curves sampled on a common grid: either `.npz` with `x` (P,)
and `f` (n, P), or `.csv` whose first row is the grid and each further row one curve. The
curves are centred (training mean), interpolated linearly onto the quadrature nodes of
[min x, max x] and split 60/20/20 into train / val / test by a fixed permutation. The
target basis is then the empirical Karhunen-Loeve basis (leading eigenfunctions of the
training covariance under the quadrature), which is also the `exact` baseline.
"""
from __future__ import annotations

import os

import numpy as np

from jaxpapers.papers.lie_bases import quadrature, targets


def read_curves(path: str) -> tuple[np.ndarray, np.ndarray]:
  """(x (P,), f (n, P)) from an npz or csv file; one-line errors for bad input."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"functional data file {path!r} not found (npz with x, f or csv "
                            "with the grid as first row; see lie_bases/README.md)")
  if path.endswith(".npz"):
    with np.load(path) as z:
      if "x" not in z or "f" not in z:
        raise ValueError(f"{path}: npz needs arrays 'x' (grid) and 'f' (curves), has "
                         f"{sorted(z.files)}")
      x, f = np.asarray(z["x"], np.float64), np.asarray(z["f"], np.float64)
  elif path.endswith(".csv"):
    table = np.loadtxt(path, delimiter=",", ndmin=2)
    x, f = table[0], table[1:]
  else:
    raise ValueError(f"{path}: unknown format (expected .npz or .csv)")
  if x.ndim != 1 or f.ndim != 2 or f.shape[1] != x.size:
    raise ValueError(f"{path}: curves f {f.shape} do not match grid x {x.shape}")
  if f.shape[0] < 10:
    raise ValueError(f"{path}: need at least 10 curves, got {f.shape[0]}")
  if not (np.all(np.isfinite(x)) and np.all(np.isfinite(f))):
    raise ValueError(f"{path}: non-finite values in x or f")
  if np.any(np.diff(x) <= 0):
    raise ValueError(f"{path}: grid x must be strictly increasing")
  return x, f


def file_problem(path: str, cfg, n: int) -> tuple[targets.Problem, dict]:
  """The empirical-KL target of a user data set at n nodes, and its splits (weighted)."""
  x, f = read_curves(path)
  perm = np.random.default_rng(0).permutation(f.shape[0])
  n_tr, n_va = int(0.6 * f.shape[0]), int(0.2 * f.shape[0])
  parts = {"train": perm[:n_tr], "val": perm[n_tr:n_tr + n_va], "test": perm[n_tr + n_va:]}
  grid = quadrature.make_grid(n, float(x[0]), float(x[-1]))
  mean = f[parts["train"]].mean(0)
  on_nodes = np.stack([np.interp(grid.x[:, 0], x, c - mean) for c in f]) * grid.sqrt_w
  m = min(cfg.m, n_tr)
  splits = {k: on_nodes[v].astype(np.float32) for k, v in parts.items()}
  cov = on_nodes[parts["train"]].T @ on_nodes[parts["train"]] / n_tr
  evals, evecs = np.linalg.eigh(cov)
  evals, evecs = evals[::-1], evecs[:, ::-1]
  ref = grid.sqrt_w[:, None] * quadrature.reference_basis(grid, cfg.reference, m)
  problem = targets.Problem("file", "pca", grid, m, ref, evecs[:, :m], True, evals[:m], cov,
                            float(np.trace(cov)))
  return problem, splits
