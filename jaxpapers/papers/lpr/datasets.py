"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- datasets.

Offline tabular anomaly-detection sets built the ODDS/ADBench way (Rayana 2016; Han et
al. 2022): a classification table, one or several classes declared anomalous and
(where ODDS does) down-sampled. Sources:
  * scikit-learn's bundled tables: wbc (breast cancer), wine, optdigits (digits);
  * the UCI tables of Debian's `r-cran-mlbench` (.rda, read with the `rdata` package):
    breastw, pima, ionosphere, glass, satellite, satimage-2, shuttle;
  * ADBench's realistic synthetic anomalies (Han et al. 2022, Sec. 3.3) generated from a
    real set's normal samples: local (GMM with covariances x alpha), global (uniform in
    the inflated bounding box), dependency (normals keep the feature dependence through a
    Gaussian copula, anomalies draw each feature independently from its marginal; ADBench
    uses a vine copula and KDE marginals) and clustered / collective (GMM with means x
    alpha);
  * ADBench's `.npz` files (keys X, y) from a user-given directory.
`split` makes the stratified train/test split and standardizes with training statistics
only, so no test information reaches the detectors.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
from sklearn import datasets as skdata
from sklearn import mixture
from sklearn import model_selection

SKLEARN_SETS = ("wbc", "wine", "optdigits")
MLBENCH_SETS = ("breastw", "pima", "ionosphere", "glass", "satellite", "satimage2",
                "shuttle")
# Used only to pick LPR's default bit width (never in the results table).
DEV_SETS = ("vehicle", "sonar")
SYNTHETIC_SETS = ("local", "global", "dependency", "clustered")
MLBENCH_HOWTO = (
    "get them without R with: apt-get download r-cran-mlbench && "
    "dpkg-deb -x r-cran-mlbench_*.deb /tmp/mlbench && cp -r "
    "/tmp/mlbench/usr/lib/R/site-library/mlbench/data ~/.cache/jaxpapers/mlbench "
    "(or apt-get install r-cran-mlbench), and `pip install rdata`; or point "
    "config.data.mlbench_dir / $LPR_MLBENCH_DIR at the folder holding the .rda files")


@dataclasses.dataclass
class ADData:
  """A standardized train/test split; y = 1 marks anomalies."""
  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray

  @property
  def anomaly_ratio(self) -> float:
    return float(np.concatenate([self.y_train, self.y_test]).mean())


def _downsample(x, y, n_anom, rng):
  """Keeps all normals and `n_anom` random anomalies (the ODDS recipe)."""
  anom = np.flatnonzero(y == 1)
  keep = np.concatenate([np.flatnonzero(y == 0),
                         rng.choice(anom, size=min(n_anom, len(anom)), replace=False)])
  keep.sort()
  return x[keep], y[keep]


def _cap(x, y, max_n, rng, name=""):
  """Stratified subsample to at most `max_n` rows (keeps the anomaly ratio); says so."""
  if max_n <= 0 or len(y) <= max_n:
    return x, y
  print(f"lpr data: {name or 'dataset'} capped from {len(y)} to {max_n} rows "
        "(stratified; data.max_n / max_n=0 to keep all)", flush=True)
  keep, _ = model_selection.train_test_split(
      np.arange(len(y)), train_size=max_n, stratify=y, random_state=int(rng.integers(2**31)))
  keep.sort()
  return x[keep], y[keep]


def _sklearn(name, rng):
  if name == "wbc":  # ODDS wbc: 357 benign + 21 malignant
    d = skdata.load_breast_cancer()
    return _downsample(d.data, (d.target == 0).astype(np.int32), 21, rng)
  if name == "wine":  # ODDS wine: classes 2, 3 normal, 10 of class 1 anomalous
    d = skdata.load_wine()
    return _downsample(d.data, (d.target == 0).astype(np.int32), 10, rng)
  if name == "optdigits":  # ODDS optdigits: digit 0 anomalous at ~3%
    d = skdata.load_digits()
    y = (d.target == 0).astype(np.int32)
    return _downsample(d.data, y, int(round(0.03 * (y == 0).sum())), rng)
  raise ValueError(name)


