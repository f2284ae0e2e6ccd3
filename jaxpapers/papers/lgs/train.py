"""LGS (arXiv 2602.11229): training and rollouts of PhyVAE, PFlowFT and every baseline.

One trainer serves all models: members (seeds x learning rates) are vmapped and spread
over the mesh (`core.sharding.spread`), or, at the paper's size, each batch is split over
the devices (`batch_parallel_chunk`), steps run in `lax.scan` chunks, batches are drawn
inside the program from `fold_in(member key, step)` (so a resumed run draws the same
batches), and each chunk's state can be checkpointed through `core.checkpoint`.

Model kinds (`KINDS`): `vae` (PhyVAE), `lgs` (PFlowFT: pyramidal flow forcing in the
latent), `latent_mse` (the same transformer, deterministic), `latent_dpot` (the same,
deterministic with input noise while training, DPOT-style), `pixel_fm` (flow matching in
pixel space on patches), `fno`, `unet`; `persistence` (u_{t+1} = u_t) is the trivial
model. Rollouts update the K-frame context on the model's own predictions.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jax.sharding import NamedSharding, PartitionSpec as P

from jaxpapers.core import accumulate
from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import mesh as mesh_lib
from jaxpapers.core import population
from jaxpapers.core import sharding
from jaxpapers.papers.lgs import flows
from jaxpapers.papers.lgs import models

KINDS = ("vae", "lgs", "latent_mse", "latent_dpot", "pixel_fm", "fno", "unet")
LATENT = ("lgs", "latent_mse", "latent_dpot")
DYNAMICS = ("lgs", "latent_mse", "latent_dpot", "pixel_fm", "fno", "unet")


@dataclasses.dataclass(frozen=True)
class Spec:
  """Everything a loss or rollout needs besides parameters and data (hashable)."""
  kind: str
  context: int = 2
  latent: int = 4
  vae_widths: tuple = (32, 48, 64)
  vae_up: str = "nearest"  # the PhyVAE decoder's upsampling (models.Decoder.up)
  beta: float = 1e-3
  width: int = 64
  depth: int = 3
  heads: int = 4
  patch: int = 2
  stages: int = 2
  flow_steps: int = 4  # Euler steps per pyramid stage (pixel_fm: 2x this, one stage)
  sigma_max: float = 0.3  # context noise levels while training: U[0, sigma_max]
  sigma_inf: float = 0.1  # context noise level at inference (lgs)
  fno_width: int = 24
  fno_modes: int = 8
  unet_widths: tuple = (32, 64, 96)
  batch: int = 16
  steps: int = 1000
  warmup: float = 0.05
  bf16: bool = False
  micro: int = 1  # gradient accumulated over this many slices of each batch

  def net(self):
    dt = jnp.bfloat16 if self.bf16 else jnp.float32
    if self.kind == "vae":
      return models.PhyVAE(self.vae_widths, self.latent, up=self.vae_up)
    if self.kind in LATENT:
      return models.FlowTransformer(self.width, self.depth, self.heads, self.latent, 1,
                                    max(self.stages, 1), dt)
    if self.kind == "pixel_fm":
      return models.FlowTransformer(self.width, self.depth, self.heads, 2, self.patch, 1, dt)
    if self.kind == "fno":
      return models.FNO(self.fno_width, self.fno_modes)
    if self.kind == "unet":
      return models.UNet(self.unet_widths)
    raise ValueError(f"unknown model kind {self.kind!r}; known: {', '.join(KINDS)}")


def init_params(spec: Spec, rng, frame_shape):
  """Parameters for a state of shape [H, W, D] (latent grid or pixels)."""
  h, w, d = frame_shape
  net = spec.net()
  if spec.kind == "vae":
    return net.init(rng, jnp.zeros((1, h, w, d)), rng)
  ctx = jnp.zeros((1, spec.context, h, w, d))
  if spec.kind in ("fno", "unet"):
    return net.init(rng, ctx)
  z = jnp.zeros((1, h, w, d if spec.kind in LATENT else 2))
  return net.init(rng, z, ctx, jnp.zeros((1,)), jnp.zeros((1,)), 0)


# ------------------------------------------------------------------ batches and losses

def sample_batch(data, key, batch: int, context: int):
  """Random (trajectory, time) windows: ctx [B, K, ...], nxt [B, ...], mask [B, C]."""
  x, mask = data["x"], data["mask"]
  n, t = x.shape[:2]
  ki, kt = jax.random.split(key)
  i = jax.random.randint(ki, (batch,), 0, n)
  s = jax.random.randint(kt, (batch,), 0, t - context)
  win = jax.vmap(lambda ii, ss: jax.lax.dynamic_slice_in_dim(x[ii], ss, context + 1))(i, s)
  return dict(ctx=win[:, :context], nxt=win[:, context], mask=mask[i])


def _masked_mse(a, b, mask):
  w = mask[:, None, None, :]
  return jnp.sum(((a - b) ** 2) * w) / (jnp.sum(w) * a.shape[1] * a.shape[2])


def loss_fn(spec: Spec, params, batch, rng, res_std):
  """(loss, metrics) of one batch for the model kind."""
  net = spec.net()
  if spec.kind == "vae":
    recon, mu, logvar = net.apply(params, batch["nxt"], rng)
    loss, (mse, kl) = models.vae_loss(recon, batch["nxt"], batch["mask"], mu, logvar,
                                      spec.beta)
    return loss, dict(mse=mse, kl=kl)
  ctx, nxt = batch["ctx"], batch["nxt"]
  r = (nxt - ctx[:, -1]) / res_std
  b = r.shape[0]
  apply = lambda x, c, t, s, k: net.apply(params, x, c, t, s, k)
  ks, kn, kl = jax.random.split(rng, 3)
  if spec.kind == "lgs":
    sigma = spec.sigma_max * jax.random.uniform(ks, (b,))
    loss = flows.pyramid_fm_loss(apply, r, flows.noisy_context(ctx, sigma, kn), sigma, kl,
                                 spec.stages)
  elif spec.kind in ("latent_mse", "latent_dpot"):
    if spec.kind == "latent_dpot":
      ctx = flows.noisy_context(ctx, spec.sigma_max * jax.random.uniform(ks, (b,)), kn)
    zero = jnp.zeros((b,))
    loss = jnp.mean((apply(jnp.zeros_like(r), ctx, zero, zero, spec.stages - 1) - r) ** 2)
  elif spec.kind == "pixel_fm":
    loss = flows.fm_loss(apply, r, ctx, jnp.zeros((b,)), kl, batch["mask"])
  else:
    loss = _masked_mse(net.apply(params, ctx), r, batch["mask"])
  return loss, {}


# ------------------------------------------------------------------ the trainer

def optimizer():
  return optax.chain(optax.clip_by_global_norm(1.0), optax.scale_by_adam())


def lr_at(spec: Spec, step):
  """Linear warm-up, then cosine decay to 10% of the peak."""
  w = max(int(spec.warmup * spec.steps), 1)
  frac = jnp.clip((step - w) / max(spec.steps - w, 1), 0.0, 1.0)
  return jnp.where(step < w, (step + 1) / w, 0.1 + 0.45 * (1 + jnp.cos(jnp.pi * frac)))


_INITS = {}


def init_member(spec: Spec, seed: int, lr: float, frame_shape):
  # One compiled program per (spec, shape): flax's eager init dispatches (and compiles)
  # every op on its own, seconds per model on CPU.
  fn_key = (spec, tuple(frame_shape))
  if fn_key not in _INITS:
    def init(key, lr):
      params = init_params(spec, jax.random.fold_in(key, 1), frame_shape)
      return dict(params=params, opt=optimizer().init(params), key=jax.random.fold_in(key, 2),
                  lr=lr, loss=jnp.float32(0.0))
    _INITS[fn_key] = jax.jit(init)
  return _INITS[fn_key](jax.random.PRNGKey(seed), jnp.float32(lr))


def make_chunk(spec: Spec, chunk: int, rows=None):
  """member_state, data, start, res_std -> member_state after `chunk` steps.

  rows: a sharding for each batch's leading (row) axis, or None: with one, XLA splits the
  batch's forward and backward over it and all-reduces the gradient (data parallel)."""
  tx = optimizer()

  def run(state, data, start, res_std):
    def body(st, i):
      step = start + i
      key = jax.random.fold_in(st["key"], step)
      kb, kl = jax.random.split(key)
      batch = sample_batch(data, kb, spec.batch, spec.context)
      if rows is not None:
        batch = jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, rows), batch)
      if spec.micro == 1:
        (loss, _), g = jax.value_and_grad(
            lambda p: loss_fn(spec, p, batch, kl, res_std), has_aux=True)(st["params"])
      else:
        # One slice's activations live at a time (the paper's 1024^2 attention weights).
        loss, g = accumulate.value_and_grad(
            lambda p, b, r: loss_fn(spec, p, b, r, res_std)[0], st["params"], batch, kl,
            spec.micro)
      upd, opt = tx.update(g, st["opt"], st["params"])
      scale = st["lr"] * lr_at(spec, step)
      params = jax.tree.map(lambda p, u: p - scale * u, st["params"], upd)
      return dict(st, params=params, opt=opt), loss
    st, losses = jax.lax.scan(body, state, jnp.arange(chunk))
    return dict(st, loss=jnp.mean(losses))

  return run


