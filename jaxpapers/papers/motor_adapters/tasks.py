"""Motor primitives as adapters of a shared recurrent core (abstract 7): movements.

Primitives are hand displacements relative to where the movement starts, traversed with
a minimum-jerk time course and followed by a short hold:

* 8 center-out reaches (directions 0, 45, ..., 315 deg, length r),
* 4 arcs (semicircles with chord r in direction 0/90/180/270 deg, bulging to the left
  of the direction of travel),
* 2 loops (a full circle of diameter r, counter-clockwise / clockwise, back to start).

Out-of-distribution movements are sequences of strokes drawn without stopping the
network: random multi-segment paths (the high-level policy's training and validation
sets) and letter-like drawings (the test set). A user may give drawings as CSV
(`drawing,segment,x,y` rows, x/y in metres relative to the drawing's start, each segment
sampled with any number of points) or as npz (`paths`, (N, S, P, 2)); `load_drawings`
reads both and resamples every segment to the points the policy reads.
"""
from __future__ import annotations

import csv
import os
import zipfile

import numpy as np

REACH_DIRS = tuple(range(0, 360, 45))
ARC_DIRS = (0, 90, 180, 270)
NAMES = tuple([f"reach{d}" for d in REACH_DIRS] + [f"arc{d}" for d in ARC_DIRS]
              + ["loop_ccw", "loop_cw"])
N_PRIMITIVES = len(NAMES)

# Letter-like drawings from the primitive alphabet (novel sequences; never trained as
# sequences). Each is a list of primitive names.
LETTERS = {
    "L": ["reach270", "reach0"],
    "V": ["reach315", "reach45"],
    "N": ["reach90", "reach315", "reach90"],
    "Z": ["reach0", "reach225", "reach0"],
    "W": ["reach315", "reach45", "reach315", "reach45"],
    "M": ["reach90", "reach315", "reach45", "reach270"],
    "U": ["reach270", "arc180", "reach90"],
    "S": ["arc180", "arc0"],
    "e": ["reach0", "loop_ccw"],
    "B": ["reach90", "arc270", "arc270"],
}


def min_jerk(s):
  s = np.clip(s, 0.0, 1.0)
  return 10 * s**3 - 15 * s**4 + 6 * s**5


def shape(name: str, s, radius: float):
  """Displacement (len(s), 2) in metres along primitive `name` at path parameter s."""
  s = np.asarray(s, np.float64)
  if name.startswith("reach"):
    th = np.deg2rad(float(name[5:]))
    return radius * s[:, None] * np.array([np.cos(th), np.sin(th)])[None]
  if name.startswith("arc"):
    th = np.deg2rad(float(name[3:]))
    d = np.array([np.cos(th), np.sin(th)])
    left = np.array([-d[1], d[0]])
    # semicircle from 0 to r d through the left side: centre r/2 d
    ang = np.pi * s  # angle swept from the start point around the centre
    rr = radius / 2
    return (rr * d)[None] - rr * np.cos(ang)[:, None] * d[None] + rr * np.sin(ang)[:, None] * left[None]
  if name in ("loop_ccw", "loop_cw"):
    sign = 1.0 if name == "loop_ccw" else -1.0
    rr = radius / 2
    ang = 2 * np.pi * s
    # circle through the start point, centre r/2 above it; start at its bottom
    return np.stack([sign * rr * np.sin(ang), rr * (1 - np.cos(ang))], -1)
  raise ValueError(f"unknown primitive {name!r}; known: {', '.join(NAMES)}")


def primitive_paths(radius: float, move_steps: int, hold_steps: int) -> np.ndarray:
  """Target displacement per step for every primitive: (N_PRIMITIVES, T, 2) float32."""
  t = np.arange(1, move_steps + hold_steps + 1) / move_steps
  s = min_jerk(t)
  return np.stack([shape(n, s, radius) for n in NAMES]).astype(np.float32)


def stroke_points(radius: float, points: int) -> np.ndarray:
  """Each primitive sampled at `points` evenly spaced path parameters: (N, points, 2).

  Every primitive is parameterised proportionally to arc length, so these are also
  evenly spaced in arc length, like `_resample` makes user strokes.
  """
  s = np.linspace(1.0 / points, 1.0, points)
  return np.stack([shape(n, s, radius) for n in NAMES]).astype(np.float32)


def polyline_targets(poly, move_steps: int, hold_steps: int) -> np.ndarray:
  """Target displacement per step (..., T, 2) along polylines (..., P, 2) that start at
  the origin (not included) and are evenly spaced in arc length, with the minimum-jerk
  time course of the primitives."""
  poly = np.asarray(poly, np.float64)
  p = poly.shape[-2]
  xy = np.concatenate([np.zeros(poly.shape[:-2] + (1, 2)), poly], -2)
  t = np.arange(1, move_steps + hold_steps + 1) / move_steps
  u = min_jerk(t) * p  # fractional index into xy
  i0 = np.clip(np.floor(u).astype(int), 0, p - 1)
  w = (u - i0)[:, None]
  return ((1 - w) * xy[..., i0, :] + w * xy[..., i0 + 1, :]).astype(np.float32)


def sequences_to_ids(seqs) -> np.ndarray:
  return np.array([[NAMES.index(n) for n in seq] for seq in seqs], np.int32)