def mlbench_dir(explicit: str = "") -> str:
  """The folder with mlbench's .rda files, or a FileNotFoundError saying how to get it."""
  candidates = [explicit, os.environ.get("LPR_MLBENCH_DIR", ""),
                "/usr/lib/R/site-library/mlbench/data",
                os.path.expanduser("~/.cache/jaxpapers/mlbench")]
  for c in candidates:
    if c and os.path.isfile(os.path.join(c, "Glass.rda")):
      return c
  raise FileNotFoundError(
      "mlbench .rda files not found (looked in "
      + ", ".join(repr(c) for c in candidates if c) + "); " + MLBENCH_HOWTO)


def _read_rda(folder, name):
  path = os.path.join(folder, f"{name}.rda")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} is missing; " + MLBENCH_HOWTO)
  try:
    import rdata  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("reading mlbench .rda files needs `pip install rdata`") from e
  import warnings  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII."
    return rdata.read_rda(path)[name]


def _numeric(df):
  """Feature matrix of an mlbench frame: factors as their codes, constant columns dropped."""
  cols = []
  for c in df.columns:
    s = df[c]
    v = s.cat.codes.to_numpy() if hasattr(s, "cat") else np.asarray(s, dtype=np.float64)
    cols.append(np.asarray(v, np.float64))
  x = np.stack(cols, axis=1)
  return x[:, x.std(axis=0) > 0]


def _mlbench(name, folder, rng):
  if name == "breastw":  # ODDS breastw: 683 complete rows, malignant anomalous
    df = _read_rda(folder, "BreastCancer").dropna()
    y = (df["Class"].astype(str) == "malignant").to_numpy().astype(np.int32)
    x = np.stack([df[c].astype(str).astype(float).to_numpy()
                  for c in df.columns if c not in ("Id", "Class")], axis=1)
    return x, y
  if name == "pima":  # ODDS pima: diabetic anomalous (35%)
    df = _read_rda(folder, "PimaIndiansDiabetes")
    return (_numeric(df.drop(columns="diabetes")),
            (df["diabetes"].astype(str) == "pos").to_numpy().astype(np.int32))
  if name == "ionosphere":  # ODDS ionosphere: 'bad' anomalous, constant column dropped
    df = _read_rda(folder, "Ionosphere")
    return (_numeric(df.drop(columns="Class")),
            (df["Class"].astype(str) == "bad").to_numpy().astype(np.int32))
  if name == "glass":  # ODDS glass: class 6 (tableware, 9 rows) anomalous
    df = _read_rda(folder, "Glass")
    return (_numeric(df.drop(columns="Type")),
            (df["Type"].astype(str) == "6").to_numpy().astype(np.int32))
  if name in ("satellite", "satimage2"):
    df = _read_rda(folder, "Satellite")
    cls = df["classes"].astype(str).to_numpy()
    x = _numeric(df.drop(columns="classes"))
    if name == "satellite":  # ODDS satellite: the three smallest classes anomalous
      return x, np.isin(cls, ["cotton crop", "damp grey soil", "vegetation stubble"]
                        ).astype(np.int32)
    # ODDS satimage-2: class 2 (cotton crop) down-sampled to 71 anomalies
    return _downsample(x, (cls == "cotton crop").astype(np.int32), 71, rng)
  if name == "shuttle":  # ODDS shuttle: class 1 normal, 4 dropped, 2/3/5/6/7 anomalous
    df = _read_rda(folder, "Shuttle")
    cls = df["Class"].astype(str).to_numpy()
    keep = cls != "High"
    return (_numeric(df.drop(columns="Class"))[keep],
            (cls[keep] != "Rad.Flow").astype(np.int32))
  if name == "vehicle":  # dev set: 'van' down-sampled to 5% anomalies
    df = _read_rda(folder, "Vehicle")
    y = (df["Class"].astype(str) == "van").to_numpy().astype(np.int32)
    return _downsample(_numeric(df.drop(columns="Class")), y, 34, rng)
  if name == "sonar":  # dev set: rocks ('R') down-sampled to 10 anomalies
    df = _read_rda(folder, "Sonar")
    y = (df["Class"].astype(str) == "R").to_numpy().astype(np.int32)
    return _downsample(_numeric(df.drop(columns="Class")), y, 10, rng)
  raise ValueError(name)


