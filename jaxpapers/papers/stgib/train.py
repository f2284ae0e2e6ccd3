"""Training members (seeds x learning rates) of one method, vmapped and spread over devices.

A member's batch at step k is a pure function of (seed, k): windows drawn with
fold_in(key, k) from the training split held on the device, so a run killed after a
checkpoint and resumed gives the same parameters bit for bit. Every `eval_every` steps the
validation MAE of each member is measured and its best parameters kept (early stopping on
validation, never test).
"""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import population
from jaxpapers.core import sharding
from jaxpapers.papers.stgib import model as model_lib


def _opt():
  # The step size is a per-member array applied after Adam's scaling, so one program
  # serves the whole learning-rate grid.
  return optax.chain(optax.clip_by_global_norm(5.0), optax.scale_by_adam())


def _gather(feats, target, last, t_in, t_out):
  xi = last[:, None] - t_in + 1 + jnp.arange(t_in)[None]
  yi = last[:, None] + 1 + jnp.arange(t_out)[None]
  return feats[xi], target[yi]


def member_init(spec, seed, steps):
  del steps
  key = jax.random.PRNGKey(seed)
  params = model_lib.init(spec, jax.random.fold_in(key, 1))
  state = dict(params=params, opt=_opt().init(params), key=key)
  if spec.kind == "gib":  # the discriminator's own Adam (GIB's optimizer_local)
    state["dopt"] = optax.scale_by_adam().init(params["disc"])
  return state


def gib_inner(spec, disc, dopt, emb, lr, key):
  """GIB's inner loop: `gib_inner` Adam steps maximising the DV bound over the
  discriminator alone, on the (detached) embeddings of the current batch."""
  opt = optax.scale_by_adam()

  def body(c, k):
    d, o = c
    g = jax.grad(lambda d_: -model_lib.dv_bound(d_, *emb, k, spec.gib_out_relu))(d)
    u, o = opt.update(g, o, d)
    return (jax.tree.map(lambda p, u_: p - lr * u_, d, u), o), None

  (disc, dopt), _ = jax.lax.scan(body, (disc, dopt), jax.random.split(key, spec.gib_inner))
  return disc, dopt


_PROGRAMS = {}


def make_chunk(spec, batch, chunk, steps, mean, std, mesh=None):
  """(member, lr, step0, feats, target, train_last) -> (member, mean train loss, kl).

  One program per setting and process (a resumed or repeated run reuses the compilation).
  """
  key = ("chunk", spec, batch, chunk, steps, mean, std, mesh)
  if key not in _PROGRAMS:
    _PROGRAMS[key] = _make_chunk(spec, batch, chunk, steps, mean, std, mesh)
  return _PROGRAMS[key]


def _make_chunk(spec, batch, chunk, steps, mean, std, mesh):
  opt = _opt()

  def one(state, lr, step0, feats, target, train_last):
    def body(st, k):
      step = step0 + k
      kd, km = jax.random.split(jax.random.fold_in(st["key"], step))
      idx = jax.random.randint(kd, (batch,), 0, train_last.shape[0])
      x, y = _gather(feats, target, train_last[idx], spec.t_in, spec.t_out)
      valid = (y != 0).astype(jnp.float32)
      yz = (y - mean) / std
      r = model_lib.gsat_r(step, steps, spec.final_r)
      (loss, (mae, kl, emb)), g = jax.value_and_grad(
          lambda p: model_lib.loss_fn(spec, p, x, yz, valid, km, r), has_aux=True)(st["params"])
      upd, o = opt.update(g, st["opt"], st["params"])
      params = jax.tree.map(lambda p, u: p - lr * u, st["params"], upd)
      new = dict(params=params, opt=o, key=st["key"])
      if spec.kind == "gib":
        # The discriminator gets no gradient from the outer loss (stop_gradient there);
        # its inner loop runs on this batch's embeddings and serves the next step.
        disc, new["dopt"] = gib_inner(spec, params["disc"], st["dopt"], emb, lr,
                                      jax.random.fold_in(km, 11))
        new["params"] = dict(params, disc=disc)
      return new, (loss, mae, kl)

    state, (loss, mae, kl) = jax.lax.scan(body, state, jnp.arange(chunk))
    return state, mae.mean(), kl.mean()

  return sharding.spread(one, mesh, in_axes=(0, 0, None, None, None, None))


def predict_fn(spec, r_final):
  """params, x [W, t_in, N, C] -> (y_hat z [W, t_out, N], aux) deterministic."""
  def f(params, x):
    return jax.vmap(lambda xi: model_lib.forward(spec, params, xi, jax.random.PRNGKey(0),
                                                 r_final, False))(x)
  return f


