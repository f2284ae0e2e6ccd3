"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

Times the jitted StoMPP train step: examples/s, achieved GFLOP/s (FLOPs from XLA's cost
analysis) beside this machine's fp32 matmul peak measured in the same run, and, when
PyTorch is installed, the same step in PyTorch eager (torch_reference.py) for a ratio.
Measured mid-schedule (half the entries committed), where the mask logic is busiest.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import bench
from jaxpapers.core import mesh as mesh_lib
from jaxpapers.data import sources
from jaxpapers.papers.stompp import experiment
from jaxpapers.papers.stompp import model as model_lib
from jaxpapers.papers.stompp import train_lib


def _time_steps(step_fn, state, batch, n_warm=3, min_time=3.0):
  mid = jnp.asarray(0, jnp.int32)
  for _ in range(n_warm):
    state, m = step_fn(state, batch, mid)
  jax.block_until_ready(m)
  n, t0 = 0, time.perf_counter()
  while time.perf_counter() - t0 < min_time:
    for _ in range(5):
      state, m = step_fn(state, batch, mid)
    jax.block_until_ready(m)
    n += 5
  return (time.perf_counter() - t0) / n


def run(config, workdir: str):
  ds = experiment.load_data(config)
  model = model_lib.build(config, ds.num_classes)
  optimizer = train_lib.make_optimizer(config)
  train_step, _ = train_lib.bind(config, model, optimizer)
  mesh = mesh_lib.make_mesh(config.mesh)
  repl, data = mesh_lib.replicated(mesh), mesh_lib.batch_sharding(mesh)
  state = jax.jit(lambda r: train_lib.init_state(config, model, optimizer, ds.input_shape,
                                                 r), out_shardings=repl)(jax.random.PRNGKey(0))
  bs = config.train.batch_size
  batch = mesh_lib.shard_batch(mesh, sources.train_batch(ds, 0, 0, bs))
  # Mid-schedule: the step index that puts the middle layer half-way through its slot.
  mid_step = int(0.5 * config.binarize.end * config.train.steps)

  def step(state, batch, _):
    return train_step(state, batch, jax.random.PRNGKey(1), jnp.asarray(mid_step, jnp.int32))

  jitted = jax.jit(step, donate_argnums=0, in_shardings=(repl, data, repl),
                   out_shardings=(repl, repl))
  flops = bench.xla_flops(jitted, state, batch, jnp.asarray(0, jnp.int32))
  # Where the time goes: the committed forward alone (inference) beside the train step
  # (timed first: the step donates `state`).
  fwd = jax.jit(lambda st, x: train_lib.logits_hard(model, st, x))
  fwd_flops = bench.xla_flops(fwd, state, batch["image"])
  fwd_sec = bench.time_call(fwd, state, batch["image"], min_time=2.0)
  sec = _time_steps(jitted, state, batch)
  peak = bench.matmul_peak_gflops()
  out = {"model": config.model.name, "width": config.model.width,
         "depth": config.model.get("depth"), "batch": bs, "data": ds.name,
         "devices": jax.device_count(), "backend": jax.default_backend(),
         "jax_step_ms": 1e3 * sec, "jax_examples_per_s": bs / sec,
         "xla_gflop_per_step": None if flops is None else flops / 1e9,
         "jax_achieved_gflops": None if flops is None else flops / sec / 1e9,
         "matmul_peak_gflops": peak,
         "jax_forward_ms": 1e3 * fwd_sec,
         "forward_achieved_gflops": None if fwd_flops is None else fwd_flops / fwd_sec / 1e9}
  try:
    import torch
  except ImportError:
    out["torch"] = ("not installed, no PyPI wheel fetched here; the README's earlier "
                    "rows used torch 2.13.0 (pip install torch==2.13.0)")
    return out
  from jaxpapers.papers.stompp import torch_reference
  tstep, _ = torch_reference.make_step(config, ds.input_shape, ds.num_classes)
  x = torch.from_numpy(np.asarray(sources.train_batch(ds, 0, 0, bs)["image"]))
  if config.model.name != "mlp":
    x = x.permute(0, 3, 1, 2).contiguous()
  y = torch.from_numpy(np.asarray(sources.train_batch(ds, 0, 0, bs)["label"])).long()
  for _ in range(3):
    tstep(x, y)
  n, t0 = 0, time.perf_counter()
  while time.perf_counter() - t0 < 3.0:
    tstep(x, y)
    n += 1
  tsec = (time.perf_counter() - t0) / n
  out.update({"torch_version": torch.__version__, "torch_threads": torch.get_num_threads(),
              "torch_step_ms": 1e3 * tsec, "torch_examples_per_s": bs / tsec,
              "speedup_vs_torch_eager": tsec / sec})
  return out
