"""Data sources: pure (seed, step) batches, process slices, IDX parsing, TFDS offline."""
import gzip
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


# --------------------------------------------------------------- image input path

@pytest.fixture
def tfds_mock_getitems(monkeypatch):
  """tfds' mock_data installs `__getitems__` on a MagicMock as a plain attribute, so it is
  called without `self` and fails (tensorflow-datasets 4.9.x); this binds it correctly.
  Real ArrayRecord data sources are unaffected."""
  from tensorflow_datasets.testing import mocking
  calls = []

  def getitems(record_keys, generator, serialized=False):
    calls.append(list(record_keys))
    return [generator[k] for k in record_keys]
  monkeypatch.setattr(mocking, "_getitems", getitems)
  return calls


def test_tfds_batches_are_read_in_one_vectorized_call(tfds_mock_getitems, monkeypatch):
  with tfds.testing.mock_data(num_examples=24):
    ds = sources.load("tfds:cifar10")
    single = []
    inner = ds.train.images.source
    monkeypatch.setattr(type(inner), "__getitem__",
                        lambda self, k: single.append(k) or (_ for _ in ()).throw(
                            AssertionError("read one by one")))
    b = sources.train_batch(ds, 0, 1, 8)
  assert b["image"].shape == (8, 32, 32, 3)
  assert tfds_mock_getitems == [sources.batch_indices(0, 1, 8, 24).tolist()]
  assert single == []


@pytest.fixture(autouse=True)
def _bind_mock_getitems(request, monkeypatch):
  # Every tfds mock test in this file needs the binding fix above.
  if "tfds_mock_getitems" not in request.fixturenames:
    from tensorflow_datasets.testing import mocking
    monkeypatch.setattr(mocking, "_getitems", lambda keys, generator, serialized=False:
                        [generator[k] for k in keys])


def test_normalize_uses_training_statistics_per_channel():
  rng = np.random.default_rng(0)
  tr = rng.normal([1.0, -2.0, 5.0], [0.5, 2.0, 3.0], size=(200, 4, 4, 3)).astype(np.float32)
  te = rng.normal(size=(50, 4, 4, 3)).astype(np.float32)
  ds = sources.Dataset("toy", sources.ArraySplit(tr, np.zeros(200, np.int32)),
                       sources.ArraySplit(te, np.zeros(50, np.int32)), (4, 4, 3), 2)
  nd = sources.normalize(ds)
  x, _ = nd.train.get(np.arange(200))
  np.testing.assert_allclose(x.reshape(-1, 3).mean(0), 0.0, atol=1e-5)
  np.testing.assert_allclose(x.reshape(-1, 3).std(0), 1.0, atol=1e-5)
  mean, std = tr.reshape(-1, 3).mean(0), tr.reshape(-1, 3).std(0)
  xt, _ = nd.test.get(np.arange(5))
  np.testing.assert_allclose(xt, (te[:5] - mean) / std, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(nd.train.images, x, rtol=1e-6)


def test_normalize_rejects_constant_channel():
  tr = np.zeros((10, 2, 2, 1), np.float32)
  ds = sources.Dataset("c", sources.ArraySplit(tr, np.zeros(10, np.int32)),
                       sources.ArraySplit(tr, np.zeros(10, np.int32)), (2, 2, 1), 2)
  with pytest.raises(ValueError, match="constant"):
    sources.normalize(ds)


def test_normalize_tfds_reads_one_sample_batch(tfds_mock_getitems):
  with tfds.testing.mock_data(num_examples=30):
    ds = sources.normalize(sources.load("tfds:cifar10"))
    b = sources.train_batch(ds, 0, 0, 6)
  assert b["image"].shape == (6, 32, 32, 3) and b["image"].min() < 0.0
  assert len(tfds_mock_getitems[0]) == 30  # the statistics: one call over the split


def _np_crops(x, pad):
  """Every crop (and its mirror) a pad-and-crop can produce: the brute-force reference."""
  h, w = x.shape[:2]
  p = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
  crops = [p[i:i + h, j:j + w] for i in range(2 * pad + 1) for j in range(2 * pad + 1)]
  return crops + [c[:, ::-1] for c in crops]


def test_random_crop_flip_is_a_pure_crop_of_the_padded_image():
  import jax
  x = np.random.default_rng(0).normal(size=(64, 6, 5, 2)).astype(np.float32)
  key = jax.random.fold_in(jax.random.PRNGKey(3), 17)  # (seed, step)
  out = np.asarray(sources.random_crop_flip(key, x, 2, True))
  np.testing.assert_array_equal(out, np.asarray(sources.random_crop_flip(key, x, 2, True)))
  assert not np.array_equal(out, np.asarray(sources.random_crop_flip(
      jax.random.fold_in(jax.random.PRNGKey(3), 18), x, 2, True)))
  found = []
  for i in range(len(x)):
    matches = [k for k, c in enumerate(_np_crops(x[i], 2)) if np.array_equal(c, out[i])]
    assert matches, f"image {i} is not a crop/flip of its padded input"
    found.append(matches[0])
  flipped = np.asarray(found) >= 25
  assert 0.2 < flipped.mean() < 0.8  # about half flipped
  assert len(set(np.asarray(found) % 25)) > 10  # offsets spread over the 5x5 choices
  np.testing.assert_array_equal(np.asarray(sources.random_crop_flip(key, x, 0, False)), x)
