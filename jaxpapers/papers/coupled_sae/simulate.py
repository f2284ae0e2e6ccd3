"""Multisubject coupled SAE (abstract 1): simulated multi-subject story-listening fMRI.

Ground truth the real data cannot give: voxel responses are driven by a few *planted
sparse semantic atoms*, directions in the LM feature space (spherical k-means centroids of
the training TRs, so each atom is a kind of text segment), each thresholded and rectified
(active on ~20% of TRs) and kept only if among the `k_true` strongest at that TR: exactly
a TopK-ReLU encoder, the model's own class. The second generator (`generator="smooth"`)
breaks that assumption: each atom's drive is a smooth bump exp(kappa (cos - 1)) of the
TR's cosine to the atom direction, positive on every TR, with no threshold and no TopK.
Each atom has a cortical map on a template surface (two hemispheres, a rows x cols grid
each) made of Gaussian blobs centred inside its home network of a generated Yeo-7-like
parcellation (7 networks, each a few irregular patches per hemisphere, roughly mirrored).
Subjects differ as real brains do after template registration: blob centres shift,
widths and gains vary, plus an idiosyncratic smooth map per atom. A dense component
(a random low-rank linear read-out of all features) stands for the response variance that
no 50-atom sparse basis captures. Atom time courses are convolved with the SPM HRF; noise
is AR(1) in time and spatially smooth, scaled so that the 95th percentile of the voxel
noise ceilings (correlation of response with its noise-free signal) is `peak_ceiling`,
as in story-listening data where most voxels are weakly predictable.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from scipy import ndimage

from jaxpapers.papers.coupled_sae import signal

NETWORKS = ("Visual", "Somatomotor", "DorsalAttention", "VentralAttention", "Limbic",
            "Frontoparietal", "Default")
# Home networks of the planted semantic atoms: language/semantic responses concentrate in
# default-mode, frontoparietal and ventral-attention cortex, with some in the others.
_HOME_WEIGHTS = np.array([0.5, 0.5, 1.0, 1.5, 1.0, 2.0, 3.0])


@dataclasses.dataclass
class Surface:
  rows: int
  cols: int
  labels: np.ndarray     # (V,) network index per vertex, hemisphere-major order

  @property
  def n_vertices(self) -> int:
    return 2 * self.rows * self.cols

  def grid(self, v_map: np.ndarray) -> np.ndarray:
    """(V,) -> (2, rows, cols)."""
    return np.asarray(v_map).reshape(2, self.rows, self.cols)


def parcellation(rows: int, cols: int, rng, n_networks: int = 7, patches: int = 2,
                 roughness: float = 2.5) -> Surface:
  """Yeo-7-like labels: each network owns `patches` irregular patches per hemisphere.

  Patch seeds are drawn in the left hemisphere and mirrored (with jitter) to the right;
  each vertex takes the patch whose distance, perturbed by a smooth random field, is
  smallest, which gives contiguous patches with irregular borders.
  """
  seeds = rng.uniform([0, 0], [rows, cols], size=(n_networks * patches, 2))
  owner = np.repeat(np.arange(n_networks), patches)
  rr, cc = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
  labels = []
  for hemi in range(2):
    s = seeds if hemi == 0 else seeds + rng.normal(0, 0.8, seeds.shape)
    d = np.sqrt((rr[None] - s[:, 0, None, None]) ** 2 + (cc[None] - s[:, 1, None, None]) ** 2)
    field = ndimage.gaussian_filter(rng.standard_normal(d.shape), (0, 2, 2))
    d = d + roughness * field / (field.std() + 1e-9)
    labels.append(owner[np.argmin(d, axis=0)].reshape(-1))
  return Surface(rows, cols, np.concatenate(labels))


@dataclasses.dataclass
class AtomSpec:
  """Group-level description of one planted atom's cortical map."""
  home: int                 # network index
  centers: np.ndarray       # (n_blobs, 3): hemisphere, row, col
  widths: np.ndarray        # (n_blobs,)
  signs: np.ndarray         # (n_blobs,)


def atom_specs(surface: Surface, n_atoms: int, rng, blobs: int = 2) -> list[AtomSpec]:
  # Networks too small to own a vertex on a tiny grid cannot be a home.
  present = np.isin(np.arange(len(NETWORKS)), surface.labels)
  p = _HOME_WEIGHTS * present
  p = p / p.sum()
  coords = vertex_coords(surface)
  specs = []
  for _ in range(n_atoms):
    home = int(rng.choice(len(NETWORKS), p=p))
    inside = np.flatnonzero(surface.labels == home)
    centers = coords[rng.choice(inside, size=blobs)].astype(np.float64)
    widths = rng.uniform(1.2, 2.2, size=blobs)
    signs = np.where(rng.uniform(size=blobs) < 0.85, 1.0, -1.0)
    specs.append(AtomSpec(home, centers, widths, signs))
  return specs