def synthetic(kind, x_normal, n_normal, n_anom, rng, alpha=5.0, percentage=0.1,
              max_components=5):
  """ADBench-style synthetic anomalies of `kind` around the given normal samples."""
  # Min-max scaled like ADBench's inputs, so the origin is a corner of the data and
  # "means x alpha" moves the clustered anomalies away from the normal clusters.
  lo, hi = x_normal.min(0), x_normal.max(0)
  keep = hi > lo
  base = (x_normal[:, keep] - lo[keep]) / (hi[keep] - lo[keep])
  seed = int(rng.integers(2**31))
  if kind == "dependency":
    # Gaussian copula: normals keep the rank correlation, anomalies lose it.
    n, d = base.shape
    ranks = base.argsort(0).argsort(0)
    from scipy import stats  # pylint: disable=g-import-not-at-top
    zs = stats.norm.ppf((ranks + 0.5) / n)
    corr = np.corrcoef(zs, rowvar=False) + 1e-6 * np.eye(d)
    u_norm = stats.norm.cdf(rng.multivariate_normal(np.zeros(d), corr, size=n_normal))
    u_anom = rng.uniform(size=(n_anom, d))
    marg = lambda u: np.stack([np.quantile(base[:, j], u[:, j]) for j in range(d)], 1)
    x = np.concatenate([marg(u_norm), marg(u_anom)])
  else:
    fits = [mixture.GaussianMixture(k, covariance_type="full", reg_covar=1e-3,
                                    random_state=seed).fit(base)
            for k in range(1, max_components + 1)]
    gmm = min(fits, key=lambda g: g.bic(base))
    xn = gmm.sample(n_normal)[0]
    if kind == "local":
      gmm.covariances_ = gmm.covariances_ * alpha
      xa = gmm.sample(n_anom)[0]
    elif kind == "clustered":
      gmm.means_ = gmm.means_ * alpha
      xa = gmm.sample(n_anom)[0]
    elif kind == "global":
      lo, hi = xn.min(0) * (1 + percentage), xn.max(0) * (1 + percentage)
      xa = rng.uniform(np.minimum(lo, hi), np.maximum(lo, hi), size=(n_anom, xn.shape[1]))
    else:
      raise ValueError(f"unknown synthetic anomaly type {kind!r}; expected {SYNTHETIC_SETS}")
    x = np.concatenate([xn, xa])
  y = np.concatenate([np.zeros(n_normal, np.int32), np.ones(n_anom, np.int32)])
  perm = rng.permutation(len(y))
  return x[perm], y[perm]


def _check_xy(path, x, y):
  y = np.asarray(y).reshape(-1)
  if x.ndim != 2 or y.shape != (x.shape[0],):
    raise ValueError(f"{path}: need X [n, d] and y [n], got {x.shape}, {y.shape}")
  if not set(np.unique(y).tolist()) <= {0, 1}:
    raise ValueError(f"{path}: labels must be 0 (normal) / 1 (anomaly), found "
                     f"{sorted(np.unique(y).tolist())[:5]}")
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{path}: X holds NaN or inf ({int((~np.isfinite(x)).sum())} entries)")
  if y.sum() == 0 or y.sum() == len(y):
    raise ValueError(f"{path}: need both normal (0) and anomalous (1) rows")
  return np.asarray(x, np.float64), y.astype(np.int32)


def load_npz(path: str):
  """An ADBench `.npz` file (arrays X: [n, d], y: [n] with 1 = anomaly)."""
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f"{path} not found; download ADBench's Classical/*.npz files "
        "(github.com/Minqi824/ADBench, datasets/Classical) into that folder")
  with np.load(path, allow_pickle=False) as f:
    if "X" not in f or "y" not in f:
      raise ValueError(f"{path}: expected arrays 'X' and 'y', found {sorted(f.files)}")
    x, y = np.asarray(f["X"], np.float64), np.asarray(f["y"])
  return _check_xy(path, x, y)


