"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- classical baselines.

The shallow unsupervised detectors of the comparison, with library defaults as in ADBench:
Isolation Forest, LOF and One-class SVM from scikit-learn, KNN (distance to the k-th
nearest training point, Ramaswamy et al. 2000) with scikit-learn's NearestNeighbors, and
from PyOD (3.6.7): ECOD, COPOD, HBOS, PCA (sum of weighted projections on the minor
components), CBLOF and LODA; `available()` drops the PyOD ones if PyOD is absent; and
PCA reconstruction error (`pca_recon`: squared residual of the test row after projecting
onto the top-k principal directions of the training rows), the linear autoencoder with a
k-dimensional code that a deep AE must at least match; and the task's trivial detector
(`mean_dist`: squared distance of the test row to the mean of the training rows, i.e.
PCA reconstruction with k = 0). All are fit on the (unlabeled,
contaminated) training split and score the test split; higher = more anomalous. Columns
that are constant or collinear on the training rows are dropped first
(`datasets.independent_columns`).
"""
from __future__ import annotations

import numpy as np
from sklearn import ensemble, neighbors, svm

from jaxpapers.papers.lpr import datasets as data_lib

NAMES = ("iforest", "lof", "ocsvm", "knn", "ecod", "copod", "hbos", "pca", "cblof", "loda",
         "pca_recon", "mean_dist")
PYOD = ("ecod", "copod", "hbos", "pca", "cblof", "loda")


def _knn(x_tr, x_te, k=5):
  nn = neighbors.NearestNeighbors(n_neighbors=k).fit(x_tr)
  return nn.kneighbors(x_te)[0][:, -1]


def pca_recon(x_tr: np.ndarray, x_te: np.ndarray, k: int = 8) -> np.ndarray:
  """Squared reconstruction error of the test rows from the top-k training PCs."""
  mu = x_tr.mean(0)
  _, _, vt = np.linalg.svd(x_tr - mu, full_matrices=False)
  # At most d - 1 components: with k >= rank the residual is floating-point round-off
  # (~1e-32 |z|^2), whose ranking is a norm detector in disguise, not a reconstruction.
  v = vt[:max(0, min(k, x_tr.shape[1] - 1, vt.shape[0] - 1))].T
  z = x_te - mu
  return np.sum(np.square(z - (z @ v) @ v.T), axis=1)


def score(name: str, x_tr: np.ndarray, x_te: np.ndarray, seed: int = 0,
          keep: np.ndarray | None = None, pca_k: int = 8,
          pca_frac: float = 0.0) -> np.ndarray:
  """Test-split anomaly scores of one classical detector.

  `keep` (a column mask, default `datasets.independent_columns(x_tr)`) drops columns
  that are constant or collinear on the training rows: they carry no information and
  give PCA zero eigenvalues, which PyOD's PCA divides by (optdigits, ODDS cardio).
  `pca_frac` > 0 sets pca_recon's k to round(pca_frac * kept columns), at least 1.
  """
  keep = data_lib.independent_columns(x_tr) if keep is None else keep
  x_tr, x_te = x_tr[:, keep], x_te[:, keep]
  if name == "pca_recon":
    if pca_frac > 0:  # k relative to the (kept) width: round(frac * d), at least 1
      pca_k = max(1, int(np.floor(pca_frac * x_tr.shape[1] + 0.5)))
    return pca_recon(np.asarray(x_tr, np.float64), np.asarray(x_te, np.float64), pca_k)
  if name == "mean_dist":  # the trivial detector: sum_j (x_j - mean_j)^2
    return np.sum(np.square(np.asarray(x_te, np.float64) - np.mean(x_tr, 0, np.float64)), 1)
  if name == "iforest":  # random: seeded by `seed`
    m = ensemble.IsolationForest(n_estimators=100, random_state=seed).fit(x_tr)
    return -m.score_samples(x_te)
  if name == "lof":
    m = neighbors.LocalOutlierFactor(n_neighbors=20, novelty=True).fit(x_tr)
    return -m.score_samples(x_te)
  if name == "ocsvm":
    m = svm.OneClassSVM(kernel="rbf", gamma="scale", nu=0.5).fit(x_tr)
    return -m.score_samples(x_te)
  if name == "knn":
    return _knn(x_tr, x_te)
  if name in PYOD:
    try:
      from pyod.models import cblof, copod, ecod, hbos, loda, pca  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ImportError(f"{name} needs PyOD: pip install pyod==3.6.7") from e
    np.random.seed(seed)  # LODA draws its projections from NumPy's global generator
    m = {"ecod": ecod.ECOD, "copod": copod.COPOD, "hbos": hbos.HBOS, "pca": pca.PCA,
         "cblof": lambda: cblof.CBLOF(random_state=seed),
         "loda": loda.LODA}[name]()
    try:
      return m.fit(x_tr).decision_function(x_te)
    except ValueError as e:
      if name != "cblof" or "cluster separation" not in str(e):
        raise
      return _cblof_all_large(x_tr, x_te, seed)
  raise ValueError(f"unknown classical detector {name!r}; expected one of {NAMES}")


def _cblof_all_large(x_tr, x_te, seed: int, n_clusters: int = 8) -> np.ndarray:
  """CBLOF when PyOD finds no large/small split of its 8 KMeans clusters (neither the
  alpha = 90% mass rule nor the beta = 5 size-ratio rule holds: clusters of near-equal
  size, e.g. one Gaussian blob; PyOD raises "Could not form valid cluster separation").
  Every cluster is then large, and CBLOF's large-cluster score (unweighted) is the
  distance to the row's nearest cluster centre. Printed, so the run log shows it."""
  from sklearn import cluster  # pylint: disable=g-import-not-at-top
  print(f"lpr cblof: no large/small cluster split (PyOD); every cluster counted as large "
        f"(distance to the nearest of {n_clusters} KMeans centres)", flush=True)
  km = cluster.KMeans(n_clusters=n_clusters, random_state=seed, n_init="auto").fit(x_tr)
  return np.min(np.linalg.norm(x_te[:, None, :] - km.cluster_centers_[None], axis=-1), 1)



def available() -> tuple:
  """The classical detectors that can run here (ECOD/COPOD need PyOD)."""
  try:
    import pyod  # pylint: disable=g-import-not-at-top,unused-import
    return NAMES
  except ImportError:
    return tuple(n for n in NAMES if n not in PYOD)
