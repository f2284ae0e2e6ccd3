"""llops: linear attention in linear time (block causal and non-causal), as nn kernels.

Given features fq = phi(q) (B, T, H, F) and fk = phi(k) (B, S, K, F) (GQA: K key/value
heads, each serving H/K query heads), the score of query t and key s is fq_t . fk_s and

  out_t = sum_{s visible} (fq_t . fk_s) v_s / (bias + sum_{s visible} fq_t . fk_s)

with bias 1 for polynomial maps (PolySketchFormer's normalizer) and ~0 for exp maps.

Non-causal: one state KV = sum_s fk_s v_s^T (F, D) and z = sum_s fk_s, O(T F D).
Causal, block algorithm (PolySketchFormer's lower-triangular multiplication; also
Katharopoulos et al.'s chunked form): split the T positions into blocks of c; inside a
block the scores are computed exactly as a masked (c, c) matrix, and across blocks through
the prefix state S_b = sum over earlier blocks of fk v^T, an exclusive cumulative sum of
the per-block states. Time O(T c F + T F D), memory O(T/c F D + T c): never a (T, T) array.

`feature_kernel(phi, family, block)` wraps a feature function as a structured
`jaxpapers.nn.attention` kernel (it receives the mask as kind + lengths); key padding
(lengths_B) zeroes the padded keys' features, which removes them from every sum.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.nn import attention as attn_lib


def _bias(family: str) -> float:
  return 1.0 if family == "poly" else 1e-6


def noncausal(fq_BxTxHxF, fk_BxSxKxF, v_BxSxKxD, bias: float):
  B, T, H, F = fq_BxTxHxF.shape
  K, D = fk_BxSxKxF.shape[2], v_BxSxKxD.shape[-1]
  fq = fq_BxTxHxF.reshape(B, T, K, H // K, F)
  kv = jnp.einsum("bskf,bskd->bkfd", fk_BxSxKxF, v_BxSxKxD)
  z = jnp.sum(fk_BxSxKxF, 1)                               # (B, K, F)
  num = jnp.einsum("btkgf,bkfd->btkgd", fq, kv)
  den = bias + jnp.einsum("btkgf,bkf->btkg", fq, z)[..., None]
  return (num / den).reshape(B, T, H, D)


def block_causal(fq_BxTxHxF, fk_BxTxKxF, v_BxTxKxD, bias: float, block: int = 64):
  """Causal linear attention by blocks of `block` positions (T padded to a multiple)."""
  B, T, H, F = fq_BxTxHxF.shape
  K, D = fk_BxTxKxF.shape[2], v_BxTxKxD.shape[-1]
  G = H // K
  c = min(block, T)
  n = -(-T // c)
  pad = n * c - T
  if pad:
    padder = lambda a: jnp.pad(a, ((0, 0), (0, pad), (0, 0), (0, 0)))
    fq_BxTxHxF, fk_BxTxKxF, v_BxTxKxD = map(padder, (fq_BxTxHxF, fk_BxTxKxF, v_BxTxKxD))
  fq = fq_BxTxHxF.reshape(B, n, c, K, G, F)
  fk = fk_BxTxKxF.reshape(B, n, c, K, F)
  v = v_BxTxKxD.reshape(B, n, c, K, D)
  # Inside each block: the exact masked scores.
  s = jnp.einsum("bnikgf,bnjkf->bnkgij", fq, fk)
  s = jnp.where(jnp.tril(jnp.ones((c, c), bool))[None, None, None, None], s, 0.0)
  num = jnp.einsum("bnkgij,bnjkd->bnikgd", s, v)
  den = jnp.einsum("bnkgij->bnikg", s)
  # Across blocks: exclusive prefix sums of the per-block states.
  kv = jnp.einsum("bnjkf,bnjkd->bnkfd", fk, v)
  z = jnp.sum(fk, 2)                                         # (B, n, K, F)
  kv_prev = jnp.cumsum(kv, 1) - kv
  z_prev = jnp.cumsum(z, 1) - z
  num = num + jnp.einsum("bnikgf,bnkfd->bnikgd", fq, kv_prev)
  den = den + jnp.einsum("bnikgf,bnkf->bnikg", fq, z_prev)
  out = num / (bias + den[..., None])
  return out.reshape(B, n * c, H, D)[:, :T]


def quadratic(fq_BxTxHxF, fk_BxSxKxF, v_BxSxKxD, bias: float, mask=None):
  """The O(T^2) form (any dense mask (B, T, S)): the reference the fast forms must equal."""
  B, T, H, F = fq_BxTxHxF.shape
  K, D = fk_BxSxKxF.shape[2], v_BxSxKxD.shape[-1]
  fq = fq_BxTxHxF.reshape(B, T, K, H // K, F)
  a = jnp.einsum("btkgf,bskf->bkgts", fq, fk_BxSxKxF)
  if mask is not None:
    a = jnp.where(mask[:, None, None], a, 0.0)
  num = jnp.einsum("bkgts,bskd->btkgd", a, v_BxSxKxD)
  den = bias + jnp.einsum("bkgts->btkg", a)[..., None]
  return (num / den).reshape(B, T, H, D)


def feature_kernel(phi, family: str, block: int = 64):
  """A structured nn kernel computing linear attention with features phi(q), phi(k)."""
  bias = _bias(family)

  def kernel(q, k, v, mask=None, scale=None, mask_kind="causal", lengths_B=None):
    del mask, scale
    fq = phi(q.astype(jnp.float32))
    fk = phi(k.astype(jnp.float32))
    vf = v.astype(jnp.float32)
    if lengths_B is not None:
      keep = (jnp.arange(k.shape[1])[None, :] < lengths_B[:, None])[:, :, None, None]
      fk = jnp.where(keep, fk, 0.0)
    if mask_kind == "causal":
      out = block_causal(fq, fk, vf, bias, block)
    elif mask_kind == "bidirectional":
      out = noncausal(fq, fk, vf, bias)
    else:
      raise ValueError(f"unknown mask kind {mask_kind!r}; expected 'causal' or 'bidirectional'")
    return out.astype(v.dtype)

  return attn_lib.structured(kernel)


def sliding_window_softmax(window: int):
  """Causal softmax attention over the last `window` keys (BASED's sliding-window part).
  Reference form with a dense banded mask (the study's T is small); a structured kernel
  so it sees the mask kind."""
  def kernel(q, k, v, mask=None, scale=None, mask_kind="causal", lengths_B=None):
    del mask
    T = q.shape[1]
    t = jnp.arange(T)[:, None]
    s = jnp.arange(k.shape[1])[None, :]
    band = (s <= t) & (s > t - window) if mask_kind == "causal" else jnp.abs(s - t) < window
    m = band[None]
    if lengths_B is not None:
      m = m & attn_lib.padding_mask(lengths_B, k.shape[1])
    return attn_lib.softmax_attention(q, k, v, m, scale=scale)

  return attn_lib.structured(kernel)
