"""llops: launcher entries (train, study, benchmark, plan, validate).

`train_and_evaluate` trains one small LM whose global attention is `model.method` (or a
seeds x LRs population of it, one vmapped program) through core.loop: progress lines,
checkpoints, exact resume. `run_study` runs study.py. `benchmark` times the attention op
against sequence length: block-causal linear attention (LLoPS features) vs exact
polynomial vs softmax attention (both quadratic), forward + backward, with XLA's FLOPs and
temp memory, tokens/s, the crossover length, a NumPy reference and the matmul peak.
"""
from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import bench
from jaxpapers.core import config as config_lib
from jaxpapers.core import loop
from jaxpapers.core import planner
from jaxpapers.core import population
from jaxpapers.nn import attention as attn_lib
from jaxpapers.nn import lm
from jaxpapers.nn.lm_experiment import load_data, members
from jaxpapers.papers.llops import features
from jaxpapers.papers.llops import linear
from jaxpapers.papers.llops import model as model_lib

METHODS = ("softmax", "poly", "window") + features.MAP_NAMES


def validate(config) -> None:
  m = config.model
  if m.method not in METHODS:
    raise ValueError(f"model.method={m.method!r}; expected one of {list(METHODS)}")
  if m.n_layers < 2 or m.n_layers % 2:
    raise ValueError(f"model.n_layers={m.n_layers} must be even and >= 2 "
                     "(pairs of a window layer and a global layer)")
  if m.degree < 2 or m.degree % 2:
    raise ValueError(f"model.degree={m.degree} must be even and >= 2 (the sketch is "
                     "self-tensored: degree = 2 * power)")
  if m.state < 4:
    raise ValueError(f"model.state={m.state} is too small; use at least 4")
  if m.dim % m.n_heads:
    raise ValueError(f"model.dim={m.dim} is not a multiple of model.n_heads={m.n_heads}")
  for name in config.study.maps:
    if name not in features.MAP_NAMES:
      raise ValueError(f"study.maps has {name!r}; expected names from {list(features.MAP_NAMES)}")
  for name in config.study.lm_methods:
    if name not in METHODS:
      raise ValueError(f"study.lm_methods has {name!r}; expected names from {list(METHODS)}")
  for part in ("mqar", "longrange"):
    for run in config[part].runs:
      name, _, state = run.partition("@")
      if name not in METHODS or (state and not state.isdigit()):
        raise ValueError(f"{part}.runs has {run!r}; expected 'method' or 'map@state' with a "
                         f"method from {list(METHODS)}")
  c = config.convert
  for name in (c.source,) + tuple(c.maps):
    if name not in METHODS or name == "window":
      raise ValueError(f"convert has {name!r}; expected source and maps from "
                       f"{[m for m in METHODS if m != 'window']}")
  if c.source_steps < 1 or c.steps < 1:
    raise ValueError(f"convert.source_steps={c.source_steps} and convert.steps={c.steps} "
                     "must be >= 1")
  q = config.mqar
  if q.seq_len % 2 or q.vocab <= q.seq_len or 4 * max(q.kv) > q.seq_len:
    raise ValueError(f"mqar: seq_len={q.seq_len} must be even, vocab={q.vocab} > seq_len, "
                     f"and 4 * max kv ({max(q.kv)}) <= seq_len (Zoology's conditions)")
  q = config.longrange
  from jaxpapers.papers.llops import mqar  # pylint: disable=g-import-not-at-top
  mqar.far_layout(q.seq_len, q.vocab, max(q.kv))  # raises naming the limit


def train_and_evaluate(config, workdir: str):
  data = load_data(config)
  model, lm_model, mp = model_lib.build(config, data.vocab_size, config.model.method)
  pop = members(config)
  m = config.model
  print(f"llops: method={m.method} pattern={model.cfg.pattern} d={m.dim} heads={m.n_heads} "
        f"state={mp.state if mp else 'n/a'} degree={m.degree} params="
        f"{model_lib.n_params(model, mp):,} data={data.name} ({len(data.train):,} train / "
        f"{len(data.val):,} held-out bytes) members={len(pop)}", flush=True)
  if len(pop) == 1:
    state, final = loop.train(config, workdir, lm.make_task(config, data, lm_model))
    print(f"held-out bits per byte: {final['bpb']:.4f}", flush=True)
    return state, final
  task = population.population_task(
      lambda seed, hp: lm.make_task(config, data, lm_model, seed=seed, hparams=hp), pop)
  state, final = loop.train(config, workdir, task)
  for mem, e in zip(pop, population.unstack(final, len(pop))):
    print(f"member seed={mem['seed']} lr={mem['lr']:.3g}: held-out bpb {e['bpb']:.4f}", flush=True)
  return state, final


def run_study(config, workdir: str):
  from jaxpapers.papers.llops import study  # pylint: disable=g-import-not-at-top
  return study.run(config, workdir)


PLAN_CHARS = 2 ** 20


def plan(config) -> planner.Plan:
  """The LM train step at config's shapes (layers unrolled: XLA counts every layer)."""
  limit = min(config.data.max_chars or PLAN_CHARS, PLAN_CHARS)
  config = config_lib.override(config, {"data.max_chars": limit})
  data = load_data(config)
  model, lm_model, mp = model_lib.build(config, data.vocab_size, config.model.method,
                                        unroll=True)
  fn, args = loop.plan_step(config, lm.make_task(config, data, lm_model))
  m = config.model
  label = (f"llops method={m.method} pattern={model.cfg.pattern} d={m.dim} heads={m.n_heads}"
           f" state={mp.state if mp else 'n/a'} params={model_lib.n_params(model, mp):,} "
           f"batch {config.train.batch_size} x {config.data.seq_len} mesh={config.mesh} "
           f"compute_dtype={config.compute_dtype}")
  return planner.Plan(fn, args, steps=config.train.steps, label=label,
                      bf16=config.compute_dtype == "bfloat16")


