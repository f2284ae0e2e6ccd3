"""LGS (issue 41): `launch/benchmark.py` for this paper.

Times, at the config's sizes and training batch, every dynamics model's jitted
autoregressive step (PFlowFT: 2 pyramid stages x `flow_steps` Euler steps of the latent
transformer, decoder excluded, as the study's FLOP column) and its jitted training step
(loss, gradient, Adam update), with FLOPs from XLA's cost analysis and the achieved
GFLOP/s beside this machine's fp32 matmul peak measured in the same run. Reference
implementation in the same run: a NumPy forward of the FNO (`numpy_fno`, written from
the paper's definition on the flax parameters; PyTorch is not installed here), timed
beside the jitted flax forward on the same batch, with their largest difference.

  python launch/benchmark.py --config=configs/lgs.py:setting=close --workdir=/tmp/lgs_bench
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import bench
from jaxpapers.papers.lgs import experiment as E
from jaxpapers.papers.lgs import pdes
from jaxpapers.papers.lgs import train as T


def _gelu(x):  # flax's nn.gelu default: the tanh approximation
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def numpy_fno(params, ctx, modes: int, layers: int = 4):
  """models.FNO's forward in NumPy: ctx [B, K, H, W, C] -> [B, H, W, out].

  Lifting of (context frames, grid) to the width, `layers` Fourier layers (rFFT, the
  lowest `modes` rows from each end and `modes` columns weighted per mode by a complex
  channel matrix, inverse rFFT) plus a 1x1 path, GELU between, then two dense layers."""
  p = jax.tree.map(np.asarray, params["params"])
  b, k, h, w, c = ctx.shape
  x = np.moveaxis(np.asarray(ctx, np.float64), 1, -2).reshape(b, h, w, k * c)
  gy, gx = np.meshgrid(np.arange(h) / h, np.arange(w) / w, indexing="ij")
  x = np.concatenate([x, np.broadcast_to(np.stack([gy, gx], -1), (b, h, w, 2))], -1)
  dense = lambda name, x: x @ p[name]["kernel"] + p[name]["bias"]
  x = dense("Dense_0", x)
  m = modes
  for i in range(layers):
    s = p[f"SpectralConv2d_{i}"]
    wc = s["w_real"] + 1j * s["w_imag"]  # [2, m, m, C, O]
    xf = np.fft.rfft2(x, axes=(1, 2))
    out = np.zeros((b, h, w // 2 + 1, wc.shape[-1]), np.complex128)
    out[:, :m, :m] = np.einsum("bxyc,xyco->bxyo", xf[:, :m, :m], wc[0])
    out[:, h - m:, :m] = np.einsum("bxyc,xyco->bxyo", xf[:, h - m:, :m], wc[1])
    y = np.fft.irfft2(out, s=(h, w), axes=(1, 2)) + dense(f"Dense_{i + 1}", x)
    x = _gelu(y) if i < layers - 1 else y
  x = _gelu(dense(f"Dense_{layers + 1}", x))
  return dense(f"Dense_{layers + 2}", x)


def _time_numpy(fn, min_time):
  fn()
  n, t0 = 0, time.perf_counter()
  while time.perf_counter() - t0 < min_time:
    fn()
    n += 1
  return (time.perf_counter() - t0) / n


def _shapes(config):
  """(latent frame shape, pixel frame shape) at the config's sizes."""
  r, m = config.data.resolution, config.model
  g = r // 2 ** (len(m.vae_widths) - 1)
  return (g, g, m.latent), (r, r, pdes.C)


def _train_step(sp):
  tx = T.optimizer()

  def step(st, batch, rng):
    (loss, _), g = jax.value_and_grad(
        lambda p: T.loss_fn(sp, p, batch, rng, 1.0), has_aux=True)(st["params"])
    upd, opt = tx.update(g, st["opt"], st["params"])
    params = jax.tree.map(lambda p, u: p - st["lr"] * u, st["params"], upd)
    return dict(st, params=params, opt=opt), loss
  return jax.jit(step)


