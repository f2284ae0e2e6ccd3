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

Sensor handling follows the C-MAPSS literature: the usual 14 informative sensors
(s2, s3, s4, s7, s8, s9, s11, s12, s13, s14, s15, s17, s20, s21; s1, s5, s10, s16, s18,
s19 are constant on FD001 and s6 takes two values), or `auto` (drop sensors with at most
two distinct values inside every operating regime). Multi-condition subsets (FD002,
FD004: six operating conditions) are normalised per operating regime (KMeans on the
three settings), each regime on its own healthy baseline. `write_synthetic` writes
generated files in the exact NASA text format (tests, smoke, notebook; no real data).
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


LIT14 = (2, 3, 4, 7, 8, 9, 11, 12, 13, 14, 15, 17, 20, 21)  # 1-based sensor numbers
SENSOR_SETS = ("lit14", "auto")
MULTI_CONDITION = ("FD002", "FD004")


def expected_files(subset: str = "FD001"):
  return [f"train_{subset}.txt", f"test_{subset}.txt", f"RUL_{subset}.txt"]


def load_rul(directory: str, subset: str = "FD001") -> np.ndarray:
  """True remaining useful life of each test engine (`RUL_<subset>.txt`, one per line)."""
  path = os.path.join(directory, f"RUL_{subset}.txt")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"C-MAPSS file {path!r} not found. {HOW_TO_GET}")
  with open(path) as f:
    vals = [line.split() for line in f if line.strip()]
  if any(len(v) != 1 for v in vals):
    raise ValueError(f"{path}: expected one RUL value per line")
  return np.asarray([float(v[0]) for v in vals])


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


def select_sensors(engines, mode: str, regimes=None) -> np.ndarray:
  """0-based indices of the sensors used (`lit14` or `auto`, see module docstring)."""
  if mode == "lit14":
    return np.asarray(LIT14) - 1
  if mode != "auto":
    raise ValueError(f"unknown C-MAPSS sensor set {mode!r}; expected one of {SENSOR_SETS}")
  sen = np.concatenate([e[3] for e in engines])
  reg = (np.zeros(len(sen), int) if regimes is None
         else np.concatenate([regimes.predict(e[2]) for e in engines]))
  levels = np.array([[len(np.unique(sen[reg == r, j])) for r in np.unique(reg)]
                     for j in range(sen.shape[1])])
  return np.where(levels.max(axis=1) > 2)[0]


def fit_regimes(engines, n_regimes: int, seed: int = 0):
  """KMeans on the (scaled) operating settings; None when there is one regime."""
  if n_regimes <= 1:
    return None
  from sklearn import cluster, pipeline, preprocessing  # pylint: disable=g-import-not-at-top
  x = np.concatenate([e[2] for e in engines])
  return pipeline.make_pipeline(
      preprocessing.StandardScaler(),
      cluster.KMeans(n_regimes, n_init=10, random_state=seed)).fit(x)


def normalise(engines, sensors, baseline_cycles: int, regimes=None, stats=None,
              min_std: float = 1e-6):
  """z-scores of the chosen sensors against the pooled healthy baseline, per regime.

  The baseline is the first `baseline_cycles` of every engine in `engines` (training
  engines), unless `stats` (from a previous call) is given: test engines are scaled with
  the training statistics. Returns (engines with z-scored sensors, stats).
  """
  reg = lambda e: (np.zeros(len(e[1]), int) if regimes is None  # noqa: E731
                   else regimes.predict(e[2]))
  if stats is None:
    base = np.concatenate([e[3][:baseline_cycles][:, sensors] for e in engines])
    base_reg = np.concatenate([reg(e)[:baseline_cycles] for e in engines])
    n_reg = 1 if regimes is None else regimes[-1].n_clusters
    mu = np.zeros((n_reg, len(sensors)))
    sd = np.ones((n_reg, len(sensors)))
    for r in range(n_reg):
      rows = base[base_reg == r]
      if len(rows) < 2:
        raise ValueError(f"operating regime {r} has {len(rows)} healthy baseline rows; "
                         "increase cmapss.baseline_cycles")
      mu[r], sd[r] = rows.mean(0), np.maximum(rows.std(0), min_std)
    stats = (mu, sd)
  mu, sd = stats
  out = []
  for u, c, st, se in engines:
    r = reg((u, c, st, se))
    out.append((u, c, st, (se[:, sensors] - mu[r]) / sd[r]))
  return out, stats


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


