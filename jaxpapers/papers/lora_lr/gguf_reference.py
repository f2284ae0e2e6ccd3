"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- loader check.

An independent float64 NumPy forward of a llama-architecture GGUF (SmolLM2-135M here),
written from the tensors *as stored in the file* and llama.cpp's own conventions, to check
`jaxpapers.nn.gguf_loader` + `jaxpapers.nn.llama` without torch:
- GGUF stores a matrix with shape [ne0 = in, ne1 = out]; read row-major it is W (out, in)
  and y = x W^T (no transposition to our (in, out) kernels);
- the query/key rows stay as llama.cpp's converter permuted them, and rotary embedding is
  applied the way llama.cpp does for LLAMA_ROPE_TYPE_NORM: to *adjacent* pairs
  (x[2i], x[2i+1]) with angle pos * base^(-2i/d) (the loader instead un-permutes the rows
  and our model rotates the halves (x[i], x[i+d/2]));
- RMSNorm, grouped-query causal attention, SwiGLU, tied output embedding.
Only `gguf` is used, to parse the file and decode the quantized blocks (its decoding is
checked against a from-scratch decoder of the Q8_0 / Q4_1 formats in the tests).
"""
from __future__ import annotations

import numpy as np


def _field(r, key, default=None):
  f = r.fields.get(key)
  return default if f is None else f.contents()


def _weights(r) -> dict:
  """name -> float64 array in the file's row-major order ((out, in) for matrices)."""
  import gguf  # pylint: disable=g-import-not-at-top
  out = {}
  for t in r.tensors:
    w = gguf.quants.dequantize(t.data, t.tensor_type)
    out[t.name] = np.asarray(w, np.float64).reshape([int(d) for d in reversed(t.shape)])
  return out


def _rms(x, w, eps):
  return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope_adjacent(x_TxHxD, base):
  """llama.cpp's normal-mode RoPE: rotate each adjacent pair (2i, 2i+1)."""
  T, _, D = x_TxHxD.shape
  inv = base ** (-np.arange(0, D, 2) / D)                  # (D/2,)
  ang = np.arange(T)[:, None] * inv[None]                  # (T, D/2)
  cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]    # (T, 1, D/2)
  x0, x1 = x_TxHxD[..., 0::2], x_TxHxD[..., 1::2]
  out = np.empty_like(x_TxHxD)
  out[..., 0::2] = x0 * cos - x1 * sin
  out[..., 1::2] = x0 * sin + x1 * cos
  return out


def forward(path_or_reader, token_ids) -> np.ndarray:
  """float64 logits (T, vocab) of one token sequence (a path or an open GGUFReader)."""
  import gguf  # pylint: disable=g-import-not-at-top
  r = (gguf.GGUFReader(path_or_reader) if isinstance(path_or_reader, str)
       else path_or_reader)
  if _field(r, "general.architecture") != "llama":
    raise ValueError("the GGUF file is not a llama model")
  n_layers = int(_field(r, "llama.block_count"))
  n_heads = int(_field(r, "llama.attention.head_count"))
  n_kv = int(_field(r, "llama.attention.head_count_kv", n_heads))
  base = float(_field(r, "llama.rope.freq_base", 10000.0))
  eps = float(_field(r, "llama.attention.layer_norm_rms_epsilon", 1e-5))
  W = _weights(r)
  emb = W["token_embd.weight"]                             # (vocab, dim)
  x = emb[np.asarray(token_ids)]                           # (T, dim)
  T = x.shape[0]
  causal = np.tril(np.ones((T, T), bool))
  for i in range(n_layers):
    p = lambda name, i=i: W[f"blk.{i}.{name}.weight"]
    h = _rms(x, p("attn_norm"), eps)
    q, k, v = h @ p("attn_q").T, h @ p("attn_k").T, h @ p("attn_v").T
    hd = q.shape[-1] // n_heads
    q = _rope_adjacent(q.reshape(T, n_heads, hd), base)
    k = _rope_adjacent(k.reshape(T, n_kv, hd), base)
    v = v.reshape(T, n_kv, hd)
    group = n_heads // n_kv                                # query head h uses kv head h // group
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
    s = np.where(causal[None], s, -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    o = np.einsum("hts,shd->thd", a, v).reshape(T, n_heads * hd)
    x = x + o @ p("attn_output").T
    h = _rms(x, p("ffn_norm"), eps)
    g = h @ p("ffn_gate").T
    x = x + ((g / (1 + np.exp(-g))) * (h @ p("ffn_up").T)) @ p("ffn_down").T
  x = _rms(x, W["output_norm.weight"], eps)
  out = W.get("output.weight", emb)                        # tied when absent
  return x @ out.T
