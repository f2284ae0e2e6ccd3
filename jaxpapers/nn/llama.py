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

`greedy_generate` decodes with a key/value cache: a prefill pass stores each layer's
post-RoPE keys and values for the whole token buffer, then every new token is one
single-token pass through the same `block` that writes its own cache slot (rows may sit
at different positions) and attends to the slots before it. The full-recompute decoder
stays behind `kv_cache=False` as the reference.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxpapers.nn import attention as attn_lib
from jaxpapers.nn import blocks

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


# Shared with the block zoo (jaxpapers.nn.blocks), so every LM here has one RMSNorm/RoPE.
rms_norm = blocks.rms_norm
rope = blocks.rope


def plain_linear(name, x, w, extra):
  del name, extra
  return x @ w


def attention(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, mask_BxTxS=None):
  """GQA: each of the K key/value heads serves H/K query heads; causal when no mask.

  `mask_BxTxS` (True = may attend) lets T new queries attend into a longer cache of S
  slots; without it T == S and the mask is the usual lower triangle. The softmax kernel
  is the block zoo's (`attention.softmax_attention`).
  """
  B, T, H, D = q_BxTxHxD.shape
  mask = attn_lib.causal_mask(T, k_BxSxKxD.shape[1]) if mask_BxTxS is None else mask_BxTxS
  return attn_lib.softmax_attention(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, mask).reshape(B, T, H * D)


def block(cfg: LlamaConfig, x_BxTxD, p, extra, positions_BxT, linear: Callable,
          cache=None):
  """One pre-norm block; returns (x, (k, v)) with the keys/values it attended over.

  Without `cache` the T tokens attend causally to each other and (k, v) are their own
  post-RoPE keys and values, (B, T, K, D): what a prefill stores. With `cache = (k, v)`
  of S slots (slot s holds position s), the new tokens' keys/values are written at
  their `positions_BxT` (per row, so rows may be at different lengths) and
  each token attends to the slots at or before its position; (k, v) is the updated cache.
  """
  B, T, _ = x_BxTxD.shape
  lin = lambda name, h: linear(name, h, p[name], extra)
  h = rms_norm(x_BxTxD, p["attn_norm"], cfg.norm_eps)
  q = lin("q", h).reshape(B, T, cfg.n_heads, cfg.hd)
  k = lin("k", h).reshape(B, T, cfg.n_kv_heads, cfg.hd)
  v = lin("v", h).reshape(B, T, cfg.n_kv_heads, cfg.hd)
  q = rope(q, positions_BxT, cfg.rope_theta)
  k = rope(k, positions_BxT, cfg.rope_theta)
  mask = None
  if cache is not None:
    rows = jnp.arange(B)[:, None]
    k = cache[0].at[rows, positions_BxT].set(k.astype(cache[0].dtype))
    v = cache[1].at[rows, positions_BxT].set(v.astype(cache[1].dtype))
    mask = jnp.arange(k.shape[1])[None, None, :] <= positions_BxT[:, :, None]
  x_BxTxD = x_BxTxD + lin("o", attention(q, k, v, mask))
  h = rms_norm(x_BxTxD, p["mlp_norm"], cfg.norm_eps)
  return x_BxTxD + lin("down", jax.nn.silu(lin("gate", h)) * lin("up", h)), (k, v)


def hidden(params, tokens_BxT, cfg: LlamaConfig, *, extra=None,
           linear: Callable = plain_linear, remat: bool = False, positions_BxT=None,
           cache=None, keep_kv: bool = False, unroll: bool = False):
  """Final-normed hidden states (B, T, dim), and the per-layer (k, v) if asked for.

  `unroll=True` unrolls the layer loop; it exists for FLOP counting, because XLA's cost
  analysis counts a loop body once, whatever the number of layers.

  The blocks run under `lax.scan` over the stacked layer axis, with `extra` and the
  `cache` ((L, B, S, K, D) keys and values, see `block`) scanned alongside. The keys and
  values come back stacked the same way when `keep_kv` or a cache is given, else None
  (so training never materializes them).
  """
  B, T = tokens_BxT.shape
  if positions_BxT is None:
    positions_BxT = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
  keep_kv = keep_kv or cache is not None

  def body(x, layer):
    p, e, c = layer
    x, kv = block(cfg, x, p, e, positions_BxT, linear, c)
    return x, (kv if keep_kv else None)

  if remat:
    body = jax.checkpoint(body)
  x, kv = jax.lax.scan(body, params["embed"][tokens_BxT], (params["blocks"], extra, cache),
                       unroll=unroll)
  return rms_norm(x, params["final_norm"], cfg.norm_eps), kv


