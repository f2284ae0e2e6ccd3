"""nn.lm's held-out evaluation keys: each eval batch draws its own noise.

A stochastic objective (a diffusion LM's sampled ELBO) must not see the same draws in
every held-out batch (with one key for all, every batch shares e.g. its diffusion times,
one atypical draw for the whole estimate); a deterministic objective must not notice the
key at all, so every other LM number stays bit-identical.
"""
import math

import jax
import ml_collections
import numpy as np

from jaxpapers.data import text
from jaxpapers.nn import lm

V, T = 5, 4


def _config(eval_batch=2):
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.train = ml_collections.ConfigDict(dict(steps=4, batch_size=2))
  c.data = ml_collections.ConfigDict(dict(seq_len=T))
  c.optim = ml_collections.ConfigDict(dict(
      lr=1e-3, warmup_frac=0.0, schedule="constant", min_lr_frac=0.0, b1=0.9, b2=0.99,
      eps=1e-8, weight_decay=0.0, clip_norm=0.0))
  c.eval = ml_collections.ConfigDict(dict(batch_size=eval_batch, max_windows=0))
  return c


def _data(val):
  return text.TokenData(train=np.arange(64, dtype=np.int32) % V, val=np.asarray(val, np.int32),
                        vocab_size=V, token_bytes=np.ones(V, np.int64), tokenizer=None,
                        name="toy")


# A bigram table: logits of the next token are a row of W (deterministic in the key).
_MODEL = lm.LMModel(init=lambda rng: {"W": jax.random.normal(rng, (V, V))},
                    apply=lambda p, t, **kw: p["W"][t])


def _noise_nats(apply, params, tokens, rng):
  """A stochastic toy objective: uniform draws, whatever the tokens."""
  del apply, params
  return jax.random.uniform(rng, tokens[:, 1:].shape)


def _per_batch(task, state):
  step = jax.jit(task.eval_step)
  return [jax.device_get(step(state, b)) for b in task.eval_batches(slice(None))]


def test_identical_eval_batches_get_different_noise_and_the_same_at_every_evaluation():
  data = _data(np.zeros(4 * T + 1))                  # 4 identical windows, 2 batches
  for k in (1, 3):
    task = lm.make_task(_config(), data, _MODEL, objective=_noise_nats, eval_samples=k)
    state = task.init(jax.random.PRNGKey(0))
    first, second = _per_batch(task, state)
    assert first["bpb"] != second["bpb"], k          # one key for all: equal
    if k > 1:
      a = [first[f"bpb_key/{j}"] for j in range(k)]
      b = [second[f"bpb_key/{j}"] for j in range(k)]
      assert len(set(np.round(a + b, 7))) == 2 * k   # every (batch, key) its own draw
    again = _per_batch(task, state)                  # the curve compares like with like
    assert [r["bpb"] for r in again] == [first["bpb"], second["bpb"]]


def test_a_deterministic_objective_ignores_the_eval_key():
  rng = np.random.default_rng(0)
  val = rng.integers(0, V, 3 * T + 1)                # 3 windows: 2 batches, 1 padded row
  task = lm.make_task(_config(), _data(val), _MODEL)
  state = task.init(jax.random.PRNGKey(1))
  step = jax.jit(task.eval_step)
  batches = list(task.eval_batches(slice(None)))
  assert [int(b["batch_index"][0]) for b in batches] == [0, 1]
  tot = 0.0
  for b in batches:
    out = jax.device_get(step(state, b))
    moved = jax.device_get(step(state, dict(b, batch_index=b["batch_index"] + 7)))
    for name in out:                                 # bit-identical under another key
      np.testing.assert_array_equal(out[name], moved[name])
    tot += float(out["loss"]) * T
  # against NumPy: the summed next-token NLL of every held-out window
  w = text.eval_windows(val, T)
  logits = np.asarray(state["params"]["W"], np.float64)[w[:, :-1]]
  logz = np.log(np.exp(logits).sum(-1))
  nats = (logz - np.take_along_axis(logits, w[:, 1:, None], -1)[..., 0]).sum()
  assert math.isclose(tot, nats, rel_tol=1e-5)
