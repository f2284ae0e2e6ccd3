"""llops MQAR: the generator's labels against an independent per-row lookup, its query-gap
law against Zoology's power law, the long-range variant's defining property (answers more
than L/2 back, nothing nearer carries them, chance without them), the masked accuracy against NumPy, and the study's
staged LR selection (edge extension, then the other seeds at the chosen LR)."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.papers.llops import mqar


@pytest.mark.parametrize("random_fill", [False, True])
def test_mqar_labels_match_an_independent_lookup(random_fill):
  T, V, kv, n = 32, 64, 5, 200
  x, y = mqar.generate(np.random.default_rng(0), n, T, V, kv, random_non_queries=random_fill)
  assert x.shape == y.shape == (n, T)
  for row_x, row_y in zip(x, y):
    keys, vals = row_x[0:2 * kv:2], row_x[1:2 * kv:2]
    assert np.all((keys >= 1) & (keys < V // 2)) and len(set(keys)) == kv
    assert np.all((vals >= V // 2) & (vals < V)) and len(set(vals)) == kv
    table = dict(zip(keys.tolist(), vals.tolist()))
    pos = np.flatnonzero(row_y != mqar.IGNORE)
    assert len(pos) == kv                                  # one query per pair
    assert np.all(pos >= 2 * kv) and np.all((pos - 2 * kv) % 2 == 0)
    assert sorted(row_x[pos].tolist()) == sorted(keys.tolist())  # every key queried once
    for t in pos:                                          # the label is the key's value
      assert row_y[t] == table[int(row_x[t])]
    if not random_fill:                                    # filler is 0 off the queries
      rest = np.setdiff1d(np.arange(2 * kv, T), pos)
      assert np.all(row_x[rest] == 0)
  if random_fill:                                          # filler spans the vocabulary
    assert x[:, 2 * kv:].max() > V // 2 and (x[:, 2 * kv:] == 0).mean() < 0.1


def test_mqar_first_query_gap_follows_the_power_law():
  # Key 1's query slot is the first draw of the without-replacement sample, so its law is
  # p(g) ~ a (g + 1)^(a - 1) itself (Zoology's choice(p=...)), whatever kv is.
  T, V, kv, n = 32, 64, 3, 40000
  for a in (0.01, 1.0):
    x, y = mqar.generate(np.random.default_rng(1), n, T, V, kv, power_a=a,
                         random_non_queries=False)
    space = (T - 2 * kv) // 2
    slot = np.argmax(x[:, 2 * kv:] == x[:, :1], axis=1)    # where key 1 is queried
    freq = np.bincount(slot // 2, minlength=space) / n
    p = a * np.arange(1, space + 1) ** (a - 1)
    p = p / p.sum()
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p) < 5 * se + 1e-9), (a, freq, p)


@pytest.mark.parametrize("kv", [1, 4, 8])
def test_long_range_answers_lie_more_than_half_the_sequence_back(kv):
  """generate_far's defining property, checked on the tokens: each query's key occurs
  once before it, more than L/2 back, directly followed by the label; within L/2 before a
  query there are only noise tokens and other queries (no value token at all); the
  labels agree with an independent lookup."""
  L, V, n = 256, 64, 300
  (k0, k1), (z0, z1), (v0, v1) = mqar.far_layout(L, V, kv)
  x, y = mqar.generate_far(np.random.default_rng(kv), n, L, V, kv)
  assert x.shape == y.shape == (n, L) and x.dtype == y.dtype == np.int32
  is_val = (x >= v0) & (x < v1)
  for row_x, row_y in zip(x, y):
    pos = np.flatnonzero(row_y != mqar.IGNORE)
    assert len(pos) == kv and np.all(pos >= 3 * L // 4)       # queries in the last quarter
    assert len(set(row_x[pos].tolist())) == kv
    for t in pos:
      key = int(row_x[t])
      assert k0 <= key < k1
      first = np.flatnonzero(row_x[:t] == key)
      assert len(first) == 1 and t - first[0] > L // 2        # the pair is far back ...
      assert row_y[t] == row_x[first[0] + 1]                  # ... and holds the answer
      near = row_x[t - L // 2:t + 1]
      assert not np.any((near >= v0) & (near < v1))           # nothing near carries it
      assert np.all(((near >= z0) & (near < z1)) | np.isin(near, row_x[pos]))
  # Noise fills everything off the pairs and queries; every value is a pair's second token.
  assert is_val.sum() == n * kv and np.all(is_val[:, L // 4:] == 0)
  pairs = ((x >= k0) & (x < k1))[:, :L // 4]
  assert pairs.sum() == n * kv and ((x >= z0) & (x < z1)).sum() == n * (L - 3 * kv)


def test_long_range_is_at_chance_without_the_far_half():
  """No-memory baseline: the best guess from the query token alone (the most frequent
  value per key on half the rows) scores chance, 1 / (number of values), on the rest."""
  L, V, kv, n = 64, 64, 8, 20000
  (_, _), (_, _), (v0, v1) = mqar.far_layout(L, V, kv)
  x, y = mqar.generate_far(np.random.default_rng(7), n, L, V, kv)
  m = y != mqar.IGNORE
  keys, vals = x[m].reshape(n, kv), y[m].reshape(n, kv)
  table = np.zeros((V, V))
  np.add.at(table, (keys[:n // 2], vals[:n // 2]), 1)
  guess = table.argmax(1)[keys[n // 2:]]
  acc, p = float(np.mean(guess == vals[n // 2:])), 1 / (v1 - v0)
  assert abs(acc - p) < 5 * np.sqrt(p * (1 - p) / (n // 2 * kv)), acc
  with pytest.raises(ValueError, match="first quarter"):
    mqar.generate_far(np.random.default_rng(0), 2, 32, 64, 5)
  with pytest.raises(ValueError, match="keys for"):
    mqar.generate_far(np.random.default_rng(0), 2, 512, 16, 8)


def test_mqar_masked_accuracy_and_loss_against_numpy():
  rng = np.random.default_rng(2)
  x, y = mqar.generate(rng, 16, 32, 64, 4)
  logits = rng.standard_normal((16, 32, 64)).astype(np.float32)
  logits[0, np.flatnonzero(y[0] != mqar.IGNORE), y[0][y[0] != mqar.IGNORE]] += 100.0
  s, c, h = (np.asarray(a) for a in mqar.masked_ce(jnp.asarray(logits), jnp.asarray(y)))
  m = y != mqar.IGNORE
  lse = np.log(np.exp(logits.astype(np.float64)).sum(-1))
  ce = lse - np.take_along_axis(logits, np.where(m, y, 0)[..., None], -1)[..., 0]
  np.testing.assert_allclose(s, (ce * m).sum(1), rtol=1e-4)
  np.testing.assert_array_equal(c, m.sum(1))
  np.testing.assert_array_equal(h, ((logits.argmax(-1) == y) & m).sum(1))
  assert h[0] == 4                                           # the boosted row is all right
  acc = float(mqar.accuracy_fn(lambda p, t: jnp.asarray(logits))(None, x, y))
  assert math.isclose(acc, h.sum() / c.sum(), rel_tol=1e-6)


def test_mqar_rejects_impossible_settings():
  with pytest.raises(ValueError, match="4 \\* n_kv"):
    mqar.generate(np.random.default_rng(0), 2, 16, 64, 5)
  with pytest.raises(ValueError, match="exceed"):
    mqar.generate(np.random.default_rng(0), 2, 32, 32, 4)


def test_staged_selection_extends_past_the_edge_then_runs_the_other_seeds():
  from jaxpapers.papers.llops import study
  calls = []

  def run(pop):  # validation loss with its minimum at lr = 1e-1 (outside the grid)
    calls.append(sorted({(m["seed"], m["lr"]) for m in pop}))
    return [{"seed": m["seed"], "lr": m["lr"], "v": (math.log10(m["lr"]) + 1) ** 2}
            for m in pop]

  rows = study.staged(run, (1e-4, 1e-3, 1e-2), [0, 1, 2],
                      lambda rs: np.mean([r["v"] for r in rs]), max_ext=3)
  lrs0 = sorted(r["lr"] for r in rows if r["seed"] == 0)
  np.testing.assert_allclose(lrs0, [1e-4, 1e-3, 1e-2, 1e-1, 1.0])  # extended twice
  rest = [(r["seed"], r["lr"]) for r in rows if r["seed"] != 0]
  assert sorted(s for s, _ in rest) == [1, 2]
  np.testing.assert_allclose([lr for _, lr in rest], [1e-1, 1e-1])  # chosen, interior
  assert len(calls) == 4
  # A diverged (NaN) member never wins; the full grid without stage 1.
  rows = study.staged(lambda pop: [{"seed": m["seed"], "lr": m["lr"], "v": float("nan")}
                                   for m in pop], (1e-3,), [0, 1], lambda rs: rs[0]["v"],
                      stage1=False)
  assert len(rows) == 2


def test_bigram_baseline_against_a_counting_loop():
  # The trivial model of part 2: add-alpha bigram counts from the train split; bits per
  # byte of the held-out windows' targets, alpha picked on the validation windows.
  from jaxpapers.papers.llops import study
  rng = np.random.default_rng(3)
  V = 4
  train = rng.integers(0, V, 300)
  val, test = rng.integers(0, V, (3, 9)), rng.integers(0, V, (2, 9))
  nbytes = np.array([1, 1, 2, 1])  # one multi-byte token
  got = study.bigram_bpb(train, val, test, V, nbytes, alphas=(0.5, 5.0))

  def bpb(w, a):
    nll = nb = 0.0
    for row in w:
      for prev, nxt in zip(row[:-1], row[1:]):
        c = sum(1 for i in range(len(train) - 1) if train[i] == prev and train[i + 1] == nxt)
        tot = sum(1 for i in range(len(train) - 1) if train[i] == prev)
        nll -= math.log2((c + a) / (tot + V * a))
        nb += nbytes[nxt]
    return nll / nb

  best = min((0.5, 5.0), key=lambda a: bpb(val, a))
  assert got["alpha"] == best
  assert math.isclose(got["val_bpb"], bpb(val, best), rel_tol=1e-9)
  assert math.isclose(got["test_bpb"], bpb(test, best), rel_tol=1e-9)


def test_mqar_config_errors_name_the_problem():
  from jaxpapers.core import config as config_lib
  from jaxpapers.papers.llops import experiment
  base = config_lib.load("configs/llops.py:smoke")
  experiment.validate(base)
  for key, value, match in (("mqar.runs", ("softmax", "nope@64"), "mqar.runs has 'nope@64'"),
                            ("mqar.runs", ("llops@x",), "mqar.runs has 'llops@x'"),
                            ("mqar.kv", (2, 16), "4 \\* max kv"),
                            ("longrange.runs", ("nope",), "longrange.runs has 'nope'"),
                            ("longrange.kv", (2, 5), "first quarter")):
    with pytest.raises(ValueError, match=match):
      experiment.validate(config_lib.override(base, {key: value}))


def test_cached_rows_are_refused_for_a_changed_config(tmp_path):
  """A study's cached population rows belong to the config that trained them: a changed
  model field in the same workdir is refused naming it, a study-group change is not."""
  import ml_collections
  from jaxpapers.core import metrics as metrics_lib
  from jaxpapers.core import workdir as workdir_lib
  from jaxpapers.papers.llops import study
  cfg = ml_collections.ConfigDict({"model": {"d": 32}, "study": {"seeds": 3}})
  calls = []

  def train():  # what loop.train leaves behind: config.json, then the rows
    calls.append(1)
    metrics_lib.write_config(str(tmp_path), cfg)
    return [{"val": 1.5}]

  assert study._cached(str(tmp_path), train, cfg) == [{"val": 1.5}]
  other_study = ml_collections.ConfigDict({"model": {"d": 32}, "study": {"seeds": 5}})
  assert study._cached(str(tmp_path), train, other_study) == [{"val": 1.5}]
  assert len(calls) == 1
  wider = ml_collections.ConfigDict({"model": {"d": 64}, "study": {"seeds": 3}})
  with pytest.raises(workdir_lib.ResumeError, match="model.d: 32 -> 64"):
    study._cached(str(tmp_path), train, wider)



def test_lm_part_without_softmax_runs_and_hands_no_own_lm(tmp_path, monkeypatch):
  """Part 2 with only linear-attention methods (new rows beside a measured table) used to
  stop at StopIteration looking for the softmax LM that part 1's own-LM q/k come from.
  Training is stubbed (rows per member) to keep this test to the table logic."""
  from jaxpapers.core import config as config_lib
  from jaxpapers.papers.llops import study

  def fake_rows(config, wd, make_task, pop, row):
    return [{"method": "window", "state": 0, "seed": m["seed"], "lr": m["lr"],
             "diverged": False, "val_bpb": 2.0 + m["lr"], "test_bpb": 2.1, "params": 1,
             "curve": []} for m in pop]

  monkeypatch.setattr(study, "_population_rows", fake_rows)
  cfg = config_lib.load("configs/llops.py:smoke,study_lm_methods=window,study_lm_lrs=1e-3+3e-3+1e-2")
  table, rows, log, curves, trained = study.lm_part(cfg, str(tmp_path))
  assert [r["method"] for r in table] == ["window", "bigram (add-alpha)"]
  assert trained == {} and log[0]["chosen_lr"] == 1e-3 and log[0]["edge"]