def load_mat(path: str):
  """An ODDS `.mat` file (odds.cs.stonybrook.edu: X [n, d], y [n, 1], 1 = outlier).

  MATLAB v5 files are read with scipy; the few v7.3 (HDF5) ODDS files need h5py.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f"{path} not found; download the ODDS .mat file (odds.cs.stonybrook.edu, e.g. "
        "cardio.mat) and pass datasets=mat:<path>")
  from scipy import io as sio  # pylint: disable=g-import-not-at-top
  try:
    m = sio.loadmat(path)
    x, y = m.get("X"), m.get("y")
  except NotImplementedError:  # MATLAB v7.3 = HDF5, stored transposed
    try:
      import h5py  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise ImportError(f"{path} is a MATLAB v7.3 (HDF5) file; pip install h5py") from None
    with h5py.File(path, "r") as f:
      x = np.asarray(f["X"]).T if "X" in f else None
      y = np.asarray(f["y"]).T if "y" in f else None
  except ValueError as e:
    raise ValueError(f"{path}: not a MATLAB .mat file ({e})") from None
  if x is None or y is None:
    raise ValueError(f"{path}: expected variables 'X' and 'y' (the ODDS layout)")
  return _check_xy(path, np.asarray(x, np.float64), y)


def load_csv(path: str, label: str = "label"):
  """A user CSV with a header row: numeric feature columns and a 0/1 `label` column."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} not found (datasets=csv:<path> needs a CSV file with "
                            f"a header and a 0/1 column {label!r})")
  import pandas as pd  # pylint: disable=g-import-not-at-top
  df = pd.read_csv(path)
  if label not in df.columns:
    raise ValueError(f"{path}: no label column {label!r} (columns: "
                     f"{', '.join(map(str, df.columns[:10]))}); set data.csv_label")
  feats = df.drop(columns=label)
  bad = [c for c in feats.columns if not pd.api.types.is_numeric_dtype(feats[c])]
  if bad:
    raise ValueError(f"{path}: non-numeric feature columns {bad[:5]}; encode them first")
  return _check_xy(path, feats.to_numpy(np.float64), df[label].to_numpy())


FILE_KINDS = ("npz", "mat", "csv")


def file_spec(name: str):
  """'csv:/data/cardio.csv' -> ('csv', '/data/cardio.csv'); None for built-in names."""
  kind, sep, path = name.partition(":")
  return (kind, path) if sep and kind in FILE_KINDS else None


def display_name(name: str) -> str:
  """Table/randomness name of a dataset: built-in name, or '<kind>:<file stem>'.

  The file's folder is not part of it, so moving a file does not change its seeds.
  """
  spec = file_spec(name)
  if spec is None:
    return name
  stem = os.path.splitext(os.path.basename(spec[1]))[0]
  return f"{spec[0]}:{stem}"


def raw(name: str, seed: int = 0, mlbench: str = "", npz_dir: str = "",
        synthetic_base: str = "wbc", synthetic_n: int = 2000, synthetic_ratio: float = 0.05,
        max_n: int = 4000, csv_label: str = "label"):
  """(X, y) of a named set: sklearn, mlbench, synthetic, or a file 'npz:'/'mat:'/'csv:'.

  'npz:<stem>' reads <npz_dir>/<stem>.npz; 'npz:<path>.npz', 'mat:<path>' (ODDS) and
  'csv:<path>' (label column `csv_label`) read the given file.
  """
  rng = np.random.default_rng(seed)
  spec = file_spec(name)
  if spec is not None:
    kind, path = spec
    if kind == "npz":
      if not path.endswith(".npz"):
        path = os.path.join(npz_dir, path + ".npz")
      x, y = load_npz(path)
    elif kind == "mat":
      x, y = load_mat(path)
    else:
      x, y = load_csv(path, csv_label)
  elif name in SKLEARN_SETS:
    x, y = _sklearn(name, rng)
  elif name in MLBENCH_SETS + DEV_SETS:
    x, y = _mlbench(name, mlbench_dir(mlbench), rng)
  elif name in SYNTHETIC_SETS:
    bx, by = raw(synthetic_base, seed, mlbench, npz_dir, max_n=max_n)
    n_anom = int(round(synthetic_ratio * synthetic_n))
    x, y = synthetic(name, bx[by == 0], synthetic_n - n_anom, n_anom, rng)
  else:
    raise ValueError(f"unknown dataset {name!r}; known: "
                     f"{', '.join(SKLEARN_SETS + MLBENCH_SETS + SYNTHETIC_SETS)}, or a file "
                     "npz:<path|stem>, mat:<path> (ODDS), csv:<path>")
  return _cap(np.asarray(x, np.float64), np.asarray(y, np.int32), max_n, rng, name)