def vertex_coords(surface: Surface) -> np.ndarray:
  h, r, c = np.meshgrid(np.arange(2), np.arange(surface.rows), np.arange(surface.cols),
                        indexing="ij")
  return np.stack([h.ravel(), r.ravel(), c.ravel()], axis=1)


def atom_map(surface: Surface, spec: AtomSpec, leak: float = 0.3, shift=None,
             width_scale=None) -> np.ndarray:
  """(V,) map: blobs (possibly shifted / rescaled for a subject), damped outside home."""
  coords = vertex_coords(surface)
  m = np.zeros(surface.n_vertices)
  for b in range(len(spec.widths)):
    c = spec.centers[b] + (0 if shift is None else np.r_[0.0, shift[b]])
    w = spec.widths[b] * (1.0 if width_scale is None else width_scale[b])
    same = coords[:, 0] == c[0]
    d2 = (coords[:, 1] - c[1]) ** 2 + (coords[:, 2] - c[2]) ** 2
    m += same * spec.signs[b] * np.exp(-d2 / (2 * w ** 2))
  return m * np.where(surface.labels == spec.home, 1.0, leak)


def smooth_field(surface: Surface, rng, sigma: float = 1.5, size: int = 1) -> np.ndarray:
  """(size, V) spatially smooth unit-variance random maps."""
  f = rng.standard_normal((size, 2, surface.rows, surface.cols))
  f = ndimage.gaussian_filter(f, (0, 0, sigma, sigma))
  f /= f.std(axis=(1, 2, 3), keepdims=True) + 1e-12
  return f.reshape(size, -1)


def subject_maps(surface: Surface, specs, rng, shift_sd: float, gain_sd: float,
                 idio: float) -> np.ndarray:
  """(n_atoms, V) one subject's maps: shifted blobs, gains, idiosyncratic smooth part."""
  maps = []
  for spec in specs:
    nb = len(spec.widths)
    m = atom_map(surface, spec, shift=rng.normal(0, shift_sd, (nb, 2)),
                 width_scale=np.exp(rng.normal(0, 0.1, nb)))
    m = m * float(np.exp(rng.normal(0, gain_sd)))
    maps.append(m + idio * np.abs(m).max() * smooth_field(surface, rng)[0])
  return np.stack(maps)


# --------------------------------------------------------------------------- atoms

def spherical_kmeans(x_NxD: np.ndarray, k: int, rng, iters: int = 30) -> np.ndarray:
  """(k, D) unit centroids maximizing the cosine of each row to its centroid."""
  xn = x_NxD / (np.linalg.norm(x_NxD, axis=1, keepdims=True) + 1e-12)
  c = xn[rng.choice(len(xn), size=k, replace=False)]
  for _ in range(iters):
    assign = np.argmax(xn @ c.T, axis=1)
    for j in range(k):
      members = xn[assign == j]
      v = members.sum(0) if len(members) else xn[rng.integers(len(xn))]
      c[j] = v / (np.linalg.norm(v) + 1e-12)
  return c


@dataclasses.dataclass
class PlantedAtoms:
  directions: np.ndarray   # (K, D) unit vectors in feature space
  thresholds: np.ndarray   # (K,)
  scales: np.ndarray       # (K,) activation std on training TRs
  k_true: int
  kind: str = "topk"       # topk | smooth
  kappa: float = 8.0       # smooth: concentration of the cosine bump

  def activations(self, x_TxD: np.ndarray) -> np.ndarray:
    """(T, K) non-negative atom activations.

    topk: rectified thresholded projections, top-k_true per TR: exactly a TopK-ReLU
    encoder, the coupled model's own class. smooth: exp(kappa (cos(x, atom) - 1)), a smooth
    bump of the TR's cosine to the atom direction: every atom is active on every TR (no
    threshold, no TopK), larger near its kind of segment, and nonlinear in x.
    """
    if self.kind == "smooth":
      xn = x_TxD / (np.linalg.norm(x_TxD, axis=1, keepdims=True) + 1e-12)
      return np.exp(self.kappa * (xn @ self.directions.T - 1.0)) / self.scales
    a = np.maximum(x_TxD @ self.directions.T - self.thresholds, 0.0) / self.scales
    if self.k_true < a.shape[1]:
      kth = -np.sort(-a, axis=1)[:, self.k_true - 1:self.k_true]
      a = np.where(a >= kth, a, 0.0)
    return a


def plant_atoms(x_train_TxD: np.ndarray, n_atoms: int, k_true: int, active_frac: float,
                rng, kind: str = "topk", kappa: float = 8.0) -> PlantedAtoms:
  dirs = spherical_kmeans(x_train_TxD, n_atoms, rng)
  proj = x_train_TxD @ dirs.T
  thr = np.quantile(proj, 1.0 - active_frac, axis=0)
  if kind == "smooth":
    unit = PlantedAtoms(dirs, thr, np.ones(n_atoms), k_true, kind, kappa)
    return PlantedAtoms(dirs, thr, unit.activations(x_train_TxD).std(0) + 1e-9, k_true,
                        kind, kappa)
  if kind != "topk":
    raise ValueError(f"unknown generator {kind!r}; expected topk or smooth")
  a = np.maximum(proj - thr, 0.0)
  return PlantedAtoms(dirs, thr, a.std(0) + 1e-9, k_true)


