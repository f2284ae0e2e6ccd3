"""core/sharding.py on 8 forced CPU devices: FSDP and tensor-parallel runs equal the
replicated run, a checkpoint moves between mesh shapes, `spread` drops its padding, a
population gives the same per-member numbers on 8 devices as on 1, bf16 tracks float32."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxpapers.core import config as config_lib
from jaxpapers.core import loop, mesh as mesh_lib, population, sharding
from jaxpapers.nn import lm, lm_experiment, stack
from tests import _runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ("smoke,steps=4,dim=16,n_heads=4,pattern=AA,seq_len=16,batch_size=8,eval_windows=8,"
        "log_every=1,eval_every=4,max_chars=20000,fsdp_min_size=0")


def cfg(arg=""):
  return config_lib.load("configs/lm.py:" + BASE + ("," + arg if arg else ""))


def train(config, workdir):
  data = lm_experiment.load_data(config)
  _, lm_model = lm_experiment.build_model(config, data.vocab_size)
  return loop.train(config, str(workdir), lm.make_task(config, data, lm_model))


def host(tree):
  return jax.tree.map(np.asarray, jax.device_get(tree))


def assert_close(a, b, **kw):
  fa, fb = _runs.flat(host(a)), _runs.flat(host(b))
  assert fa.keys() == fb.keys()
  for k in fa:
    np.testing.assert_allclose(fa[k], fb[k], err_msg=k, **kw)


def test_leaf_spec_rules():
  mesh = mesh_lib.make_mesh([("data", 2), ("fsdp", 4)])
  # FSDP splits the largest dimension that divides evenly; small leaves stay replicated.
  assert sharding.leaf_spec("params/w", (6, 32), mesh, fsdp_min_size=0) == P(None, "fsdp")
  assert sharding.leaf_spec("params/w", (32, 6), mesh, fsdp_min_size=0) == P("fsdp")
  assert sharding.leaf_spec("params/w", (6, 10), mesh, fsdp_min_size=0) == P()
  assert sharding.leaf_spec("params/w", (64, 64), mesh, fsdp_min_size=10 ** 6) == P()
  tp = mesh_lib.make_mesh([("data", 2), ("model", 4)])
  rules = stack.TENSOR_PARALLEL_RULES
  # Trailing-dimension specs match a stacked layer axis and the optimizer's copies.
  assert sharding.leaf_spec("params/layers/0/q", (3, 16, 8), tp, rules) == P(None, None, "model")
  assert sharding.leaf_spec("opt/1/0/mu/layers/0/down", (3, 8, 16), tp, rules) == P(None, "model")
  assert sharding.leaf_spec("params/layers/0/attn_norm", (3, 16), tp, rules) == P()
  assert sharding.leaf_spec("params/layers/0/q", (3, 16, 6), tp, rules) == P()  # 6 % 4
  # The batch is split over data x fsdp, never over the tensor-parallel axis.
  assert mesh_lib.batch_axes(mesh) == ("data", "fsdp")
  assert mesh_lib.batch_axes(tp) == ("data",)


@pytest.fixture(scope="module")
def replicated_run(tmp_path_factory):
  return train(cfg(), tmp_path_factory.mktemp("replicated"))


@pytest.mark.parametrize("mesh_arg", ["data:2+fsdp:4", "data:2+model:4"])
def test_fsdp_and_tensor_parallel_equal_the_replicated_run(replicated_run, mesh_arg, tmp_path):
  state, final = train(cfg(f"mesh={mesh_arg}"), tmp_path)
  axis = mesh_arg.split("+")[1].split(":")[0]
  specs = [x.sharding.spec for x in jax.tree.leaves(state["params"])]
  assert sum(axis in str(s) for s in specs) >= 5, specs  # really sharded
  # The optimizer's moments are sharded like their parameters.
  moment_specs = [x.sharding.spec for x in jax.tree.leaves(state["opt"]) if x.ndim >= 2]
  assert sum(axis in str(s) for s in moment_specs) >= 10
  assert_close(state["params"], replicated_run[0]["params"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(final["bpb"], replicated_run[1]["bpb"], rtol=1e-5)


def test_checkpoint_written_on_1x8_resumes_on_2x4(replicated_run, tmp_path):
  wd = tmp_path / "run"
  state4, _ = train(cfg("steps=2,mesh=data:8"), wd)
  saved = host(state4)
  # Resumed at its last step: the restored state is the saved one, bit for bit, now FSDP.
  restored, _ = train(cfg("steps=2,mesh=data:2+fsdp:4"), wd)
  assert any("fsdp" in str(x.sharding.spec) for x in jax.tree.leaves(restored["params"]))
  for k, v in _runs.flat(host(restored)).items():
    np.testing.assert_array_equal(v, _runs.flat(saved)[k], err_msg=k)
  # ... and it continues on the 2 x 4 mesh as the uninterrupted 1 x 8 run did.
  resumed, final = train(cfg("mesh=data:2+fsdp:4"), wd)
  assert_close(resumed["params"], replicated_run[0]["params"], rtol=1e-5, atol=1e-6)
  changes = (wd / "config_changes.jsonl").read_text()
  assert "mesh" in changes


def test_spread_pads_and_drops_the_padding():
  f = sharding.spread(lambda x, w: jnp.tanh(x * w).sum() + x[0], in_axes=(0, None))
  x = jnp.arange(5 * 3, dtype=jnp.float32).reshape(5, 3) / 10
  out = f(x, jnp.float32(0.5))
  assert out.shape == (5,)
  np.testing.assert_allclose(out, np.tanh(np.asarray(x) * 0.5).sum(1) + np.asarray(x)[:, 0],
                             rtol=1e-6)
  # 5 rows on 8 devices run on the first 5 devices, one row each (no padded copies); 12
  # rows are padded to 16 and the padding dropped (padded rows never leak into outputs).
  assert len(out.sharding.device_set) == 5
  assert sharding.padded_size(12, 8) == 16
  x12 = jnp.arange(12 * 3, dtype=jnp.float32).reshape(12, 3) / 30
  out12 = f(x12, jnp.float32(0.5))
  assert out12.shape == (12,)
  np.testing.assert_allclose(out12, np.tanh(np.asarray(x12) * 0.5).sum(1)
                             + np.asarray(x12)[:, 0], rtol=1e-6)
  np.testing.assert_allclose(f(x[:3], jnp.float32(0.5)), out[:3], rtol=1e-6)
  with pytest.raises(ValueError, match="in_axes"):
    sharding.spread(lambda x: x, in_axes=1)(x)


def test_spread_donates_a_chunked_state():
  """A state passed back chunk after chunk is donated (its old buffer is freed) and the
  chunks give what one vmapped loop gives."""
  step = sharding.spread(lambda s, k: s * 0.5 + k, in_axes=(0, None), donate_argnums=(0,))
  init = jnp.arange(8 * 4, dtype=jnp.float32).reshape(8, 4)
  want = np.asarray(init)
  state = step(init, jnp.float32(0.0))
  assert not init.is_deleted()  # the caller's array is copied, never donated
  for k in (1.0, 2.0):
    prev = state
    state = step(state, jnp.float32(k))
    assert prev.is_deleted()
  for k in (0.0, 1.0, 2.0):
    want = want * 0.5 + k
  np.testing.assert_allclose(state, want, rtol=1e-6)


def test_spread_passes_compiler_options_to_xla():
  """Options reach XLA's compile (an unknown one is refused there), and a smoke-speed
  compile keeps spread's padding and donation."""
  fn = lambda s, k: jnp.tanh(s * 0.5 + k)
  fast = sharding.spread(fn, in_axes=(0, None), donate_argnums=(0,),
                         compiler_options={"xla_backend_optimization_level": 0})
  init = jnp.arange(8 * 3, dtype=jnp.float32).reshape(8, 3) / 30
  state = fast(init, jnp.float32(0.1))
  prev, state = state, fast(state, jnp.float32(0.2))
  assert prev.is_deleted() and not init.is_deleted() and state.shape == (8, 3)
  np.testing.assert_allclose(fast(init[:5], jnp.float32(0.1)),
                             np.tanh(np.asarray(init[:5]) * 0.5 + 0.1), rtol=1e-5)
  want = np.tanh(np.tanh(np.asarray(init) * 0.5 + 0.1) * 0.5 + 0.2)
  np.testing.assert_allclose(state, want, rtol=1e-5)
  bad = sharding.spread(fn, in_axes=(0, None), compiler_options={"no_such_xla_option": 1})
  with pytest.raises(Exception, match="no_such_xla_option"):
    bad(init, jnp.float32(0.1))


