"""Test setup: 8 forced CPU devices (so sharding code really runs) and strict ranks."""
import os
import sys

# Must be set before JAX initializes its backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent XLA compilation cache for the whole suite: the xdist workers, notebook
# kernels and launcher subprocesses compile many of the same programs (a smoke config, its
# notebook, its resume test); only compilations over a second are stored.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.environ.get("TMPDIR", "/tmp"), "jaxpapers_test_xla_cache"))
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
