"""Traffic data: the simulator by default, the field's standard files from a user path.

Every source becomes one `Traffic`: values [T, N] (speed or flow; 0 = missing, as in
METR-LA), the fraction of the day of each step, a directed edge list, and (simulator
only) the ground truth. Windows are 12 steps in, 12 out; splits are chronological
70 / 10 / 20 (DCRNN's for METR-LA / PEMS-BAY). Inputs per node and step are four
channels: the z-scored value, sin and cos of the time of day, and a fourth channel that
is the simulator's non-causal distractor sensor (zeros for real data).

Formats (tested on generated files):
  metr  METR-LA / PEMS-BAY: pandas HDF5 table (T x N, 5-minute DatetimeIndex; key 'df' or
        the file's only key) + DCRNN's adjacency pickle [sensor_ids, id_to_index, adj_mx]
  pems  PEMS03/04/07/08: npz with key 'data' shaped (T, N, C) (channel 0 is used) + a
        'from,to,cost' distance CSV (edges in both directions)
  csv   a plain speed CSV (header of sensor ids; an optional first timestamp column) + an
        N x N adjacency CSV (edge i -> j where entry (i, j) > 0, i != j)
"""
from __future__ import annotations

import dataclasses
import os
import pickle

import numpy as np

from jaxpapers.papers.stgib import simulator as sim_lib

CHANNELS = ("value", "tod_sin", "tod_cos", "distractor")
SOURCES = ("sim", "metr", "pems", "csv")


@dataclasses.dataclass
class Traffic:
  values: np.ndarray  # [T, N] float32, 0 = missing
  tod: np.ndarray  # [T] fraction of the day
  src: np.ndarray  # [E] int32
  dst: np.ndarray  # [E] int32
  extra: np.ndarray  # [T, N] the fourth channel
  name: str
  sim: sim_lib.Sim | None = None
  coords: np.ndarray | None = None

  @property
  def n(self) -> int:
    return self.values.shape[1]


class DataError(ValueError):
  """A data file that cannot be read as the named format (one line)."""


def _need(path: str, what: str):
  if not path:
    raise DataError(f"data: {what} path is empty")
  if not os.path.isfile(path):
    raise DataError(f"data: {what} file {path} not found")


def _finite(values: np.ndarray, path: str):
  if values.ndim != 2 or values.shape[0] < 30 or values.shape[1] < 2:
    raise DataError(f"data: {path} holds a {values.shape} table; expected T x N with T >= 30"
                    " steps and N >= 2 sensors")
  if not np.all(np.isfinite(values)):
    raise DataError(f"data: {path} has NaN or infinite values (write missing readings as 0)")


def _edges_from_matrix(adj: np.ndarray, n: int, path: str):
  if adj.shape != (n, n):
    raise DataError(f"data: adjacency {path} is {adj.shape}, the table has {n} sensors")
  if not np.all(np.isfinite(adj)):
    raise DataError(f"data: adjacency {path} has NaN or infinite entries")
  a = np.array(adj, np.float64)
  np.fill_diagonal(a, 0.0)
  src, dst = np.nonzero(a > 0)
  if len(src) == 0:
    raise DataError(f"data: adjacency {path} has no edges")
  return src.astype(np.int32), dst.astype(np.int32)


