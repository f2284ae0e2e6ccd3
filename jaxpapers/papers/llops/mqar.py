"""llops: multi-query associative recall (MQAR), Zoology's definition (Arora et al. 2023).

`generate` follows `zoology/data/multiquery_ar.py` (HazyResearch/zoology): keys from
[1, V/2), values from [V/2, V), all distinct within an example; the first 2 * n_kv
positions hold the pairs k_1 v_1 ... k_n v_n; after them each key appears once more as a
query, at query slot 2 * g (g drawn without replacement from a power law
p(g) ~ a * (g + 1)^(a - 1), a = 0.01, Zoology's default); the label at a query position
is its key's value (the model predicts the value from the query token), every other label
IGNORE. The filler positions are uniform random tokens over the whole vocabulary
(`random_non_queries=True`, Zoology's default). Sampling without replacement uses the
Gumbel top-k trick (the same law as numpy's sequential `choice(replace=False, p=...)`),
with a numpy Generator instead of the global seed.

`generate_far` is the long-range variant of part 2 (associative recall with the relevant
tokens far apart): the pairs sit in the first quarter of the sequence, the queries in the
last quarter, only noise tokens (their own range of the vocabulary) between them, so every
answer is fixed by tokens at distance > seq_len / 2 and nothing nearer carries it.

`task` trains one LM of `model.build` (any method of the study) on fresh MQAR batches
through core.loop (population-ready: the peak LR may be traced); a batch mixes the kv
counts of `kv` in equal parts (Zoology trains on a mixture of kv counts too), and
`accuracy` scores the argmax prediction at the labelled positions, per kv count.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import loop
from jaxpapers.nn import lm

IGNORE = -1


def gap_probs(space: int, power_a: float = 0.01) -> np.ndarray:
  p = power_a * np.arange(1, space + 1) ** (power_a - 1)
  return p / p.sum()


def generate(rng: np.random.Generator, n: int, seq_len: int, vocab: int, n_kv: int,
             power_a: float = 0.01, random_non_queries: bool = True):
  """(inputs (n, seq_len) int32, labels (n, seq_len) int32 with IGNORE off the queries)."""
  if seq_len % 2:
    raise ValueError(f"MQAR seq_len={seq_len} must be even")
  if vocab <= seq_len:
    raise ValueError(f"MQAR vocab={vocab} must exceed seq_len={seq_len} (Zoology's condition)")
  if 4 * n_kv > seq_len:
    raise ValueError(f"MQAR n_kv={n_kv}: 4 * n_kv must be <= seq_len={seq_len}")
  half = vocab // 2
  ctx = 2 * n_kv
  # n_kv distinct keys from [1, half) and values from [half, vocab) per row.
  keys = np.argsort(rng.random((n, half - 1)), axis=1)[:, :n_kv] + 1
  values = np.argsort(rng.random((n, vocab - half)), axis=1)[:, :n_kv] + half
  space = (seq_len - ctx) // 2
  # Gumbel top-k = sequential sampling without replacement with probabilities p.
  g = np.log(gap_probs(space, power_a))[None] + rng.gumbel(size=(n, space))
  gaps = np.argsort(-g, axis=1)[:, :n_kv]
  full = np.zeros((n, seq_len + 1), np.int64)
  full[:, 0:ctx:2] = keys
  full[:, 1:ctx:2] = values
  rows = np.arange(n)[:, None]
  full[rows, ctx + 2 * gaps] = keys
  lab = np.full((n, seq_len + 1), IGNORE, np.int64)
  lab[rows, ctx + 2 * gaps + 1] = values
  inputs, labels = full[:, :-1], lab[:, 1:]
  if random_non_queries:
    fill = rng.integers(0, vocab, size=inputs.shape)
    inputs = np.where(inputs == 0, fill, inputs)
  return inputs.astype(np.int32), labels.astype(np.int32)


def far_layout(seq_len: int, vocab: int, n_kv: int):
  """(keys range, noise range, values range) of `generate_far`; errors name the limit."""
  half, n_noise = vocab // 2, vocab // 8
  if seq_len % 4 or 8 * n_kv > seq_len:
    raise ValueError(f"long-range recall: seq_len={seq_len} must be a multiple of 4 and "
                     f">= 8 * n_kv ({8 * n_kv}): the pairs must fit in its first quarter")
  if half - n_noise - 1 < n_kv or n_noise < 1:
    raise ValueError(f"long-range recall: vocab={vocab} has {half - n_noise - 1} keys for "
                     f"n_kv={n_kv} (keys [1, {half - n_noise}), noise [{half - n_noise}, "
                     f"{half}), values [{half}, {vocab}))")
  return (1, half - n_noise), (half - n_noise, half), (half, vocab)


def generate_far(rng: np.random.Generator, n: int, seq_len: int, vocab: int, n_kv: int):
  """Long-range recall: (inputs (n, L) int32, labels (n, L) int32, IGNORE off the queries).

  The n_kv pairs k_1 v_1 ... k_n v_n form one block at a random offset inside [0, L/4);
  each key is queried once, in random order, at n_kv random positions of [3L/4, L); every
  other position is a noise token. Keys, noise and values come from disjoint ranges
  (`far_layout`), keys and values distinct within a row. The label at a query position is
  its key's value, whose pair lies more than L/2 back; the last L/2 tokens before a query
  hold only noise and other queries, independent of every value (so a model without
  memory of the far half is at chance, 1 / (number of values))."""
  (k0, k1), (z0, z1), (v0, v1) = far_layout(seq_len, vocab, n_kv)
  L, q = seq_len, seq_len // 4
  keys = np.argsort(rng.random((n, k1 - k0)), axis=1)[:, :n_kv] + k0
  values = np.argsort(rng.random((n, v1 - v0)), axis=1)[:, :n_kv] + v0
  x = rng.integers(z0, z1, size=(n, L))
  rows = np.arange(n)[:, None]
  start = rng.integers(0, q - 2 * n_kv + 1, size=(n, 1))
  x[rows, start + 2 * np.arange(n_kv)] = keys
  x[rows, start + 2 * np.arange(n_kv) + 1] = values
  where = np.sort(np.argsort(rng.random((n, q)), axis=1)[:, :n_kv], axis=1) + L - q
  order = np.argsort(rng.random((n, n_kv)), axis=1)
  x[rows, where] = np.take_along_axis(keys, order, 1)
  y = np.full((n, L), IGNORE, np.int64)
  y[rows, where] = np.take_along_axis(values, order, 1)
  return x.astype(np.int32), y.astype(np.int32)


GENERATORS = {"mqar": generate, "longrange": generate_far}


def mixture(rng: np.random.Generator, n: int, seq_len: int, vocab: int, kv, gen=generate,
            **kw):
  """n rows split as evenly as possible over the kv counts (in order), drawn by `gen`."""
  parts = np.array_split(np.arange(n), len(kv))
  xs, ys = zip(*(gen(rng, len(p), seq_len, vocab, k, **kw) for p, k in zip(parts, kv)))
  return np.concatenate(xs), np.concatenate(ys)


def masked_ce(logits_BxTxV, labels_BxT):
  """Per row: (sum of CE over labelled positions, labelled positions, correct argmaxes)."""
  m = labels_BxT != IGNORE
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxTxV.astype(jnp.float32), jnp.where(m, labels_BxT, 0))
  hit = (jnp.argmax(logits_BxTxV, -1) == labels_BxT) & m
  return jnp.sum(ce * m, -1), jnp.sum(m, -1), jnp.sum(hit, -1)


def task(config, lm_model: lm.LMModel, kv, seq_len: int, vocab: int, val_n: int,
         *, seed: int | None = None, hparams: dict | None = None, gen=generate) -> loop.Task:
  """MQAR (or, gen=generate_far, long-range recall) training as a core.loop Task (AdamW +
  schedule of `lm.optimizer`)."""
  seed = config.seed if seed is None else seed
  hp = {"lr": config.optim.lr, **(hparams or {})}
  opt = lm.optimizer(config, lm_model, hp["lr"])
  B = config.train.batch_size
  vx, vy = mixture(np.random.default_rng([10 ** 6, 1]), val_n, seq_len, vocab, kv, gen)

  def init(rng):
    p = lm_model.init(rng)
    return {"params": p, "opt": opt.init(p)}

  def train_step(state, batch, rng, step):
    del rng, step

    def loss_fn(p):
      s, c, _ = masked_ce(lm_model.apply(p, batch["inputs"]), batch["labels"])
      return jnp.sum(s) / jnp.maximum(jnp.sum(c), 1)

    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    upd, o = opt.update(grads, state["opt"], state["params"])
    return ({"params": optax.apply_updates(state["params"], upd), "opt": o},
            {"loss": loss, "grad_norm": optax.tree.norm(grads)})

  def eval_step(state, batch):
    s, c, h = masked_ce(lm_model.apply(state["params"], batch["inputs"]), batch["labels"])
    m = batch["mask"].astype(jnp.float32)
    n_kv = jnp.maximum(c, 1).astype(jnp.float32)
    return {"count": jnp.sum(m), "loss": jnp.sum(m * s / n_kv), "acc": jnp.sum(m * h / n_kv)}

  def train_batch(step, rows):
    x, y = mixture(np.random.default_rng([seed, step]), B, seq_len, vocab, kv, gen)
    return {"inputs": x[rows], "labels": y[rows]}

  def eval_batches(rows):
    bs = config.eval.batch_size
    for i in range(0, len(vx), bs):
      x, y = vx[i:i + bs], vy[i:i + bs]
      mask = np.zeros(bs, np.int32)
      mask[:len(x)] = 1
      pad = bs - len(x)
      x = np.concatenate([x, np.zeros((pad, seq_len), np.int32)])
      y = np.concatenate([y, np.full((pad, seq_len), IGNORE, np.int32)])
      yield {"inputs": x[rows], "labels": y[rows], "mask": mask[rows]}

  return loop.Task(init=init, train_step=train_step, eval_step=eval_step,
                   train_batch=train_batch, eval_batches=eval_batches)


def accuracy_fn(apply):
  """jitted (params, inputs, labels) -> fraction of labelled positions predicted right."""
  @jax.jit
  def fn(p, x, y):
    _, c, h = masked_ce(apply(p, x), y)
    return jnp.sum(h) / jnp.maximum(jnp.sum(c), 1)
  return fn