def letters(max_segments: int | None = None):
  """(names, ids (L, S) padded with -1) of the letter-like test drawings."""
  names = list(LETTERS)
  s = max(len(v) for v in LETTERS.values()) if max_segments is None else max_segments
  ids = np.full((len(names), s), -1, np.int32)
  for i, n in enumerate(names):
    ids[i, :len(LETTERS[n])] = sequences_to_ids([LETTERS[n]])[0]
  return names, ids


def random_sequences(seed: int, count: int, segments: int) -> np.ndarray:
  """Random multi-segment paths (count, segments) of primitive ids, no stroke repeated
  twice in a row (a repeat is just a longer primitive)."""
  rng = np.random.default_rng(seed)
  out = np.zeros((count, segments), np.int32)
  out[:, 0] = rng.integers(0, N_PRIMITIVES, count)
  for j in range(1, segments):
    step = rng.integers(1, N_PRIMITIVES, count)
    out[:, j] = (out[:, j - 1] + step) % N_PRIMITIVES
  return out


def _resample(seg_xy: np.ndarray, points: int) -> np.ndarray:
  """Resamples a polyline (P, 2) that starts at the segment origin to `points` points
  evenly spaced in arc length (excluding the origin)."""
  xy = np.concatenate([np.zeros((1, 2)), seg_xy], 0)
  d = np.r_[0.0, np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))]
  if d[-1] <= 0:
    return np.zeros((points, 2), np.float32)
  target = np.linspace(d[-1] / points, d[-1], points)
  return np.stack([np.interp(target, d, xy[:, 0]), np.interp(target, d, xy[:, 1])],
                  -1).astype(np.float32)


def load_drawings(path: str, points: int):
  """User drawings -> (names, stroke points (N, S, points, 2) relative to each segment's
  start, mask (N, S)). CSV rows: drawing,segment,x,y (x, y relative to the drawing's
  start, metres); npz: `paths` (N, S, P, 2) relative to each segment's start."""
  if not os.path.exists(path):
    raise FileNotFoundError(
        f"drawings file {path} not found: write a CSV with columns drawing,segment,x,y "
        "or an npz with 'paths' (N, S, P, 2) (see the motor_adapters README)")
  if not os.path.isfile(path):
    raise ValueError(f"drawings path {path} is not a file (a CSV drawing,segment,x,y "
                     "or an npz with 'paths' (N, S, P, 2))")
  if path.endswith(".npz"):
    try:
      z = np.load(path)  # no pickles: a non-archive raises here
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as e:
      raise ValueError(f"{path}: not a readable npz ({type(e).__name__}: "
                       f"{str(e).splitlines()[0][:80]})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
      raise ValueError(f"{path}: not an npz archive (a single .npy array?); needs an "
                       "array 'paths' of shape (N, S, P, 2)")
    with z:
      if "paths" not in z:
        raise ValueError(f"{path}: npz needs an array 'paths' of shape (N, S, P, 2)")
      try:
        paths = np.asarray(z["paths"], np.float64)
      except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: 'paths' is not a numeric array ({e})") from None
    if paths.ndim != 4 or paths.shape[-1] != 2 or 0 in paths.shape:
      raise ValueError(f"{path}: 'paths' must have shape (N, S, P, 2) with N, S, P >= 1, "
                       f"got {paths.shape}")
    if not np.all(np.isfinite(paths)):
      raise ValueError(f"{path}: 'paths' holds NaN or infinite values")
    out = np.stack([[_resample(seg, points) for seg in d] for d in paths])
    mask = np.ones(out.shape[:2], bool)
    return [f"drawing{i}" for i in range(len(out))], out, mask
  rows = {}
  try:
    with open(path, newline="") as f:
      reader = csv.DictReader(f)
      need = {"drawing", "segment", "x", "y"}
      if reader.fieldnames is None or not need <= set(reader.fieldnames):
        raise ValueError(f"{path}: CSV header must contain drawing,segment,x,y; got "
                         f"{reader.fieldnames}")
      for line, r in enumerate(reader, start=2):
        try:
          key, seg = r["drawing"], int(r["segment"])
          xy = (float(r["x"]), float(r["y"]))
        except (TypeError, ValueError):
          raise ValueError(f"{path}: bad row {r}") from None
        if not np.all(np.isfinite(xy)):
          raise ValueError(f"{path}: line {line}: x, y must be finite, got {xy}")
        rows.setdefault(key, {}).setdefault(seg, []).append(xy)
  except UnicodeDecodeError:
    raise ValueError(f"{path}: not a text CSV (drawing,segment,x,y) and not named "
                     "*.npz") from None
  if not rows:
    raise ValueError(f"{path}: no drawings")
  names = list(rows)
  nseg = max(len(v) for v in rows.values())
  out = np.zeros((len(names), nseg, points, 2), np.float32)
  mask = np.zeros((len(names), nseg), bool)
  for i, n in enumerate(names):
    origin = np.zeros(2)
    for j, seg in enumerate(sorted(rows[n])):
      xy = np.asarray(rows[n][seg], np.float64)
      out[i, j] = _resample(xy - origin, points)
      mask[i, j] = True
      origin = xy[-1]
  return names, out, mask
