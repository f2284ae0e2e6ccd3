"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- fine-tuning runs.

One fine-tuning run is a pure function of (learning rate, seed): attach the adapter to
the frozen pretrained model (seed -> adapter init and data order), train the adapter
parameters with AdamW (LoFT: its own optimizer) under the paper's schedule (3% linear
warm-up, cosine decay, no weight decay), with the loss on answer tokens only, then
decode the test prompts greedily. The steps run under `lax.scan` and a whole grid of
(learning rate, seed) pairs runs as one `vmap`ped program, compiled once per
(method, rank). Scoring (exact match) happens on the host from the generated tokens.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

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
  hessian_iters: int = 0          # Lanczos steps (0: skip)


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


def make_run(cfg: llama.LlamaConfig, ac, tc: TrainConfig):
  """Returns run(lr, seed, params, train_tokens, train_mask) -> (losses (steps,), merged
  dense parameters, lambda_max at init). Returning the merged model (exact,
  see `adapters.merge`) lets one compiled decoding program score every method.
  """
  sched = schedule(tc)
  opt = direction(ac, tc)

  # Model and data are arguments (not closed-over constants) so XLA does not embed them.
  def run(lr, seed, params, tr_tokens, tr_mask, attached=None):
    key = jax.random.PRNGKey(seed)
    k_init, k_data = jax.random.split(key)
    if attached is None:
      base, ad = attach_for(ac, tc, cfg, k_init, params, tr_tokens, tr_mask)
    else:
      base, ad = attached
    train, frozen = ad["train"], ad["frozen"]
    opt_state = opt.init(train)
    lam = jnp.zeros([])
    if tc.hessian_iters:
      # Computed in the same program as training so that no extra compile is needed.
      n = tc.hessian_examples
      loss = lambda tr: adapter_loss(tr, base, frozen, tr_tokens[:n], tr_mask[:n], cfg, ac)
      lam = hessian.lanczos_top(loss, train, jax.random.fold_in(key, 7), tc.hessian_iters)

    def step(carry, i):
      train, opt_state = carry
      idx = jax.random.randint(jax.random.fold_in(k_data, i), (tc.batch,), 0,
                               tr_tokens.shape[0])
      loss, g = jax.value_and_grad(adapter_loss)(
          train, base, frozen, tr_tokens[idx], tr_mask[idx], cfg, ac)
      d, opt_state = opt.update(g, opt_state, train)
      train = jax.tree.map(lambda p, u: p - lr * sched(i) * u, train, d)
      return (train, opt_state), loss

    (train, _), losses = jax.lax.scan(step, (train, opt_state), jnp.arange(tc.steps))
    return losses, adapters_lib.merge(base, {"train": train, "frozen": frozen}, ac), lam

  return run


def attach_for(ac, tc, cfg, key, params, tr_tokens, tr_mask):
  grads = None
  if ac.method in adapters_lib.NEEDS_GRAD:
    n = tc.ga_examples
    grads = kernel_grads(params, cfg, tr_tokens[:n], tr_mask[:n])
  return adapters_lib.attach(key, params, cfg, ac, grads)


def lambda_max_at_init(params, cfg, ac, tc, tr_tokens, tr_mask, n_examples, iters):
  """Top Hessian eigenvalue of the loss on `n_examples` w.r.t. the adapter at init (seed
  0), in its own program: for models where computing it once per LR is too costly."""
  def top(params, tr_tokens, tr_mask):
    base, ad = attach_for(ac, tc, cfg, jax.random.PRNGKey(0), params, tr_tokens, tr_mask)
    t, m = tr_tokens[:n_examples], tr_mask[:n_examples]
    loss = lambda tr: adapter_loss(tr, base, ad["frozen"], t, m, cfg, ac)
    return hessian.lanczos_top(loss, ad["train"], jax.random.PRNGKey(1), iters)
  return float(jax.jit(top)(params, tr_tokens, tr_mask))


@functools.lru_cache(maxsize=None)
def decoder(cfg, n_new):
  """jit(vmap(greedy decoding)) over a leading axis of dense parameter trees; cached."""
  gen = lambda p, t, l: llama.greedy_generate(p, cfg, t, l, n_new)
  return jax.jit(jax.vmap(gen, in_axes=(0, None, None)))


def run_grid(params, cfg, ac, tc, data, n_new, lrs, seeds):
  """All (lr, seed) pairs in one vmapped, jitted program: losses (S, R, steps), gens, lams."""
  lrs = np.asarray(lrs, np.float32)
  seeds = np.asarray(seeds, np.int32)
  L, S = np.meshgrid(lrs, seeds)            # (S, R)
  attached = None
  if ac.method in adapters_lib.DETERMINISTIC:
    # Seed-independent SVD/QR/gradient inits run once, in their own program: XLA:CPU's
    # LAPACK calls intermittently deadlocked inside the big vmapped/scanned program.
    attached = jax.jit(lambda p, t, m: attach_for(ac, tc, cfg, jax.random.PRNGKey(0), p, t, m))(
        params, data[0], data[1])
  run = jax.vmap(make_run(cfg, ac, tc), in_axes=(0, 0, None, None, None, None))
  losses, merged, lams = jax.jit(run)(jnp.asarray(L.reshape(-1)), jnp.asarray(S.reshape(-1)),
                                      params, data[0], data[1], attached)
  gens = decoder(cfg, n_new)(merged, data[2], data[3])
  shape = (len(seeds), len(lrs))
  out = (np.asarray(losses).reshape(shape + (-1,)),
         np.asarray(gens).reshape(shape + gens.shape[1:]), np.asarray(lams).reshape(shape))
  if len(data) > 4:
    test_loss = evaluator(cfg)(merged, data[4], data[5])
    out += (np.asarray(test_loss).reshape(shape),)
  return out


@functools.lru_cache(maxsize=None)
def evaluator(cfg):
  """jit(vmap(answer-token loss on the test set)) over stacked dense parameters; cached."""
  loss = lambda p, t, m: masked_loss(llama.forward(p, t, cfg), t, m)
  return jax.jit(jax.vmap(loss, in_axes=(0, None, None)))


def score(task, tok, gens, lens, answers, n_new) -> float:
  texts = tasks_lib.decode_answers(tok, gens, lens, n_new)
  return float(np.mean([tasks_lib.is_correct(task, t, a) for t, a in zip(texts, answers)]))


def prepare(task, tok, n_train, n_test, seq_len, n_new, seed=1234):
  train, test = tasks_lib.make_task(task, n_train, n_test, seed)
  trt, trm = tasks_lib.encode_supervised(train, tok, seq_len)
  tet, tel = tasks_lib.encode_prompts(test, tok, seq_len, n_new)
  tst, tsm = tasks_lib.encode_supervised(test, tok, seq_len)
  arrays = (trt, trm, tet, tel, tst, tsm)
  return tuple(jnp.asarray(a) for a in arrays), test
