"""Online identification under parameter drift: NASA C-MAPSS loader and health indicator.

The C-MAPSS turbofan files (`train_FD001.txt`, `test_FD001.txt`, `RUL_FD001.txt`, ...
FD001-FD004) are whitespace-separated text, one row per engine cycle with 26 columns:
unit, cycle, 3 operating settings, 21 sensors. They are not redistributed here; the
loader reads them from a directory the user names and fails with instructions otherwise.

Health indicator (the paper's unsupervised use of the residual proxy): per engine, the
sensors are identified online as a linear-in-parameter model of the operating settings,
  s_t = Theta_t [1, setting_t] + noise   (Phi_t = I_p kron [1, setting_t]^T),
(settings only on the multi-condition subsets FD002/FD004),
with projected OGD; every block of W cycles the residual proxy P_k of
`estimators.block_proxy` (frozen-reference, debiased half-block residual difference)
estimates how far the parameters drifted in that block. A healthy engine's model is
stationary (P_k near its noise floor); degradation makes the sensor/setting relation
drift faster towards end of life, so P_k should trend upwards with cycle. The trend
statistic is the Spearman rank correlation of P_k with the block's cycle, per engine.
Engines are padded to a common length and vmapped; padded steps leave the state as is.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxpapers.papers.drift_ident import estimators

SUBSETS = ("FD001", "FD002", "FD003", "FD004")
COLUMNS = (["unit", "cycle", "setting1", "setting2", "setting3"]
           + [f"s{i}" for i in range(1, 22)])
HOW_TO_GET = (
    "Download 'Turbofan Engine Degradation Simulation' (C-MAPSS) from the NASA "
    "Prognostics Center of Excellence Data Set Repository "
    "(https://www.nasa.gov/intelligent-systems-division/discovery-and-systems-health/"
    "pcoe/pcoe-data-set-repository/), unzip CMAPSSData.zip and pass that directory.")


def expected_files(subset: str = "FD001"):
  return [f"train_{subset}.txt", f"test_{subset}.txt", f"RUL_{subset}.txt"]


def load(directory: str, subset: str = "FD001", split: str = "train") -> np.ndarray:
  """Returns the (rows, 26) float array of `<split>_<subset>.txt` in `directory`."""
  if subset not in SUBSETS:
    raise ValueError(f"unknown C-MAPSS subset {subset!r}; known: {', '.join(SUBSETS)}")
  if split not in ("train", "test"):
    raise ValueError(f"C-MAPSS split must be 'train' or 'test', got {split!r}")
  path = os.path.join(directory, f"{split}_{subset}.txt")
  if not os.path.isdir(directory) or not os.path.isfile(path):
    raise FileNotFoundError(
        f"C-MAPSS file {path!r} not found. The directory must contain "
        f"{', '.join(expected_files(subset))} (whitespace-separated, 26 columns: "
        f"unit, cycle, 3 settings, 21 sensors). {HOW_TO_GET}")
  rows = []
  with open(path) as f:
    for lineno, line in enumerate(f, 1):
      fields = line.split()
      if not fields:
        continue
      if len(fields) != len(COLUMNS):
        raise ValueError(f"{path}:{lineno}: expected {len(COLUMNS)} columns "
                         f"(unit, cycle, 3 settings, 21 sensors), got {len(fields)}")
      rows.append([float(v) for v in fields])
  if not rows:
    raise ValueError(f"{path}: no data rows")
  return np.asarray(rows, np.float64)


def split_engines(data: np.ndarray):
  """[(unit, cycles, settings (n,3), sensors (n,21))] sorted by unit and cycle."""
  out = []
  for unit in np.unique(data[:, 0]):
    rows = data[data[:, 0] == unit]
    rows = rows[np.argsort(rows[:, 1])]
    out.append((int(unit), rows[:, 1], rows[:, 2:5], rows[:, 5:]))
  return out


def standardise(engines, baseline_cycles: int, min_std: float = 1e-6):
  """Scales settings and sensors by the pooled first `baseline_cycles` of every engine.

  Those cycles are the healthy reference; sensors that are constant there (several in
  FD001) carry no information and are dropped. Returns (engines, kept sensor indices).
  """
  base_set = np.concatenate([e[2][:baseline_cycles] for e in engines])
  base_sen = np.concatenate([e[3][:baseline_cycles] for e in engines])
  keep = np.where(base_sen.std(0) > min_std)[0]
  ms, ss = base_set.mean(0), np.maximum(base_set.std(0), min_std)
  mx, sx = base_sen[:, keep].mean(0), base_sen[:, keep].std(0)
  out = [(u, c, (st - ms) / ss, (se[:, keep] - mx) / sx) for u, c, st, se in engines]
  return out, keep


def _pad(engines):
  n = max(len(e[1]) for e in engines)
  k, p = engines[0][2].shape[1], engines[0][3].shape[1]
  settings = np.zeros((len(engines), n, k), np.float32)
  sensors = np.zeros((len(engines), n, p), np.float32)
  mask = np.zeros((len(engines), n), bool)
  for i, (_, c, st, se) in enumerate(engines):
    settings[i, :len(c)], sensors[i, :len(c)], mask[i, :len(c)] = st, se, True
  return settings, sensors, mask


def residual_proxy(settings, sensors, mask, window: int, eta: float, radius: float,
                   use_settings: bool = True):
  """Per-block proxy P_k for one engine (n cycles); NaN for incomplete blocks.

  Without `use_settings` the regressor is the constant 1 (Theta = sensor levels): on
  the single-condition subsets (FD001, FD003) the settings are noise and would only
  add dimensions to the proxy's noise floor.
  """
  n, p = sensors.shape
  if not use_settings:
    settings = settings[:, :0]
  d = p * (settings.shape[1] + 1)
  center = jnp.zeros((d,))

  def step(carry, inputs):
    theta, acc = carry
    st, y, valid, t = inputs
    phi = jnp.kron(jnp.eye(p), jnp.concatenate([jnp.ones((1,)), st])[None, :])
    g = phi.T @ (y - phi @ acc["ref"])
    second = (t % window) >= window // 2
    new_acc = dict(
        ref=acc["ref"],
        res_a=acc["res_a"] + jnp.where(second, 0.0, g),
        res_b=acc["res_b"] + jnp.where(second, g, 0.0),
        sq_a=acc["sq_a"] + jnp.where(second, 0.0, g @ g),
        sq_b=acc["sq_b"] + jnp.where(second, g @ g, 0.0),
        sig_a=acc["sig_a"], sig_b=acc["sig_b"],
        excitation=acc["excitation"] + jnp.sum(phi ** 2) / d)
    r = y - phi @ theta
    new_theta = estimators.project_ball(theta + eta * (phi.T @ r), center, radius)
    end = (t % window) == window - 1
    proxy, _ = estimators.block_proxy(new_acc, jnp.int32(window))
    fresh = dict(new_acc, ref=new_theta, res_a=jnp.zeros((d,)), res_b=jnp.zeros((d,)),
                 sq_a=jnp.zeros(()), sq_b=jnp.zeros(()), excitation=jnp.zeros(()))
    new_acc = jax.tree.map(lambda f, u: jnp.where(end, f, u), fresh, new_acc)
    keep = lambda new, old: jnp.where(valid, new, old)  # noqa: E731
    carry = (keep(new_theta, theta), jax.tree.map(keep, new_acc, acc))
    return carry, jnp.where(end & valid, proxy, jnp.nan)

  zero = jnp.zeros((d,))
  acc = dict(ref=zero, res_a=zero, res_b=zero, sq_a=jnp.zeros(()), sq_b=jnp.zeros(()),
             sig_a=zero, sig_b=zero, excitation=jnp.zeros(()))
  # Sensors are standardised on the healthy baseline, so theta = 0 is the healthy model.
  _, out = jax.lax.scan(step, (zero, acc), (settings, sensors, mask, jnp.arange(n)))
  return out


def health_indicator(engines, window: int, eta: float, radius: float,
                     baseline_cycles: int, use_settings: bool = True):
  """Runs the proxy on every engine; returns per-engine blocks, proxies and Spearman."""
  engines, keep = standardise(engines, baseline_cycles)
  settings, sensors, mask = _pad(engines)
  fn = jax.jit(jax.vmap(lambda a, b, c: residual_proxy(a, b, c, window, eta, radius,
                                                       use_settings)))
  proxies = np.asarray(fn(settings, sensors, mask))
  rows = []
  for i, (unit, cycles, _, _) in enumerate(engines):
    valid = ~np.isnan(proxies[i])
    hi = proxies[i][valid]
    block_cycle = cycles[np.where(valid)[0]]
    rho = stats.spearmanr(block_cycle, hi).statistic if len(hi) >= 3 else np.nan
    rows.append(dict(unit=unit, cycles=int(len(cycles)), blocks=int(len(hi)),
                     spearman=float(rho), hi=hi, block_cycle=block_cycle))
  return rows, keep


def summarise(rows):
  rho = np.array([r["spearman"] for r in rows], float)
  rho = rho[~np.isnan(rho)]
  return dict(engines=len(rows), median_spearman=float(np.median(rho)),
              frac_positive=float(np.mean(rho > 0)),
              frac_above_half=float(np.mean(rho > 0.5)))
