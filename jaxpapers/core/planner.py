"""What a config's training step costs on N devices, from XLA, before paying for it.

A paper's `plan(config)` returns a `Plan`: its jitted step and abstract arguments
(`jax.ShapeDtypeStruct`s carrying the shardings training would use, so nothing is
allocated). `estimate` lowers and compiles that step for the mesh and reads, per step:

  flops     XLA's cost analysis of the partitioned program: FLOPs per device (the whole
            step is that times the device count)
  memory    the compiled program's memory analysis per device: arguments (state and
            batch), outputs, temporaries, minus the donated buffers outputs reuse
  time      flops per device / (platform peak x MFU), and that times the run's steps

XLA's cost analysis counts a while loop's body once, however many times it runs, so a
step that scans (layers, rollout steps, micro-batches) is undercounted by its trip count.
`estimate` adds the missing trips of the step's matmuls and convolutions, counted on its
jaxpr (`loop_matmul_flops`: each `lax.scan` body times its length); elementwise work inside
a loop stays counted once, which for matmul-bound steps is a small part. A `while_loop`
with a dynamic trip count cannot be counted that way; the report says how many there are.

Peaks are the vendors' published dense rates: bf16 for `compute_dtype='bfloat16'` steps,
TF32 (GPUs) for float32 ones. MFU 0.4 is a typical achieved fraction for a well-sharded
transformer step; small or communication-bound steps reach less, so the time is a
lower bound of what the hardware allows, not a promise. The program is compiled by
XLA's CPU backend over forced host devices: FLOPs are the same HLO a GPU or TPU would
run; the memory figures are the CPU compiler's buffer assignment, a close but not exact
stand-in for the accelerator's.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

import jax
import jax.extend

# name: (bf16 dense FLOP/s, float32-path dense FLOP/s, device memory bytes, source)
PLATFORMS = {
    "h100": (989e12, 494.7e12, 80e9, "H100 SXM: 989 TFLOP/s bf16, 495 TF32 (dense), 80 GB"),
    "a100": (312e12, 156e12, 80e9, "A100 SXM 80GB: 312 TFLOP/s bf16, 156 TF32 (dense)"),
    "v5e": (197e12, 197e12, 16e9, "TPU v5e: 197 TFLOP/s bf16 (float32 matmuls also run "
                                  "on the bf16 MXU), 16 GB HBM"),
    "cpu": (None, None, None, "this machine: the matmul rate measured now, host memory"),
}


@dataclasses.dataclass
class Plan:
  """fn: the jitted step; args: its abstract arguments; steps: training steps of the run.
  """
  fn: Callable
  args: tuple
  steps: int
  label: str = ""
  bf16: bool = False


def _first(x):
  if isinstance(x, (list, tuple)):
    return x[0] if x else None
  return x


def _matmul_flops(eqn) -> int:
  """FLOPs (multiply-adds x 2) of a dot_general or convolution equation, else 0."""
  name = eqn.primitive.name
  if name not in ("dot_general", "conv_general_dilated"):
    return 0
  out = eqn.outvars[0].aval
  if name == "dot_general":
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    k = 1
    for d in lhs_contract:
      k *= lhs[d]
    return 2 * out.size * k
  if name == "conv_general_dilated":
    rhs = eqn.invars[1].aval
    out_feature_dim = eqn.params["dimension_numbers"].rhs_spec[0]
    # each output element sums over the kernel's window x its input features per group
    return 2 * out.size * (rhs.size // rhs.shape[out_feature_dim])
  return 0


def _sub_jaxprs(eqn):
  for v in eqn.params.values():
    for x in (v if isinstance(v, (list, tuple)) else (v,)):
      if isinstance(x, jax.extend.core.ClosedJaxpr):
        yield x.jaxpr
      elif isinstance(x, jax.extend.core.Jaxpr):
        yield x


def loop_matmul_flops(jaxpr, *, trips: bool = True) -> tuple[int, int]:
  """(matmul + convolution FLOPs of a jaxpr, dynamic while loops met).

  trips=True counts a scan body `length` times, as the step runs it; trips=False as XLA's
  cost analysis sees the compiled loop (its bodies once). A cond counts its costliest
  branch."""
  total, dynamic = 0, 0
  for eqn in jaxpr.eqns:
    total += _matmul_flops(eqn)
    subs = [loop_matmul_flops(j, trips=trips) for j in _sub_jaxprs(eqn)]
    dynamic += sum(d for _, d in subs) + (eqn.primitive.name == "while")
    if eqn.primitive.name == "cond":
      total += max((f for f, _ in subs), default=0)
    else:
      reps = 1
      if eqn.primitive.name == "scan":
        length, unroll = eqn.params["length"], int(eqn.params.get("unroll", 1))
        # unroll=u lowers to a loop of u bodies plus the length % u left over, which XLA
        # counts once each (u = length: no loop; length 1: the loop is removed)
        reps = length if trips else min(length, unroll + length % unroll)
      total += reps * sum(f for f, _ in subs)
  return total, dynamic


def devices_used(args, devices: int | None = None) -> int:
  """Devices that hold a shard of an argument: a spread of n < devices rows runs on n
  devices (sharding.spread_mesh), so the step's FLOPs are not divided among idle ones.
  Arguments without a sharding: `devices` (or 1)."""
  used = max([len(a.sharding.device_set) for a in jax.tree.leaves(args)
              if getattr(a, "sharding", None) is not None] or [devices or 1])
  return min(used, devices) if devices else used


# The compiled program is only read (cost and memory analyses), never run: both analyses
# come from XLA's HLO passes and buffer assignment, before LLVM lowers the program to
# machine code, so LLVM runs unoptimised. The FLOPs and bytes are those of a default
# compile (every :paper plan checked), for about a quarter less compile time
# (lgs:paper 19.9 -> 14.5 CPU s, lora_lr:paper ~37 -> ~27). Only on the CPU backend, where
# plans are made and these flags were checked; other backends compile with their defaults.
ANALYSIS_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0,
                             "xla_llvm_disable_expensive_passes": True}


def compiled_costs(fn, args, devices: int | None = None) -> dict:
  """FLOPs and per-device bytes of `fn` compiled for `args` (abstract or concrete).

  flops_per_device is XLA's count plus the scan trips it skips (loop_flops, spread over
  the devices that hold the work like the rest of the step); xla_flops_per_device is
  XLA's count alone."""
  options = ANALYSIS_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
  compiled = fn.lower(*args).compile(compiler_options=options)
  cost = _first(compiled.cost_analysis()) or {}
  mem = compiled.memory_analysis()
  xla = float(cost.get("flops", float("nan")))
  jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
  every, dynamic = loop_matmul_flops(jaxpr)
  once, _ = loop_matmul_flops(jaxpr, trips=False)
  used = devices_used(args, devices)
  out = dict(flops_per_device=xla + (every - once) / used, xla_flops_per_device=xla,
             loop_flops=float(every - once), dynamic_loops=dynamic, devices_used=used)
  if mem is not None:
    arg_b = int(mem.argument_size_in_bytes)
    out_b = int(mem.output_size_in_bytes)
    tmp_b = int(mem.temp_size_in_bytes)
    alias_b = int(mem.alias_size_in_bytes)
    out.update(argument_bytes=arg_b, output_bytes=out_b, temp_bytes=tmp_b,
               alias_bytes=alias_b, bytes_per_device=arg_b + out_b + tmp_b - alias_b)
  return out


