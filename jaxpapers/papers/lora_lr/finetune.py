"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- fine-tuning runs.

One fine-tuning run is a pure function of (learning rate, seed): attach the adapter to
the frozen pretrained model (seed -> adapter init and data order), train the adapter
parameters with AdamW (LoFT: its own optimizer) under the paper's schedule (3% linear
warm-up, cosine decay, no weight decay), with the loss on answer tokens only, then
decode the test prompts greedily. The steps run under `lax.scan` and a whole grid of
(learning rate, seed) pairs runs as one `vmap`ped program, compiled once per
(method, rank), its rows split over every device (`core.sharding.spread`; one device:
plain `jit(vmap)`). The top Hessian eigenvalue at init is computed once per (method, rank,
seed) in its own small program (`lambda_max`), since it does not depend on the LR.
Evaluation decodes the validation and test prompts in one pass; scoring (exact match)
happens on the host from the generated tokens, per split.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import precision
from jaxpapers.core import sharding
from jaxpapers.nn import llama
from jaxpapers.papers.lora_lr import adapters as adapters_lib
from jaxpapers.papers.lora_lr import hessian
from jaxpapers.papers.lora_lr import loft as loft_lib
from jaxpapers.papers.lora_lr import tasks as tasks_lib


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  steps: int = 150
  batch: int = 16
  warmup_frac: float = 0.03
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  loft_eps: float = 1e-4          # LoFTAdamW's default, used by the paper's runs
  ga_examples: int = 32           # LoRA-GA gradient estimate: 32 samples, as the paper
  hessian_examples: int = 16      # batch for the top Hessian eigenvalue at init
  hessian_iters: int = 0          # Lanczos steps (0: skip; lambda_max is then NaN)


def masked_loss(logits_BxTxV, tokens_BxT, mask_BxT):
  """Mean cross-entropy of predicting token t+1 at position t, on masked positions."""
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxTxV[:, :-1].astype(jnp.float32), tokens_BxT[:, 1:])
  m = mask_BxT[:, :-1]
  return jnp.sum(ce * m) / jnp.maximum(jnp.sum(m), 1.0)


def adapter_loss(train, base, frozen, tokens, mask, cfg, ac):
  logits = adapters_lib.forward(base, {"train": train, "frozen": frozen}, tokens, cfg, ac)
  return masked_loss(logits, tokens, mask)


def kernel_grads(params, cfg, tokens, mask):
  """Gradient of the task loss w.r.t. every block kernel of the frozen model (LoRA-GA)."""
  def loss(blocks):
    logits = llama.forward({**params, "blocks": blocks}, tokens, cfg)
    return masked_loss(logits, tokens, mask)
  return jax.grad(loss)(params["blocks"])


def schedule(tc: TrainConfig):
  """Unit-peak warm-up + cosine decay to 0, multiplied by each run's learning rate."""
  warm = max(1, int(round(tc.warmup_frac * tc.steps)))
  return optax.warmup_cosine_decay_schedule(0.0, 1.0, warm, tc.steps, 0.0)


def direction(ac, tc: TrainConfig):
  if ac.method == "loft":
    return loft_lib.loft(tc.b1, tc.b2, tc.loft_eps)
  return optax.scale_by_adam(tc.b1, tc.b2, tc.eps)


def make_update(cfg: llama.LlamaConfig, ac, tc: TrainConfig, dtype=jnp.float32, **fwd):
  """Returns update(train, opt_state, base, frozen, tokens, mask, lr, i) -> (train,
  opt_state, loss): one optimizer step of the adapters at step i of the schedule.

  Only `train` is differentiated, so the frozen base costs its forward and the
  activation gradients, never a weight gradient or optimizer state. `dtype` (bfloat16 for
  the 7B plan) is the compute dtype of the adapters in the forward pass (the base arrives
  in its stored dtype); master adapters and moments stay float32. `fwd` goes to
  `llama.forward` (remat, unroll).
  """
  sched = schedule(tc)
  opt = direction(ac, tc)

  def update(train, opt_state, base, frozen, tokens, mask, lr, i):
    def loss_fn(tr):
      logits = adapters_lib.forward(base, {"train": precision.cast(tr, dtype),
                                           "frozen": precision.cast(frozen, dtype)},
                                    tokens, cfg, ac, **fwd)
      return masked_loss(logits, tokens, mask)
    loss, g = jax.value_and_grad(loss_fn)(train)
    d, opt_state = opt.update(g, opt_state, train)
    train = jax.tree.map(lambda p, u: p - lr * sched(i) * u, train, d)
    return train, opt_state, loss

  return update


