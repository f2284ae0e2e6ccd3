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
# No persistent XLA compilation cache: one worker crash stack ended inside its executable
# writer (see _free_compiled_programs for the cause), and no test needs it.
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
