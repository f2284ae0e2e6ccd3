"""Benchmark helpers: wall-clock timing of jitted calls, XLA FLOP counts, matmul peak.

Speed goals are measured here and reported in READMEs, never asserted in timed tests.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp


def time_call(fn, *args, warmup: int = 2, iters: int = 10, min_time: float = 1.0) -> float:
  """Median-free mean seconds per call of `fn(*args)`, after warm-up, blocking on results.

  Repeats in blocks of `iters` until `min_time` has elapsed, so short calls are timed
  over enough repetitions to be stable.
  """
  for _ in range(warmup):
    jax.block_until_ready(fn(*args))
  n, t0 = 0, time.perf_counter()
  while True:
    for _ in range(iters):
      out = fn(*args)
    jax.block_until_ready(out)
    n += iters
    elapsed = time.perf_counter() - t0
    if elapsed >= min_time:
      return elapsed / n


def xla_flops(jitted, *args) -> float | None:
  """FLOPs of one call, from XLA's cost analysis of the compiled program (None if absent)."""
  compiled = jitted.lower(*args).compile()
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  if not cost or "flops" not in cost:
    return None
  return float(cost["flops"])


def matmul_peak_gflops(n: int = 1024, dtype=jnp.float32) -> float:
  """This machine's achieved fp32 matmul rate (GFLOP/s) on an n x n x n product."""
  a = jnp.ones((n, n), dtype)
  b = jnp.ones((n, n), dtype)
  mm = jax.jit(lambda x, y: x @ y)
  sec = time_call(mm, a, b, iters=5, min_time=1.0)
  return 2 * n**3 / sec / 1e9