def make_run(cfg: llama.LlamaConfig, ac, tc: TrainConfig):
  """Returns run(lr, seed, params, train_tokens, train_mask[, attached]) -> (losses (steps,),
  merged dense parameters). Returning the merged model (exact, see `adapters.merge`) lets
  one compiled decoding program score every method.
  """
  opt = direction(ac, tc)
  update = make_update(cfg, ac, tc)

  # Model and data are arguments (not closed-over constants) so XLA does not embed them.
  def run(lr, seed, params, tr_tokens, tr_mask, attached=None):
    k_init, k_data = jax.random.split(jax.random.PRNGKey(seed))
    if attached is None:
      base, ad = attach_for(ac, tc, cfg, k_init, params, tr_tokens, tr_mask)
    else:
      base, ad = attached
    train, frozen = ad["train"], ad["frozen"]
    opt_state = opt.init(train)

    def step(carry, i):
      train, opt_state = carry
      idx = jax.random.randint(jax.random.fold_in(k_data, i), (tc.batch,), 0,
                               tr_tokens.shape[0])
      train, opt_state, loss = update(train, opt_state, base, frozen, tr_tokens[idx],
                                      tr_mask[idx], lr, i)
      return (train, opt_state), loss

    (train, _), losses = jax.lax.scan(step, (train, opt_state), jnp.arange(tc.steps))
    return losses, adapters_lib.merge(base, {"train": train, "frozen": frozen}, ac)

  return run


def attach_for(ac, tc, cfg, key, params, tr_tokens, tr_mask):
  grads = None
  if ac.method in adapters_lib.NEEDS_GRAD:
    n = tc.ga_examples
    grads = kernel_grads(params, cfg, tr_tokens[:n], tr_mask[:n])
  return adapters_lib.attach(key, params, cfg, ac, grads)


def attach_deterministic(params, cfg, ac, tc, tr_tokens, tr_mask):
  """Seed-independent SVD/QR/gradient inits, once, in their own program (None for the
  random-init methods): XLA:CPU's LAPACK calls intermittently deadlocked inside the big
  vmapped/scanned program."""
  if ac.method not in adapters_lib.DETERMINISTIC:
    return None
  return jax.jit(lambda p, t, m: attach_for(ac, tc, cfg, jax.random.PRNGKey(0), p, t, m))(
      params, tr_tokens, tr_mask)


def lambda_max(params, cfg, ac, tc, tr_tokens, tr_mask, seeds, attached=None):
  """Top Hessian eigenvalue of the answer loss on the first `tc.hessian_examples` training
  examples w.r.t. the adapter parameters at the init each seed's run starts from (same
  init key as `make_run`): one value per seed, LR-independent, so computed once per
  (method, rank, seed) for every leg of the study. NaN per seed when hessian_iters == 0.
  """
  seeds = np.asarray(seeds, np.int32)
  if not tc.hessian_iters:
    return np.full(seeds.shape, np.nan)
  n = tc.hessian_examples

  def one(seed, params, t, m, attached):
    key = jax.random.PRNGKey(seed)
    k_init, _ = jax.random.split(key)
    base, ad = attached if attached is not None else attach_for(ac, tc, cfg, k_init, params,
                                                                t, m)
    loss = lambda tr: adapter_loss(tr, base, ad["frozen"], t[:n], m[:n], cfg, ac)
    return hessian.lanczos_top(loss, ad["train"], jax.random.fold_in(key, 7), tc.hessian_iters)

  fn = sharding.spread(one, in_axes=(0, None, None, None, None))
  return np.asarray(fn(jnp.asarray(seeds), params, tr_tokens, tr_mask, attached), np.float64)


def _over_models(fn, models, batch_size):
  """fn over a leading axis of stacked models: all at once (vmap) or `batch_size` at a
  time (lax.map), which bounds memory on large models (SmolLM2)."""
  if batch_size is None:
    return jax.vmap(fn)(models)
  return jax.lax.map(fn, models, batch_size=batch_size)