def estimate(plan: Plan, *, devices: int, platform: str = "h100", mfu: float = 0.4) -> dict:
  if platform not in PLATFORMS:
    raise ValueError(f"--platform={platform!r}; expected one of {sorted(PLATFORMS)}")
  if not 0 < mfu <= 1:
    raise ValueError(f"--mfu={mfu} must be in (0, 1]")
  bf16_peak, f32_peak, mem_cap, source = PLATFORMS[platform]
  if platform == "cpu":
    from jaxpapers.core import bench  # pylint: disable=g-import-not-at-top
    # The forced host devices share this machine's cores: each gets 1/devices of it.
    bf16_peak = f32_peak = bench.matmul_peak_gflops(512) * 1e9 / devices
    mem_cap = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / devices
  peak = bf16_peak if plan.bf16 else f32_peak
  r = compiled_costs(plan.fn, plan.args, devices=devices)
  used = r["devices_used"]
  step_s = r["flops_per_device"] / (peak * mfu)
  r.update(label=plan.label, devices=devices, devices_used=used, platform=platform,
           platform_source=source,
           peak_flops=peak, precision="bf16" if plan.bf16 else "float32", mfu=mfu,
           flops_per_step=r["flops_per_device"] * used, step_seconds=step_s,
           steps=plan.steps, run_hours=step_s * plan.steps / 3600,
           device_memory_bytes=mem_cap,
           fits=(r.get("bytes_per_device", 0) <= mem_cap) if mem_cap else None)
  return r


def _si(x: float, unit: str) -> str:
  for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(x) >= scale:
      return f"{x / scale:.3g} {prefix}{unit}"
  return f"{x:.3g} {unit}"


def format_report(r: dict) -> str:
  gb = lambda b: _si(b, "B")
  lines = [
      f"plan: {r['label']}",
      f"  mesh: {r['devices']} devices"
      + (f" ({r['devices_used']} hold the work)" if r.get("devices_used", r["devices"])
         < r["devices"] else "")
      + f", platform {r['platform']} ({r['platform_source']})",
      f"  FLOPs per step: {_si(r['flops_per_step'], 'FLOP')} "
      f"({_si(r['flops_per_device'], 'FLOP')} per device)"
      + (f"; {_si(r['loop_flops'], 'FLOP')} of it added for the scan trips XLA's cost analysis skips"
         if r.get("loop_flops") else "")
      + (f"; {r['dynamic_loops']} while loop(s) of unknown trip count counted once"
         if r.get("dynamic_loops") else ""),
  ]
  if "bytes_per_device" in r:
    lines.append(
        f"  memory per device: {gb(r['bytes_per_device'])} = arguments "
        f"{gb(r['argument_bytes'])} + outputs {gb(r['output_bytes'])} + temporaries "
        f"{gb(r['temp_bytes'])} - donated {gb(r['alias_bytes'])}")
  if r["device_memory_bytes"]:
    lines.append(f"  fits in {gb(r['device_memory_bytes'])} per device: "
                 f"{'yes' if r['fits'] else 'NO'}")
  lines.append(
      f"  step time at {r['mfu']:.0%} MFU of {_si(r['peak_flops'], 'FLOP/s')} "
      f"({r['precision']}): {r['step_seconds'] * 1e3:.4g} ms; {r['steps']} steps: "
      f"{r['run_hours']:.4g} h ({r['run_hours'] * r['devices']:.4g} device-hours)")
  return "\n".join(lines)
