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
  prepared TFDS directory; never downloads.
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
    records = [self.source[int(i)] for i in idx]
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


def load(name: str, path: str = "") -> Dataset:
  """Dispatches `data.name` ('digits', 'fashion_mnist', 'tfds:cifar10', ...)."""
  if name == "digits":
    return digits()
  if name == "fashion_mnist":
    return fashion_mnist(path or FASHION_MNIST_DIR)
  if name.startswith("tfds:"):
    return tfds_images(name[len("tfds:"):], path or None)
  raise ValueError(f"unknown dataset {name!r}; use digits, fashion_mnist or tfds:<name>")
