"""Small-LM workbench: multi-head attention with masks and a pluggable score kernel.

Multi-head attention (Vaswani et al. 2017) with grouped key/value heads (GQA, Ainslie et
al. 2023): K key/value heads each serve H/K query heads (K = H is plain multi-head
attention, K = 1 multi-query). The part that turns (q, k, v, mask) into outputs is a
*kernel*, a plain function, so papers can swap it:

  kernel(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, mask) -> out_BxTxHxD

`mask` is a boolean array broadcastable to (B, T, S) (True = query t may attend to key
s) or None (every key visible). `softmax_attention` is the standard kernel;
`linear_attention(feature_map)` builds the kernelized form of Katharopoulos et al. 2020
(arXiv 2006.16236), out_t = sum_s phi(q_t).phi(k_s) v_s / sum_s phi(q_t).phi(k_s) over
visible s, written as its O(T^2) reference that honours any mask; a paper with a fast
causal (prefix-sum or chunked) form supplies it as another kernel with the same
signature. Masks: causal (decoders), bidirectional (encoders, masked diffusion LMs),
key padding, and their intersection.

A dense (B, T, S) mask costs O(T^2) memory, which a linear-time kernel must not pay. A
kernel marked `structured_mask = True` (see `structured`) therefore receives mask=None and
the mask as its kind and lengths instead:
  kernel(q, k, v, None, scale=..., mask_kind='causal' | 'bidirectional', lengths_B=... | None)
and builds whatever it needs (a block-causal prefix state, a padding vector).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxpapers.nn import blocks

Kernel = Callable[..., jax.Array]


def causal_mask(length: int, keys: int | None = None, offset: int = 0):
  """(1, T, S) bool: query t sees key s iff s <= t + offset (offset: cached keys before)."""
  keys = length if keys is None else keys
  t = jnp.arange(length)[:, None]
  s = jnp.arange(keys)[None, :]
  return (s <= t + offset)[None]


def bidirectional_mask(length: int, keys: int | None = None):
  """(1, T, S) bool, all True: every query sees every key."""
  keys = length if keys is None else keys
  return jnp.ones((1, length, keys), bool)


def padding_mask(lengths_B, keys: int):
  """(B, 1, S) bool: key s is real iff s < lengths[b] (right padding)."""
  return (jnp.arange(keys)[None, :] < lengths_B[:, None])[:, None, :]


def make_mask(kind: str, length: int, lengths_B=None):
  """'causal' or 'bidirectional', intersected with key padding when lengths are given."""
  if kind == "causal":
    mask = causal_mask(length)
  elif kind == "bidirectional":
    mask = bidirectional_mask(length)
  else:
    raise ValueError(f"unknown attention mask {kind!r}; expected 'causal' or 'bidirectional'")
  if lengths_B is not None:
    mask = mask & padding_mask(lengths_B, length)
  return mask


def _group(q_BxTxHxD, n_kv: int):
  B, T, H, D = q_BxTxHxD.shape
  if H % n_kv:
    raise ValueError(f"{H} query heads are not a multiple of {n_kv} key/value heads")
  return q_BxTxHxD.reshape(B, T, n_kv, H // n_kv, D)


def softmax_attention(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, mask=None, scale: float | None = None):
  """softmax(q.k * scale + mask) v per head; scale None = 1/sqrt(D) (muP uses 1/D).

  Scores and the softmax run in float32; masked scores are -1e30, so a fully masked row
  gives the mean of the values instead of NaN (only padding rows can be fully masked).
  The products run head-major, (B, K, G*T, D) x (B, K, S, D) with the batch axes leading
  and contiguous: XLA's CPU backend ran the grouped (B, T, K, G, D) einsum 1.4x slower
  (forward + backward, d=256, T=256), transposing inside the batched products; the
  results are the same (max |diff| 0 on that probe).
  """
  B, T, H, D = q_BxTxHxD.shape
  K, S = k_BxSxKxD.shape[2], k_BxSxKxD.shape[1]
  q_BxTxKxGxD = _group(q_BxTxHxD, K)
  G = q_BxTxKxGxD.shape[3]
  q_BxKxQxD = q_BxTxKxGxD.transpose(0, 2, 3, 1, 4).reshape(B, K, G * T, D)
  k_BxKxSxD = k_BxSxKxD.transpose(0, 2, 1, 3)
  v_BxKxSxD = v_BxSxKxD.transpose(0, 2, 1, 3)
  s_BxKxQxS = jnp.einsum("bkqd,bksd->bkqs", q_BxKxQxD, k_BxKxSxD)
  if scale is None:
    s_BxKxQxS = s_BxKxQxS / jnp.sqrt(D).astype(q_BxKxQxD.dtype)
  else:
    s_BxKxQxS = s_BxKxQxS * jnp.asarray(scale, q_BxKxQxD.dtype)
  s_BxKxGxTxS = s_BxKxQxS.reshape(B, K, G, T, S).astype(jnp.float32)
  if mask is not None:
    s_BxKxGxTxS = jnp.where(mask[:, None, None], s_BxKxGxTxS, -1e30)
  p = jax.nn.softmax(s_BxKxGxTxS, axis=-1).astype(v_BxSxKxD.dtype).reshape(B, K, G * T, S)
  out_BxKxQxD = jnp.einsum("bkqs,bksd->bkqd", p, v_BxKxSxD)
  return out_BxKxQxD.reshape(B, K, G, T, D).transpose(0, 3, 1, 2, 4).reshape(B, T, H, D)


def elu_plus_one(x):
  """The feature map of Katharopoulos et al. 2020: elu(x) + 1 > 0."""
  return jax.nn.elu(x) + 1.0


def linear_attention(feature_map: Callable = elu_plus_one, eps: float = 1e-6) -> Kernel:
  """A kernel computing sum_s phi(q_t).phi(k_s) v_s / sum_s phi(q_t).phi(k_s) over visible s.

  `feature_map` maps (..., D) to (..., F) with non-negative entries (F may differ from
  D, e.g. random features or polynomial sketches).
  """
  def kernel(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, mask=None, scale=None):
    del scale  # a kernelized score has no temperature; the feature map owns the scaling
    B, T, H, D = q_BxTxHxD.shape
    fq = _group(feature_map(q_BxTxHxD.astype(jnp.float32)), k_BxSxKxD.shape[2])
    fk = feature_map(k_BxSxKxD.astype(jnp.float32))
    a_BxKxGxTxS = jnp.einsum("btkgf,bskf->bkgts", fq, fk)
    if mask is not None:
      a_BxKxGxTxS = jnp.where(mask[:, None, None], a_BxKxGxTxS, 0.0)
    num = jnp.einsum("bkgts,bskd->btkgd", a_BxKxGxTxS, v_BxSxKxD.astype(jnp.float32))
    den = jnp.einsum("bkgts->btkg", a_BxKxGxTxS)[..., None]
    return (num / (den + eps)).reshape(B, T, H, D).astype(v_BxSxKxD.dtype)

  return kernel


def structured(kernel: Kernel) -> Kernel:
  """Marks `kernel` as taking the mask as (mask_kind, lengths_B) instead of a dense array."""
  kernel.structured_mask = True
  return kernel


KERNELS = {"softmax": softmax_attention, "linear_elu": linear_attention(elu_plus_one)}


def get_kernel(name: str) -> Kernel:
  """KERNELS[name], or a one-line error naming the registered kernels."""
  if name not in KERNELS:
    raise ValueError(f"unknown attention kernel {name!r}; registered: {sorted(KERNELS)} "
                     "(a paper adds one with attention.KERNELS[name] = fn, or passes kernel=)")
  return KERNELS[name]


def call_kernel(kernel: Kernel, q, k, v, *, mask, mask_kind: str, lengths_B, scale):
  """Calls `kernel` with a dense mask, or with the mask's kind and lengths if structured."""
  if getattr(kernel, "structured_mask", False):
    return kernel(q, k, v, None, scale=scale, mask_kind=mask_kind, lengths_B=lengths_B)
  if mask is None and (mask_kind != "bidirectional" or lengths_B is not None):
    mask = make_mask(mask_kind, q.shape[1], lengths_B)
  return kernel(q, k, v, mask, scale=scale)