_CHUNKS = {}


def batch_parallel_chunk(spec: Spec, chunk: int, in_axes):
  """The vmapped chunk over every device with each member's batch rows split over them.

  For a paper-size model whose batch does not fit one device (and for seeds < devices):
  members and data are replicated, every device computes batch / devices rows of every
  member. `spread` instead gives each device whole members."""
  n = jax.device_count()
  if spec.batch % n:
    raise ValueError(f"batch_parallel: the batch {spec.batch} must be divisible by the "
                     f"{n} devices")
  mesh = mesh_lib.make_mesh()
  repl = NamedSharding(mesh, P())
  return jax.jit(jax.vmap(make_chunk(spec, chunk, NamedSharding(mesh, P("data"))),
                          in_axes=in_axes), in_shardings=repl, out_shardings=repl)


def fit(spec: Spec, members, data, res_std, *, chunk: int = 50, ckpt_dir: str | None = None,
        log=print, tag: str = "", batch_parallel: bool = False):
  """Trains stacked members (leading axis M) for spec.steps; returns (members, curve).

  data: dict(x, mask) shared by every member, or with a leading member axis M when
  `res_std` is an array [M] (each member its own data: latents of its own seed's VAE).
  curve: [(step, mean loss per member)] at every chunk end. With ckpt_dir, every chunk
  is checkpointed and a restarted call resumes from the newest one. `batch_parallel`
  splits each batch over the devices instead of the members (`batch_parallel_chunk`).
  """
  accumulate.check(spec.micro, spec.batch, f"the {spec.kind} batch")
  per_member = np.ndim(res_std) == 1

  def chunk_fn(n):
    key = (spec, n, per_member, batch_parallel)
    if key not in _CHUNKS:
      axes = (0, 0, None, 0) if per_member else (0, None, None, None)
      _CHUNKS[key] = (batch_parallel_chunk(spec, n, axes) if batch_parallel else
                      sharding.spread(make_chunk(spec, n), in_axes=axes))
    return _CHUNKS[key]

  n_chunks = -(-spec.steps // chunk)
  state = dict(members=members, chunk=jnp.int32(0), curve=jnp.zeros((n_chunks, members["lr"].shape[0])))
  ckpt = checkpoint_lib.Checkpointer(ckpt_dir, keep=1) if ckpt_dir else None
  if ckpt:
    state, _ = ckpt.restore_or(state)
  t0 = time.perf_counter()
  start = int(state["chunk"])
  res = jnp.asarray(res_std, jnp.float32)
  try:
    for c in range(start, n_chunks):
      # exactly spec.steps: the last chunk is shorter when chunk does not divide them (a
      # 5-epoch fine-tuning of 55 steps ran 100 at chunk 100 before this)
      n = min(chunk, spec.steps - c * chunk)
      m = chunk_fn(n)(state["members"], data, jnp.int32(c * chunk), res)
      loss = np.asarray(m["loss"])
      if not np.all(np.isfinite(loss)):
        raise FloatingPointError(f"{tag} loss is not finite at step {c * chunk + n}: "
                                 f"{loss.tolist()}")
      # The curve lives on the host: the members' sharding is the spread's, not the curve's.
      curve_np = np.array(state["curve"])
      curve_np[c] = loss
      state = dict(members=m, chunk=jnp.int32(c + 1), curve=jnp.asarray(curve_np))
      if ckpt:
        ckpt.save(c + 1, state)
      el = time.perf_counter() - t0
      done = c * chunk + n
      rate = (done - start * chunk) / el
      log(f"[{tag}] step {done}/{spec.steps} loss "
          f"{' '.join(f'{v:.4f}' for v in loss)} ({rate:.1f} steps/s, ETA "
          f"{(spec.steps - done) / rate:.0f} s)")
  finally:
    if ckpt:
      ckpt.close()
  curve = [((c + 1) * chunk, np.asarray(state["curve"][c]).tolist()) for c in range(n_chunks)]
  return state["members"], curve


stack = population.stack  # the members' states, stacked along the member axis


# ------------------------------------------------------------------ rollouts

def encode(vae_spec: Spec, vae_params, x):
  """Posterior means [N, T, h, w, d] of frames [N, T, H, W, C] (in chunks of frames)."""
  net = vae_spec.net()
  n, t = x.shape[:2]
  flat = x.reshape((n * t,) + x.shape[2:])
  mu = jax.lax.map(lambda f: net.apply(vae_params, f[None], method=net.encode)[0][0], flat,
                   batch_size=64)
  return mu.reshape((n, t) + mu.shape[1:])


def decode(vae_spec: Spec, vae_params, z):
  net = vae_spec.net()
  return net.apply(vae_params, z, method=net.decode)


def dynamics_step(spec: Spec, params, ctx, mask, rng, res_std, sigma_inf=None):
  """One autoregressive step: the next state [B, ...] from the context [B, K, ...]."""
  net = spec.net()
  b = ctx.shape[0]
  last = ctx[:, -1]
  apply = lambda x, c, t, s, k: net.apply(params, x, c, t, s, k)
  if spec.kind == "lgs":
    sig = spec.sigma_inf if sigma_inf is None else sigma_inf
    sigma = jnp.full((b,), sig, jnp.float32)
    kn, ks = jax.random.split(rng)
    c = flows.noisy_context(ctx, sigma, kn)
    r = flows.pyramid_fm_sample(apply, c, sigma, ks, spec.stages, spec.flow_steps, last.shape)
  elif spec.kind in ("latent_mse", "latent_dpot"):
    zero = jnp.zeros((b,))
    r = apply(jnp.zeros_like(last), ctx, zero, zero, spec.stages - 1)
  elif spec.kind == "pixel_fm":
    r = flows.fm_sample(apply, ctx, jnp.zeros((b,)), rng, 2 * spec.flow_steps, last.shape)
  elif spec.kind in ("fno", "unet"):
    r = net.apply(params, ctx)
  else:
    raise ValueError(f"{spec.kind!r} has no dynamics step")
  nxt = last + res_std * r
  if spec.kind not in LATENT:
    nxt = nxt * mask[:, None, None, :]
  return nxt


def rollout(spec: Spec, params, ctx, mask, rng, res_std, steps: int, vae=None,
            sigma_inf=None):
  """[B, steps, H, W, C] predicted (normalized) frames; the context follows predictions.

  Latent kinds: ctx holds latents; vae = (vae_spec, vae_params, z_std) decodes every
  step's latent (decoding is not part of the recurrence).
  """
  def body(c, k):
    nxt = dynamics_step(spec, params, c, mask, jax.random.fold_in(rng, k), res_std,
                        sigma_inf)
    return jnp.concatenate([c[:, 1:], nxt[:, None]], axis=1), nxt
  _, preds = jax.lax.scan(body, ctx, jnp.arange(steps))
  preds = jnp.moveaxis(preds, 0, 1)
  if spec.kind in LATENT:
    vspec, vparams, z_std = vae
    b, s = preds.shape[:2]
    frames = decode(vspec, vparams, preds.reshape((b * s,) + preds.shape[2:]) * z_std)
    preds = frames.reshape((b, s) + frames.shape[1:]) * mask[:, None, None, None, :]
  return preds


def persistence(ctx, steps: int):
  return jnp.repeat(ctx[:, -1:], steps, axis=1)


def l2re(pred, true, mask):
  """Relative L2 error per sample and channel, averaged over real channels: [B, S].

  pred, true: [B, S, H, W, C] in physical units; ||pred_c - true_c|| / ||true_c|| over
  the grid, per sample, step and channel.
  """
  num = jnp.sqrt(jnp.sum((pred - true) ** 2, axis=(2, 3)))
  den = jnp.sqrt(jnp.sum(true ** 2, axis=(2, 3)))
  rel = num / jnp.maximum(den, 1e-8)
  m = mask[:, None, :]
  return jnp.sum(rel * m, axis=-1) / jnp.sum(m, axis=-1)
