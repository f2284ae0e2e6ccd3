"""LGS (arXiv 2602.11229) objectives: pyramidal flow forcing and the baselines' losses.

Flow matching (Lipman et al. 2023, linear path): x_t = t x1 + (1 - t) n, target velocity
x1 - n; the ODE dx/dt = v(x_t) from t = 0 (noise) to 1 (data) is integrated by Euler.

Pyramidal flow matching (Jin et al., arXiv 2410.05954, section 3.1): time [0, 1] is cut
into S windows [s_k, e_k] (S = 2 here; S = 1 is plain flow matching); window k runs at resolution 2^-(S-1-k) of the target. Its
path interpolates between the endpoints
    start_k = s_k Up(Down(x1_k)) + (1 - s_k) n,   end_k = e_k x1_k + (1 - e_k) n
(x1_k: the target at stage k's resolution, n: fresh unit noise at that resolution), so
early, noisy steps run on 4x fewer tokens. At a stage jump the sampler estimates the
coarse clean state from its last step and renoises it to the next stage's start
distribution (Choices in the README).

Flow forcing (input-noised flow matching, the paper's PFlowFT): the K context latents
are corrupted, each with its own level sigma ~ U[0, sigma_max] (diffusion-forcing style
independent levels), and the network is told sigma; at inference the context noise
level is an argument. Rollouts feed the model's own predictions back as context.

Targets are the next state's residual x_{t+1} - x_t divided by its training std, for
every model, so all heads learn the same quantity.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def down(x):
  """2x2 average pooling of [B, H, W, D]."""
  b, h, w, d = x.shape
  return x.reshape(b, h // 2, 2, w // 2, 2, d).mean(axis=(2, 4))


def up(x):
  """Nearest-neighbour 2x upsampling of [B, H, W, D]."""
  return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


def down_n(x, n: int):
  for _ in range(n):
    x = down(x)
  return x


def down_ctx(ctx, n: int):
  b, k = ctx.shape[:2]
  y = down_n(ctx.reshape((b * k,) + ctx.shape[2:]), n)
  return y.reshape((b, k) + y.shape[1:])


def noisy_context(ctx, sigma, rng):
  """ctx + sigma * eps, sigma per sample [B] (the same level for each context frame)."""
  return ctx + sigma[:, None, None, None, None] * jax.random.normal(rng, ctx.shape)


def windows(stages: int):
  return [(k / stages, (k + 1) / stages) for k in range(stages)]


def pyramid_fm_loss(apply, x1, ctx, sigma, rng, stages: int):
  """Mean squared velocity error averaged over the S pyramid stages (one draw each)."""
  if stages not in (1, 2):
    raise ValueError(f"pyramid stages must be 1 or 2, got {stages}")
  total = 0.0
  for k, (s, e) in enumerate(windows(stages)):
    lvl = stages - 1 - k
    xk, ck = down_n(x1, lvl), down_ctx(ctx, lvl)
    rng, kn, kt = jax.random.split(rng, 3)
    n = jax.random.normal(kn, xk.shape)
    start = n if k == 0 else s * up(down(xk)) + (1 - s) * n
    end = e * xk + (1 - e) * n
    tl = jax.random.uniform(kt, (x1.shape[0],))
    xt = tl[:, None, None, None] * end + (1 - tl[:, None, None, None]) * start
    v = apply(xt, ck, s + tl * (e - s), sigma, k)
    total = total + jnp.mean((v - (end - start)) ** 2)
  return total / stages


def pyramid_fm_sample(apply, ctx, sigma, rng, stages: int, steps: int, shape):
  """Euler integration through the stages (1 or 2), `steps` per stage; shape [B,H,W,D]."""
  if stages not in (1, 2):
    raise ValueError(f"pyramid stages must be 1 or 2, got {stages}")
  b, h, w, d = shape
  lvl0 = stages - 1
  rng, kn = jax.random.split(rng)
  n0 = jax.random.normal(kn, (b, h >> lvl0, w >> lvl0, d))
  x = n0
  for k, (s, e) in enumerate(windows(stages)):
    lvl = stages - 1 - k
    ck = down_ctx(ctx, lvl)
    if k > 0:
      # Stage 0 ended at s Down(x1) + (1 - s) n0 with the path's own noise n0 (its start):
      # recover the coarse estimate of Down(x1), then start stage 1 as training does,
      # s Up(Down(x1)) + (1 - s) n with fresh noise n.
      coarse = (x - (1 - s) * n0) / s
      rng, kn = jax.random.split(rng)
      x = s * up(coarse) + (1 - s) * jax.random.normal(kn, (b, h >> lvl, w >> lvl, d))
    dt = 1.0 / steps
    for i in range(steps):
      v = apply(x, ck, jnp.full((b,), s + i * dt * (e - s)), sigma, k)
      x = x + dt * v
  return x


def fm_loss(apply, x1, ctx, sigma, rng, mask=None):
  """Plain conditional flow matching (the pixel-space generative baseline).

  mask [B, C] drops the zero-padded channels of single-channel families from the mean."""
  kn, kt = jax.random.split(rng)
  n = jax.random.normal(kn, x1.shape)
  t = jax.random.uniform(kt, (x1.shape[0],))
  xt = t[:, None, None, None] * x1 + (1 - t[:, None, None, None]) * n
  v = apply(xt, ctx, t, sigma, 0)
  if mask is None:
    return jnp.mean((v - (x1 - n)) ** 2)
  w = mask[:, None, None, :]
  return jnp.sum(((v - (x1 - n)) ** 2) * w) / (jnp.sum(w) * x1.shape[1] * x1.shape[2])


def fm_sample(apply, ctx, sigma, rng, steps: int, shape):
  x = jax.random.normal(rng, shape)
  for i in range(steps):
    t = jnp.full((shape[0],), i / steps)
    x = x + (1.0 / steps) * apply(x, ctx, t, sigma, 0)
  return x
