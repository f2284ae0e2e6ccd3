"""Image classification sources that yield numpy batches as a pure function of (seed, step).

Every source is an in-memory (or random-access) array pair, so the batch at step s is
`indices(seed, s)` into it: a fresh permutation per epoch, seeded by (seed, epoch). A run
restarted at step s therefore sees exactly the batches the uninterrupted run saw, and each
process of a multi-host run reads only its own rows of the global batch.

Sources:
- `digits`: scikit-learn's bundled 8x8 digits (always present, no download).
- `fashion_mnist`: the IDX files (Debian `dataset-fashion-mnist` installs them in
  /usr/share/datasets/fashion-mnist; any directory via `data.path`).
- `tfds:<name>` (cifar10, cifar100, mnist, imagenet2012, ...): `tfds.data_source` over a
  prepared TFDS directory; never downloads. A batch is read with one vectorized
  `__getitems__` call (ArrayRecord reads the records together), not record by record.

Image input path for research runs:
- `normalize(ds)`: per-channel standardization with the training split's mean and std
  (from up to 10,000 training images read in one batch; exact for in-memory sets).
- `random_crop_flip(key, images, pad, flip)`: zero-pad + random crop and horizontal flip,
  in JAX and pure in `key`; with the loop's `fold_in(rng, step)` key an augmented run
  resumes exactly.
"""
from __future__ import annotations

import dataclasses
import functools
import gzip
import difflib
import os
import re
from typing import Any

import numpy as np

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


@dataclasses.dataclass
class ArraySplit:
  """A split held as arrays (images NHWC float32 in [0, 1], labels int32), or any
  random-access object with `__len__` and `get(indices) -> (images, labels)`."""
  images: Any
  labels: Any = None

  def __len__(self):
    return len(self.images)

  def get(self, idx):
    if self.labels is None:  # random-access source (TFDS)
      return self.images.get(idx)
    return self.images[idx], self.labels[idx]


@dataclasses.dataclass
class Dataset:
  name: str
  train: ArraySplit
  test: ArraySplit
  input_shape: tuple
  num_classes: int


@functools.lru_cache(maxsize=8)
def _epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
  return np.random.default_rng([seed, epoch]).permutation(n)


def batch_indices(seed: int, step: int, batch_size: int, n: int) -> np.ndarray:
  """Indices of the global batch at `step`: a pure function of (seed, step)."""
  pos = step * batch_size + np.arange(batch_size)
  epoch, offset = np.divmod(pos, n)
  out = np.empty(batch_size, np.int64)
  for e in np.unique(epoch):
    sel = epoch == e
    out[sel] = _epoch_permutation(seed, int(e), n)[offset[sel]]
  return out


def train_batch(ds: Dataset, seed: int, step: int, batch_size: int,
                rows: slice = slice(None)) -> dict:
  """The (process-local `rows` of the) global training batch at `step`."""
  idx = batch_indices(seed, step, batch_size, len(ds.train))[rows]
  images, labels = ds.train.get(idx)
  return {"image": images, "label": labels}


def eval_batches(ds: Dataset, batch_size: int, rows: slice = slice(None),
                 split: str = "test"):
  """Yields fixed-size batches over a split; the last is padded and `mask` marks real rows."""
  data = getattr(ds, split)
  n = len(data)
  for start in range(0, n, batch_size):
    idx = np.arange(start, start + batch_size)
    mask = idx < n
    idx = np.where(mask, idx, 0)[rows]
    images, labels = data.get(idx)
    yield {"image": images, "label": labels, "mask": mask[rows].astype(np.float32)}


# ----------------------------------------------------------------------------- sources

def digits(test_fraction: float = 0.2) -> Dataset:
  """scikit-learn's 1797 bundled 8x8 digits, split 80/20 with a fixed permutation."""
  from sklearn.datasets import load_digits
  d = load_digits()
  images = (d.images / 16.0).astype(np.float32)[..., None]
  labels = d.target.astype(np.int32)
  perm = np.random.default_rng(0).permutation(len(labels))
  n_test = int(round(test_fraction * len(labels)))
  test, train = perm[:n_test], perm[n_test:]
  return Dataset("digits", ArraySplit(images[train], labels[train]),
                 ArraySplit(images[test], labels[test]), (8, 8, 1), 10)


def _read_idx(path: str) -> np.ndarray:
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rb") as f:
    data = f.read()
  if data[:2] != b"\x00\x00":
    raise ValueError(f"{path}: not an IDX file")
  dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
           0x0E: ">f8"}[data[2]]
  ndim = data[3]
  shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
  return np.frombuffer(data, dtype, offset=4 + 4 * ndim).reshape(shape)


def _find(directory: str, stem: str) -> str:
  for name in (stem, stem + ".gz"):
    p = os.path.join(directory, name)
    if os.path.exists(p):
      return p
  raise FileNotFoundError(
      f"Fashion-MNIST file {stem}[.gz] not found in {directory}. Install it with "
      "`apt-get install dataset-fashion-mnist` (puts the IDX files in "
      f"{FASHION_MNIST_DIR}) or point data.path at a directory holding the four IDX "
      "files from github.com/zalandoresearch/fashion-mnist.")


def fashion_mnist(path: str = FASHION_MNIST_DIR) -> Dataset:
  """The full 60k/10k Fashion-MNIST from its four IDX files."""
  if not os.path.isdir(path):
    _find(path, "train-images-idx3-ubyte")  # raises with the how-to
  def split(prefix):
    x = _read_idx(_find(path, f"{prefix}-images-idx3-ubyte"))
    y = _read_idx(_find(path, f"{prefix}-labels-idx1-ubyte"))
    return ArraySplit((x.astype(np.float32) / 255.0)[..., None], y.astype(np.int32))
  return Dataset("fashion_mnist", split("train"), split("t10k"), (28, 28, 1), 10)