def run(config, workdir, kinds=T.DYNAMICS, min_time: float | None = None):
  del workdir
  min_time = config.bench_min_time if min_time is None else min_time
  B, K = config.train.batch_size, config.model.context
  lat_shape, pix_shape = _shapes(config)
  rng = np.random.default_rng(0)
  peak = bench.matmul_peak_gflops()
  out = dict(backend=jax.default_backend(), devices=jax.device_count(), batch=B,
             latent=list(lat_shape), pixels=list(pix_shape), matmul_peak_gflops=peak,
             models={})
  mask = jnp.ones((B, pdes.C), jnp.float32)
  key = jax.random.PRNGKey(0)
  for kind in kinds:
    sp = E.spec(config, kind)
    shape = lat_shape if kind in T.LATENT else pix_shape
    st = T.init_member(sp, 0, 1e-3, shape)
    ctx = jnp.asarray(rng.standard_normal((B, K) + shape), jnp.float32)
    dyn = jax.jit(lambda p, c, m, k, sp=sp: T.dynamics_step(sp, p, c, m, k, 1.0))
    d_flops = bench.xla_flops(dyn, st["params"], ctx, mask, key)
    d_sec = bench.time_call(dyn, st["params"], ctx, mask, key, min_time=min_time)
    batch = dict(ctx=ctx, nxt=jnp.asarray(rng.standard_normal((B,) + shape), jnp.float32),
                 mask=mask)
    step = _train_step(sp)
    t_flops = bench.xla_flops(step, st, batch, key)
    t_sec = bench.time_call(lambda s: step(s, batch, key)[1], st, min_time=min_time)
    row = dict(step_ms=1e3 * d_sec, step_gflop=d_flops and d_flops / 1e9,
               train_step_ms=1e3 * t_sec, train_gflop=t_flops and t_flops / 1e9)
    for name, fl, sec in (("step", d_flops, d_sec), ("train", t_flops, t_sec)):
      row[f"{name}_gflops"] = fl and fl / sec / 1e9
      row[f"{name}_of_peak"] = fl and fl / sec / 1e9 / peak
    out["models"][kind] = row
    print(f"[bench] {kind:12s} step {row['step_ms']:8.3f} ms {row['step_gflops'] or 0:7.2f} "
          f"GFLOP/s | train {row['train_step_ms']:8.3f} ms {row['train_gflops'] or 0:7.2f} "
          f"GFLOP/s (peak {peak:.0f})", flush=True)
  # The reference: the FNO forward in NumPy beside the jitted flax forward, same batch.
  sp = E.spec(config, "fno")
  params = T.init_member(sp, 0, 1e-3, pix_shape)["params"]
  ctx = jnp.asarray(rng.standard_normal((B, K) + pix_shape), jnp.float32)
  net = sp.net()
  fwd = jax.jit(net.apply)
  j_sec = bench.time_call(fwd, params, ctx, min_time=min_time)
  ctx_np = np.asarray(ctx)
  ref = numpy_fno(params, ctx_np, config.model.fno_modes)
  n_sec = _time_numpy(lambda: numpy_fno(params, ctx_np, config.model.fno_modes), min_time)
  fl = bench.xla_flops(fwd, params, ctx)
  out["fno_forward"] = dict(
      jax_ms=1e3 * j_sec, numpy_ms=1e3 * n_sec, numpy_over_jax=n_sec / j_sec,
      gflop=fl and fl / 1e9, jax_gflops=fl and fl / j_sec / 1e9,
      numpy_gflops=fl and fl / n_sec / 1e9,
      max_abs_diff=float(np.max(np.abs(np.asarray(fwd(params, ctx)) - ref))),
      ref_max_abs=float(np.max(np.abs(ref))))
  f = out["fno_forward"]
  print(f"[bench] FNO forward: jax {f['jax_ms']:.3f} ms, numpy {f['numpy_ms']:.3f} ms "
        f"({f['numpy_over_jax']:.1f}x), max |diff| {f['max_abs_diff']:.2e}", flush=True)
  return out
