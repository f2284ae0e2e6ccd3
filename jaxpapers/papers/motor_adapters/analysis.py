"""Motor primitives as adapters of a shared recurrent core (abstract 7): adapter geometry.

An adapter's perturbation of the recurrent dynamics is its connectivity change A_k
(H x H, acting on the hidden state). Its effective rank is read from the singular values
s_i: the participation ratio PR = (sum s_i^2)^2 / sum s_i^4 (1 for a rank-one matrix, n
for n equal singular values) and the number of singular values holding 90% of
sum s_i^2. The subspace an adapter writes into is the span of its top-r left singular
vectors (columns of the output side: A_k acts as h @ A_k, so its image lies in the row
space; we take the right singular vectors of A_k, i.e. the directions of R^H that h @ A_k
reaches). The overlap of two such r-dimensional subspaces U, V is ||U^T V||_F^2 / r
(mean squared cosine of the principal angles: 1 identical, 0 orthogonal, r/H for random
subspaces in expectation).
"""
from __future__ import annotations

import numpy as np


def singular_values(m) -> np.ndarray:
  return np.linalg.svd(np.asarray(m, np.float64), compute_uv=False)


def participation_ratio(s) -> float:
  s2 = np.asarray(s, np.float64) ** 2
  den = np.sum(s2**2)
  return float(np.sum(s2) ** 2 / den) if den > 0 else 0.0


def rank_at(s, energy: float = 0.9) -> int:
  s2 = np.asarray(s, np.float64) ** 2
  if s2.sum() <= 0:
    return 0
  return int(np.searchsorted(np.cumsum(s2) / s2.sum(), energy - 1e-12) + 1)


def output_subspace(m, r: int) -> np.ndarray:
  """Orthonormal basis (H, r) of the directions h @ m reaches most strongly."""
  _, _, vt = np.linalg.svd(np.asarray(m, np.float64))
  return vt[:r].T


def overlap(u, v) -> float:
  r = u.shape[1]
  return float(np.sum((u.T @ v) ** 2) / r)


def adapter_geometry(mats, used, r: int) -> dict:
  """Effective rank of each used adapter's A_k and the mean pairwise overlap of their
  top-r output subspaces. mats (K, H, H); used: indices of adapters some primitive
  selects."""
  used = sorted(set(int(k) for k in used))
  prs, r90, norms, bases = [], [], [], []
  for k in used:
    s = singular_values(mats[k])
    prs.append(participation_ratio(s))
    r90.append(rank_at(s, 0.9))
    norms.append(float(np.sqrt(np.sum(s**2))))
    bases.append(output_subspace(mats[k], r))
  pairs = [overlap(bases[i], bases[j]) for i in range(len(bases))
           for j in range(i + 1, len(bases))]
  hidden = np.asarray(mats).shape[-1]
  return {"pr": float(np.mean(prs)) if prs else float("nan"),
          "pr_max": float(np.max(prs)) if prs else float("nan"),
          "rank90": float(np.mean(r90)) if r90 else float("nan"),
          "norm": float(np.mean(norms)) if norms else float("nan"),
          "overlap": float(np.mean(pairs)) if pairs else float("nan"),
          "overlap_chance": r / hidden, "n_used": len(used), "prs": prs}


def random_reference(hidden: int, count: int, r: int, seed: int = 0) -> dict:
  """The same statistics for Gaussian H x H matrices (what 'no structure' looks like)."""
  rng = np.random.default_rng(seed)
  mats = rng.normal(size=(count, hidden, hidden))
  return adapter_geometry(mats, range(count), r)
