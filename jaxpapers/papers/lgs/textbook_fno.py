"""LGS (issue 41): a plain textbook FNO, written apart from models.FNO / train.py.

Li et al. 2021's reference `fourier_2d.py` in plain JAX (no flax, no shared trainer):
lift (context frames + grid) to `width`, 4 Fourier layers (the lowest `modes` rows from
each end and `modes` columns of the rFFT, a complex weight per mode, plus a 1x1 path,
GELU between), projection 128 -> GELU -> out. It predicts the next frame itself (not a
residual), is trained with the reference's relative L2 loss and optimizer (Adam, weight
decay 1e-4 added to the gradient, the lr halved at every fifth of the steps), on the
study's batches of (context, next frame), with the study's steps and batch, 3 seeds and
an lr grid chosen on validation. If it beats the study's FNO, ours is handicapped.

  python -m jaxpapers.papers.lgs.textbook_fno --config=configs/lgs.py:setting=close \\
      --workdir=/tmp/lg41/close --out=/tmp/lg41/close/textbook_fno.json

The same loop trains the textbook U-Net (`--model=unet`, or `python -m
jaxpapers.papers.lgs.textbook_unet`), through `train`'s `net` argument.
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax


def init(key, cin, cout, width=16, modes=6, layers=4, hidden=128):
  ks = iter(jax.random.split(key, 4 * layers + 4))
  dense = lambda k, i, o: dict(w=jax.random.uniform(k, (i, o), minval=-1, maxval=1) / np.sqrt(i),
                               b=jnp.zeros((o,)))
  scale = 1.0 / (width * width)
  spec = lambda k: scale * (jax.random.uniform(k, (2, 2, modes, modes, width, width)))
  return dict(lift=dense(next(ks), cin + 2, width),
              spectral=[spec(next(ks)) for _ in range(layers)],
              point=[dense(next(ks), width, width) for _ in range(layers)],
              proj1=dense(next(ks), width, hidden), proj2=dense(next(ks), hidden, cout))


def spectral(x, w):
  """x [B, H, W, C] real; w [2 (re, im), 2 (low / high rows), m, m, C, O]."""
  h, wd = x.shape[1:3]
  m = w.shape[2]
  wc = w[0] + 1j * w[1]
  xf = jnp.fft.rfft2(x, axes=(1, 2))
  out = jnp.zeros(xf.shape[:3] + (w.shape[-1],), jnp.complex64)
  out = out.at[:, :m, :m].set(jnp.einsum("bxyi,xyio->bxyo", xf[:, :m, :m], wc[0]))
  out = out.at[:, h - m:, :m].set(jnp.einsum("bxyi,xyio->bxyo", xf[:, h - m:, :m], wc[1]))
  return jnp.fft.irfft2(out, s=(h, wd), axes=(1, 2))


def apply(p, ctx):
  """ctx [B, K, H, W, C] -> next frame [B, H, W, out]."""
  b, k, h, w, c = ctx.shape
  x = jnp.moveaxis(ctx, 1, -2).reshape(b, h, w, k * c)
  gy, gx = jnp.meshgrid(jnp.linspace(0, 1, h), jnp.linspace(0, 1, w), indexing="ij")
  x = jnp.concatenate([x, jnp.broadcast_to(jnp.stack([gy, gx], -1), (b, h, w, 2))], -1)
  lin = lambda d, x: x @ d["w"] + d["b"][None, None, None]
  x = lin(p["lift"], x)
  n = len(p["spectral"])
  for i, (sw, pw) in enumerate(zip(p["spectral"], p["point"])):
    x = spectral(x, sw) + lin(pw, x)
    x = jax.nn.gelu(x) if i < n - 1 else x
  return lin(p["proj2"], jax.nn.gelu(lin(p["proj1"], x)))


def rel_l2(pred, true, mask):
  """The reference's LpLoss: mean over samples of ||pred - true|| / ||true|| (masked)."""
  m = mask[:, None, None, :]
  num = jnp.sqrt(jnp.sum(((pred - true) * m) ** 2, axis=(1, 2, 3)))
  return jnp.mean(num / jnp.maximum(jnp.sqrt(jnp.sum((true * m) ** 2, axis=(1, 2, 3))), 1e-8))


