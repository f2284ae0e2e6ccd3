"""Test setup: 8 forced CPU devices (so sharding code really runs) and strict ranks."""
import os
import sys

# Must be set before JAX initializes its backend. The suite compiles hundreds of small
# programs and runs each for seconds, so XLA's CPU backend compiles without LLVM's
# optimisation passes: the suite takes about 40% less time (measured on the lgs smoke
# config, the StoMPP bf16 test and the bfmnet grid test: 114 s -> 67 s). Every test
# compares runs made under the same flags, and the quick-start rerun drops them (it is
# checked against a record made with none). JAXPAPERS_TEST_XLA_OPT=1 restores the default.
FAST_COMPILE = ("" if os.environ.get("JAXPAPERS_TEST_XLA_OPT") == "1" else
                " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8"
                           + FAST_COMPILE).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# No persistent XLA compilation cache: on this jaxlib (0.10.2, CPU) three suite runs in a
# row lost an xdist worker to a segfault, each in another test; the one stack we caught
# was inside compilation_cache.put_executable_and_time (writing an executable to the cache).
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
# Notebooks executed by the tests read this to pick their tiny setting.
os.environ["JAXPAPERS_SMOKE"] = "1"

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)


def pytest_configure(config):
  # The CI log lists the slowest tests, so the suite's budget (well under 20 minutes on
  # 2 cores) can be kept without a separate timing run.
  if config.option.durations is None:
    config.option.durations = 25
