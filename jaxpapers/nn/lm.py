"""Small-LM workbench: language-model pretraining as a `core.loop.Task`.

Next-token prediction (the causal LM objective) on random windows of a tokenized corpus,
with AdamW + warm-up/cosine through optax and per-parameter LR multipliers from the
parameter classes (`params.py`), evaluated in bits per byte on the held-out tail:

  bpb = sum of the held-out targets' negative log-likelihoods (nats) / (ln 2 * their UTF-8 bytes)

which compares byte-level and BPE models on equal terms. The training objective is a
hook: `objective(apply, params, tokens_BxT1, rng) -> nats_BxT` (per-position negative
log-likelihood, or a per-position bound such as a diffusion LM's ELBO terms); training
minimizes its mean, evaluation sums it. The default is `next_token_nats`.

The task runs through the unchanged `core.loop.train` (mesh, jitted step with donation,
progress lines, NaN guard, checkpoints, exact resume), and its hyper-parameters
(`hparams`, e.g. the peak LR) may be traced arrays, which is how
`core.population` trains many of them in one vmapped program.

Mixed precision: `config.compute_dtype='bfloat16'` runs the forward and backward pass in
bf16 on float32 master weights (core/precision.py); the objective's nats are float32.
With a 'model' mesh axis, the stack's tensor-parallel rules place q/k/v/gate/up by
column and o/down by row (`stack.TENSOR_PARALLEL_RULES`).

Config fields read: seed, compute_dtype, train.{steps, batch_size}, data.seq_len,
optim.{lr, warmup_frac, schedule, min_lr_frac, b1, b2, eps, weight_decay, clip_norm},
eval.max_windows.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import accumulate
from jaxpapers.core import loop
from jaxpapers.core import precision
from jaxpapers.data import text as text_lib
from jaxpapers.nn import params as params_lib


@dataclasses.dataclass(frozen=True)
class LMModel:
  """What the LM task needs from a model: init, apply and per-parameter optimizer trees.

  init(rng) -> params; apply(params, tokens_BxT, **kw) -> logits_BxTxV (keywords such as
  cond= pass through to the model, so an objective can condition it, e.g. on a time);
  lr_mults: tree of floats shaped like params (None: all 1); decay_mask: tree of bools
  (None: decay every parameter, as optax.adamw does by default).
  """
  init: Callable[[jax.Array], Any]
  apply: Callable[..., jax.Array]
  lr_mults: Any = None
  decay_mask: Any = None
  sharding_rules: tuple = ()


def from_stack(model, parametrization: params_lib.Parametrization | None = None,
               decayed=("hidden", "output"), **apply_kw) -> LMModel:
  """An LMModel for a `stack.Model` under a parametrization (default: standard)."""
  par = parametrization or params_lib.standard()
  from jaxpapers.nn import stack  # pylint: disable=g-import-not-at-top
  return LMModel(init=lambda rng: model.init(rng, par),
                 apply=lambda p, t, **kw: model.apply(p, t, **{**apply_kw, **kw}),
                 lr_mults=params_lib.lr_multipliers(model.specs, par),
                 decay_mask=params_lib.decay_mask(model.specs, decayed),
                 sharding_rules=stack.TENSOR_PARALLEL_RULES)


def next_token_nats(apply, params, tokens_BxT1, rng):
  """-log p(x_{t+1} | x_<=t) for every position: (B, T)."""
  del rng
  logits = apply(params, tokens_BxT1[:, :-1]).astype(jnp.float32)
  return optax.softmax_cross_entropy_with_integer_labels(logits, tokens_BxT1[:, 1:])


def schedule(config, lr, steps: int):
  """Peak `lr` (a float or a traced array) with linear warm-up then cosine/constant decay."""
  o = config.optim
  warm = max(1, int(o.warmup_frac * steps))
  floor = o.get("min_lr_frac", 0.0)

  def fn(count):
    count = jnp.asarray(count, jnp.float32)
    up = count / warm
    frac = jnp.clip((count - warm) / max(1, steps - warm), 0.0, 1.0)
    if o.schedule == "cosine":
      down = floor + (1 - floor) * 0.5 * (1 + jnp.cos(jnp.pi * frac))
    elif o.schedule == "constant":
      down = jnp.ones_like(frac)
    else:
      raise ValueError(f"unknown optim.schedule {o.schedule!r}; expected 'cosine' or 'constant'")
    return lr * jnp.where(count < warm, up, down)

  return fn


def optimizer(config, model: LMModel, lr):
  o = config.optim
  return params_lib.adamw(schedule(config, lr, config.train.steps), b1=o.b1, b2=o.b2,
                          eps=o.eps, weight_decay=o.weight_decay,
                          multipliers=model.lr_mults, mask=model.decay_mask,
                          clip_norm=o.get("clip_norm", 0.0) or None)


def make_task(config, data: text_lib.TokenData, model: LMModel, *, seed: int | None = None,
              hparams: dict | None = None, objective: Callable = next_token_nats,
              make_optimizer: Callable | None = None, eval_samples: int = 1,
              regularizer: Callable | None = None,
              train_metrics: Callable | None = None) -> loop.Task:
  """The LM pretraining Task. `seed` (default config.seed) picks the training windows;
  `hparams` overrides float hyper-parameters ('lr', 'weight_decay'), possibly traced;
  `make_optimizer(config, model, lr)` replaces the per-class AdamW of `optimizer` (a paper
  comparing optimizers passes its own; `model` then needs only `init` and `apply`).

  A stochastic objective (a diffusion LM's sampled ELBO) is evaluated with `eval_samples`
  fixed keys per window: 'bpb' is their mean and 'bpb_se' the Monte-Carlo standard error
  of that mean (the spread over keys of the whole held-out estimate / sqrt(K); 0 for
  K = 1). `regularizer(params) -> scalar` is added to the training loss only (never to the
  held-out bound); `train_metrics(params) -> {name: scalar}` joins the logged metrics.
  `config.train.microbatches` (optional, default 1) accumulates the gradient over that
  many slices of the batch, for a paper-size step whose activations do not fit."""
  seed = config.seed if seed is None else seed
  hp = {"lr": config.optim.lr, **(hparams or {})}
  unknown = set(hp) - {"lr"}
  if unknown:
    raise ValueError(f"LM task hyper-parameters {sorted(unknown)} are not supported; "
                     "known: ['lr']")
  opt = (make_optimizer or optimizer)(config, model, hp["lr"])
  sched = schedule(config, hp["lr"], config.train.steps)
  T, B = config.data.seq_len, config.train.batch_size
  windows = text_lib.token_windows(data.train, B, T)
  val = text_lib.eval_windows(data.val, T, config.eval.get("max_windows", 0) or None)
  # bpb over exactly the scored targets: every row's nats are divided by the mean bytes
  # of a row, so the loop's average over rows is sum(nats) / (ln 2 * sum(bytes)).
  bytes_per_row = float(data.token_bytes[val[:, 1:]].sum()) / len(val)
  dtype = precision.compute_dtype(config)
  # Gradient accumulation: the step's batch in `micro` sequential slices (lax.scan), so
  # activations and logits are held for B / micro rows at a time; the update is the one of
  # the whole batch (up to float rounding) for a deterministic objective. A stochastic one
  # draws slice i's noise from fold_in(rng, i): the same estimator, other draws.
  micro = accumulate.check(config.train.get("microbatches", 1), B, "train.batch_size")

  def apply(p, tokens, **kw):  # float32 master weights, the forward pass in `dtype`
    return model.apply(precision.cast(p, dtype), tokens, **kw)

  def init(rng):
    params = model.init(rng)
    return {"params": params, "opt": opt.init(params)}

  def micro_grads(params, tokens, rng):
    """Mean loss and gradient over `micro` strided slices of the batch, one at a time."""
    loss, grads = accumulate.value_and_grad(
        lambda p, tok, r: jnp.mean(objective(apply, p, tok, r).astype(jnp.float32)),
        params, tokens, rng, micro)
    if regularizer is not None:  # counted once, on the whole parameters
      r, r_grads = jax.value_and_grad(regularizer)(params)
      loss, grads = loss + r, jax.tree.map(jnp.add, grads, r_grads)
    return loss, grads

  def train_step(state, batch, rng, step):
    def loss_fn(p):
      loss = jnp.mean(objective(apply, p, batch["tokens"], rng).astype(jnp.float32))
      return loss + (regularizer(p) if regularizer is not None else 0.0)
    if micro == 1:
      loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    else:
      loss, grads = micro_grads(state["params"], batch["tokens"], rng)
    updates, opt_state = opt.update(grads, state["opt"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    extra = train_metrics(state["params"]) if train_metrics is not None else {}
    return ({"params": params, "opt": opt_state},
            {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": sched(step), **extra})

  def eval_step(state, batch):
    def nats(key):
      return jnp.sum(objective(apply, state["params"], batch["tokens"],
                               key).astype(jnp.float32), axis=-1)
    # Each held-out batch draws its own noise: fold_in(PRNGKey(0), the batch's index in
    # eval_batches), the same at every evaluation (so the held-out curve compares like with
    # like), and ignored by a deterministic objective. One key for every batch would give
    # every batch the same draws (e.g. the same diffusion times), one atypical draw for all.
    key = jax.random.fold_in(jax.random.PRNGKey(0), batch["batch_index"][0])
    if eval_samples == 1:
      nats_KxB = nats(key)[None]
    else:
      nats_KxB = jax.lax.map(nats, jax.random.split(key, eval_samples))
    m = batch["mask"].astype(jnp.float32)
    nats_B = jnp.mean(nats_KxB, axis=0)
    out = {"count": jnp.sum(m), "loss": jnp.sum(m * nats_B) / T,
           "bpb": jnp.sum(m * nats_B) / (math.log(2) * bytes_per_row)}
    if eval_samples > 1:
      # Each key's held-out bpb is a sum over batches, so the per-key sums (divided by the
      # loop's row count) add up across batches; the standard error is taken afterwards
      # from these K totals (`mc_standard_error`).
      per_key = jnp.sum(m[None] * nats_KxB, axis=1) / (math.log(2) * bytes_per_row)
      out.update({f"bpb_key/{k}": per_key[k] for k in range(eval_samples)})
    return out

  def train_batch(step, rows):
    return {"tokens": windows(seed, step)[rows]}

  def eval_batches(rows):
    bs = config.eval.batch_size
    for i in range(0, len(val), bs):
      chunk = val[i:i + bs]
      mask = np.zeros(bs, np.int32)
      mask[:len(chunk)] = 1
      chunk = np.concatenate([chunk, np.zeros((bs - len(chunk), T + 1), np.int32)])
      # the batch's index, on every row (the loop shards each leaf over the batch axis)
      index = np.full(bs, i // bs, np.int32)
      yield {"tokens": chunk[rows], "mask": mask[rows], "batch_index": index[rows]}

  return loop.Task(init=init, train_step=train_step, eval_step=eval_step,
                   train_batch=train_batch, eval_batches=eval_batches,
                   sharding_rules=getattr(model, "sharding_rules", ()))



def mc_standard_error(metrics: dict, prefix: str = "bpb_key/") -> float:
  """The Monte-Carlo standard error of the mean held-out bpb over `eval_samples` keys,
  from the per-key totals an evaluation with eval_samples > 1 returns."""
  vals = np.asarray([v for k, v in sorted(metrics.items()) if k.startswith(prefix)], float)
  if len(vals) < 2:
    return 0.0
  return float(np.std(vals, ddof=1) / math.sqrt(len(vals)))
