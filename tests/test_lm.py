"""nn.lm + data.text: batches from (seed, step), BPE, bits per byte against NumPy, a run."""
import importlib.util
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import metrics
from jaxpapers.data import text
from jaxpapers.nn import lm, lm_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = ("To be, or not to be, that is the question: whether 'tis nobler in the mind "
          "to suffer the slings and arrows of outrageous fortune. Ñandú café — naïve. ") * 40


def lm_config(arg=""):
  spec = importlib.util.spec_from_file_location("lm_cfg", os.path.join(ROOT, "configs", "lm.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.get_config("smoke,dim=8,pattern=A,seq_len=8" + ("," + arg if arg else ""))


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("corpus") / "text.txt"
  path.write_text(CORPUS, encoding="utf-8")
  return str(path)


def test_windows_are_a_pure_function_of_seed_and_step():
  toks = np.arange(1000, dtype=np.int32)
  get = text.token_windows(toks, batch=4, seq_len=8)
  np.testing.assert_array_equal(get(0, 5), get(0, 5))
  assert not np.array_equal(get(0, 5), get(0, 6))
  assert not np.array_equal(get(0, 5), get(1, 5))
  w = get(3, 7)
  np.testing.assert_array_equal(np.diff(w, axis=1), 1)  # contiguous windows of the corpus


def test_eval_windows_score_every_heldout_token_once():
  toks = np.arange(50, dtype=np.int32)
  w = text.eval_windows(toks, seq_len=8)
  assert w.shape == (6, 9)
  np.testing.assert_array_equal(w[:, 1:].reshape(-1), np.arange(1, 49))
  with pytest.raises(ValueError, match="shorter than seq_len"):
    text.eval_windows(toks[:5], seq_len=8)


def test_bpe_round_trip_and_token_bytes(corpus_file):
  d = text.prepare(tokenizer="bpe", vocab_size=300, path=corpus_file, holdout=0.1)
  assert d.vocab_size == 300 and d.name == "text.txt/bpe"
  held = CORPUS[int(len(CORPUS) * 0.9):]
  assert d.tokenizer.decode(d.val) == held
  assert len(d.val) < len(held.encode("utf-8"))  # merges compress
  assert int(d.token_bytes[d.val].sum()) == len(held.encode("utf-8"))
  d2 = text.prepare(tokenizer="bpe", vocab_size=300, path=corpus_file, holdout=0.1)
  np.testing.assert_array_equal(d.train, d2.train)  # BPE training is deterministic
  b = text.prepare(tokenizer="byte", path=corpus_file, holdout=0.1)
  np.testing.assert_array_equal(b.val, np.frombuffer(held.encode("utf-8"), np.uint8))


def test_bad_inputs_name_the_problem(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.txt"):
    text.prepare(path=str(tmp_path / "nope.txt"))
  with pytest.raises(ValueError, match="unknown tokenizer 'words'"):
    text.prepare(tokenizer="words", path=__file__)
  with pytest.raises(ValueError, match="must exceed the 256 byte tokens"):
    text.train_bpe("abc", 100)


def test_bits_per_byte_matches_numpy_on_bpe(corpus_file):
  config = lm_config(f"tokenizer=bpe,vocab_size=300,path={corpus_file},eval_windows=0")
  data = lm_experiment.load_data(config)
  model, lm_model = lm_experiment.build_model(config, data.vocab_size)
  task = lm.make_task(config, data, lm_model)
  state = task.init(jax.random.PRNGKey(0))
  # What the loop computes: sums over batches, divided by the total count.
  totals = None
  for batch in task.eval_batches(slice(0, config.eval.batch_size)):
    s = task.eval_step(state, jax.tree.map(jnp.asarray, batch))
    totals = s if totals is None else jax.tree.map(jnp.add, totals, s)
  count = float(totals["count"])
  # Reference: log-softmax in NumPy (float64) over every held-out window; the scored
  # targets tile val[1:n*T+1], so their bytes are those of the decoded text of
  # val[:n*T+1] less the first token's (decoded whole: a token may split a character).
  w = text.eval_windows(data.val, config.data.seq_len)
  logits = np.asarray(model.apply(state["params"], jnp.asarray(w[:, :-1])), np.float64)
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  nats = (logz - np.take_along_axis(logits, w[:, 1:, None], -1)[..., 0]).sum()
  n_scored = w[:, 1:].size
  first = data.tokenizer.decode(data.val[:1])
  assert "\ufffd" not in first
  n_bytes = (len(data.tokenizer.decode(data.val[:n_scored + 1]).encode("utf-8"))
             - len(first.encode("utf-8")))
  assert count == len(w)
  assert float(totals["bpb"]) / count == pytest.approx(nats / (math.log(2) * n_bytes), rel=1e-4)
  assert float(totals["loss"]) / count == pytest.approx(nats / w[:, 1:].size, rel=1e-4)


def test_objective_hook_is_what_training_minimizes(corpus_file):
  config = lm_config(f"path={corpus_file}")
  data = lm_experiment.load_data(config)
  _, lm_model = lm_experiment.build_model(config, data.vocab_size)
  double = lambda apply, p, t, rng: 2.0 * lm.next_token_nats(apply, p, t, rng)
  batch = {"tokens": jnp.asarray(lm.make_task(config, data, lm_model).train_batch(0, slice(0, 8))["tokens"])}
  out = []
  for obj in (lm.next_token_nats, double):
    task = lm.make_task(config, data, lm_model, objective=obj)
    state = task.init(jax.random.PRNGKey(0))
    out.append(float(task.train_step(state, batch, jax.random.PRNGKey(1), 0)[1]["loss"]))
  assert out[1] == pytest.approx(2 * out[0], rel=1e-6)


def test_microbatched_step_is_the_whole_batch_step(corpus_file):
  """Accumulating the gradient over 4 slices of the batch gives the whole batch's loss,
  gradient norm and update (a deterministic objective; the regularizer counted once)."""
  config = lm_config(f"path={corpus_file},batch_size=8")
  data = lm_experiment.load_data(config)
  _, lm_model = lm_experiment.build_model(config, data.vocab_size)
  reg = lambda p: 1e-2 * sum(jnp.sum(x ** 2) for x in jax.tree.leaves(p))
  out = []
  for micro in (1, 4):
    with config.unlocked():
      config.train.microbatches = micro
    task = lm.make_task(config, data, lm_model, regularizer=reg)
    state = task.init(jax.random.PRNGKey(0))
    batch = {"tokens": jnp.asarray(task.train_batch(0, slice(None))["tokens"])}
    assert batch["tokens"].shape[0] == 8
    out.append(jax.jit(task.train_step)(state, batch, jax.random.PRNGKey(1), 0))
  (s1, m1), (s4, m4) = out
  for k in ("loss", "grad_norm"):
    np.testing.assert_allclose(float(m4[k]), float(m1[k]), rtol=1e-5, err_msg=k)
  for a, b in zip(jax.tree.leaves(s4["params"]), jax.tree.leaves(s1["params"])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
  with config.unlocked():
    config.train.microbatches = 3
  with pytest.raises(ValueError, match="train.microbatches=3 must be >= 1 and divide"):
    lm.make_task(config, data, lm_model)


def test_lm_run_on_a_user_text_file_learns(corpus_file, tmp_path):
  config = lm_config(f"path={corpus_file},steps=30,lr=1e-2,log_every=1,eval_every=30,"
                     "seq_len=16,dim=16")
  _, final = lm_experiment.train_and_evaluate(config, str(tmp_path))
  rows = metrics.read_metrics(str(tmp_path), "train")
  assert rows[0]["loss"] == pytest.approx(math.log(256), rel=0.02)  # uniform at init
  assert rows[-1]["loss"] < 0.8 * rows[0]["loss"]  # a repetitive text is learned quickly
  assert np.isfinite(final["bpb"])
  with pytest.raises(ValueError, match="not supported"):
    lm.make_task(config, lm_experiment.load_data(config), None, hparams={"momentum": 0.5})