def _over_rows(fn, chunk, *arrays):
  """fn over row chunks of `arrays` (padded to a multiple of `chunk`), concatenated."""
  n = arrays[0].shape[0]
  if chunk is None or chunk >= n:
    return fn(*arrays)
  pad = -n % chunk
  padded = [jnp.concatenate([a, jnp.repeat(a[:1], pad, 0)]) if pad else a for a in arrays]
  split = [a.reshape((-1, chunk) + a.shape[1:]) for a in padded]
  out = jax.lax.map(lambda xs: fn(*xs), tuple(split))
  return jax.tree.map(lambda o: o.reshape((-1,) + o.shape[2:])[:n], out)


@functools.lru_cache(maxsize=None)
def decoder(cfg, n_new, model_batch=None, row_chunk=None):
  """jit(greedy decoding) over a leading axis of dense parameter trees; cached."""
  def gen(p, t, l):
    return _over_rows(lambda t, l: llama.greedy_generate(p, cfg, t, l, n_new), row_chunk, t, l)
  return jax.jit(lambda ps, t, l: _over_models(lambda p: gen(p, t, l), ps, model_batch))


@functools.lru_cache(maxsize=None)
def evaluator(cfg, model_batch=None, row_chunk=None):
  """jit(per-example summed answer-token cross-entropy) over stacked dense parameters."""
  def per_example(p, t, m):
    def rows(t, m):
      logits = llama.forward(p, t, cfg)
      ce = optax.softmax_cross_entropy_with_integer_labels(
          logits[:, :-1].astype(jnp.float32), t[:, 1:])
      return jnp.sum(ce * m[:, :-1], axis=1)
    return _over_rows(rows, row_chunk, t, m)
  return jax.jit(lambda ps, t, m: _over_models(lambda p: per_example(p, t, m), ps,
                                               model_batch))


def answer_positions(mask_NxT):
  """(N, A) positions t whose next token t+1 is supervised (an answer token or the end
  token; `tasks.encode_supervised`'s mask), left-aligned and padded with 0, and (N, A)
  validity; A is the longest answer + end."""
  m = np.asarray(mask_NxT)[:, :-1] > 0
  A = max(int(m.sum(1).max()), 1)
  pos = np.zeros((m.shape[0], A), np.int32)
  valid = np.zeros((m.shape[0], A), bool)
  for i, row in enumerate(m):
    idx = np.nonzero(row)[0]
    pos[i, :len(idx)], valid[i, :len(idx)] = idx, True
  return pos, valid


@functools.lru_cache(maxsize=None)
def teacher_forced(cfg, row_chunk=None):
  """jit(params, tokens, pos, valid) -> (summed answer cross-entropy (N,), exact (N,)).

  One causal forward over prompt + gold answer + end token; the LM head runs only at
  the `answer_positions`. `exact` is True iff at every supervised position the argmax
  is the gold next token. Greedy decoding picks the argmax given its own prefix, so by
  induction over the answer it emits exactly the gold answer followed by the end token
  iff `exact` (while it matches, its prefix is the gold one): the same exact-match
  decision as decoding, from one forward pass instead of one pass per generated token
  (tested against `llama.greedy_generate`)."""
  def rows(p, t, pos, valid):
    x, _ = llama.hidden(p, t, cfg)
    h = jnp.take_along_axis(x, pos[..., None], axis=1)           # (n, A, D)
    logits = llama.unembed(p, h, cfg).astype(jnp.float32)
    gold = jnp.take_along_axis(t, pos + 1, axis=1)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, gold)
    hit = (jnp.argmax(logits, -1) == gold) | ~valid
    return jnp.sum(ce * valid, 1), jnp.all(hit, 1)
  return jax.jit(lambda p, t, pos, valid: _over_rows(
      lambda t, pos, valid: rows(p, t, pos, valid), row_chunk, t, pos, valid))


@dataclasses.dataclass(frozen=True)
class Grid:
  """What `run_grid` returns, always the same fields. S seeds x R LRs; N eval examples
  (validation then test, see `Data`)."""
  losses: np.ndarray        # (S, R, steps) training loss per step
  gens: np.ndarray          # (S, R, N, T) greedy continuations of the eval prompts
  loss_sum: np.ndarray      # (S, R, N) summed answer-token cross-entropy per eval example
  lam: np.ndarray           # (S,) top Hessian eigenvalue at init (NaN if not computed)