def train(x, mask, key, lr, steps, batch, context, width, modes, net=None):
  """One model, x [N, T, H, W, C] normalized frames; returns (params, losses [steps]).
  net: (init(key, c_in, c_out), apply) of another textbook model (textbook_unet); the
  default is this FNO at `width` and `modes`."""
  net_init, net_apply = net or (lambda k, i, o: init(k, i, o, width, modes), apply)
  x, mask = jnp.asarray(x), jnp.asarray(mask)
  n, t = x.shape[:2]
  c = x.shape[-1]
  p = net_init(jax.random.fold_in(key, 0), context * c, c)
  sched = optax.piecewise_constant_schedule(lr, {int(steps * f): 0.5 for f in (.2, .4, .6, .8)})
  tx = optax.chain(optax.add_decayed_weights(1e-4), optax.adam(sched))
  opt = tx.init(p)

  def step(carry, i):
    p, opt = carry
    ki, kt = jax.random.split(jax.random.fold_in(key, i + 1))
    idx = jax.random.randint(ki, (batch,), 0, n)
    s = jax.random.randint(kt, (batch,), 0, t - context)
    win = jax.vmap(lambda a, b: jax.lax.dynamic_slice_in_dim(x[a], b, context + 1))(idx, s)
    loss, g = jax.value_and_grad(
        lambda q: rel_l2(net_apply(q, win[:, :context]) * mask[idx][:, None, None, :],
                         win[:, context], mask[idx]))(p)
    upd, opt = tx.update(g, opt, p)
    return (optax.apply_updates(p, upd), opt), loss
  (p, _), losses = jax.lax.scan(step, (p, opt), jnp.arange(steps))
  return p, losses


def rollout(p, ctx, mask, steps, net_apply=apply):
  """[B, steps, H, W, C]: the context follows the predictions."""
  def body(c, _):
    nxt = net_apply(p, c) * mask[:, None, None, :]
    return jnp.concatenate([c[:, 1:], nxt[:, None]], 1), nxt
  return jnp.moveaxis(jax.lax.scan(body, ctx, None, length=steps)[1], 0, 1)


def main(model="fno"):
  from jaxpapers.core import config as config_lib  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.lgs import experiment as E  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.lgs import textbook_unet  # pylint: disable=g-import-not-at-top
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", default=model, choices=("fno", "unet"))
  ap.add_argument("--config", required=True)  # configs/lgs.py:ARGS, as for the study
  ap.add_argument("--workdir", required=True)  # the study's (its corpus cache)
  ap.add_argument("--lrs", default="3e-4,1e-3,3e-3")
  ap.add_argument("--out", required=True)
  a = ap.parse_args()
  config = config_lib.load(a.config)
  data, fams = E.corpus(config, a.workdir)
  mean, std = E.stats(data["train"], len(fams))
  xs = {s: jnp.asarray(E.normalize(v, mean, std)) for s, v in data.items()}
  K, S, VS = config.model.context, config.eval.rollout_steps, config.eval.val_steps
  seeds = list(range(config.train.seeds))
  lrs = [float(v) for v in a.lrs.split(",")]
  members = [(s, lr) for lr in lrs for s in seeds]
  mtr = jnp.asarray(data["train"]["mask"])
  t0 = time.perf_counter()
  net = None
  if a.model == "unet":  # the study's U-Net widths
    widths = tuple(config.model.unet_widths)
    net = (lambda k, i, o: textbook_unet.init(k, i, o, widths), textbook_unet.apply)
  net_apply = net[1] if net else apply
  fit = jax.jit(jax.vmap(lambda k, lr: train(
      xs["train"], mtr, k, lr, config.train.steps, config.train.batch_size, K,
      config.model.fno_width, config.model.fno_modes, net)))
  keys = jnp.stack([jax.random.PRNGKey(5000 + s) for s, _ in members])
  params, losses = fit(keys, jnp.asarray([lr for _, lr in members], jnp.float32))
  print(f"[textbook {a.model}] trained {len(members)} members in {time.perf_counter() - t0:.0f} s",
        flush=True)
  roll = jax.jit(jax.vmap(lambda p, c, m, s: rollout(p, c, m, s, net_apply),
                          in_axes=(0, None, None, None)), static_argnums=3)
  def err(split, idx, steps):
    pr = roll(jax.tree.map(lambda v: v[np.asarray(idx)], params), xs[split][:, :K],
              jnp.asarray(data[split]["mask"]), steps)
    return E.errors(np.asarray(pr), data[split], mean, std, K)
  val = err("val", range(len(members)), VS).mean(axis=(1, 2)).reshape(len(lrs), len(seeds))
  best = int(np.argmin(val.mean(1)))
  test = err("test", range(best * len(seeds), (best + 1) * len(seeds)), S)
  fam = data["test"]["fam"]
  per_fam = np.stack([test[:, fam == f].mean(1) for f in range(len(fams))], 1)  # [M, F, S]
  q = losses.shape[1] // 4
  lc = np.asarray(losses)[best * len(seeds):(best + 1) * len(seeds)]
  out = dict(model=a.model, grid=lrs, val_l2re=val.mean(1).tolist(), chosen=lrs[best],
             edge=best in (0, len(lrs) - 1), errors=np.round(test, 5).tolist(),
             l2re={str(k): [float(v) for v in per_fam[:, :, k - 1].mean(1)]
                   for k in (1, 5, 10, 20) if k <= S},
             loss_q3=float(lc[:, 2 * q:3 * q].mean()), loss_q4=float(lc[:, 3 * q:].mean()),
             wall_s=time.perf_counter() - t0)
  print(json.dumps({k: v for k, v in out.items() if k != "errors"}), flush=True)
  with open(a.out, "w") as f:
    json.dump(out, f)


if __name__ == "__main__":
  main()
