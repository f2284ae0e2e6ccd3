"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

The pure training pieces shared by the launcher (core loop) and the vmapped studies:
state init, the train step (augment -> schedule -> masks -> loss -> Adam -> latent-weight
clip -> soft refresh) and the evaluation step, which always runs the fully committed
network with hard signs only.

Everything that distinguishes one training variant from another (rule, order, window,
learning rate, refresh fraction, binary activations) is a `variant`: a dict of scalars
(see `variant`). The launcher builds it from the config; the studies stack many and
`vmap` over them, so rules x orders x learning rates x seeds train in one compiled
program instead of one compile per cell.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

from jaxpapers.core import precision
from jaxpapers.data import sources
from jaxpapers.papers.stompp import binarize as bz
from jaxpapers.papers.stompp import model as model_lib


def variant(rule: str, order: str = "forward", start: float = 0.0, end: float = 0.8,
            lr: float = 3e-3, refresh_frac: float = 0.1, binary_acts: bool = True) -> dict:
  """One training variant as a pytree of scalars (stackable, vmappable)."""
  return {"knobs": bz.knobs(rule, binary_acts), "sched": bz.schedule(rule, order, start, end),
          "lr": jnp.float32(lr), "refresh_frac": jnp.float32(refresh_frac)}


def config_variant(config) -> dict:
  b = config.binarize
  return variant(b.rule, b.order, b.start, b.end, config.optim.lr, b.refresh_frac,
                 b.binary_acts)


def make_optimizer(config):
  """AdamW with warmup + cosine decay at unit peak; the step scales by the variant's lr.

  Scaling the final update by lr is exactly AdamW with peak lr (weight decay in optax's
  adamw is applied before the learning-rate scaling), and lets lr be vmapped.
  """
  o = config.optim
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, 1.0, int(o.warmup_frac * config.train.steps), config.train.steps)
  return optax.adamw(schedule, weight_decay=o.weight_decay)


def init_state(config, model, optimizer, input_shape, rng):
  p_rng, r_rng = jax.random.split(rng)
  x = jnp.zeros((2, *input_shape), jnp.float32)
  progress = jnp.zeros((model.num_binary,), jnp.float32)
  variables = model.init({"params": p_rng}, x, progress, train=False)
  params = variables["params"]
  return {
      "params": params,
      "batch_stats": variables["batch_stats"],
      # Every mask's random permutation, all drawn in one sort.
      "ranks": bz.init_ranks_tree(r_rng, variables.get("ranks", {})),
      "opt_state": optimizer.init(params),
  }


def progress_at(config, num_binary: int, step, var=None):
  var = config_variant(config) if var is None else var
  return bz.progress_k(step, config.train.steps, num_binary, var["sched"],
                       config.binarize.ramp)


def _clip_latent(params, num_binary, fp):
  """BinaryConnect's latent clip to [-1, 1] (not for fp): beyond it the clip passes no
  gradient."""
  names = set(model_lib.binary_layer_names(num_binary))
  clip = lambda w: jnp.where(fp > 0, w, jnp.clip(w, -1.0, 1.0))
  return {k: (jax.tree.map(clip, v) if k in names else v) for k, v in params.items()}


def layer_grad_norms(grads, num_binary):
  """Per-binary-layer weight-gradient norm: the 'gradient blockade' instrument."""
  return jnp.stack([optax.tree.norm(grads[n]) if n in grads else jnp.zeros(())
                    for n in model_lib.binary_layer_names(num_binary)])


def committed_fractions(ranks, progress, num_binary):
  """Per binary layer: the fraction of its binarizable entries (weights and input
  activation) that the masks commit at `progress`, counted from the ranks."""
  out = []
  for i, name in enumerate(model_lib.binary_layer_names(num_binary)):
    leaves = jax.tree.leaves(ranks.get(name, {}))
    n = sum(r.size for r in leaves)
    k = sum(bz.mask_from_ranks(r, progress[i]).sum() for r in leaves)
    out.append(k / max(n, 1))
  return jnp.stack(out).astype(jnp.float32)


