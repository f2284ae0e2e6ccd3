"""Data sources: pure (seed, step) batches, process slices, IDX parsing, TFDS offline."""
import gzip
import os
import struct

import numpy as np
import pytest
import tensorflow_datasets as tfds

from jaxpapers.data import sources


def test_batches_are_a_pure_function_of_seed_and_step():
  ds = sources.digits()
  a = sources.train_batch(ds, 3, 17, 32)
  b = sources.train_batch(ds, 3, 17, 32)
  np.testing.assert_array_equal(a["image"], b["image"])
  assert not np.array_equal(a["label"], sources.train_batch(ds, 4, 17, 32)["label"])


def test_each_epoch_is_a_permutation_and_rows_slice_the_global_batch():
  n = 10
  idx = np.concatenate([sources.batch_indices(0, s, 4, n) for s in range(5)])
  assert sorted(idx[:n].tolist()) == list(range(n))  # epoch 0 visits each row once
  assert sorted(idx[n:2 * n].tolist()) == list(range(n))
  ds = sources.digits()
  full = sources.train_batch(ds, 0, 2, 8)
  halves = [sources.train_batch(ds, 0, 2, 8, slice(i * 4, i * 4 + 4)) for i in range(2)]
  np.testing.assert_array_equal(np.concatenate([h["label"] for h in halves]), full["label"])


def test_eval_batches_cover_the_split_once_with_mask():
  ds = sources.digits()
  batches = list(sources.eval_batches(ds, 100))
  assert all(b["image"].shape[0] == 100 for b in batches)
  assert sum(b["mask"].sum() for b in batches) == len(ds.test)


def _write_idx(path, array):
  dtype_code = {np.uint8: 0x08}[array.dtype.type]
  header = b"\x00\x00" + bytes([dtype_code, array.ndim])
  header += b"".join(struct.pack(">I", s) for s in array.shape)
  with gzip.open(path, "wb") as f:
    f.write(header + array.tobytes())


def test_fashion_mnist_reads_idx_files(tmp_path):
  rng = np.random.default_rng(0)
  for prefix, n in (("train", 12), ("t10k", 5)):
    _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz",
               rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
    _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz",
               rng.integers(0, 10, (n,), dtype=np.uint8))
  ds = sources.fashion_mnist(str(tmp_path))
  assert ds.train.images.shape == (12, 28, 28, 1) and len(ds.test) == 5
  assert ds.train.images.max() <= 1.0 and ds.train.labels.dtype == np.int32


def test_missing_fashion_mnist_names_path_and_how_to_get_it(tmp_path):
  with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
    sources.fashion_mnist(str(tmp_path / "missing"))


@pytest.mark.parametrize("name,shape,classes", [("cifar10", (32, 32, 3), 10),
                                                ("cifar100", (32, 32, 3), 100),
                                                ("mnist", (28, 28, 1), 10)])
def test_tfds_sources_offline_with_mock_data(name, shape, classes):
  with tfds.testing.mock_data(num_examples=24):
    ds = sources.load(f"tfds:{name}")
    assert ds.input_shape == shape and ds.num_classes == classes
    b = sources.train_batch(ds, 0, 1, 8)
    assert b["image"].shape == (8, *shape) and b["image"].dtype == np.float32
    assert 0.0 <= b["image"].min() and b["image"].max() <= 1.0
    assert list(sources.eval_batches(ds, 16))[0]["mask"].shape == (16,)


def test_tfds_imagenet_split_names_offline():
  with tfds.testing.mock_data(num_examples=4):
    ds = sources.load("tfds:imagenet2012")
    assert len(ds.train) == 4 and len(ds.test) == 4


def test_unprepared_tfds_fails_fast_naming_dir_and_fix(tmp_path):
  with pytest.raises(FileNotFoundError, match=f"{tmp_path}.*tfds build cifar10"):
    sources.load("tfds:cifar10", str(tmp_path))


def test_unknown_tfds_name_lists_close_matches_only(tmp_path):
  with pytest.raises(FileNotFoundError) as e:
    sources.load("tfds:cifar1O", str(tmp_path))
  msg = str(e.value)
  assert "did you mean cifar10" in msg and "\n" not in msg and len(msg) < 300