# --- benchmark ---------------------------------------------------------------------------

def _ops(config):
  b = config.bench
  mp = features.make_map("llops", b.state, config.model.degree, b.dim)
  params = mp.init(jax.random.PRNGKey(0), b.dim)
  phi = lambda x: mp.phi(params, features.layer_norm(x))
  lin = linear.feature_kernel(phi, "poly", config.model.block)
  deg = config.model.degree
  return {
      "block_causal_llops": lambda q, k, v: lin(q, k, v, None, mask_kind="causal"),
      "exact_poly": lambda q, k, v: features.polynomial_attention(
          q, k, v, attn_lib.causal_mask(q.shape[1]), degree=deg),
      "softmax": lambda q, k, v: attn_lib.softmax_attention(q, k, v, attn_lib.causal_mask(q.shape[1])),
  }, mp


def _numpy_block_causal(fq, fk, v, block):
  """Plain NumPy reference of the block algorithm (one head), for the same-run comparison."""
  T = fq.shape[0]
  out = np.zeros_like(v)
  S = np.zeros((fq.shape[1], v.shape[1]))
  z = np.zeros(fq.shape[1])
  for a in range(0, T, block):
    q, k, vv = fq[a:a + block], fk[a:a + block], v[a:a + block]
    s = np.tril(q @ k.T)
    out[a:a + block] = (s @ vv + q @ S) / (1 + s.sum(1, keepdims=True) + (q @ z)[:, None])
    S += k.T @ vv
    z += k.sum(0)
  return out


def benchmark(config, workdir: str):
  del workdir
  b = config.bench
  ops, mp = _ops(config)
  peak = max(bench.matmul_peak_gflops() for _ in range(3))
  rows = []
  mem_limit = 8 * 2 ** 30
  for T in b.lengths:
    rng = np.random.default_rng(T)
    q, k, v = (jnp.asarray(rng.standard_normal((1, T, b.heads, b.dim)), jnp.float32)
               for _ in range(3))
    for name, op in ops.items():
      quadratic = name != "block_causal_llops"
      if quadratic and 3 * b.heads * T * T * 4 > mem_limit:
        rows.append({"op": name, "T": T, "skipped": "score matrix over 8 GiB"})
        continue
      fwd_bwd = jax.jit(jax.grad(lambda q, k, v, op=op: jnp.sum(op(q, k, v)), argnums=(0, 1, 2)))
      compiled = fwd_bwd.lower(q, k, v).compile()
      mem = compiled.memory_analysis()
      flops = bench.xla_flops(fwd_bwd, q, k, v)
      sec = bench.time_call(fwd_bwd, q, k, v, warmup=1, iters=2, min_time=b.min_time)
      rows.append({"op": name, "T": T, "ms": sec * 1e3, "tokens_per_s": T / sec,
                   "gflop": (flops or float("nan")) / 1e9,
                   "gflops_per_s": (flops or float("nan")) / sec / 1e9,
                   "fraction_of_peak": (flops or float("nan")) / sec / 1e9 / peak,
                   "temp_mib": (mem.temp_size_in_bytes / 2 ** 20) if mem else float("nan")})
      print(f"[llops bench] {rows[-1]}", flush=True)
  # Crossover: the first length where the linear op is faster than each quadratic one.
  cross = {}
  for ref in ("exact_poly", "softmax"):
    cross[ref] = None
    for T in b.lengths:
      lin = next(r for r in rows if r["op"] == "block_causal_llops" and r["T"] == T)
      quad = next(r for r in rows if r["op"] == ref and r["T"] == T)
      if "skipped" in quad or lin["ms"] < quad["ms"]:
        cross[ref] = T
        break
  # A NumPy (float64, one head) reference of the block algorithm at the smallest length.
  T = b.lengths[0]
  rng = np.random.default_rng(0)
  x = rng.standard_normal((T, b.dim))
  params = mp.init(jax.random.PRNGKey(0), b.dim)
  fq = np.asarray(mp.phi(params, features.layer_norm(jnp.asarray(x, jnp.float32))), np.float64)
  vv = rng.standard_normal((T, b.dim))
  t0 = time.perf_counter()
  ref = _numpy_block_causal(fq, fq, vv, config.model.block)
  numpy_ms = (time.perf_counter() - t0) * 1e3
  jax_out = linear.block_causal(jnp.asarray(fq[None, :, None], jnp.float32),
                                jnp.asarray(fq[None, :, None], jnp.float32),
                                jnp.asarray(vv[None, :, None], jnp.float32), 1.0, config.model.block)
  agree = float(np.max(np.abs(np.asarray(jax_out)[0, :, 0] - ref)) / np.max(np.abs(ref)))
  return {"rows": rows, "crossover_length": cross, "matmul_peak_gflops": peak,
          "map": f"llops degree {config.model.degree} state {mp.state}",
          "heads": b.heads, "head_dim": b.dim, "block": config.model.block,
          "numpy_block_causal_one_head_forward_ms": numpy_ms,
          "numpy_vs_jax_max_rel_diff": agree, "devices": jax.device_count(),
          "note": "forward + backward of the attention op alone, batch 1, float32"}
