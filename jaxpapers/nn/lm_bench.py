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
from jaxpapers.nn import attention as attn_lib
from jaxpapers.nn import blocks
from jaxpapers.nn import lm
from jaxpapers.nn import params as params_lib
from jaxpapers.nn import stack


def task_opt(config, model):
  return lm.optimizer(config, lm.from_stack(model), config.optim.lr)


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


def _gemm_gflops(m, k, n, repeats):
  """Best of `repeats` timings of one (m, k) @ (k, n) fp32 product, GFLOP/s."""
  a, b = jnp.ones((m, k)), jnp.ones((k, n))
  mm = jax.jit(lambda x, y: x @ y)
  return max(2.0 * m * k * n / bench.time_call(mm, a, b, iters=5, min_time=0.5) / 1e9
             for _ in range(repeats))


def components(model, params, tokens, opt, repeats: int = 3, min_time: float = 1.0) -> dict:
  """Where the step's time goes: forward + backward of each part of the model timed alone.

  Each part is its own jitted program (value and gradient with respect to its input and
  parameters), on the step's shapes, best of `repeats`: one layer's attention sublayer
  (and inside it the softmax-attention core: scores, mask, softmax, values) and MLP
  sublayer, scaled by the number of layers; the embedding, final norm, logits and
  cross-entropy; the optimizer update (clip + AdamW) alone. Their sum is compared with the
  whole step: a part that runs below the matmul rate of its own shapes shows here.
  """
  cfg = model.cfg
  B, T = tokens.shape[0], tokens.shape[1] - 1
  L = model.repeats * len(model.unit)
  layer = jax.tree.map(lambda a: a[0], params["layers"][0])
  x = jax.random.normal(jax.random.PRNGKey(1), (B, T, cfg.dim))
  ctx = stack.Context(blocks.default_positions(B, T), attn_lib.make_mask(cfg.mask, T),
                      attn_lib.KERNELS[cfg.kernel], model.n_residual)
  qkv = jax.random.normal(jax.random.PRNGKey(2), (3, B, T, cfg.n_heads, cfg.hd))

  def grad_of(f):
    return jax.jit(jax.grad(lambda *a: jnp.sum(f(*a)), argnums=(0, 1)))

  def best(fn, *args):
    return min(bench.time_call(fn, *args, iters=2, min_time=min_time) for _ in range(repeats))

  attn = best(grad_of(lambda p, h: stack.attention_sublayer(cfg, p, h, ctx)), layer, x)
  core = best(grad_of(lambda q, kv: attn_lib.softmax_attention(q, kv[0], kv[1], ctx.mask)),
              qkv[0], qkv[1:])
  mlp = best(grad_of(lambda p, h: stack.mlp_sublayer(cfg, p, h, ctx)), layer, x)

  def head(p, h):
    logits = model.logits(p, blocks.rms_norm(h + p["embed"][tokens[:, :-1]], p["final_norm"],
                                             cfg.norm_eps))
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1)
  head_sec = best(grad_of(head), params, x)
  opt_state = opt.init(params)
  update = jax.jit(lambda g, s, p: opt.update(g, s, p))
  opt_sec = best(update, params, opt_state, params)
  parts = {"attention_sublayers": L * attn, "of_which_softmax_core": L * core,
           "mlp_sublayers": L * mlp, "embed_logits_loss": head_sec, "optimizer_update": opt_sec}
  total = parts["attention_sublayers"] + parts["mlp_sublayers"] + head_sec + opt_sec
  d, f, n = cfg.dim, cfg.ffn, B * T
  return {"ms": {k: 1e3 * v for k, v in parts.items()}, "sum_of_parts_ms": 1e3 * total,
          # matmul rates on this model's own GEMM shapes (tokens x d x ffn, tokens x d x d)
          "gemm_gflops_tokens_d_ffn": _gemm_gflops(n, d, f, repeats),
          "gemm_gflops_tokens_d_d": _gemm_gflops(n, d, d, repeats),
          "mlp_gflops": 3 * 2 * 3 * n * d * f * L / (L * mlp) / 1e9,
          "softmax_core_gflops": 3 * 4.0 * B * T * T * d / core / 1e9}


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
  # The same step with the layers unrolled (no scan), and unrolled with XLA CPU's YNNPACK
  # fusion restricted to dots (a per-program compiler option, not a process-wide flag):
  # on 2 CPU cores the scan's backward fuses stacked-residual slices into transposing
  # loops, and the default fusion choice was slower than dots alone (issue 12 probes).
  fresh_state = lambda: jax.jit(task.init)(jax.random.PRNGKey(0))
  variants = {"unrolled": step_unrolled}
  if jax.default_backend() == "cpu":
    variants["unrolled_ynn_dot"] = step_unrolled.lower(*args).compile(
        compiler_options={"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"})
  sec = _time(step, state, batch, b.min_time)
  variant_ms = {k: 1e3 * _time(fn, fresh_state(), batch, b.min_time) for k, fn in variants.items()}
  n_matrix = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(model.specs, is_leaf=params_lib.is_spec)
                 if s.cls in ("hidden", "output"))
  analytic = 6.0 * n_matrix * B * T + 3 * L * 4.0 * B * T * T * d  # scores + values, fwd x3
  # best of 5 probes: a single probe moved by 1.6x between runs on a busy machine
  peak = max(bench.matmul_peak_gflops() for _ in range(5))
  out.update({"matrix_params": n_matrix, "jax_step_ms": 1e3 * sec,
              "jax_tokens_per_s": B * T / sec,
              "xla_gflop_per_step": None if flops is None else flops / 1e9,
              "analytic_gflop_per_step": analytic / 1e9,
              "jax_gflops_xla": None if flops is None else flops / sec / 1e9,
              "jax_gflops_analytic": analytic / sec / 1e9,
              "matmul_peak_gflops": peak,
              "fraction_of_peak_analytic": analytic / sec / 1e9 / peak,
              "variant_step_ms": variant_ms,
              "variant_fraction_of_peak_analytic": {
                  k: analytic / (ms / 1e3) / 1e9 / peak for k, ms in variant_ms.items()}})
  fresh = jax.jit(task.init)(jax.random.PRNGKey(0))["params"]  # `state` was donated
  comp = components(model, fresh, batch["tokens"], task_opt(run_cfg, model),
                    min_time=b.min_time / 5)
  out["components"] = comp
  out["step_vs_sum_of_parts"] = 1e3 * sec / comp["sum_of_parts_ms"]
  for k in ("gemm_gflops_tokens_d_ffn", "gemm_gflops_tokens_d_d"):
    out[f"fraction_of_{k}"] = analytic / sec / 1e9 / comp[k]
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
