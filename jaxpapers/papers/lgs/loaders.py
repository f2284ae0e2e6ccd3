"""LGS (arXiv 2602.11229) real data: The Well and PDEBench HDF5 files from a user path.

Both return trajectories as float32 [N, T, H, W, C] (2-D fields, channels last), and the
channel names, so a file can stand in for the generated corpus (`data.real_path`).

The Well (Ohana et al. 2024), one file per split shard: root attrs `n_spatial_dims`,
`dataset_name`; groups `dimensions` (`time`, the spatial coordinates), `boundary_conditions`
and `t0_fields` / `t1_fields` / `t2_fields`, each with attr `field_names`; a field is a
dataset [n_traj, n_time, *spatial] (+ [D] for t1, [D, D] for t2), with attrs
`time_varying` / `sample_varying`. Vector and tensor fields become one channel per
component (`velocity_x`, ...). Fields that are not time- and sample-varying are skipped.

PDEBench (Takamoto et al. 2022), three layouts: a single `tensor` [N, T, X, Y] with
`x-coordinate` / `t-coordinate` (2-D Darcy-like files); the compressible-CFD files with
`density`, `pressure`, `Vx`, `Vy` [N, T, X, Y]; and per-seed groups (`0000/data`
[T, X, Y, C] with `0000/grid/{x, y, t}`: 2-D diffusion-reaction, shallow water).
"""
from __future__ import annotations

import os

import numpy as np


def _h5py():
  try:
    import h5py  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("reading HDF5 needs h5py: pip install 'jaxpapers[lgs]'") from None
  return h5py


def _open(path: str):
  if not os.path.isfile(path):
    raise FileNotFoundError(f"data file {path} does not exist")
  h5py = _h5py()
  try:
    return h5py.File(path, "r")
  except OSError as e:
    raise ValueError(f"{path} is not a readable HDF5 file ({e})") from None


def _attr_names(group, path, where):
  if "field_names" not in group.attrs:
    raise ValueError(f"{path}: The Well group {where!r} has no 'field_names' attribute")
  return [n.decode() if isinstance(n, bytes) else str(n) for n in group.attrs["field_names"]]


def load_well(path: str):
  """(array [N, T, H, W, C], channel names) from a The Well HDF5 file."""
  with _open(path) as f:
    for g in ("dimensions", "boundary_conditions", "t0_fields"):
      if g not in f:
        raise ValueError(f"{path}: not a The Well file (no {g!r} group)")
    dims = int(f.attrs.get("n_spatial_dims", 0))
    if dims != 2:
      raise ValueError(f"{path}: n_spatial_dims={dims}; this LGS reads 2-D data only")
    chans, names = [], []
    for order in (0, 1, 2):
      gname = f"t{order}_fields"
      if gname not in f:
        continue
      grp = f[gname]
      for name in _attr_names(grp, path, gname):
        if name not in grp:
          raise ValueError(f"{path}: field {name!r} is listed in {gname} but missing")
        ds = grp[name]
        if not (bool(ds.attrs.get("time_varying", True))
                and bool(ds.attrs.get("sample_varying", True))):
          continue
        a = np.asarray(ds, np.float32)
        if a.ndim != 4 + order:
          raise ValueError(f"{path}: {gname}/{name} has shape {a.shape}; expected "
                           f"[traj, time, x, y]{' + [D]' * order}")
        a = a.reshape(a.shape[:4] + (-1,))
        suffixes = ["x", "y"] if order == 1 else ["xx", "xy", "yx", "yy"][:a.shape[-1]]
        for j in range(a.shape[-1]):
          chans.append(a[..., j])
          names.append(name if order == 0 else f"{name}_{suffixes[j]}")
    if not chans:
      raise ValueError(f"{path}: no time- and sample-varying fields to read")
    shapes = {c.shape for c in chans}
    if len(shapes) != 1:
      raise ValueError(f"{path}: fields disagree on [traj, time, x, y]: {sorted(shapes)}")
    if "time" in f["dimensions"] and len(f["dimensions"]["time"]) != chans[0].shape[1]:
      raise ValueError(f"{path}: dimensions/time has {len(f['dimensions']['time'])} "
                       f"entries but fields have {chans[0].shape[1]} time steps")
    return _finite(np.stack(chans, axis=-1), path), names


def load_pdebench(path: str):
  """(array [N, T, H, W, C], channel names) from a PDEBench HDF5 file."""
  with _open(path) as f:
    keys = list(f.keys())
    if "tensor" in f:
      a = np.asarray(f["tensor"], np.float32)
      if a.ndim != 4:
        raise ValueError(f"{path}: 'tensor' has shape {a.shape}; expected [N, T, X, Y] "
                         "(1-D PDEBench files are not read by this 2-D LGS)")
      return _finite(a[..., None], path), ["tensor"]
    cfd = [k for k in ("density", "pressure", "Vx", "Vy") if k in f]
    if cfd:
      if len(cfd) != 4:
        raise ValueError(f"{path}: a PDEBench CFD file needs density, pressure, Vx, Vy; "
                         f"found {cfd}")
      arrs = [np.asarray(f[k], np.float32) for k in cfd]
      if len({a.shape for a in arrs}) != 1 or arrs[0].ndim != 4:
        raise ValueError(f"{path}: CFD fields must share one [N, T, X, Y] shape, got "
                         f"{[a.shape for a in arrs]}")
      return _finite(np.stack(arrs, axis=-1), path), cfd
    seeds = sorted(k for k in keys if k.isdigit())
    if seeds:
      rows = []
      for k in seeds:
        if "data" not in f[k]:
          raise ValueError(f"{path}: seed group {k!r} has no 'data' dataset")
        a = np.asarray(f[k]["data"], np.float32)
        if a.ndim != 4:
          raise ValueError(f"{path}: {k}/data has shape {a.shape}; expected [T, X, Y, C]")
        rows.append(a)
      if len({r.shape for r in rows}) != 1:
        raise ValueError(f"{path}: seed groups disagree on shape")
      return _finite(np.stack(rows), path), [f"c{j}" for j in range(rows[0].shape[-1])]
    raise ValueError(f"{path}: no PDEBench layout found ('tensor', CFD fields or seed "
                     f"groups); keys: {keys[:8]}")


def _finite(a, path):
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{path}: the data contain NaN or inf")
  return a


def load(path: str, fmt: str):
  if fmt == "well":
    return load_well(path)
  if fmt == "pdebench":
    return load_pdebench(path)
  raise ValueError(f"data.real_format={fmt!r}; expected 'well' or 'pdebench'")


def resample(a, n: int, path: str = ""):
  """Area-average [N, T, H, W, C] to n x n (H and W must be multiples of n)."""
  h, w = a.shape[2:4]
  if h % n or w % n:
    raise ValueError(f"{path}: grid {h}x{w} is not a multiple of resolution {n}")
  fh, fw = h // n, w // n
  return a.reshape(a.shape[:2] + (n, fh, n, fw, a.shape[-1])).mean(axis=(3, 5))