def run_grid(params, cfg, ac, tc, data, n_new, lrs, seeds, model_batch=None, row_chunk=None):
  """All (lr, seed) pairs in one vmapped, jitted program, then one decoding program and one
  loss program over the merged models, and lambda_max once per seed."""
  lrs = np.asarray(lrs, np.float32)
  seeds = np.asarray(seeds, np.int32)
  L, S = np.meshgrid(lrs, seeds)            # (S, R)
  attached = attach_deterministic(params, cfg, ac, tc, data.train_tokens, data.train_mask)
  # The (lr, seed) rows split over every device (one device: jit(vmap)); the frozen model
  # and the data replicated.
  run = sharding.spread(make_run(cfg, ac, tc), in_axes=(0, 0, None, None, None, None))
  losses, merged = run(jnp.asarray(L.reshape(-1)), jnp.asarray(S.reshape(-1)),
                       params, data.train_tokens, data.train_mask, attached)
  gens = decoder(cfg, n_new, model_batch, row_chunk)(merged, data.prompts, data.prompt_lens)
  loss_sum = evaluator(cfg, model_batch, row_chunk)(merged, data.eval_tokens, data.eval_mask)
  lam = lambda_max(params, cfg, ac, tc, data.train_tokens, data.train_mask, seeds, attached)
  shape = (len(seeds), len(lrs))
  return Grid(losses=np.asarray(losses).reshape(shape + (-1,)),
              gens=np.asarray(gens).reshape(shape + gens.shape[1:]),
              loss_sum=np.asarray(loss_sum).reshape(shape + (-1,)), lam=lam)


def correct(task, tok, gens, lens, answers, n_new) -> np.ndarray:
  """0/1 exact match per prompt."""
  texts = tasks_lib.decode_answers(tok, gens, lens, n_new)
  return np.array([tasks_lib.is_correct(task, t, a) for t, a in zip(texts, answers)], bool)


def score(task, tok, gens, lens, answers, n_new) -> float:
  return float(np.mean(correct(task, tok, gens, lens, answers, n_new)))


def split_scores(grid: Grid, data, task, tok, n_new) -> dict:
  """Per split ('val', 'test'): correct (S, R, n) 0/1, acc (S, R), loss (S, R) (mean
  answer-token cross-entropy; inf where a run diverged)."""
  S, R = grid.losses.shape[:2]
  lens = np.asarray(data.prompt_lens)
  tokens = np.asarray(data.eval_mask)[:, :-1].sum(1)
  out = {}
  for name, sl, split in (("val", slice(0, data.n_val), data.val),
                          ("test", slice(data.n_val, None), data.test)):
    c = np.array([[correct(task, tok, grid.gens[i, j][sl], lens[sl], split.answers, n_new)
                   for j in range(R)] for i in range(S)]).reshape(S, R, -1)
    loss = grid.loss_sum[:, :, sl].sum(-1) / max(tokens[sl].sum(), 1)
    out[name] = {"correct": c, "acc": c.mean(-1) if c.shape[-1] else np.zeros((S, R)),
                 "loss": np.where(np.isfinite(loss), loss, np.inf)}
  return out


@dataclasses.dataclass(frozen=True)
class Data:
  """Encoded splits. Eval arrays hold the validation examples first, then the test ones."""
  train_tokens: jax.Array   # (n_train, T) prompt + answer, right-padded
  train_mask: jax.Array     # (n_train, T) loss mask on answer tokens
  prompts: jax.Array        # (n_val + n_test, T) prompt buffers with room to generate
  prompt_lens: jax.Array    # (n_val + n_test,)
  eval_tokens: jax.Array    # (n_val + n_test, T) supervised, for the answer loss
  eval_mask: jax.Array
  val: tasks_lib.Split
  test: tasks_lib.Split

  @property
  def n_val(self) -> int:
    return len(self.val.prompts)


def prepare(task, tok, n_train, n_val, n_test, seq_len, n_new, seed=1234) -> Data:
  train, val, test = tasks_lib.make_splits(task, n_train, n_val, n_test, seed)
  trt, trm = tasks_lib.encode_supervised(train, tok, seq_len)
  both = tasks_lib.Split(val.prompts + test.prompts, val.answers + test.answers)
  pt, pl = tasks_lib.encode_prompts(both, tok, seq_len, n_new)
  et, em = tasks_lib.encode_supervised(both, tok, seq_len)
  a = [jnp.asarray(x) for x in (trt, trm, pt, pl, et, em)]
  return Data(*a, val=val, test=test)