def load_metr(h5: str, adj: str) -> Traffic:
  _need(h5, "METR-LA/PEMS-BAY HDF5")
  _need(adj, "adjacency pickle")
  try:
    import pandas as pd  # pylint: disable=g-import-not-at-top
    with pd.HDFStore(h5, mode="r") as store:
      keys = store.keys()
      key = "/df" if "/df" in keys else (keys[0] if len(keys) == 1 else None)
      if key is None:
        raise DataError(f"data: {h5} holds keys {keys}; expected 'df' or a single table")
      df = store[key]
  except ImportError as e:
    raise DataError(f"data: reading HDF5 tables needs PyTables ({e}); "
                    "pip install -e '.[stgib]'") from None
  except DataError:
    raise
  except Exception as e:  # pandas/PyTables raise many types for a bad file
    raise DataError(f"data: {h5} is not a pandas HDF5 table ({type(e).__name__})") from None
  values = np.asarray(df.values, np.float32)
  _finite(values, h5)
  try:
    with open(adj, "rb") as f:
      obj = pickle.load(f, encoding="latin1")
    sensor_ids, _, adj_mx = obj
    adj_mx = np.asarray(adj_mx, np.float64)
  except Exception:  # a pickle of another shape
    raise DataError(f"data: {adj} is not DCRNN's adjacency pickle "
                    "[sensor_ids, id_to_index, adj_mx]") from None
  if len(sensor_ids) != values.shape[1]:
    raise DataError(f"data: {adj} lists {len(sensor_ids)} sensors, {h5} has "
                    f"{values.shape[1]} columns")
  src, dst = _edges_from_matrix(adj_mx, values.shape[1], adj)
  idx = df.index
  if hasattr(idx, "hour"):
    tod = ((idx.hour * 60 + idx.minute) / 1440.0).to_numpy(np.float32)
  else:
    tod = (np.arange(len(values)) % sim_lib.STEPS_PER_DAY) / sim_lib.STEPS_PER_DAY
  return Traffic(values, np.asarray(tod, np.float32), src, dst, np.zeros_like(values),
                 os.path.basename(h5))


def load_pems(npz: str, csv: str) -> Traffic:
  _need(npz, "PEMS npz")
  _need(csv, "PEMS distance CSV")
  try:
    with np.load(npz) as f:
      if "data" not in f:
        raise DataError(f"data: {npz} has keys {list(f.keys())}; expected 'data' (T, N, C)")
      arr = np.asarray(f["data"], np.float32)
  except DataError:
    raise
  except Exception:
    raise DataError(f"data: {npz} is not an npz archive") from None
  if arr.ndim == 2:
    arr = arr[..., None]
  if arr.ndim != 3:
    raise DataError(f"data: {npz} 'data' is {arr.shape}; expected (T, N, C)")
  values = arr[..., 0]
  _finite(values, npz)
  n = values.shape[1]
  with open(csv) as f:
    header = f.readline().strip().lower().replace(" ", "")
    if header.split(",")[:2] != ["from", "to"]:
      raise DataError(f"data: {csv} header is {header!r}; expected 'from,to,cost'")
    rows = [line.strip().split(",") for line in f if line.strip()]
  try:
    pairs = np.array([(int(float(r[0])), int(float(r[1]))) for r in rows], np.int64)
  except (ValueError, IndexError):
    raise DataError(f"data: {csv} has a row that is not 'from,to,cost' numbers") from None
  if len(pairs) == 0 or pairs.min() < 0 or pairs.max() >= n:
    raise DataError(f"data: {csv} names sensors outside 0..{n - 1} (or no edges)")
  a = np.zeros((n, n))
  a[pairs[:, 0], pairs[:, 1]] = 1.0
  a[pairs[:, 1], pairs[:, 0]] = 1.0
  src, dst = _edges_from_matrix(a, n, csv)
  tod = (np.arange(len(values)) % sim_lib.STEPS_PER_DAY) / sim_lib.STEPS_PER_DAY
  return Traffic(values, tod.astype(np.float32), src, dst, np.zeros_like(values),
                 os.path.basename(npz))


def load_csv(speed_csv: str, adj_csv: str) -> Traffic:
  _need(speed_csv, "speed CSV")
  _need(adj_csv, "adjacency CSV")
  import pandas as pd  # pylint: disable=g-import-not-at-top
  try:
    df = pd.read_csv(speed_csv)
  except Exception:
    raise DataError(f"data: {speed_csv} is not a CSV table") from None
  tod = None
  first = df.columns[0]
  if not pd.api.types.is_numeric_dtype(df[first]):  # a timestamp column
    try:
      ts = pd.to_datetime(df[first])
    except Exception:
      raise DataError(f"data: {speed_csv}: first column {first!r} is neither numbers nor "
                      "timestamps") from None
    tod = ((ts.dt.hour * 60 + ts.dt.minute) / 1440.0).to_numpy(np.float32)
    df = df.drop(columns=[first])
  try:
    values = df.to_numpy(np.float32)
  except ValueError:
    raise DataError(f"data: {speed_csv} has non-numeric readings") from None
  _finite(values, speed_csv)
  try:
    adj = np.loadtxt(adj_csv, delimiter=",", ndmin=2)
  except ValueError:
    try:
      adj = np.loadtxt(adj_csv, delimiter=",", skiprows=1, ndmin=2)
    except ValueError:
      raise DataError(f"data: {adj_csv} is not a numeric N x N CSV matrix") from None
  src, dst = _edges_from_matrix(adj, values.shape[1], adj_csv)
  if tod is None:
    tod = ((np.arange(len(values)) % sim_lib.STEPS_PER_DAY) /
           sim_lib.STEPS_PER_DAY).astype(np.float32)
  return Traffic(values, tod, src, dst, np.zeros_like(values), os.path.basename(speed_csv))


