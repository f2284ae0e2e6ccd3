"""Learned autoscaling of prefill/decode-disaggregated LLM serving (abstract 12): calibration.

The simulator's latency, memory and lifecycle numbers, shipped as data with their source.
Every number below is a public figure quoted in the issue (DistServe's fitted latency model,
Vidur's profiling tables) or derived from a model's shape; none was measured here (no GPU
profiling run is part of this reproduction). `PROFILES[name]` is a plain dict; `profile()`
checks and returns one. The README's "Calibration" section repeats this table.

Latency model of one forward pass (milliseconds):
  prefill(S) = p0 + p1 S + p2 S^2 + interp(S; prefill_table)   S = tokens in the batch
  decode(C, b) = d0 + d_ctx C + d_b b + interp(b; decode_table)  C = context tokens summed
                                                                over the batch, b = batch
"""
from __future__ import annotations

import math

MiB = 2 ** 20


def _kv_bytes(layers: int, hidden: int, dtype_bytes: int = 2) -> int:
  """K and V of every layer for one token (multi-head attention, no GQA)."""
  return 2 * layers * hidden * dtype_bytes


def _kv_capacity_tokens(gpu_bytes: float, weight_bytes: float, kv_bytes: float,
                        usable: float = 0.9) -> int:
  """Tokens of KV cache that fit beside the weights in `usable` of the GPU's memory."""
  return int((usable * gpu_bytes - weight_bytes) // kv_bytes)


PROFILES = {
    # DistServe (Zhong et al., OSDI 2024), fitted A100-80G model for OPT-13B, as quoted in
    # the issue: prefill 16.46 + 0.0926 S + 6.47e-6 S^2 ms; decode 19.93 + 6.27e-4 C +
    # 0.0385 b ms ("for small batches"). KV bytes from OPT-13B's shape (40 layers, hidden
    # 5120, fp16): 0.78 MiB per token. Capacity: 90% of 80 GB minus 26 GB of fp16 weights.
    "distserve_opt13b_a100": dict(
        source="DistServe fitted latency model, OPT-13B on A100-80G (issue 39 figures); "
               "KV size from OPT-13B's shape",
        p0=16.46, p1=0.0926, p2=6.47e-6, prefill_table=None,
        d0=19.93, d_ctx=6.27e-4, d_b=0.0385, decode_table=None,
        kv_bytes_per_token=_kv_bytes(40, 5120),
        kv_capacity_tokens=_kv_capacity_tokens(80e9, 26e9, _kv_bytes(40, 5120)),
        max_context=8192),
    # Vidur (Agrawal et al., MLSys 2024) profiling of Llama-2-7B (32 layers): the
    # non-attention time of one forward vs tokens in the batch, A100: ~9.3 ms up to ~128
    # tokens, 68 ms at 1k, 261 ms at 4k (issue 39 figures; linear between the points).
    # Attention in decode is memory bound: reading the batch's KV cache at the HBM
    # bandwidth (2.0 TB/s A100) gives d_ctx = 0.5 MiB / 2.0e12 B/s per token. Prefill
    # attention (quadratic in the prompt) is not in the table and is left out.
    "vidur_llama2_7b_a100": dict(
        source="Vidur non-attention profile, Llama-2-7B on A100 (issue 39 figures); decode "
               "attention = KV bytes / 2.0 TB/s HBM",
        p0=0.0, p1=0.0, p2=0.0, prefill_table=((1, 9.3), (128, 9.3), (1024, 68.0),
                                               (4096, 261.0), (8192, 522.0)),
        d0=0.0, d_ctx=1e3 * _kv_bytes(32, 4096) / 2.0e12, d_b=0.0,
        decode_table=((1, 9.3), (128, 9.3), (1024, 68.0)),
        kv_bytes_per_token=_kv_bytes(32, 4096),
        kv_capacity_tokens=_kv_capacity_tokens(80e9, 13.5e9, _kv_bytes(32, 4096)),
        max_context=8192),
    # The same model on H100: 5.6 / 21 / 83 ms non-attention; HBM 3.35 TB/s.
    "vidur_llama2_7b_h100": dict(
        source="Vidur non-attention profile, Llama-2-7B on H100 (issue 39 figures); decode "
               "attention = KV bytes / 3.35 TB/s HBM",
        p0=0.0, p1=0.0, p2=0.0, prefill_table=((1, 5.6), (128, 5.6), (1024, 21.0),
                                               (4096, 83.0), (8192, 166.0)),
        d0=0.0, d_ctx=1e3 * _kv_bytes(32, 4096) / 3.35e12, d_b=0.0,
        decode_table=((1, 5.6), (128, 5.6), (1024, 21.0)),
        kv_bytes_per_token=_kv_bytes(32, 4096),
        kv_capacity_tokens=_kv_capacity_tokens(80e9, 13.5e9, _kv_bytes(32, 4096)),
        max_context=8192),
}

# Pod start-up: scheduling + container start + loading fp16 weights (26 GB for OPT-13B at
# ~1 GB/s from a model cache) + engine warm-up (CUDA graphs). Public vLLM/AIBrix reports
# put a cold start between ~30 s and a few minutes; 60 s is our choice (config field).
STARTUP_S = 60.0
# KV transfer prefill -> decode: one 200 Gb/s InfiniBand link per pod pair (25 GB/s) plus a
# fixed 1 ms setup; transfers do not share bandwidth (DistServe finds them small).
TRANSFER_BANDWIDTH = 25e9
TRANSFER_LATENCY_S = 1e-3


def profile(name: str) -> dict:
  if name not in PROFILES:
    raise ValueError(f"unknown latency profile {name!r}; known: {', '.join(PROFILES)}")
  return dict(PROFILES[name])


def prefill_ms_np(prof: dict, s):
  """NumPy reference of the prefill model (used by planners and tests)."""
  import numpy as np
  s = np.asarray(s, np.float64)
  out = prof["p0"] + prof["p1"] * s + prof["p2"] * s * s
  if prof["prefill_table"]:
    xs, ys = zip(*prof["prefill_table"])
    out = out + np.interp(s, xs, ys)
  return out


def decode_ms_np(prof: dict, ctx, batch):
  import numpy as np
  ctx, batch = np.asarray(ctx, np.float64), np.asarray(batch, np.float64)
  out = prof["d0"] + prof["d_ctx"] * ctx + prof["d_b"] * batch
  if prof["decode_table"]:
    xs, ys = zip(*prof["decode_table"])
    out = out + np.interp(batch, xs, ys)
  return out


def best_prefill_ms_per_token(prof: dict, budget: float) -> float:
  """min over batch sizes S <= budget of prefill(S) / S: the fluid bound's prefill cost."""
  import numpy as np
  s = np.unique(np.concatenate([np.arange(1, int(budget) + 1, 8), [budget]]))
  return float(np.min(prefill_ms_np(prof, s) / s))


def check() -> None:
  for name, p in PROFILES.items():
    assert p["kv_capacity_tokens"] > 0, name
    assert math.isfinite(p["d_ctx"]), name