def test_spread_plan_compiles_the_program_spread_runs():
  fn = lambda x, w: jnp.tanh(x @ w).sum()
  w = jnp.ones((3, 2), jnp.float32)
  for n, n_pad, devices in ((5, 5, 5), (12, 16, 8)):
    x = jax.ShapeDtypeStruct((n, 4, 3), jnp.float32)
    jitted, args = sharding.spread_plan(fn, x, w, in_axes=(0, None))
    assert args[0].shape == (n_pad, 4, 3) and args[1].shape == (3, 2)  # as spread pads
    assert len(args[0].sharding.device_set) == devices
    assert args[1].sharding.is_fully_replicated
    compiled = jitted.lower(*args).compile()
    xs = jnp.arange(n * 4 * 3, dtype=jnp.float32).reshape(n, 4, 3) / 50
    want = sharding.spread(fn, in_axes=(0, None))(xs, w)
    got = compiled(jax.device_put(sharding.pad_leading(xs, n_pad), args[0].sharding),
                   jax.device_put(w, args[1].sharding))
    np.testing.assert_allclose(got[:n], want, rtol=1e-6)


def test_population_on_the_mesh_resumes_bitwise(tmp_path):
  config = cfg("steps=4")
  config.train.checkpoint_every = 2
  data = lm_experiment.load_data(config)
  _, lm_model = lm_experiment.build_model(config, data.vocab_size)
  members = population.grid([0, 1], lr=[1e-3, 3e-3, 1e-2])  # 6 members, padded to 8
  make = lambda s, hp: lm.make_task(config, data, lm_model, seed=s, hparams=hp)
  task = population.population_task(make, members)
  state, final = loop.train(config, str(tmp_path / "full"), task)
  assert state["diverged"].shape == (8,)
  assert "fsdp" not in str(state["diverged"].sharding.spec)
  assert len(state["diverged"].sharding.device_set) == 8  # split over every device
  assert len(population.unstack(final, 6)) == 6 and "bpb/6" not in final
  half = config.copy_and_resolve_references()
  half.train.steps = 2
  loop.train(half, str(tmp_path / "cut"), population.population_task(make, members))
  resumed, final2 = loop.train(config, str(tmp_path / "cut"),
                               population.population_task(make, members))
  for k, v in _runs.flat(host(resumed)).items():
    np.testing.assert_array_equal(v, _runs.flat(host(state))[k], err_msg=k)


