"""Llama-style decoder (Touvron et al. 2023, arXiv 2302.13971) as pure JAX functions.

Pre-norm decoder blocks with RMSNorm, rotary position embeddings (RoPE, Su et al.
2021) in the Hugging Face "rotate-half" layout, grouped-query attention (GQA, Ainslie
et al. 2023) and a SwiGLU MLP (Shazeer 2020); tied or untied output embedding. This is
the architecture of SmolLM2-135M (loaded by `gguf_loader`) and of the tiny models the
papers pretrain themselves.

Parameters are a plain dict of arrays; the per-layer weights are stacked along a leading
layer axis and the blocks run under `lax.scan`, so compile time does not grow with depth.
Every projection goes through a `linear(name, x, w, extra)` hook (default `x @ w`), and
`extra` is a pytree stacked like the blocks: this is how adapters (LoRA and relatives)
change chosen projections without the model knowing about them. `param_specs` gives
PartitionSpecs for a ("data", "model") mesh: heads and MLP hidden units are split over
"model" (Megatron-style), everything else replicated.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

# Names of the seven projections inside a block, in the order adapters usually list them.
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  vocab_size: int
  dim: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  hidden_dim: int           # SwiGLU inner width
  head_dim: int | None = None
  rope_theta: float = 10000.0
  norm_eps: float = 1e-5
  tie_embeddings: bool = True
  init_std: float = 0.02

  @property
  def hd(self) -> int:
    return self.head_dim or self.dim // self.n_heads

  def shapes(self) -> dict:
    """(in, out) shape of every projection kernel of one block."""
    hd = self.hd
    return {"q": (self.dim, self.n_heads * hd), "k": (self.dim, self.n_kv_heads * hd),
            "v": (self.dim, self.n_kv_heads * hd), "o": (self.n_heads * hd, self.dim),
            "gate": (self.dim, self.hidden_dim), "up": (self.dim, self.hidden_dim),
            "down": (self.hidden_dim, self.dim)}


def init(rng, cfg: LlamaConfig) -> dict:
  """Random parameters: normal(init_std) kernels, output projections scaled by depth."""
  keys = jax.random.split(rng, len(PROJECTIONS) + 2)
  L = cfg.n_layers
  blocks = {"attn_norm": jnp.ones((L, cfg.dim)), "mlp_norm": jnp.ones((L, cfg.dim))}
  for key, (name, (din, dout)) in zip(keys, cfg.shapes().items()):
    std = cfg.init_std / ((2 * L) ** 0.5 if name in ("o", "down") else 1.0)
    blocks[name] = std * jax.random.normal(key, (L, din, dout))
  params = {"embed": cfg.init_std * jax.random.normal(keys[-2], (cfg.vocab_size, cfg.dim)),
            "blocks": blocks, "final_norm": jnp.ones((cfg.dim,))}
  if not cfg.tie_embeddings:
    params["unembed"] = cfg.init_std * jax.random.normal(keys[-1], (cfg.dim, cfg.vocab_size))
  return params


def rms_norm(x, scale, eps):
  x32 = x.astype(jnp.float32)
  var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
  scale = scale.reshape((1,) * (x.ndim - 1) + (-1,))
  return (x32 * jax.lax.rsqrt(var + eps)).astype(x.dtype) * scale


def rope(x_BxTxHxD, positions_BxT, theta):
  """Rotate-half RoPE (the Hugging Face layout; GGUF's interleaved layout is undone at load)."""
  d = x_BxTxHxD.shape[-1]
  inv_freq = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
  ang = positions_BxT.astype(jnp.float32)[:, :, None] * inv_freq[None, None, :]
  cos = jnp.cos(jnp.concatenate([ang, ang], -1))[:, :, None, :]
  sin = jnp.sin(jnp.concatenate([ang, ang], -1))[:, :, None, :]
  x1, x2 = jnp.split(x_BxTxHxD, 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  return (x_BxTxHxD * cos + rotated * sin).astype(x_BxTxHxD.dtype)


def plain_linear(name, x, w, extra):
  del name, extra
  return x @ w


def attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD):
  """Causal GQA: each of the K key/value heads serves H/K query heads."""
  B, T, H, D = q_BxTxHxD.shape
  K = k_BxTxKxD.shape[2]
  q = q_BxTxHxD.reshape(B, T, K, H // K, D)
  s_BxKxGxTxS = jnp.einsum("btkgd,bskd->bkgts", q, k_BxTxKxD) / jnp.sqrt(D).astype(q.dtype)
  mask = jnp.tril(jnp.ones((T, T), bool))[None, None, None]
  s_BxKxGxTxS = jnp.where(mask, s_BxKxGxTxS.astype(jnp.float32), -1e30)
  p = jax.nn.softmax(s_BxKxGxTxS, axis=-1).astype(v_BxTxKxD.dtype)
  out = jnp.einsum("bkgts,bskd->btkgd", p, v_BxTxKxD)
  return out.reshape(B, T, H * D)


def block(cfg: LlamaConfig, x_BxTxD, p, extra, positions_BxT, linear: Callable):
  B, T, _ = x_BxTxD.shape
  lin = lambda name, h: linear(name, h, p[name], extra)
  h = rms_norm(x_BxTxD, p["attn_norm"], cfg.norm_eps)
  q = lin("q", h).reshape(B, T, cfg.n_heads, cfg.hd)
  k = lin("k", h).reshape(B, T, cfg.n_kv_heads, cfg.hd)
  v = lin("v", h).reshape(B, T, cfg.n_kv_heads, cfg.hd)
  q = rope(q, positions_BxT, cfg.rope_theta)
  k = rope(k, positions_BxT, cfg.rope_theta)
  x_BxTxD = x_BxTxD + lin("o", attention(q, k, v))
  h = rms_norm(x_BxTxD, p["mlp_norm"], cfg.norm_eps)
  return x_BxTxD + lin("down", jax.nn.silu(lin("gate", h)) * lin("up", h))


def forward(params, tokens_BxT, cfg: LlamaConfig, *, extra=None,
            linear: Callable = plain_linear, remat: bool = False):
  """Logits (B, T, vocab) of a causal LM; `extra` is scanned with the blocks for `linear`."""
  B, T = tokens_BxT.shape
  positions = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
  x = params["embed"][tokens_BxT]

  def body(x, layer):
    p, e = layer
    return block(cfg, x, p, e, positions, linear), None

  if remat:
    body = jax.checkpoint(body)
  x, _ = jax.lax.scan(body, x, (params["blocks"], extra))
  x = rms_norm(x, params["final_norm"], cfg.norm_eps)
  unembed = params["embed"].T if cfg.tie_embeddings else params["unembed"]
  return x @ unembed


def greedy_generate(params, cfg: LlamaConfig, tokens_BxT, prompt_len_B, n_new: int, *,
                    extra=None, linear: Callable = plain_linear):
  """Greedy continuation of right-padded prompts, written in place after each prompt.

  `tokens_BxT` holds each prompt in its first `prompt_len_B[b]` slots and room for
  `n_new` more. The causal mask makes the padding after a prompt invisible, so a full
  forward pass per new token (no KV cache: sequences here are short) gives the same
  logits as running the prompt alone.
  """
  rows = jnp.arange(tokens_BxT.shape[0])

  def step(i, toks):
    logits = forward(params, toks, cfg, extra=extra, linear=linear)
    pos = prompt_len_B + i
    nxt = jnp.argmax(logits[rows, pos - 1], axis=-1).astype(toks.dtype)
    return toks.at[rows, pos].set(nxt)

  return jax.lax.fori_loop(0, n_new, step, tokens_BxT)


def param_specs(params, model_axis: str = "model") -> dict:
  """PartitionSpecs: column-parallel q/k/v/gate/up, row-parallel o/down, rest replicated."""
  col = {"q", "k", "v", "gate", "up"}
  row = {"o", "down"}

  def spec(path, x):
    name = path[-1].key if hasattr(path[-1], "key") else str(path[-1])
    if name in col:
      return P(None, None, model_axis)
    if name in row:
      return P(None, model_axis, None)
    return P(*([None] * x.ndim))

  return jax.tree_util.tree_map_with_path(spec, params)


def num_params(params) -> int:
  return sum(int(x.size) for x in jax.tree.leaves(params))
