"""launch/plan.py: its FLOPs are the benchmark's program FLOPs, its memory estimate is
within 2x of a real CPU run's measured peak, and bad input is one line."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from jaxpapers.core import bench, config as config_lib, planner
from jaxpapers.nn import lm, lm_experiment
from tests import _runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAN = os.path.join(ROOT, "launch", "plan.py")


def plan_cli(*args):
  return subprocess.run([sys.executable, PLAN, *args], env=_runs.env_with_devices(8),
                        capture_output=True, text=True, timeout=300, cwd=ROOT)


def benchmark_flops(config):
  """The lm benchmark's way: the unrolled train step jitted alone, concrete arrays."""
  data = lm_experiment.load_data(config)
  _, model = lm_experiment.build_model(config, data.vocab_size, unroll=True)
  task = lm.make_task(config, data, model)
  state = jax.jit(task.init)(jax.random.PRNGKey(0))
  batch = jax.tree.map(jnp.asarray, task.train_batch(0, slice(None)))
  step = jax.jit(lambda s, b, t: task.train_step(s, b, jax.random.PRNGKey(1), t),
                 donate_argnums=0)
  return bench.xla_flops(step, state, batch, jnp.int32(0))


def test_planner_flops_equal_the_benchmark_program_flops(tmp_path):
  r = plan_cli("--config=configs/lm.py:smoke", "--devices=1", "--platform=a100",
               f"--workdir={tmp_path}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "FLOPs per step" in r.stdout and "fits in" in r.stdout
  got = json.loads((tmp_path / "plan.json").read_text())
  want = benchmark_flops(config_lib.load("configs/lm.py:smoke"))
  assert got["flops_per_step"] == want
  assert got["step_seconds"] == pytest.approx(want / (156e12 * 0.4))
  # On 8 devices each one computes less than the whole step (the batch is split); the sum
  # is larger, by the work every device repeats on replicated parameters (the update).
  p8 = planner.estimate(lm_experiment.plan(config_lib.load("configs/lm.py:smoke")),
                        devices=8, platform="h100")
  assert p8["flops_per_device"] < want < p8["flops_per_step"] < 1.5 * want


MEM_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import jax, jax.numpy as jnp
from jaxpapers.core import config as config_lib, planner
from jaxpapers.nn import lm, lm_experiment
c = config_lib.load("configs/lm.py:dim=256,pattern=AA,seq_len=64,batch_size=16")
p = lm_experiment.plan(c)
planned = planner.compiled_costs(p.fn, p.args)["bytes_per_device"]
compiled = p.fn.lower(*p.args).compile()
data = lm_experiment.load_data(c)
_, m = lm_experiment.build_model(c, data.vocab_size, unroll=True)
task = lm.make_task(c, data, m)
batch = jax.device_put(jax.tree.map(jnp.asarray, task.train_batch(0, slice(None))))
def status(key):
  for line in open("/proc/self/status"):
    if line.startswith(key):
      return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")  # resets the peak (VmHWM) to now
base = status("VmRSS")
state = jax.jit(task.init, out_shardings=jax.tree.map(lambda x: x.sharding, p.args[0]))(
    jax.random.PRNGKey(0))
for i in range(3):
  state, _ = compiled(state, batch, jnp.int32(i))
jax.block_until_ready(state)
print("RESULT " + json.dumps({{"planned": planned, "measured": status("VmHWM") - base}}))
"""


def test_a_looped_step_is_counted_by_its_whole_equivalent():
  """XLA counts a scan body once; the planner adds the missing trips of its matmuls, for
  any unroll, nested scans and the backward pass, so a looped step costs what its
  unrolled equivalent does (memory still comes from the looped program)."""
  w = jax.ShapeDtypeStruct((64, 64), jnp.float32)
  x = jax.ShapeDtypeStruct((12, 16, 64), jnp.float32)
  matmul = 2 * 12 * 16 * 64 * 64
  whole = planner.estimate(planner.Plan(jax.jit(lambda w, x: jnp.sum(x @ w)), (w, x), steps=1),
                           devices=1)
  assert whole["flops_per_step"] == pytest.approx(matmul, rel=0.05)
  assert whole["loop_flops"] == 0
  for unroll in (1, 5, 12):
    looped = jax.jit(lambda w, x: jax.lax.scan(
        lambda c, xi: (c + jnp.sum(xi @ w), None), 0.0, x, unroll=unroll)[0])
    r = planner.estimate(planner.Plan(looped, (w, x), steps=1), devices=1)
    assert r["xla_flops_per_device"] < matmul * min(12, unroll + 12 % unroll) / 12 * 1.05
    assert r["flops_per_step"] == pytest.approx(matmul, rel=0.05), unroll
    # papers that weigh sub-programs against each other call compiled_costs directly
    assert planner.compiled_costs(looped, (w, x))["flops_per_device"] == pytest.approx(
        matmul, rel=0.05), unroll
  nested = jax.jit(lambda w, x: jax.lax.scan(lambda c, xs: (c + jax.lax.scan(
      lambda d, xi: (d + jnp.sum(xi @ w), None), 0.0, xs)[0], None), 0.0,
      x.reshape(3, 4, 16, 64))[0])
  assert planner.estimate(planner.Plan(nested, (w, x), steps=1), devices=1)[
      "flops_per_step"] == pytest.approx(matmul, rel=0.05)
  grad = jax.jit(jax.grad(lambda w, x: jax.lax.scan(
      lambda c, xi: (c + jnp.sum(jnp.tanh(xi @ w)), None), 0.0, x)[0]))
  grad_whole = jax.jit(jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w))))
  g = planner.estimate(planner.Plan(grad, (w, x), steps=1), devices=1)
  gw = planner.estimate(planner.Plan(grad_whole, (w, x), steps=1), devices=1)
  assert g["flops_per_step"] == pytest.approx(gw["flops_per_step"], rel=0.1)
  dynamic = jax.jit(lambda w, x: jax.lax.while_loop(lambda c: c[0] < x[0, 0, 0],
                                                    lambda c: (c[0] + 1, c[1] @ w), (0.0, w))[1])
  assert planner.estimate(planner.Plan(dynamic, (w, x), steps=1), devices=1)[
      "dynamic_loops"] == 1


def test_planner_memory_is_within_2x_of_a_measured_cpu_peak():
  r = subprocess.run([sys.executable, "-c", MEM_SCRIPT.format(root=ROOT)],
                     env=_runs.env_with_devices(1), capture_output=True, text=True,
                     timeout=300, cwd=ROOT)
  assert r.returncode == 0, r.stderr[-2000:]
  got = json.loads(r.stdout.split("RESULT ")[1])
  assert got["planned"] > 20e6  # a state and activations large enough to measure
  assert 0.5 < got["measured"] / got["planned"] < 2.0, got


def test_plan_cli_bad_input_is_one_line():
  r = plan_cli("--config=configs/lm.py:smoke", "--devices=8", "--platform=tpu9")
  assert r.returncode == 1
  assert r.stderr.strip().splitlines()[-1].startswith("error: ValueError: --platform='tpu9'")
  r = plan_cli("--config=configs/lm.py:smoke,mesh=data:3", "--devices=8")
  assert r.returncode == 1 and "mesh" in r.stderr.strip().splitlines()[-1]