POP_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
import jax
from jaxpapers.core import config as config_lib, loop, population
from jaxpapers.nn import lm, lm_experiment
c = config_lib.load("configs/lm.py:" + {base!r})
data = lm_experiment.load_data(c)
_, m = lm_experiment.build_model(c, data.vocab_size)
members = population.grid([0, 1], lr=[1e-3, 1e-2, 3e-2])
task = population.population_task(
    lambda s, hp: lm.make_task(c, data, m, seed=s, hparams=hp), members)
_, final = loop.train(c, {wd!r}, task)
print("RESULT " + json.dumps([e["bpb"] for e in population.unstack(final, len(members))]))
"""


def test_population_gives_the_same_members_on_8_devices_and_on_1(tmp_path):
  out = {}
  for n in (1, 8):
    script = POP_SCRIPT.format(root=ROOT, base=BASE, wd=str(tmp_path / f"d{n}"))
    r = subprocess.run([sys.executable, "-c", script], env=_runs.env_with_devices(n),
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out[n] = json.loads(r.stdout.split("RESULT ")[1])
  assert len(out[1]) == 6
  np.testing.assert_allclose(out[8], out[1], rtol=1e-5)


def test_bf16_run_tracks_the_float32_run(tmp_path):
  rows = {}
  for dtype in ("float32", "bfloat16"):
    wd = tmp_path / dtype
    train(cfg(f"steps=12,compute_dtype={dtype},eval_every=12"), wd)
    lines = [json.loads(l) for l in (wd / "metrics.jsonl").read_text().splitlines()]
    rows[dtype] = [r["loss"] for r in lines if r.get("split", "train") == "train"]
  f32, b16 = np.asarray(rows["float32"]), np.asarray(rows["bfloat16"])
  assert len(f32) == len(b16) == 12
  # bf16 has an 8-bit mantissa (relative rounding 2^-8 = 0.4%); over 12 steps the loss
  # stays within 1% of the float32 run's, and it does differ (the cast is real).
  np.testing.assert_allclose(b16, f32, rtol=1e-2)
  assert np.max(np.abs(b16 - f32)) > 0


def test_bf16_step_runs_its_matmuls_in_bf16():
  config = cfg("compute_dtype=bfloat16")
  data = lm_experiment.load_data(config)
  _, lm_model = lm_experiment.build_model(config, data.vocab_size)
  task = lm.make_task(config, data, lm_model)
  state = task.init(jax.random.PRNGKey(0))
  batch = jax.tree.map(jnp.asarray, task.train_batch(0, slice(None)))
  text = str(jax.make_jaxpr(task.train_step)(state, batch, jax.random.PRNGKey(1), 0))
  dots = [l for l in text.splitlines() if "dot_general" in l]
  assert dots and all("bf16" in l for l in dots)  # each dot's output type: bf16
  # The master weights and the update stay float32.
  new, _ = jax.jit(task.train_step)(state, batch, jax.random.PRNGKey(1), 0)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(new["params"]))
  with pytest.raises(ValueError, match="compute_dtype='float16'"):
    lm.make_task(cfg("compute_dtype=float16"), data, lm_model)
