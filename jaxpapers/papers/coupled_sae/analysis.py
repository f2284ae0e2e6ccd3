"""Multisubject coupled SAE (abstract 1): interpretability and map analyses.

- Planted-atom recovery: one-to-one (Hungarian) matching of the planted atoms to a
  model's units, by the correlation of their held-out time courses (and by the cosine of
  the decoder direction with the planted direction); the mean over planted atoms.
- Cross-subject reproducibility: for each unit, the mean correlation of its cortical map
  between every pair of subjects (maps live on the shared template surface).
- Post hoc analysis of dense encoding models (Huth et al. 2016): principal components of
  all subjects' ridge weights (each voxel's delay-summed weight vector is one sample);
  projecting each subject's weights on a component gives that subject's component map.
- Network alignment: the fraction of a map's energy inside its best network of the
  parcellation, minus the same for randomly shifted copies of the map (chance).
- Top text segments: the words heard during the TRs where a unit is most active.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from jaxpapers.papers.coupled_sae import signal


def cross_corr(a_TxK: np.ndarray, b_TxA: np.ndarray) -> np.ndarray:
  """(K, A) correlations between columns (0 for constant columns)."""
  a = a_TxK - a_TxK.mean(0)
  b = b_TxA - b_TxA.mean(0)
  na = np.linalg.norm(a, axis=0)
  nb = np.linalg.norm(b, axis=0)
  c = a.T @ b
  den = np.outer(na, nb)
  return np.where(den > 0, c / np.where(den > 0, den, 1.0), 0.0)


def matched_score(sim_KxA: np.ndarray):
  """Mean similarity of a one-to-one assignment maximizing the total; and the pairs."""
  rows, cols = linear_sum_assignment(-sim_KxA)
  return float(sim_KxA[rows, cols].mean()), cols


def recovery_timecourse(true_codes_TxK, unit_codes_TxA) -> float:
  """Planted-atom recovery from activations (signed correlation: codes are non-negative)."""
  return matched_score(cross_corr(true_codes_TxK, unit_codes_TxA))[0]


def recovery_direction(true_dirs_KxD, unit_dirs_AxD) -> float:
  a = true_dirs_KxD / np.linalg.norm(true_dirs_KxD, axis=1, keepdims=True)
  b = unit_dirs_AxD / (np.linalg.norm(unit_dirs_AxD, axis=1, keepdims=True) + 1e-12)
  return matched_score(np.abs(a @ b.T))[0]


def delay_sum(w_FxV: np.ndarray, n_delays: int) -> np.ndarray:
  """FIR weights (n_delays * A, V) -> (A, V) summed over delays (the unit's map)."""
  return w_FxV.reshape(n_delays, -1, w_FxV.shape[-1]).sum(0)


def reproducibility(maps_SxAxV: np.ndarray, units=None) -> float:
  """Mean over units of the mean pairwise between-subject correlation of their maps."""
  S, A, _ = maps_SxAxV.shape
  units = range(A) if units is None else units
  vals = []
  for a in units:
    m = maps_SxAxV[:, a]
    c = np.corrcoef(m)
    if not np.all(np.isfinite(c)):
      vals.append(0.0)
      continue
    vals.append(float(c[np.triu_indices(S, 1)].mean()))
  return float(np.mean(vals)) if vals else float("nan")


def top_units(maps_SxAxV: np.ndarray, n: int) -> np.ndarray:
  """The n units with the largest map energy (mean over subjects)."""
  energy = (maps_SxAxV ** 2).sum(-1).mean(0)
  return np.argsort(-energy)[:n]


def posthoc_pca_maps(weights_SxFxV, n_delays: int, n_comp: int):
  """Group PCs of the delay-summed ridge weights and each subject's (n_comp, V) PC maps."""
  w = np.stack([delay_sum(ws, n_delays) for ws in weights_SxFxV])     # (S, D, V)
  samples = np.concatenate([ws.T for ws in w])                          # (S*V, D)
  samples = samples - samples.mean(0)
  _, _, vt = np.linalg.svd(samples, full_matrices=False)
  pcs = vt[:n_comp]                                                     # (n, D)
  return pcs, np.einsum("nd,sdv->snv", pcs, w)


def network_purity(map_V: np.ndarray, labels_V: np.ndarray, n_networks: int) -> float:
  e = map_V ** 2
  tot = e.sum()
  if tot <= 0:
    return 0.0
  return float(max(e[labels_V == n].sum() for n in range(n_networks)) / tot)


def network_alignment(maps_AxV: np.ndarray, surface, n_networks: int, rng,
                      n_null: int = 20) -> float:
  """Mean over maps of (purity - mean purity of randomly circularly shifted maps)."""
  out = []
  for m in maps_AxV:
    p = network_purity(m, surface.labels, n_networks)
    g = surface.grid(m)
    null = []
    for _ in range(n_null):
      dr, dc = rng.integers(0, surface.rows), rng.integers(0, surface.cols)
      null.append(network_purity(np.roll(g, (dr, dc), axis=(1, 2)).ravel(), surface.labels,
                                 n_networks))
    out.append(p - np.mean(null))
  return float(np.mean(out))


def top_segments(codes_TxA, words_per_tr, units, n_top: int = 3, span: int = 3):
  """{unit: [text of the `span` TRs ending at each of its n_top most active TRs]}."""
  out = {}
  for a in units:
    order = np.argsort(-codes_TxA[:, a])[:n_top]
    segs = []
    for t in order:
      if codes_TxA[t, a] <= 0:
        break
      segs.append(" ".join(w for tt in range(max(0, t - span + 1), t + 1)
                           for w in words_per_tr[tt]))
    out[int(a)] = segs
  return out


def words_per_tr(story, n_trs: int, tr: float):
  """Words whose onset falls in each TR of a story."""
  bins = [[] for _ in range(n_trs)]
  for w, on in zip(story.words, story.onsets):
    i = int(on // tr)
    if 0 <= i < n_trs:
      bins[i].append(w)
  return bins


def mean_corr(pred_TxV, y_TxV, mask_V=None) -> float:
  r = signal.correlation(pred_TxV, y_TxV)
  return float(r[mask_V].mean() if mask_V is not None else r.mean())