def multi_head(p, h_BxTxD, *, n_heads: int, n_kv_heads: int, head_dim: int,
               positions_BxT, mask, kernel: Kernel = softmax_attention,
               rope_theta: float | None = 10000.0, scale: float | None = None,
               mask_kind: str | None = None, lengths_B=None):
  """Self-attention sublayer: q/k/v projections, RoPE (unless rope_theta is None), the
  kernel, the output projection. `p` holds 'q', 'k', 'v' (D, heads*hd) and 'o'.

  `mask` is the dense mask; `mask_kind` and `lengths_B` describe it for structured kernels
  (with mask_kind None the kernel gets `mask` as given, the pre-structured behaviour)."""
  B, T, _ = h_BxTxD.shape
  q = (h_BxTxD @ p["q"]).reshape(B, T, n_heads, head_dim)
  k = (h_BxTxD @ p["k"]).reshape(B, T, n_kv_heads, head_dim)
  v = (h_BxTxD @ p["v"]).reshape(B, T, n_kv_heads, head_dim)
  if rope_theta is not None:
    q = blocks.rope(q, positions_BxT, rope_theta)
    k = blocks.rope(k, positions_BxT, rope_theta)
  if mask_kind is None:
    out = kernel(q, k, v, mask, scale=scale)
  else:
    out = call_kernel(kernel, q, k, v, mask=mask, mask_kind=mask_kind, lengths_B=lengths_B,
                      scale=scale)
  return out.reshape(B, T, n_heads * head_dim) @ p["o"]