SCALINGS = ("zscore", "minmax")


def split(name: str, x, y, test_frac: float = 0.3, seed: int = 0,
          scaling: str = "zscore") -> ADData:
  """Stratified split; scaling statistics come from the training rows only.

  scaling: 'zscore' (mean 0, std 1) or 'minmax' ([0, 1] on the training rows, ADBench's
  MinMaxScaler; test rows may fall outside).
  """
  if scaling not in SCALINGS:
    raise ValueError(f"unknown scaling {scaling!r}; expected one of {SCALINGS}")
  idx_tr, idx_te = model_selection.train_test_split(
      np.arange(len(y)), test_size=test_frac, stratify=y, random_state=seed)
  if scaling == "zscore":
    mu = x[idx_tr].mean(0)
    sd = x[idx_tr].std(0)
  else:
    mu = x[idx_tr].min(0)
    sd = x[idx_tr].max(0) - mu
  sd = np.where(sd > 0, sd, 1.0)
  f = lambda a: ((a - mu) / sd).astype(np.float32)
  return ADData(name, f(x[idx_tr]), y[idx_tr], f(x[idx_te]), y[idx_te])


def load(name: str, seed: int = 0, test_frac: float = 0.3, scaling: str = "zscore",
         **kw) -> ADData:
  x, y = raw(name, seed, **kw)
  return split(display_name(name), x, y, test_frac, seed, scaling)


def independent_columns(x_train: np.ndarray, rtol: float = 1e-6) -> np.ndarray:
  """Mask of a maximal set of linearly independent columns of the centered training rows.

  Greedy in column order (a later duplicate or linear combination is the one dropped):
  column j is kept when its residual after projecting onto the kept columns (and the
  constant) exceeds `rtol` times its centered norm, so constant columns go too. This is
  the "drop collinear columns" fix of rank-deficient tables such as ODDS cardio (rank
  20 of 21), on which PyOD's PCA divides by a zero eigenvalue.
  """
  xc = np.asarray(x_train, np.float64)
  xc = xc - xc.mean(0)
  keep = np.zeros(xc.shape[1], bool)
  basis = np.zeros((xc.shape[0], 0))
  for j in range(xc.shape[1]):
    v = xc[:, j]
    norm = np.linalg.norm(v)
    if norm == 0:
      continue
    r = v - basis @ (basis.T @ v)
    r = r - basis @ (basis.T @ r)  # second Gram-Schmidt pass for stability
    if np.linalg.norm(r) > rtol * norm:
      keep[j] = True
      basis = np.concatenate([basis, (r / np.linalg.norm(r))[:, None]], axis=1)
  return keep


def rank_note(name: str, x_train: np.ndarray, keep: np.ndarray) -> str | None:
  """One run-log line saying which columns were dropped and why (None if none)."""
  if keep.all():
    return None
  dropped = np.flatnonzero(~keep).tolist()
  const = [j for j in dropped if np.ptp(x_train[:, j]) == 0]
  coll = [j for j in dropped if j not in const]
  parts = []
  if const:
    parts.append(f"{len(const)} constant {const[:10]}")
  if coll:
    parts.append(f"{len(coll)} collinear (linear combinations of earlier ones) {coll[:10]}")
  return (f"lpr data: {name}: training rows have rank {int(keep.sum())} of "
          f"{len(keep)} columns; the classical detectors drop " + " and ".join(parts)
          + " column(s)")


def semi_labels(y_train, frac: float, seed: int = 0, min_labeled: int = 1):
  """Deep SAD's view of the labels: a random `frac` of the training anomalies labeled."""
  rng = np.random.default_rng(seed + 1)
  anom = np.flatnonzero(y_train == 1)
  k = min(len(anom), max(min_labeled, int(round(frac * len(anom)))))
  out = np.zeros_like(y_train)
  out[rng.choice(anom, size=k, replace=False)] = 1
  return out
