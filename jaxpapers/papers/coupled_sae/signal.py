"""Multisubject coupled SAE (abstract 1): the story-listening signal chain.

Word-level features live at irregular word times; fMRI lives on a regular TR grid. As in
the voxelwise-encoding literature (Huth et al. 2016; LeBel et al. 2023) the features are
low-pass interpolated onto the TR grid with a Lanczos (windowed-sinc) kernel whose cutoff
is the TR's Nyquist rate, z-scored per story, and expanded with finite-impulse-response
(FIR) delays so a linear model can learn each voxel's hemodynamic response. The canonical
double-gamma HRF (SPM; Friston et al. 1998, Glover 1999) drives the simulator.
All functions are NumPy: they run once per story, outside any training loop.
"""
from __future__ import annotations

import math

import numpy as np


def lanczos_kernel(t: np.ndarray, cutoff: float, window: int = 3) -> np.ndarray:
  """Lanczos-windowed sinc at time offsets `t` (s) for a low-pass `cutoff` (Hz).

  L(u) = sinc(u) sinc(u / a) for |u| < a (u = t * cutoff), 0 outside; L(0) = 1.
  """
  u = np.asarray(t, np.float64) * cutoff
  # np.sinc is sin(pi x)/(pi x) with sinc(0) = 1.
  val = np.sinc(u) * np.sinc(u / window)
  return np.where(np.abs(u) < window, val, 0.0)


def lanczos_matrix(old_times: np.ndarray, new_times: np.ndarray, window: int = 3,
                   cutoff_mult: float = 1.0) -> np.ndarray:
  """(len(new), len(old)) interpolation matrix; cutoff = cutoff_mult / mean new spacing.

  Word events are summed (not averaged) into each TR, as in the Huth-lab
  `lanczosinterp2D`: a TR with more words carries more feature energy.
  """
  new_times = np.asarray(new_times, np.float64)
  if len(new_times) < 2:
    raise ValueError("lanczos resampling needs at least 2 new time points")
  cutoff = cutoff_mult / np.mean(np.diff(new_times))
  return lanczos_kernel(new_times[:, None] - np.asarray(old_times)[None, :], cutoff, window)


def lanczos_resample(data_NxD: np.ndarray, old_times: np.ndarray, new_times: np.ndarray,
                     window: int = 3, cutoff_mult: float = 1.0) -> np.ndarray:
  """Resamples rows of `data` given at `old_times` onto `new_times` (e.g. word -> TR)."""
  if data_NxD.shape[0] != len(old_times):
    raise ValueError(f"{data_NxD.shape[0]} data rows but {len(old_times)} time stamps")
  return lanczos_matrix(old_times, new_times, window, cutoff_mult) @ data_NxD


def tr_times(n_trs: int, tr: float, offset: float = 0.0) -> np.ndarray:
  """Mid-acquisition time of each TR, relative to stimulus onset."""
  return offset + tr * (np.arange(n_trs) + 0.5)


def make_delayed(x_TxD: np.ndarray, delays=(1, 2, 3, 4)) -> np.ndarray:
  """FIR expansion: [x(t - d1), x(t - d2), ...] with zeros before the story starts."""
  T = x_TxD.shape[0]
  out = []
  for d in delays:
    shifted = np.zeros_like(x_TxD)
    if d >= 0:
      shifted[d:] = x_TxD[:T - d] if d < T else 0
    else:
      shifted[:T + d] = x_TxD[-d:]
    out.append(shifted)
  return np.concatenate(out, axis=1)


def zscore(x: np.ndarray, axis: int = 0, eps: float = 1e-8) -> np.ndarray:
  return (x - x.mean(axis, keepdims=True)) / (x.std(axis, keepdims=True) + eps)


def spm_hrf(tr: float, length_s: float = 32.0) -> np.ndarray:
  """SPM canonical HRF sampled every `tr` seconds, unit sum.

  Difference of gammas: peak gamma(shape 6, scale 1) minus 1/6 of undershoot
  gamma(shape 16, scale 1), i.e. a peak near 5 s and an undershoot near 15 s.
  """
  t = np.arange(0.0, length_s, tr)

  def gamma_pdf(x, shape):
    x = np.maximum(x, 1e-12)
    return np.exp((shape - 1) * np.log(x) - x - math.lgamma(shape))

  h = gamma_pdf(t, 6.0) - gamma_pdf(t, 16.0) / 6.0
  h[0] = 0.0
  return h / h.sum()


def convolve_hrf(x_TxK: np.ndarray, hrf: np.ndarray) -> np.ndarray:
  """Causal convolution of each column with the HRF, truncated to T (within a story)."""
  T = x_TxK.shape[0]
  out = np.zeros_like(x_TxK, dtype=np.float64)
  for lag, h in enumerate(hrf):
    if lag >= T:
      break
    out[lag:] += h * x_TxK[:T - lag]
  return out


def correlation(a_TxV: np.ndarray, b_TxV: np.ndarray) -> np.ndarray:
  """Pearson correlation per column (0 where either column is constant)."""
  a = a_TxV - a_TxV.mean(0)
  b = b_TxV - b_TxV.mean(0)
  den = np.sqrt((a * a).sum(0) * (b * b).sum(0))
  return np.where(den > 0, (a * b).sum(0) / np.where(den > 0, den, 1.0), 0.0)


def make_delayed_stories(x_TxD: np.ndarray, lengths, delays=(1, 2, 3, 4)) -> np.ndarray:
  """`make_delayed` applied story by story to rows stacked story after story."""
  out, start = [], 0
  for L in lengths:
    out.append(make_delayed(x_TxD[start:start + L], delays))
    start += L
  return np.concatenate(out, axis=0)
