"""Small-LM workbench: speed of the LM training step (the issue's d=256, 4 layers, seq 256).

Times the jitted, buffer-donating `lm.make_task` train step of a 4-layer 'A' stack
(RoPE, SwiGLU, byte vocabulary, AdamW with clipping) on random tokens: tokens/s, XLA's
FLOP count of the step (from the layer-unrolled program, because cost analysis counts a
`lax.scan` body once) and an analytic count (6 x matrix parameters x tokens + the
attention score/value products, x3 for forward + backward), achieved GFLOP/s against the
fp32 matmul peak measured in the same run, and the same model and optimizer step in
PyTorch eager (`torch_lm.py`) when torch is installed.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import bench
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm
from jaxpapers.nn import params as params_lib
from jaxpapers.nn import stack


def _time(fn, state, batch, min_time):
  zero = jnp.asarray(100, jnp.int32)
  for _ in range(2):
    state, m = fn(state, batch, jax.random.PRNGKey(0), zero)
  jax.block_until_ready(m)
  n, t0 = 0, time.perf_counter()
  while time.perf_counter() - t0 < min_time:
    state, m = fn(state, batch, jax.random.PRNGKey(0), zero)
    jax.block_until_ready(m)
    n += 1
  return (time.perf_counter() - t0) / n


def run(config, workdir: str):
  del workdir
  b = config.bench
  B, T, d, L = b.batch, b.seq_len, b.dim, b.n_layers
  n_heads = max(1, d // 64)
  cfg = stack.StackConfig(vocab_size=256, dim=d, pattern="A" * L, n_heads=n_heads)
  model = stack.build(cfg)
  run_cfg = config.copy_and_resolve_references()
  run_cfg.train.batch_size = B
  run_cfg.data.seq_len = T
  run_cfg.eval.max_windows = 1
  rng = np.random.default_rng(0)
  data = text_lib.TokenData(rng.integers(0, 256, 200_000).astype(np.int32),
                            rng.integers(0, 256, 4 * (T + 1)).astype(np.int32), 256,
                            np.ones(256, np.int32), None, "random")
  batch = {"tokens": jnp.asarray(rng.integers(0, 256, (B, T + 1)), jnp.int32)}
  out = {"model": f"'A'x{L} d={d} heads={n_heads} ffn={cfg.ffn} vocab=256 (SwiGLU, RoPE)",
         "batch": B, "seq_len": T, "backend": jax.default_backend(),
         "devices": jax.device_count()}

  def jitted(unroll):
    task = lm.make_task(run_cfg, data, lm.from_stack(model, unroll=unroll))
    return task, jax.jit(task.train_step, donate_argnums=0)

  task, step = jitted(False)
  state = jax.jit(task.init)(jax.random.PRNGKey(0))
  _, step_unrolled = jitted(True)
  args = (state, batch, jax.random.PRNGKey(0), jnp.asarray(0, jnp.int32))
  flops = bench.xla_flops(step_unrolled, *args)
  sec = _time(step, state, batch, b.min_time)
  n_matrix = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(model.specs, is_leaf=params_lib.is_spec)
                 if s.cls in ("hidden", "output"))
  analytic = 6.0 * n_matrix * B * T + 3 * L * 4.0 * B * T * T * d  # scores + values, fwd x3
  peak = bench.matmul_peak_gflops()
  out.update({"matrix_params": n_matrix, "jax_step_ms": 1e3 * sec,
              "jax_tokens_per_s": B * T / sec,
              "xla_gflop_per_step": None if flops is None else flops / 1e9,
              "analytic_gflop_per_step": analytic / 1e9,
              "jax_gflops_xla": None if flops is None else flops / sec / 1e9,
              "jax_gflops_analytic": analytic / sec / 1e9,
              "matmul_peak_gflops": peak,
              "fraction_of_peak_analytic": analytic / sec / 1e9 / peak})
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    out["torch"] = "torch not installed (pip install torch==2.13.0 for the eager reference)"
    return out
  from jaxpapers.nn import torch_lm  # pylint: disable=g-import-not-at-top
  tstep = torch_lm.make_step(256, d, L, n_heads, cfg.ffn)
  tokens = torch.from_numpy(np.array(batch["tokens"])).long()
  for _ in range(2):
    tstep(tokens)
  n, t0 = 0, time.perf_counter()
  while time.perf_counter() - t0 < b.min_time:
    tstep(tokens)
    n += 1
  tsec = (time.perf_counter() - t0) / n
  out.update({"torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
              "torch_step_ms": 1e3 * tsec, "torch_tokens_per_s": B * T / tsec,
              "torch_gflops_analytic": analytic / tsec / 1e9,
              "speedup_vs_torch_eager": tsec / sec})
  return out
