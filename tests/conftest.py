"""Test setup: 8 forced CPU devices (so sharding code really runs) and strict ranks."""
import gc
import os
import sys

import pytest

# Must be set before JAX initializes its backend. The suite compiles hundreds of small
# programs and runs each for seconds, so XLA's CPU backend compiles at LLVM -O1: the lgs
# smoke config, the bfmnet grid test and perturbed_eg's numerics tests took 154 s of CPU
# at the default, 102 s at -O1 (92 s at -O0, whose float rounding broke perturbed_eg's
# float32-vs-float64 reference tolerance). Every test compares runs made under the same
# flags; the quick-start rerun drops them (its record was made with none).
# JAXPAPERS_TEST_XLA_OPT=1 keeps the default.
FAST_COMPILE = ("" if os.environ.get("JAXPAPERS_TEST_XLA_OPT") == "1" else
                " --xla_backend_optimization_level=1")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8"
                           + FAST_COMPILE).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent XLA compilation cache per suite run, shared by the xdist workers and the
# notebooks' fresh kernels (they inherit the environment): the same smoke programs are
# compiled by test_configs_smoke, the paper's own tests and its notebook, and a cache hit
# loads the executable instead (a motor_adapters + lgs smoke-and-notebook subset: 165 s
# -> 137 s, cold cache). The directory is new for every run (never a user's cache: a
# hit cannot come from other code), and a size limit turns on JAX's file lock, so two
# workers never read an entry half written. The one crash once seen inside the
# executable writer was the memory-map limit (_free_compiled_programs_per_module).
# JAXPAPERS_TEST_XLA_CACHE=0 turns it off.
if os.environ.get("JAXPAPERS_TEST_XLA_CACHE") != "0":
  if not os.environ.get("JAXPAPERS_TEST_CACHE_DIR"):  # the first process: xdist's controller
    import atexit
    import shutil
    import tempfile
    os.environ["JAXPAPERS_TEST_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxpapers-xla-cache-")
    atexit.register(shutil.rmtree, os.environ["JAXPAPERS_TEST_CACHE_DIR"], True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["JAXPAPERS_TEST_CACHE_DIR"]
  os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(8 << 30)
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.3"
else:
  os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
# Notebooks executed by the tests read this to pick their tiny setting.
os.environ["JAXPAPERS_SMOKE"] = "1"

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)


def _memory_maps() -> int:
  try:
    with open(f"/proc/{os.getpid()}/maps") as f:
      return sum(1 for _ in f)
  except OSError:  # not Linux: no map limit to watch
    return 0


def _free():
  jax.clear_caches()
  gc.collect()


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs_per_module():
  """Drops every compiled program after each test module.

  XLA's CPU runtime maps each compiled program's code into the process; an xdist worker
  that keeps every program of ~400 tests passes Linux's 65530 memory-map limit
  (vm.max_map_count) and segfaults in the next compile (four suite runs lost a worker
  this way, each in another test; two test files alone left 13.8k maps, 1.8k after a
  clear). Freeing them per module keeps a worker to one module's programs.
  """
  yield
  _free()


@pytest.fixture(autouse=True)
def _free_compiled_programs_past_20k_maps():
  """One module can compile a lot too (test_configs_smoke reached 16k maps in 45
  tests): free the programs whenever a test leaves more than 20k maps."""
  yield
  if _memory_maps() > 20_000:
    _free()


def pytest_configure(config):
  # The CI log lists the slowest tests, so the suite's budget (well under 20 minutes on
  # 2 cores) can be kept without a separate timing run.
  if config.option.durations is None:
    config.option.durations = 25