def augment(config, images, rng):
  """Random crop (zero-padded by data.crop_pad) + horizontal flip, pure in `rng`."""
  d = config.data
  if d.get("crop_pad", 0) == 0 and not d.get("flip", False):
    return images
  return sources.random_crop_flip(rng, images, d.crop_pad, d.flip)


def train_step(config, model, optimizer, state, batch, rng, step, var=None):
  """One StoMPP step; `step` is the global step (an int32 scalar array).

  `rng` must be a pure function of (seed, step) (the loop's fold_in), so augmentation and
  refresh replay exactly on resume.
  """
  var = config_variant(config) if var is None else var
  progress = progress_at(config, model.num_binary, step, var)
  aug_rng, refresh_rng = jax.random.split(rng)
  images = augment(config, batch["image"], aug_rng)

  dtype = precision.compute_dtype(config)

  def loss_fn(params):
    # compute_dtype: the forward/backward pass (convolutions, matmuls) in that dtype on
    # float32 master weights; BatchNorm statistics, running averages and the loss float32.
    logits, updates = model.apply(
        {"params": precision.cast(params, dtype), "batch_stats": state["batch_stats"],
         "ranks": state["ranks"]},
        images.astype(dtype), progress, train=True,
        knobs=precision.cast(var["knobs"], dtype), mutable=["batch_stats"])
    logits = logits.astype(jnp.float32)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
    acc = (logits.argmax(-1) == batch["label"]).mean()
    return loss, (updates["batch_stats"], acc)

  (loss, (batch_stats, acc)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state["params"])
  updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
  updates = jax.tree.map(lambda u: var["lr"] * u, updates)
  params = optax.apply_updates(state["params"], updates)
  params = _clip_latent(params, model.num_binary, var["knobs"]["fp"])

  ranks = state["ranks"]
  b = config.binarize
  # Refresh only moves which entries are committed; for STE (all committed) and fp (none)
  # it changes nothing, so it may run for every variant of a vmapped program.
  if b.refresh_every > 0 and b.rule in ("stompp", "stompp_ste"):
    def refresh(ranks):  # every tensor at once: two sorts, not two per tensor
      return bz.soft_refresh_tree(refresh_rng, ranks, var["refresh_frac"])
    # A cond, not a select: the sorts inside a refresh run only on refresh steps (the
    # predicate depends on the step alone, so it stays a cond under vmap over variants).
    ranks = jax.lax.cond((step + 1) % b.refresh_every == 0, refresh, lambda r: r, ranks)

  metrics = {
      "loss": loss,
      "accuracy": acc,
      "grad_norm": optax.tree.norm(grads),
      "layer_grad_norm": layer_grad_norms(grads, model.num_binary),
      "progress_mean": progress.mean(),
      "committed": committed_fractions(state["ranks"], progress, model.num_binary),
  }
  new_state = {"params": params, "batch_stats": batch_stats, "ranks": ranks,
               "opt_state": opt_state}
  return new_state, metrics


def logits_hard(model, state, images, var=None):
  """The committed network: every binarizable entry hard binary (fp: the real network)."""
  progress = jnp.ones((model.num_binary,), jnp.float32)
  knobs = None if var is None else var["knobs"]
  return model.apply({"params": state["params"], "batch_stats": state["batch_stats"],
                      "ranks": state["ranks"]}, images, progress, train=False, knobs=knobs)


def eval_step(model, state, batch):
  logits = logits_hard(model, state, batch["image"])
  mask = batch["mask"]
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
  correct = (logits.argmax(-1) == batch["label"]).astype(jnp.float32)
  return {"loss": (loss * mask).sum(), "accuracy": (correct * mask).sum(),
          "count": mask.sum()}


def bind(config, model, optimizer):
  """The step functions with config/model/optimizer closed over (static for jit)."""
  return (functools.partial(train_step, config, model, optimizer),
          functools.partial(eval_step, model))