def make_eval(spec, mean, std, r_final):
  key = ("eval", spec, mean, std, r_final)
  if key not in _PROGRAMS:
    _PROGRAMS[key] = _make_eval(spec, mean, std, r_final)
  return _PROGRAMS[key]


def _make_eval(spec, mean, std, r_final):
  pred = predict_fn(spec, r_final)

  def one(params, x, y):
    yh, _ = pred(params, x)
    valid = (y != 0).astype(jnp.float32)
    return jnp.sum(jnp.abs(yh * std + mean - y) * valid) / jnp.maximum(valid.sum(), 1.0)

  return sharding.spread(one, in_axes=(0, None, None))


@jax.jit
def _keep_best(params, best, val, best_val, curve, k):
  """Each member's best-on-validation parameters and score, and the curve's row k: one
  small program (per shapes) instead of an eager select per parameter leaf."""
  better = val < best_val
  M = val.shape[0]
  sel = lambda n, o: jnp.where(better.reshape((M,) + (1,) * (n.ndim - 1)), n, o)
  return (jax.tree.map(sel, params, best), jnp.where(better, val, best_val),
          curve.at[k].set(val))


def train_members(spec, cfg, w, seeds, lrs, workdir, tag, log=print, halt_after=0):
  """Trains len(seeds) x len(lrs) members (order: lr-major); returns dict with the best
  (validation) parameters [M, ...], val MAE [M], and the validation curve [evals, M]."""
  t = cfg.train
  M = len(seeds) * len(lrs)
  seed_of = [s for _ in lrs for s in seeds]
  lr_of = jnp.asarray([lr for lr in lrs for _ in seeds], jnp.float32)
  members = population.stack([member_init(spec, 1000 * s + 17, t.steps) for s in seed_of])
  r_final = float(model_lib.gsat_r(t.steps, t.steps, spec.final_r))
  chunk = make_chunk(spec, t.batch, t.eval_every, t.steps, w.mean, w.std)
  evaluate = make_eval(spec, w.mean, w.std, r_final)
  feats = jnp.asarray(w.feats)
  target = jnp.asarray(w.target)
  train_last = jnp.asarray(w.split["train"], jnp.int32)
  vl = w.split["val"][:: max(1, len(w.split["val"]) // t.val_windows)][: t.val_windows]
  xv, yv = _gather(feats, target, jnp.asarray(vl), spec.t_in, spec.t_out)
  state = dict(members=members, best=members["params"], best_val=jnp.full((M,), jnp.inf),
               curve=jnp.full((t.steps // t.eval_every, M), jnp.nan), step=jnp.int32(0))
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, tag), keep=2)
  state, _ = ckpt.restore_or(state)
  start = int(state["step"])
  if start:
    log(f"[{tag}] resumed at step {start}")
  # Rows every eval_every steps, checkpoints every ckpt_every: drop this tag's rows past it.
  metrics_lib.truncate_after(workdir, start, splits=("train",), tag=tag)
  writer = metrics_lib.MetricsWriter(workdir, total_steps=t.steps, verbose=False)
  t0 = time.perf_counter()
  for step0 in range(start, t.steps, t.eval_every):
    mem, tl, kl = chunk(state["members"], lr_of, jnp.int32(step0), feats, target, train_last)
    val = evaluate(mem["params"], xv, yv)
    k = step0 // t.eval_every
    best, best_val, curve = _keep_best(mem["params"], state["best"], val, state["best_val"],
                                       state["curve"], k)
    state = dict(members=mem, best=best, best_val=best_val, curve=curve,
                 step=jnp.int32(step0 + t.eval_every))
    done = step0 + t.eval_every
    row = {f"{tag}/train_mae": float(jnp.mean(tl)), f"{tag}/kl": float(jnp.mean(kl)),
           f"{tag}/val_mae": float(jnp.mean(val))}
    metrics_lib.check_finite(done, row)
    writer.write(done, row)
    el = time.perf_counter() - t0
    rate = (done - start) / el
    log(f"[{tag} {done}/{t.steps}] train_mae {row[f'{tag}/train_mae']:.4f} val_mae "
        f"{row[f'{tag}/val_mae']:.3f} kl {row[f'{tag}/kl']:.3f} ({rate:.1f} steps/s, "
        f"ETA {(t.steps - done) / rate:.0f} s)")
    if done % t.ckpt_every == 0 or done == t.steps:
      ckpt.save(done, state)
    if halt_after and done >= halt_after and done < t.steps:
      ckpt.close()
      raise SystemExit(f"halt_after={halt_after}: stopped after the checkpoint at {done}")
  ckpt.close()
  return dict(best=state["best"], val=np.asarray(state["best_val"]),
              curve=np.asarray(state["curve"]), seeds=seed_of, lrs=np.asarray(lr_of),
              final=state["members"]["params"], r_final=r_final)
