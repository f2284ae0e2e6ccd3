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


def orthonormal_basis(m) -> np.ndarray:
  """Orthonormal basis (H, c) of the column span of m (H, c), full column rank."""
  q, _ = np.linalg.qr(np.asarray(m, np.float64))
  return q


def complement_projector(basis) -> np.ndarray:
  """I - Q Q^T: removes the span of the orthonormal columns of `basis` (H, c)."""
  q = np.asarray(basis, np.float64)
  return np.eye(q.shape[0]) - q @ q.T


def span_fraction(u, basis) -> float:
  """Mean squared cosine of the r-dimensional subspace u (H, r) with span(basis):
  ||Q^T U||_F^2 / r (c/H for a random subspace and a c-dimensional span)."""
  return float(np.sum((np.asarray(basis).T @ u) ** 2) / u.shape[1])


def mean_pairwise_overlap(bases) -> float:
  pairs = [overlap(bases[i], bases[j]) for i in range(len(bases))
           for j in range(i + 1, len(bases))]
  return float(np.mean(pairs)) if pairs else float("nan")


def adapter_geometry(mats, used, r: int, readout=None) -> dict:
  """Effective rank of each used adapter's A_k and the mean pairwise overlap of their
  top-r output subspaces. mats (K, H, H); used: indices of adapters some primitive
  selects. With `readout` (H, 6), also: how much of each top-r output subspace lies in
  the readout's column span (`readout_frac`; chance 6/H), and the overlap of the top-r
  output subspaces of A_k (I - Q Q^T), i.e. after the readout span is projected out of
  what h @ A_k reaches (`overlap_noreadout`; chance r/(H - 6)): every adapter drives the
  same six muscles through one readout, which alone could make their outputs overlap."""
  used = sorted(set(int(k) for k in used))
  prs, r90, norms, bases = [], [], [], []
  for k in used:
    s = singular_values(mats[k])
    prs.append(participation_ratio(s))
    r90.append(rank_at(s, 0.9))
    norms.append(float(np.sqrt(np.sum(s**2))))
    bases.append(output_subspace(mats[k], r))
  hidden = np.asarray(mats).shape[-1]
  out = {"pr": float(np.mean(prs)) if prs else float("nan"),
         "pr_max": float(np.max(prs)) if prs else float("nan"),
         "rank90": float(np.mean(r90)) if r90 else float("nan"),
         "norm": float(np.mean(norms)) if norms else float("nan"),
         "overlap": mean_pairwise_overlap(bases),
         "overlap_chance": r / hidden, "n_used": len(used), "prs": prs}
  if readout is not None:
    q = orthonormal_basis(readout)
    proj = complement_projector(q)
    out["readout_frac"] = float(np.mean([span_fraction(b, q) for b in bases]))
    out["readout_frac_chance"] = q.shape[1] / hidden
    out["overlap_noreadout"] = mean_pairwise_overlap(
        [output_subspace(np.asarray(mats[k], np.float64) @ proj, r) for k in used])
    out["overlap_noreadout_chance"] = r / (hidden - q.shape[1])
  return out


def matrix_rank_stats(m) -> dict:
  """Participation ratio and rank at 90% energy of one matrix (e.g. a weight change)."""
  s = singular_values(m)
  return {"pr": participation_ratio(s), "rank90": rank_at(s, 0.9),
          "norm": float(np.sqrt(np.sum(s**2)))}


def activity_subspace(h, r: int, proj=None) -> np.ndarray:
  """Top-r principal directions (H, r) of hidden activity h (..., H), centred over
  samples and time (optionally after right-multiplying by a projector)."""
  x = np.asarray(h, np.float64).reshape(-1, np.shape(h)[-1])
  x = x - x.mean(0, keepdims=True)
  if proj is not None:
    x = x @ proj
  _, _, vt = np.linalg.svd(x, full_matrices=False)
  return vt[:r].T


def activity_geometry(hs, r: int, readout=None) -> dict:
  """Task representations: hs (N tasks, ..., H) hidden states while each primitive runs.
  Mean pairwise overlap of the primitives' top-r activity subspaces (chance r/H), the
  activity's participation ratio per primitive (of the centred activity's singular
  values), and, with `readout`, the same overlap with the readout span projected out."""
  hs = np.asarray(hs, np.float64)
  bases = [activity_subspace(hs[i], r) for i in range(hs.shape[0])]
  prs = []
  for i in range(hs.shape[0]):
    x = hs[i].reshape(-1, hs.shape[-1])
    prs.append(participation_ratio(singular_values(x - x.mean(0, keepdims=True))))
  out = {"act_overlap": mean_pairwise_overlap(bases), "act_pr": float(np.mean(prs)),
         "act_overlap_chance": r / hs.shape[-1]}
  if readout is not None:
    proj = complement_projector(orthonormal_basis(readout))
    out["act_overlap_noreadout"] = mean_pairwise_overlap(
        [activity_subspace(hs[i], r, proj) for i in range(hs.shape[0])])
  return out


