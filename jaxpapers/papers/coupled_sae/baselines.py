"""Multisubject coupled SAE (abstract 1): the voxelwise ridge baselines (himalaya).

- Dense ridge: every subject's voxels from the FIR-delayed LM features, one ridge per
  voxel with its own alpha chosen by cross-validation over whole training stories
  (`himalaya`'s RidgeCV; with more delayed features than TRs its KernelRidgeCV with a
  linear kernel, the same estimator solved in the dual, as himalaya itself recommends).
- PCA -> ridge: the same on the delayed scores of the top-A principal components of the
  training features (A = the SAE's atom count).
- Two-stage SAE -> ridge: the same on the delayed codes of an SAE trained on feature
  reconstruction alone.
BLAS runs single-threaded here: on a loaded two-core machine a multi-threaded SVD is
ten times slower than a single thread.
"""
from __future__ import annotations

import warnings

import numpy as np
from threadpoolctl import threadpool_limits

DEFAULT_ALPHAS = tuple(np.logspace(-1, 6, 15).tolist())


def story_folds(story_lengths, n_folds: int = 4):
  """CV splits that hold out whole stories (contiguous TR blocks), as lists of indices."""
  bounds = np.cumsum([0] + list(story_lengths))
  groups = np.array_split(np.arange(len(story_lengths)), min(n_folds, len(story_lengths)))
  folds = []
  for g in groups:
    val = np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in g])
    train = np.setdiff1d(np.arange(bounds[-1]), val)
    folds.append((train, val))
  return folds


def block_folds(n: int, n_folds: int = 5):
  """Contiguous-block CV splits of n TRs (for the low-data transfer fits)."""
  edges = np.linspace(0, n, n_folds + 1).astype(int)
  return [(np.setdiff1d(np.arange(n), np.arange(a, b)), np.arange(a, b))
          for a, b in zip(edges[:-1], edges[1:]) if b > a]


def ridge_cv(x_TxF: np.ndarray, y_TxV: np.ndarray, folds, alphas=DEFAULT_ALPHAS):
  """(weights (F, V), per-voxel alphas): ridge per voxel, alpha by CV over `folds`.

  Centres x and y (weights apply to centred inputs; the intercept is y's mean).
  """
  from himalaya.kernel_ridge import KernelRidgeCV  # pylint: disable=g-import-not-at-top
  from himalaya.ridge import RidgeCV  # pylint: disable=g-import-not-at-top
  x = np.asarray(x_TxF, np.float64)
  y = np.asarray(y_TxV, np.float64)
  x = x - x.mean(0)
  y = y - y.mean(0)
  alphas = np.asarray(alphas, np.float64)
  with threadpool_limits(1), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    if x.shape[0] < x.shape[1]:
      model = KernelRidgeCV(kernel="linear", alphas=alphas, cv=list(folds)).fit(x, y)
      w = x.T @ np.asarray(model.dual_coef_)
    else:
      model = RidgeCV(alphas=alphas, cv=list(folds)).fit(x, y)
      w = np.asarray(model.coef_)
  return w, np.asarray(model.best_alphas_)


def ridge_closed_form(x_TxF, y_TxV, alpha: float):
  """(X^T X + alpha I)^-1 X^T Y on centred data: the reference for the tests."""
  x = x_TxF - x_TxF.mean(0)
  y = y_TxV - y_TxV.mean(0)
  return np.linalg.solve(x.T @ x + alpha * np.eye(x.shape[1]), x.T @ y)


def predict(w_FxV, x_train_TxF, y_train_TxV, x_TxF):
  return (x_TxF - x_train_TxF.mean(0)) @ w_FxV + y_train_TxV.mean(0)


def pca_fit(x_TxD: np.ndarray, n: int):
  """(mean, components (n, D)) of the training features."""
  mu = x_TxD.mean(0)
  with threadpool_limits(1):
    _, _, vt = np.linalg.svd(x_TxD - mu, full_matrices=False)
  return mu, vt[:n]


def pca_scores(x_TxD, mu, comps):
  return (x_TxD - mu) @ comps.T