def unembed(params, x_xD, cfg: LlamaConfig):
  """Logits of final-normed hidden states (any leading shape)."""
  return x_xD @ (params["embed"].T if cfg.tie_embeddings else params["unembed"])


def forward(params, tokens_BxT, cfg: LlamaConfig, *, extra=None,
            linear: Callable = plain_linear, remat: bool = False, unroll: bool = False):
  """Logits (B, T, vocab) of a causal LM; `extra` is scanned with the blocks for `linear`."""
  x, _ = hidden(params, tokens_BxT, cfg, extra=extra, linear=linear, remat=remat,
                unroll=unroll)
  return unembed(params, x, cfg)


def greedy_generate(params, cfg: LlamaConfig, tokens_BxT, prompt_len_B, n_new: int, *,
                    extra=None, linear: Callable = plain_linear, kv_cache: bool = True,
                    return_logits: bool = False):
  """Greedy continuation of right-padded prompts, written in place after each prompt.

  `tokens_BxT` holds each prompt in its first `prompt_len_B[b]` slots and room for
  `n_new` more. With `kv_cache` (the default) one prefill pass over the whole buffer
  fills a (L, B, T, K, D) key/value cache, then each new token costs one single-token
  pass that writes its keys/values at its row's own position and attends to the slots
  at or before it; the padding after a prompt is overwritten before any query can see
  it. `kv_cache=False` is the reference: a full causal forward over the buffer per new
  token (the causal mask hides the padding). With `return_logits` the result is
  (tokens, logits (B, n_new, vocab) that chose each new token).
  """
  step_fn = _cached_steps if kv_cache else _recompute_steps
  toks, logits_NxBxV = step_fn(params, cfg, tokens_BxT, prompt_len_B, n_new, extra, linear,
                               return_logits)
  if return_logits:
    return toks, jnp.swapaxes(logits_NxBxV, 0, 1)
  return toks


def _recompute_steps(params, cfg, tokens_BxT, prompt_len_B, n_new, extra, linear, keep):
  rows = jnp.arange(tokens_BxT.shape[0])

  def step(toks, i):
    logits = forward(params, toks, cfg, extra=extra, linear=linear)[rows, prompt_len_B + i - 1]
    nxt = jnp.argmax(logits, axis=-1).astype(toks.dtype)
    return toks.at[rows, prompt_len_B + i].set(nxt), (logits if keep else None)

  return jax.lax.scan(step, tokens_BxT, jnp.arange(n_new))


def _cached_steps(params, cfg, tokens_BxT, prompt_len_B, n_new, extra, linear, keep):
  if n_new <= 0:   # nothing to prefill for; the reference returns the empty results
    return _recompute_steps(params, cfg, tokens_BxT, prompt_len_B, n_new, extra, linear, keep)
  rows = jnp.arange(tokens_BxT.shape[0])
  # Prefill: the whole buffer, so the cache has a slot for every position; only the
  # logits after each prompt's last token are computed.
  x, cache = hidden(params, tokens_BxT, cfg, extra=extra, linear=linear, keep_kv=True)
  logits = unembed(params, x[rows, prompt_len_B - 1], cfg)
  toks = tokens_BxT.at[rows, prompt_len_B].set(jnp.argmax(logits, -1).astype(tokens_BxT.dtype))

  def step(carry, i):
    toks, cache = carry
    # The token fed now sits at pos_B: its keys/values fill that slot, its successor pos_B + 1.
    pos_B = prompt_len_B + i
    x, cache = hidden(params, toks[rows, pos_B][:, None], cfg, extra=extra, linear=linear,
                      positions_BxT=pos_B[:, None], cache=cache)
    logits = unembed(params, x[:, 0], cfg)
    toks = toks.at[rows, pos_B + 1].set(jnp.argmax(logits, -1).astype(toks.dtype))
    return (toks, cache), (logits if keep else None)

  (toks, _), rest = jax.lax.scan(step, (toks, cache), jnp.arange(n_new - 1))
  if keep:
    return toks, jnp.concatenate([logits[None], rest], 0)
  return toks, None


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