def random_reference(hidden: int, count: int, r: int, seed: int = 0) -> dict:
  """The same statistics for Gaussian H x H matrices (what 'no structure' looks like)."""
  rng = np.random.default_rng(seed)
  mats = rng.normal(size=(count, hidden, hidden))
  return adapter_geometry(mats, range(count), r)


# ------------------------------------------------- positive control (issue 49, round 3)

def planted_bases(hidden: int, n: int, r: int, shared: float, seed: int = 0) -> list:
  """n orthonormal (H, r) bases built to overlap by a known amount: U_i = sqrt(shared) S
  + sqrt(1 - shared) P_i, with S one r-dimensional subspace common to all and P_i
  private, mutually orthogonal blocks of one random orthonormal basis of R^H. Pairwise
  overlap ||U_i^T U_j||_F^2 / r = shared^2 exactly (0: separate by design; 1: one shared
  subspace). Needs (n + 1) r <= H."""
  if (n + 1) * r > hidden:
    raise ValueError(f"{n} private {r}-dim blocks plus a shared one need H >= "
                     f"{(n + 1) * r}, got {hidden}")
  rng = np.random.default_rng(seed)
  q, _ = np.linalg.qr(rng.normal(size=(hidden, hidden)))
  common = q[:, :r]
  return [np.sqrt(shared) * common + np.sqrt(1 - shared) * q[:, (i + 1) * r:(i + 2) * r]
          for i in range(n)]


def replant(m, basis, seed: int = 0) -> np.ndarray:
  """m (N, H) with its singular values and left singular vectors kept and its top-r
  right singular vectors (the directions activity / h @ A reaches most) replaced by the
  orthonormal columns of `basis` (H, r), the others by a random orthonormal completion:
  the same spectrum, written into a chosen subspace."""
  m = np.asarray(m, np.float64)
  u, s, _ = np.linalg.svd(m, full_matrices=False)
  hidden, r = basis.shape
  rng = np.random.default_rng(seed)
  rest = rng.normal(size=(hidden, hidden - r))
  rest -= basis @ (basis.T @ rest)
  rest, _ = np.linalg.qr(rest)
  v = np.concatenate([basis, rest], 1)[:, :len(s)]
  return (u * s) @ v.T


def separated_control(mats, used, hs, r: int, readout=None, shared: float = 0.0,
                      seed: int = 0) -> dict:
  """Positive control for 'disparate subspaces': a trained model's own adapters (mats
  (K, H, H), the `used` ones) and its primitives' hidden activity (hs (N, ..., H)), each
  rewritten (`replant`) into planted subspaces whose pairwise overlap is shared^2 by
  design (0: separate), then measured with the study's metrics (`adapter_geometry`,
  `activity_geometry`). Keys: the planted value and what the metrics read (only the
  planted value when H < (n + 1) r leaves no room for separate blocks)."""
  used = sorted(set(int(k) for k in used))
  hidden = np.shape(hs)[-1]
  out = {"planted": shared**2}
  if (max(len(used), np.shape(hs)[0]) + 1) * r > hidden:
    return out  # too few units for separate blocks (tiny smoke networks)
  if mats is not None and used:
    bases = planted_bases(hidden, len(used), r, shared, seed)
    planted = np.array(mats, np.float64)
    for i, (k, b) in enumerate(zip(used, bases)):
      planted[k] = replant(planted[k], b, seed + 1 + i)
    g = adapter_geometry(planted, used, r, readout=readout)
    out["overlap"] = g["overlap"]
    if readout is not None:
      out["overlap_noreadout"] = g["overlap_noreadout"]
  hs = np.asarray(hs, np.float64)
  bases = planted_bases(hidden, hs.shape[0], r, shared, seed + 100)
  act = []
  for i in range(hs.shape[0]):
    x = hs[i].reshape(-1, hidden)
    mu = x.mean(0, keepdims=True)
    act.append((replant(x - mu, bases[i], seed + 200 + i) + mu).reshape(hs[i].shape))
  a = activity_geometry(np.stack(act), r, readout=readout)
  out["act_overlap"] = a["act_overlap"]
  if readout is not None:
    out["act_overlap_noreadout"] = a["act_overlap_noreadout"]
  return out
