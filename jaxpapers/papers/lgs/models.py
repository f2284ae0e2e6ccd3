"""LGS (arXiv 2602.11229) networks: PhyVAE, the latent/pixel transformer, FNO, U-Net.

PhyVAE: one convolutional VAE (periodic padding, two stride-2 stages, so a 32x32 state
becomes an 8x8 x `latent` grid) for every PDE family: the shared physical manifold. Its
loss is the masked reconstruction error plus beta times the closed-form Gaussian KL.

`FlowTransformer` is the backbone of PFlowFT and of the matched latent baselines: tokens
are the latent grid cells; each token reads the state being denoised (flow matching) or
zeros (deterministic heads) together with the K context frames, plus a resolution-free
Fourier positional code of its cell centre, so the same weights run at 4x4 (pyramid
stage 0), 8x8, and 16x16 (the 2x-resolution Kolmogorov fine-tuning). Conditioning
(flow time, context noise level, pyramid stage) modulates every block DiT-style (adaLN).
With `patch > 1` the same transformer runs in pixel space on patches: the pixel-space
generative baseline.

FNO (Li et al. 2021): lifting, Fourier layers (truncated rFFT modes, a per-mode complex
weight, plus a 1x1 path), projection. U-Net (Ronneberger et al. 2015) with circular
padding. Both map K context frames to the next frame's residual.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

PAD = "CIRCULAR"  # every family is periodic


def kl_diag_gaussian(mu, logvar):
  """KL(N(mu, diag exp(logvar)) || N(0, I)) per sample, summed over all but axis 0."""
  kl = 0.5 * (mu ** 2 + jnp.exp(logvar) - logvar - 1.0)
  return jnp.sum(kl.reshape(kl.shape[0], -1), axis=1)


class Encoder(nn.Module):
  widths: tuple = (32, 48, 64)
  latent: int = 4

  @nn.compact
  def __call__(self, x):
    h = nn.gelu(nn.Conv(self.widths[0], (3, 3), padding=PAD)(x))
    for w in self.widths[1:]:
      h = nn.gelu(nn.Conv(w, (4, 4), strides=(2, 2), padding=PAD)(h))
      h = nn.gelu(nn.Conv(w, (3, 3), padding=PAD)(h)) + h
    out = nn.Conv(2 * self.latent, (1, 1))(h)
    mu, logvar = jnp.split(out, 2, axis=-1)
    return mu, jnp.clip(logvar, -12.0, 6.0)


def depth_to_space(x):
  """[B, H, W, 4C] -> [B, 2H, 2W, C]: out[2i + k, 2j + l, c] = x[i, j, (2k + l) C + c]."""
  b, h, w, c4 = x.shape
  c = c4 // 4
  return x.reshape(b, h, w, 2, 2, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, 2 * h, 2 * w, c)


class Decoder(nn.Module):
  widths: tuple = (32, 48, 64)
  channels: int = 2
  # "nearest": nearest-neighbour upsampling, then convolutions (every cell of a 2x2
  # block starts from the same features); "shuffle": a 2x2 stride-2 transposed
  # convolution (a 1x1 conv to 4x the channels, then depth-to-space), so each of the
  # four sub-cells gets its own weights (Shi et al. 2016's sub-pixel convolution).
  up: str = "nearest"

  @nn.compact
  def __call__(self, z):
    h = nn.gelu(nn.Conv(self.widths[-1], (3, 3), padding=PAD)(z))
    for w in reversed(self.widths[:-1]):
      b, hh, ww, c = h.shape
      if self.up == "shuffle":
        h = depth_to_space(nn.Conv(4 * c, (1, 1))(h))
      elif self.up == "nearest":
        h = jax.image.resize(h, (b, 2 * hh, 2 * ww, c), "nearest")
      else:
        raise ValueError(f"Decoder.up={self.up!r}; expected 'nearest' or 'shuffle'")
      h = nn.gelu(nn.Conv(w, (3, 3), padding=PAD)(h))
      h = nn.gelu(nn.Conv(w, (3, 3), padding=PAD)(h)) + h
    return nn.Conv(self.channels, (3, 3), padding=PAD)(h)


class PhyVAE(nn.Module):
  widths: tuple = (32, 48, 64)
  latent: int = 4
  channels: int = 2
  up: str = "nearest"  # the decoder's upsampling (Decoder.up)

  def setup(self):
    self.enc = Encoder(self.widths, self.latent)
    self.dec = Decoder(self.widths, self.channels, self.up)

  def encode(self, x):
    return self.enc(x)

  def decode(self, z):
    return self.dec(z)

  def __call__(self, x, rng):
    mu, logvar = self.enc(x)
    z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(rng, mu.shape)
    return self.dec(z), mu, logvar


def vae_loss(recon, x, mask, mu, logvar, beta):
  """(loss, (mse, kl)): channel-masked MSE per sample plus beta * KL per latent element."""
  err = jnp.sum(((recon - x) ** 2) * mask[:, None, None, :], axis=(1, 2, 3))
  mse = err / (x.shape[1] * x.shape[2] * jnp.sum(mask, axis=-1))
  kl = kl_diag_gaussian(mu, logvar) / math.prod(mu.shape[1:])
  return jnp.mean(mse + beta * kl), (jnp.mean(mse), jnp.mean(kl))


def fourier_positions(h: int, w: int, bands: int = 4):
  """[h*w, 4*bands] periodic code of cell centres in [0, 1)^2: the same at any grid."""
  ys = (jnp.arange(h) + 0.5) / h
  xs = (jnp.arange(w) + 0.5) / w
  yy, xx = jnp.meshgrid(ys, xs, indexing="ij")
  k = jnp.arange(1, bands + 1)[None, :]
  feats = [f(2 * jnp.pi * k * c.reshape(-1, 1)) for c in (yy, xx) for f in (jnp.sin, jnp.cos)]
  return jnp.concatenate(feats, axis=-1)


def timestep_embedding(t, dim: int, max_period: float = 1000.0):
  """Sinusoidal embedding of scalars t in [0, 1] (per sample) -> [B, dim]."""
  half = dim // 2
  freqs = jnp.exp(-math.log(max_period) * jnp.arange(half) / half)
  args = 1000.0 * t[:, None] * freqs[None]
  return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


class Block(nn.Module):
  width: int
  heads: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x, c):
    mod = nn.Dense(6 * self.width, kernel_init=nn.initializers.zeros)(nn.silu(c))
    s1, b1, g1, s2, b2, g2 = jnp.split(mod[:, None, :], 6, axis=-1)
    h = nn.LayerNorm(use_scale=False, use_bias=False)(x) * (1 + s1) + b1
    h = nn.MultiHeadDotProductAttention(num_heads=self.heads, dtype=self.dtype)(h, h)
    x = x + g1 * h
    h = nn.LayerNorm(use_scale=False, use_bias=False)(x) * (1 + s2) + b2
    h = nn.Dense(4 * self.width, dtype=self.dtype)(h)
    h = nn.Dense(self.width, dtype=self.dtype)(nn.gelu(h))
    return x + g2 * h


class FlowTransformer(nn.Module):
  """v(x_tau, ctx, tau, sigma, stage) on a grid of tokens.

  x: [B, H, W, D] state being transported (zeros for deterministic heads);
  ctx: [B, K, H, W, D] context frames; tau, sigma: [B]; stage: int (pyramid level).
  With patch > 1, H and W are pixels and tokens are patch x patch cells.
  """
  width: int = 64
  depth: int = 3
  heads: int = 4
  out: int = 4
  patch: int = 1
  stages: int = 2
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x, ctx, tau, sigma, stage=0):
    b, h, w, d = x.shape
    p = self.patch
    k = ctx.shape[1]
    feats = jnp.concatenate([x, jnp.moveaxis(ctx, 1, -2).reshape(b, h, w, k * d)], axis=-1)
    gh, gw = h // p, w // p
    tok = feats.reshape(b, gh, p, gw, p, -1).transpose(0, 1, 3, 2, 4, 5)
    tok = tok.reshape(b, gh * gw, p * p * feats.shape[-1])
    t = nn.Dense(self.width)(tok) + nn.Dense(self.width)(fourier_positions(gh, gw))[None]
    c = nn.Dense(self.width)(timestep_embedding(tau, self.width))
    c = c + nn.Dense(self.width)(timestep_embedding(sigma, self.width))
    c = c + nn.Embed(self.stages, self.width)(jnp.full((b,), stage, jnp.int32))
    c = nn.Dense(self.width)(nn.silu(c))
    for _ in range(self.depth):
      t = Block(self.width, self.heads, self.dtype)(t, c)
    mod = nn.Dense(2 * self.width, kernel_init=nn.initializers.zeros)(nn.silu(c))
    sh, sc = jnp.split(mod[:, None, :], 2, axis=-1)
    t = nn.LayerNorm(use_scale=False, use_bias=False)(t) * (1 + sc) + sh
    o = nn.Dense(p * p * self.out, kernel_init=nn.initializers.zeros)(t).astype(jnp.float32)
    o = o.reshape(b, gh, gw, p, p, self.out).transpose(0, 1, 3, 2, 4, 5)
    return o.reshape(b, h, w, self.out)


class SpectralConv2d(nn.Module):
  """Fourier layer kernel: keep `modes` lowest frequencies per axis, mix channels."""
  width: int
  modes: int

  @nn.compact
  def __call__(self, x):
    b, h, w, c = x.shape
    m = self.modes
    scale = 1.0 / (c * self.width)
    init = lambda k, s: scale * jax.random.uniform(k, s)
    wr = self.param("w_real", init, (2, m, m, c, self.width))
    wi = self.param("w_imag", init, (2, m, m, c, self.width))
    wc = wr + 1j * wi
    xf = jnp.fft.rfft2(x, axes=(1, 2))
    out = jnp.zeros((b, h, w // 2 + 1, self.width), jnp.complex64)
    top = jnp.einsum("bxyc,xyco->bxyo", xf[:, :m, :m], wc[0])
    bot = jnp.einsum("bxyc,xyco->bxyo", xf[:, -m:, :m], wc[1])
    out = out.at[:, :m, :m].set(top).at[:, -m:, :m].set(bot)
    return jnp.fft.irfft2(out, s=(h, w), axes=(1, 2))


class FNO(nn.Module):
  width: int = 24
  modes: int = 8
  layers: int = 4
  out: int = 2

  @nn.compact
  def __call__(self, ctx):
    b, k, h, w, c = ctx.shape
    x = jnp.moveaxis(ctx, 1, -2).reshape(b, h, w, k * c)
    gy, gx = jnp.meshgrid(jnp.arange(h) / h, jnp.arange(w) / w, indexing="ij")
    grid = jnp.broadcast_to(jnp.stack([gy, gx], -1)[None], (b, h, w, 2))
    x = nn.Dense(self.width)(jnp.concatenate([x, grid], axis=-1))
    for i in range(self.layers):
      y = SpectralConv2d(self.width, self.modes)(x) + nn.Dense(self.width)(x)
      x = nn.gelu(y) if i < self.layers - 1 else y
    x = nn.gelu(nn.Dense(4 * self.width)(x))
    return nn.Dense(self.out)(x)


class UNet(nn.Module):
  widths: tuple = (32, 64, 96)
  out: int = 2

  @nn.compact
  def __call__(self, ctx):
    b, k, h, w, c = ctx.shape
    x = jnp.moveaxis(ctx, 1, -2).reshape(b, h, w, k * c)
    conv = lambda f, x: nn.gelu(nn.GroupNorm(num_groups=8)(
        nn.Conv(f, (3, 3), padding=PAD)(x)))
    skips = []
    for i, f in enumerate(self.widths):
      x = conv(f, conv(f, x))
      if i < len(self.widths) - 1:
        skips.append(x)
        x = nn.avg_pool(x, (2, 2), (2, 2))
    for f, s in zip(reversed(self.widths[:-1]), reversed(skips)):
      bb, hh, ww, cc = x.shape
      x = jax.image.resize(x, (bb, 2 * hh, 2 * ww, cc), "nearest")
      x = conv(f, conv(f, jnp.concatenate([x, s], axis=-1)))
    return nn.Conv(self.out, (1, 1))(x)
