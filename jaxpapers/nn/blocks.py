"""Small-LM workbench: the pure-function building blocks of the language models.

Shared by the papers that pretrain small LMs (lora_lr, hybrid_mup, llops, lhdlm):
RMSNorm (Zhang & Sennrich 2019), rotary position embeddings (RoPE, Su et al. 2021,
arXiv 2104.09864) in the Hugging Face "rotate-half" layout, learned absolute positions,
and the two MLPs of current decoders: SwiGLU (Shazeer 2020, arXiv 2002.05202) and the
GELU MLP of GPT-2. Every function takes its parameters as arguments (plain arrays, no
module objects) and names tensors by their shape (`x_BxTxD`).

`jaxpapers.nn.llama` uses these same functions, so the GGUF-loaded SmolLM2 and the
models built by `jaxpapers.nn.stack` share one RMSNorm and one RoPE.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def rms_norm(x, scale, eps):
  """x / rms(x) * scale over the last axis, computed in float32 and cast back."""
  x32 = x.astype(jnp.float32)
  var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
  scale = scale.reshape((1,) * (x.ndim - 1) + (-1,))
  return (x32 * jax.lax.rsqrt(var + eps)).astype(x.dtype) * scale


def rope(x_BxTxHxD, positions_BxT, theta):
  """Rotate-half RoPE: channel i is paired with channel i + D/2, frequency theta^(-2i/D).

  (llama.cpp's GGUF files store Q/K for the interleaved pairing (2i, 2i+1); the GGUF
  loader permutes them into this layout.)
  """
  d = x_BxTxHxD.shape[-1]
  inv_freq = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
  ang = positions_BxT.astype(jnp.float32)[:, :, None] * inv_freq[None, None, :]
  cos = jnp.cos(jnp.concatenate([ang, ang], -1))[:, :, None, :]
  sin = jnp.sin(jnp.concatenate([ang, ang], -1))[:, :, None, :]
  x1, x2 = jnp.split(x_BxTxHxD, 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  return (x_BxTxHxD * cos + rotated * sin).astype(x_BxTxHxD.dtype)


def learned_positions(table_PxD, positions_BxT):
  """Absolute position embeddings (GPT-2): rows of a (max_len, D) table."""
  return table_PxD[positions_BxT]


def swiglu(h_BxTxD, w_gate_DxF, w_up_DxF, w_down_FxD):
  """SwiGLU MLP: down(silu(h @ gate) * (h @ up))."""
  return (jax.nn.silu(h_BxTxD @ w_gate_DxF) * (h_BxTxD @ w_up_DxF)) @ w_down_FxD


def gelu_mlp(h_BxTxD, w_up_DxF, b_up_F, w_down_FxD, b_down_D):
  """GPT-2 MLP: down(gelu(h @ up + b)) + b, tanh-approximated GELU as in GPT-2."""
  lead = (1,) * (h_BxTxD.ndim - 1)
  u = jax.nn.gelu(h_BxTxD @ w_up_DxF + b_up_F.reshape(lead + (-1,)), approximate=True)
  return u @ w_down_FxD + b_down_D.reshape(lead + (-1,))


def default_positions(batch: int, length: int):
  """Positions 0..T-1 for every row: (B, T) int32."""
  return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32)[None, :], (batch, length))