# FD001's first-row sensor levels and the printed decimals of every column.
_NOMINAL = (518.67, 641.82, 1589.70, 1400.60, 14.62, 21.61, 554.36, 2388.06, 9046.19, 1.30,
            47.47, 521.66, 2388.02, 8138.62, 8.4195, 0.03, 392, 2388, 100.00, 39.06,
            23.4190)
_DECIMALS = (0, 0, 4, 4, 1) + (2,) * 14 + (4, 2, 0, 0, 2, 2, 4)
# Noise std and end-of-life shift (in noise stds, signed) of the 14 informative sensors.
_NOISE = {2: 0.5, 3: 6.0, 4: 9.0, 7: 0.9, 8: 0.07, 9: 22.0, 11: 0.27, 12: 0.74, 13: 0.07,
          14: 19.0, 15: 0.037, 17: 1.5, 20: 0.18, 21: 0.11}
_SHIFT = {2: 3, 3: 3, 4: 4, 7: -4, 8: 3, 9: 2, 11: 4, 12: -4, 13: 3, 14: 2, 15: 3, 17: 3,
          20: -4, 21: -4}
# FD002/FD004's six operating conditions (altitude, Mach, throttle resolver angle).
_REGIMES = ((42.0, 0.84, 100.0), (20.0, 0.70, 100.0), (10.0, 0.25, 100.0), (0.0, 0.0, 100.0),
            (25.0, 0.62, 60.0), (35.0, 0.84, 100.0))


def write_synthetic(directory: str, subset: str = "FD001", train_engines: int = 20,
                    test_engines: int = 20, seed: int = 0, degrade: bool = True) -> str:
  """Writes train/test/RUL files of `subset` in the exact NASA text format.

  NOT real data: engines whose 14 informative sensors drift with exponentially
  growing wear over their life (FD001's signs and noise levels), s6 two-valued, the
  other six constant; FD002/FD004 cycle through six operating conditions that shift
  every sensor. Test engines are truncated at a random point; RUL is the remainder.
  """
  if subset not in SUBSETS:
    raise ValueError(f"unknown C-MAPSS subset {subset!r}; known: {', '.join(SUBSETS)}")
  rng = np.random.default_rng(seed)
  multi = subset in MULTI_CONDITION
  offsets = rng.normal(size=(len(_REGIMES), 21)) * 8.0 * np.asarray(
      [_NOISE.get(j, 0.0) for j in range(1, 22)])

  def engine(unit, cut):
    life = int(rng.integers(128, 300))
    last = life if not cut else int(rng.integers(31, life))
    rows = []
    for cycle in range(1, last + 1):
      wear = (np.exp(4.0 * cycle / life) - 1.0) / (np.exp(4.0) - 1.0) if degrade else 0.0
      sensors = np.array(_NOMINAL, float)
      for j, sd in _NOISE.items():
        sensors[j - 1] += _SHIFT[j] * sd * wear + sd * rng.normal()
      sensors[5] = 21.61 if rng.uniform() < 0.97 else 21.60  # s6: two values
      if multi:
        r = int(rng.integers(len(_REGIMES)))
        settings = np.asarray(_REGIMES[r]) + rng.normal(size=3) * [0.003, 0.0003, 0.0]
        sensors += offsets[r]
      else:
        settings = np.asarray([rng.normal() * 0.002, rng.normal() * 0.0003, 100.0])
      sensors[16] = np.round(sensors[16])  # s17 is an integer sensor
      rows.append([unit, cycle, *settings, *sensors])
    return rows, life - last

  os.makedirs(directory, exist_ok=True)
  fmt = lambda row: " ".join(f"{v:.{d}f}" for v, d in zip(row, _DECIMALS)) + "  \n"  # noqa: E731
  with open(os.path.join(directory, f"train_{subset}.txt"), "w") as f:
    for u in range(1, train_engines + 1):
      f.writelines(fmt(r) for r in engine(u, False)[0])
  ruls = []
  with open(os.path.join(directory, f"test_{subset}.txt"), "w") as f:
    for u in range(1, test_engines + 1):
      rows, rul = engine(u, True)
      f.writelines(fmt(r) for r in rows)
      ruls.append(rul)
  with open(os.path.join(directory, f"RUL_{subset}.txt"), "w") as f:
    f.writelines(f"{r}\n" for r in ruls)
  return directory