class _TfdsSplit:
  """Random access to a TFDS split through `tfds.data_source` (ArrayRecord, no TF)."""

  def __init__(self, source):
    self.source = source

  def __len__(self):
    return len(self.source)

  def get(self, idx):
    keys = [int(i) for i in idx]
    # One vectorized read per batch (ArrayRecord fetches the records together).
    records = self.source.__getitems__(keys)
    images = np.stack([np.asarray(r["image"]) for r in records]).astype(np.float32) / 255.0
    labels = np.asarray([r["label"] for r in records], np.int32)
    return images, labels


TFDS_SPLITS = {"imagenet2012": ("train", "validation")}


def tfds_images(name: str, data_dir: str | None = None) -> Dataset:
  """A prepared TFDS image set; raises naming the directory and how to prepare it.

  `tfds.data_source` never downloads with `download=False`, so a missing dataset fails at
  once instead of hanging on the network. Images must share one shape (cifar, mnist);
  ImageNet needs a resized variant (e.g. `imagenet_resized/32x32`).
  """
  import tensorflow_datasets as tfds
  train_split, test_split = TFDS_SPLITS.get(name, ("train", "test"))
  try:
    sources = tfds.data_source(name, split=[train_split, test_split], data_dir=data_dir,
                               download=False)
  except Exception as e:  # tfds raises several types for a missing/unprepared dataset
    # An unknown name makes tfds list all ~1,000 builders; name the closest ones instead.
    known = re.findall(r"^\s*- (\S+)\s*$", str(e), flags=re.M)
    base = name.split("/")[0].split(":")[0]
    if known and base not in known:
      close = difflib.get_close_matches(base, known, n=5, cutoff=0.6)
      raise FileNotFoundError(
          f"no TFDS dataset named {base!r}"
          + (f"; did you mean {', '.join(close)}?" if close else "")) from None
    where = data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")
    raise FileNotFoundError(
        f"TFDS dataset {name!r} is not prepared in {where} "
        f"({type(e).__name__}: {str(e).strip().splitlines()[0][:200]}). "
        f"Prepare it on a machine with network access with `tfds build {name} "
        f"--data_dir=DIR --file_format=array_record` (needs `pip install tensorflow`), "
        "copy DIR here and set data.path=DIR.") from None
  info = sources[0].dataset_info
  shape = tuple(info.features["image"].shape)
  num_classes = info.features["label"].num_classes
  return Dataset(name, ArraySplit(_TfdsSplit(sources[0])),
                 ArraySplit(_TfdsSplit(sources[1])), shape, num_classes)


# ------------------------------------------------------------------- image input path

class NormalizedSplit:
  """A split whose images come out standardized per channel: (x - mean) / std."""

  def __init__(self, split, mean, std):
    self.split, self.mean, self.std = split, np.float32(mean), np.float32(std)

  def __len__(self):
    return len(self.split)

  def get(self, idx):
    images, labels = self.split.get(idx)
    return (images - self.mean) / self.std, labels

  @property
  def images(self):  # whole-array access for in-memory splits (studies put it on device)
    return (self.split.images - self.mean) / self.std

  @property
  def labels(self):
    return self.split.labels


def channel_stats(split, max_examples: int = 10_000, seed: int = 0):
  """Per-channel mean and std of a split's images (a fixed sample of at most
  `max_examples`, read in one batch; every image when the split is that small)."""
  n = len(split)
  idx = (np.arange(n) if n <= max_examples
         else np.sort(np.random.default_rng(seed).choice(n, max_examples, replace=False)))
  images, _ = split.get(idx)
  images = np.asarray(images, np.float64)
  axes = tuple(range(images.ndim - 1))
  std = images.std(axis=axes)
  if np.any(std == 0):
    raise ValueError(f"a channel of the training images is constant (std {std}); "
                     "cannot standardize it")
  return images.mean(axis=axes).astype(np.float32), std.astype(np.float32)


def normalize(ds: Dataset, stats=None) -> Dataset:
  """`ds` with both splits standardized by the TRAINING split's per-channel statistics."""
  mean, std = channel_stats(ds.train) if stats is None else stats
  return dataclasses.replace(ds, train=NormalizedSplit(ds.train, mean, std),
                             test=NormalizedSplit(ds.test, mean, std))


def random_crop_flip(key, images, pad: int, flip: bool = True):
  """Zero-pad each NHWC image by `pad`, crop back at a random offset, flip half of them
  left-right. Pure in `key` (jittable, vmappable); pad=0 and flip=False is the identity."""
  import jax
  import jax.numpy as jnp
  n, h, w, _ = images.shape
  k_off, k_flip = jax.random.split(key)
  if pad > 0:
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    off = jax.random.randint(k_off, (n, 2), 0, 2 * pad + 1)
    images = jax.vmap(lambda x, o: jax.lax.dynamic_slice(
        x, (o[0], o[1], 0), (h, w, x.shape[-1])))(padded, off)
  if flip:
    do = jax.random.bernoulli(k_flip, 0.5, (n,))
    images = jnp.where(do[:, None, None, None], images[:, :, ::-1], images)
  return images


def load(name: str, path: str = "") -> Dataset:
  """Dispatches `data.name` ('digits', 'fashion_mnist', 'tfds:cifar10', ...)."""
  if name == "digits":
    return digits()
  if name == "fashion_mnist":
    return fashion_mnist(path or FASHION_MNIST_DIR)
  if name.startswith("tfds:"):
    return tfds_images(name[len("tfds:"):], path or None)
  raise ValueError(f"unknown dataset {name!r}; use digits, fashion_mnist or tfds:<name>")