# --------------------------------------------------------------------------- responses

@dataclasses.dataclass
class Simulation:
  surface: Surface
  atoms: PlantedAtoms
  specs: list
  maps: np.ndarray          # (S, K, V) true subject maps
  group_maps: np.ndarray    # (K, V) template maps (no subject variability)
  responses: list           # per subject: list over stories of (T_story, V), z-scored
  signals: list             # same layout, the noise-free signal (same affine scaling)
  codes: list               # per story (T_story, K) true atom activations (pre-HRF)


def simulate(x_stories, train_idx, cfg, seed: int) -> Simulation:
  """Responses of `cfg.n_subjects` subjects to stories with TR features `x_stories`.

  `cfg` fields: rows, cols, n_planted, k_true, active_frac, n_subjects, shift_sd, gain_sd,
  idio, dense_frac, dense_rank, ar, spatial_sigma, peak_ceiling, tr.
  """
  rng = np.random.default_rng([seed, 7])
  surface = parcellation(cfg.rows, cfg.cols, rng)
  x_train = np.concatenate([x_stories[i] for i in train_idx])
  atoms = plant_atoms(x_train, cfg.n_planted, cfg.k_true, cfg.active_frac, rng,
                      getattr(cfg, "generator", "topk"), getattr(cfg, "kappa", 8.0))
  specs = atom_specs(surface, cfg.n_planted, rng)
  group = np.stack([atom_map(surface, s) for s in specs])
  hrf = signal.spm_hrf(cfg.tr)
  codes = [atoms.activations(x) for x in x_stories]
  sparse_drive = [signal.convolve_hrf(c, hrf) for c in codes]
  dense_dirs = rng.standard_normal((x_train.shape[1], cfg.dense_rank))
  dense_dirs /= np.linalg.norm(dense_dirs, axis=0)
  dense_drive = [signal.convolve_hrf(x @ dense_dirs, hrf) for x in x_stories]
  maps, responses, signals = [], [], []
  for s in range(cfg.n_subjects):
    rs = np.random.default_rng([seed, 11, s])
    m = subject_maps(surface, specs, rs, cfg.shift_sd, cfg.gain_sd, cfg.idio)
    g = smooth_field(surface, rs, sigma=2.0, size=cfg.dense_rank)
    sp = [d @ m for d in sparse_drive]
    de = [d @ g for d in dense_drive]
    # Scale the dense part to `dense_frac` of the total signal variance (over voxels).
    v_sp = np.var(np.concatenate(sp)) + 1e-12
    v_de = np.var(np.concatenate(de)) + 1e-12
    c = np.sqrt(cfg.dense_frac / (1 - cfg.dense_frac) * v_sp / v_de) if cfg.dense_frac > 0 else 0.0
    sig = [a + c * b for a, b in zip(sp, de)]
    svar = np.var(np.concatenate(sig), axis=0)
    c2 = cfg.peak_ceiling ** 2
    noise_var = np.quantile(svar, 0.95) * (1 - c2) / c2
    resp_s, sig_s = [], []
    for x in sig:
      n = _noise(x.shape, surface, rs, cfg.ar, cfg.spatial_sigma) * np.sqrt(noise_var)
      y = x + n
      mu, sd = y.mean(0), y.std(0) + 1e-12
      resp_s.append((y - mu) / sd)
      sig_s.append((x - mu) / sd)
    maps.append(m)
    responses.append(resp_s)
    signals.append(sig_s)
  return Simulation(surface, atoms, specs, np.stack(maps), group, responses, signals, codes)


def _noise(shape, surface: Surface, rng, ar: float, spatial_sigma: float) -> np.ndarray:
  T, V = shape
  e = rng.standard_normal((T, V))
  if spatial_sigma > 0:
    e = ndimage.gaussian_filter(e.reshape(T, 2, surface.rows, surface.cols),
                                (0, 0, spatial_sigma, spatial_sigma)).reshape(T, V)
  out = np.empty_like(e)
  out[0] = e[0]
  for t in range(1, T):
    out[t] = ar * out[t - 1] + np.sqrt(1 - ar ** 2) * e[t]
  return out / (out.std(0, keepdims=True) + 1e-12)


def noise_ceiling(signal_TxV: np.ndarray, response_TxV: np.ndarray) -> np.ndarray:
  """Per-voxel correlation between the noise-free signal and the measured response."""
  return signal.correlation(signal_TxV, response_TxV)