def simulated(d) -> Traffic:
  g = sim_lib.grid_graph(d.rows, d.cols)
  s = sim_lib.simulate(g, int(d.days * sim_lib.STEPS_PER_DAY), d.sim_seed, d.generator,
                       delays=tuple(d.delays), incident_len=tuple(d.incident_len),
                       rho=d.rho, coupling=d.coupling, sigma=d.sigma,
                       incident_rate=d.incident_rate)
  tod = (np.arange(len(s.speed)) % sim_lib.STEPS_PER_DAY) / sim_lib.STEPS_PER_DAY
  return Traffic(s.speed, tod.astype(np.float32), g.src, g.dst, s.distractor,
                 f"sim-{d.generator}", sim=s, coords=g.coords)


def load(d) -> Traffic:
  """The dataset a config's `data` section names."""
  if d.source == "sim":
    return simulated(d)
  if d.source == "metr":
    return load_metr(d.path, d.adj)
  if d.source == "pems":
    return load_pems(d.path, d.adj)
  if d.source == "csv":
    return load_csv(d.path, d.adj)
  raise DataError(f"data.source {d.source!r}; known: {', '.join(SOURCES)}")


@dataclasses.dataclass
class Windows:
  feats: np.ndarray  # [T, N, C]
  target: np.ndarray  # [T, N] raw values (0 = missing)
  mean: float
  std: float
  split: dict  # name -> [W] t_last indices


def windows(tr: Traffic, t_in: int, t_out: int, frac=(0.7, 0.1)) -> Windows:
  T = len(tr.values)
  n_tr = int(T * frac[0])
  n_va = int(T * (frac[0] + frac[1]))
  obs = tr.values[:n_tr][tr.values[:n_tr] != 0]  # train statistics only
  if obs.size == 0:
    raise DataError(f"data: {tr.name} has no nonzero readings in its training split")
  mean, std = float(obs.mean()), float(obs.std() + 1e-6)
  z = np.where(tr.values != 0, (tr.values - mean) / std, 0.0)
  ang = 2 * np.pi * tr.tod
  feats = np.stack([z, np.broadcast_to(np.sin(ang)[:, None], z.shape),
                    np.broadcast_to(np.cos(ang)[:, None], z.shape), tr.extra], -1)
  last = np.arange(t_in - 1, T - t_out)
  # A window belongs to the split holding its whole target span.
  split = dict(train=last[last + t_out < n_tr],
               val=last[(last - t_in + 1 >= n_tr) & (last + t_out < n_va)],
               test=last[last - t_in + 1 >= n_va])
  for k, v in split.items():
    if len(v) == 0:
      raise DataError(f"data: {tr.name} ({T} steps) is too short for a {k} split of "
                      f"{t_in}+{t_out}-step windows")
  return Windows(feats.astype(np.float32), tr.values.astype(np.float32), mean, std, split)


def gather(w: Windows, last: np.ndarray, t_in: int, t_out: int):
  """(x [W, t_in, N, C], y [W, t_out, N] raw) for windows ending at `last` (NumPy)."""
  xi = last[:, None] - t_in + 1 + np.arange(t_in)[None]
  yi = last[:, None] + 1 + np.arange(t_out)[None]
  return w.feats[xi], w.target[yi]
