"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

The pure training pieces shared by the launcher (core loop) and the vmapped study:
state init, the train step (schedule -> masks -> loss -> Adam -> latent-weight clip ->
soft refresh) and the evaluation step, which always runs the fully committed network with
hard signs only.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

from jaxpapers.papers.stompp import binarize as bz
from jaxpapers.papers.stompp import model as model_lib


def make_optimizer(config):
  o = config.optim
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, o.lr, int(o.warmup_frac * config.train.steps), config.train.steps)
  return optax.adamw(schedule, weight_decay=o.weight_decay)


def init_state(config, model, optimizer, input_shape, rng):
  p_rng, r_rng = jax.random.split(rng)
  x = jnp.zeros((2, *input_shape), jnp.float32)
  progress = jnp.zeros((model.num_binary,), jnp.float32)
  variables = model.init({"params": p_rng, "ranks": r_rng}, x, progress, train=False)
  params = variables["params"]
  return {
      "params": params,
      "batch_stats": variables["batch_stats"],
      "ranks": variables.get("ranks", {}),
      "opt_state": optimizer.init(params),
  }


def progress_at(config, num_binary: int, step):
  b = config.binarize
  return bz.layer_progress(step, config.train.steps, num_binary, b.rule, b.order,
                           b.start, b.end, b.ramp)


def _clip_latent(params, num_binary):
  """BinaryConnect's latent clip to [-1, 1]: beyond it the clip passes no gradient."""
  names = set(model_lib.binary_layer_names(num_binary))
  return {k: (jax.tree.map(lambda w: jnp.clip(w, -1.0, 1.0), v) if k in names else v)
          for k, v in params.items()}


def layer_grad_norms(grads, num_binary):
  """Per-binary-layer weight-gradient norm: the 'gradient blockade' instrument."""
  return jnp.stack([optax.tree.norm(grads[n]) if n in grads else jnp.zeros(())
                    for n in model_lib.binary_layer_names(num_binary)])


def train_step(config, model, optimizer, state, batch, rng, step):
  """One StoMPP step; `step` is the global step (an int32 scalar array)."""
  progress = progress_at(config, model.num_binary, step)

  def loss_fn(params):
    logits, updates = model.apply(
        {"params": params, "batch_stats": state["batch_stats"], "ranks": state["ranks"]},
        batch["image"], progress, train=True, mutable=["batch_stats"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
    acc = (logits.argmax(-1) == batch["label"]).mean()
    return loss, (updates["batch_stats"], acc)

  (loss, (batch_stats, acc)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state["params"])
  updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
  params = optax.apply_updates(state["params"], updates)
  if config.binarize.rule != "fp":
    params = _clip_latent(params, model.num_binary)

  ranks = state["ranks"]
  b = config.binarize
  if b.refresh_every > 0 and b.refresh_frac > 0 and b.rule in ("stompp", "stompp_ste"):
    def refresh(ranks):
      leaves, treedef = jax.tree.flatten(ranks)
      keys = jax.random.split(rng, max(len(leaves), 1))
      return jax.tree.unflatten(treedef, [
          bz.soft_refresh(k, r, b.refresh_frac) for k, r in zip(keys, leaves)])
    # A cond, not a select: the sorts inside a refresh run only on refresh steps.
    ranks = jax.lax.cond((step + 1) % b.refresh_every == 0, refresh, lambda r: r, ranks)

  metrics = {
      "loss": loss,
      "accuracy": acc,
      "grad_norm": optax.tree.norm(grads),
      "layer_grad_norm": layer_grad_norms(grads, model.num_binary),
      "progress_mean": progress.mean(),
  }
  new_state = {"params": params, "batch_stats": batch_stats, "ranks": ranks,
               "opt_state": opt_state}
  return new_state, metrics


def logits_hard(model, state, images):
  """The committed network: every binarizable entry hard binary (fp: the real network)."""
  progress = jnp.ones((model.num_binary,), jnp.float32)
  return model.apply({"params": state["params"], "batch_stats": state["batch_stats"],
                      "ranks": state["ranks"]}, images, progress, train=False)


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
