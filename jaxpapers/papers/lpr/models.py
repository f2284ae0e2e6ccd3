"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- the networks.

Tabular MLP networks for the deep detectors the paper applies LPR to (Sec. "deep AD
models"): a plain autoencoder, a variational autoencoder (Kingma & Welling 2014), a
denoising autoencoder (Vincent et al. 2008; the corruption lives in the loss, see
`detectors.py`), a memory-augmented autoencoder (MemAE, Gong et al. 2019: attention over
a learned memory with hard shrinkage), the bias-free Deep SVDD / Deep SAD feature map
(Ruff et al. 2018/2020) and a supervised MLP classifier. Layer names are stable
(`encoder/Dense_i`, `decoder/Dense_i`, `memory`) so LPR's path regex can pick layers.
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


class MLP(nn.Module):
  """Dense layers with ReLU between them (none after the last)."""
  features: Sequence[int]
  use_bias: bool = True

  @nn.compact
  def __call__(self, x):
    for i, f in enumerate(self.features):
      x = nn.Dense(f, use_bias=self.use_bias, name=f"Dense_{i}")(x)
      if i < len(self.features) - 1:
        x = nn.relu(x)
    return x


class AutoEncoder(nn.Module):
  """d -> hidden... -> latent -> reversed(hidden)... -> d (PyOD/ADBench AE layout)."""
  dim: int
  hidden: Sequence[int]
  latent: int
  code_relu: bool = True  # ReLU on the code (PyOD's stack of ReLU layers) or linear

  def setup(self):
    self.encoder = MLP(tuple(self.hidden) + (self.latent,))
    self.decoder = MLP(tuple(reversed(self.hidden)) + (self.dim,))

  def __call__(self, x, code_mask=None):
    # `code_mask` (1 = code unit in use) narrows the bottleneck per dataset (a code size
    # relative to the input width) inside one program of the widest code.
    z = self.encoder(x)
    z = z if code_mask is None else z * code_mask[None, :]
    return self.decoder(nn.relu(z) if self.code_relu else z)


class VAE(nn.Module):
  """Gaussian encoder q(z|x) = N(mu, diag(exp(logvar))), Gaussian decoder mean."""
  dim: int
  hidden: Sequence[int]
  latent: int

  def setup(self):
    self.encoder = MLP(tuple(self.hidden) + (2 * self.latent,))
    self.decoder = MLP(tuple(reversed(self.hidden)) + (self.dim,))

  def encode(self, x):
    h = self.encoder(x)
    return h[..., :self.latent], h[..., self.latent:]

  def __call__(self, x, rng=None, code_mask=None):
    mu, logvar = self.encode(x)
    logvar = jnp.clip(logvar, -10.0, 10.0)
    if code_mask is not None:  # unused units: mu = logvar = 0, so their KL term is 0
      mu, logvar = mu * code_mask[None, :], logvar * code_mask[None, :]
    z = mu if rng is None else mu + jnp.exp(0.5 * logvar) * jax.random.normal(rng, mu.shape)
    z = z if code_mask is None else z * code_mask[None, :]
    return self.decoder(z), mu, logvar


def hard_shrink(w, lam):
  """MemAE's hard shrinkage of attention weights (Gong et al. 2019, eq. 6): w where w > lam,
  else 0; gradient 1 above the threshold and 0 below.

  Gong et al. write it for back-propagation as relu(w - lam) w / (|w - lam| + eps) (eq. 7;
  their code: eps = 1e-12), whose value is this one up to a factor (w - lam) / (w - lam +
  eps). Its derivative, 1 + w eps / (w - lam + eps)^2 above lam, is ~1 except within
  ~sqrt(w eps) of lam, where it spikes to w / eps (2e10 at eps = 1e-12): one float32 ulp
  of w - lam near lam (2e-9 at lam = 1/50, where near-uniform attention sits) moves the
  gradient by thousands. So float32 round-off that depends on how many runs share the
  vmapped program (XLA fuses the backward differently) grew into different trainings,
  and MemAE's AUROCs changed with the run's composition (issue 50). This is eq. 7 with
  eps -> 0: the same values to relative eps / (w - lam), without the spike.
  """
  return jnp.where(w > lam, w, jnp.zeros_like(w))


class MemAE(nn.Module):
  """Memory-augmented AE: the code is replaced by a sparse convex mix of memory items.

  Attention w = softmax(z M^T) over `mem_size` items, hard-shrunk to zero below
  `shrink` (Gong et al. 2019, eq. 6; `hard_shrink`) and renormalized, so anomalies must be rebuilt from
  prototypes of normal data.
  """
  dim: int
  hidden: Sequence[int]
  latent: int
  mem_size: int = 50
  shrink: float = 0.02  # ~1/mem_size, the paper's threshold range [1/N, 3/N]

  def setup(self):
    self.encoder = MLP(tuple(self.hidden) + (self.latent,))
    self.decoder = MLP(tuple(reversed(self.hidden)) + (self.dim,))
    self.memory = self.param("memory", nn.initializers.normal(1.0 / self.latent ** 0.5),
                             (self.mem_size, self.latent))

  def __call__(self, x, code_mask=None):
    z = self.encoder(x)
    mem = self.memory if code_mask is None else self.memory * code_mask[None, :]
    z = z if code_mask is None else z * code_mask[None, :]
    att = hard_shrink(jax.nn.softmax(z @ mem.T, axis=-1), self.shrink)
    att = att / (jnp.sum(jnp.abs(att), axis=-1, keepdims=True) + 1e-12)
    return self.decoder(att @ mem), att


def build(kind: str, dim: int, hidden: Sequence[int], latent: int, mem_size: int = 50,
          code_relu: bool = True):
  """The network of a detector kind (see `detectors.KINDS`)."""
  hidden = tuple(hidden)
  if kind in ("ae", "dae"):
    return AutoEncoder(dim, hidden, latent, code_relu)
  if kind == "vae":
    return VAE(dim, hidden, latent)
  if kind == "memae":
    return MemAE(dim, hidden, latent, mem_size=mem_size, shrink=1.0 / mem_size)
  if kind in ("deepsvdd", "deepsad"):
    # No biases: a bias lets Deep SVDD map everything onto c (Ruff et al. 2018, Prop. 2).
    return MLP(hidden + (latent,), use_bias=False)
  if kind in ("mlp", "devnet"):
    return MLP(hidden + (1,))
  raise ValueError(f"unknown detector kind {kind!r}")
