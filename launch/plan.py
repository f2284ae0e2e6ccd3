"""What a config's training step costs on N devices, without training or allocating.

  python launch/plan.py --config=configs/lm.py:dim=2048,pattern=AAAA --devices=8 --platform=h100

Compiles the paper's `plan(config)` step for a mesh of N forced host devices (the CPU
backend, whatever this machine has) from abstract arguments, and prints FLOPs per step,
bytes per device, whether that fits the platform's device memory, and the step and run
time at the platform's published dense peak times --mfu. See jaxpapers/core/planner.py.
With --workdir, the numbers are also written to plan.json there.
"""
import os
import sys


def _force_devices(argv):
  """Sets the host device count before JAX starts (it reads XLA_FLAGS once)."""
  n = "8"
  for a in argv[1:]:
    if a.startswith("--devices="):
      n = a.split("=", 1)[1]
  if not n.isdigit() or int(n) < 1:
    print(f"error: --devices={n} must be a positive integer", file=sys.stderr)
    sys.exit(1)
  flags_env = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split()
                       if not f.startswith("--xla_force_host_platform_device_count"))
  os.environ["XLA_FLAGS"] = f"{flags_env} --xla_force_host_platform_device_count={n}".strip()
  os.environ["JAX_PLATFORMS"] = "cpu"


_force_devices(sys.argv)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import json  # noqa: E402

from absl import flags  # noqa: E402

import _common  # noqa: E402

DEVICES = flags.DEFINE_integer("devices", 8, "Devices of the planned mesh.")
PLATFORM = flags.DEFINE_string("platform", "h100", "h100 | a100 | v5e | cpu")
MFU = flags.DEFINE_float("mfu", 0.4, "Assumed model-FLOPs utilization.")
flags.FLAGS.set_default("workdir", "")


def main(argv):
  del argv
  import jax  # pylint: disable=g-import-not-at-top
  from jaxpapers.core import experiment, planner  # pylint: disable=g-import-not-at-top
  try:
    config = _common.CONFIG.value
    if jax.device_count() != DEVICES.value:
      raise ValueError(f"JAX started with {jax.device_count()} devices, not "
                       f"--devices={DEVICES.value} (XLA_FLAGS was read before plan.py)")
    try:
      plan_fn = experiment.load(config, "plan")
    except AttributeError:
      raise ValueError(f"{config.experiment} has no plan(config); the planner needs the "
                       "paper to expose the step it wants planned") from None
    r = planner.estimate(plan_fn(config), devices=DEVICES.value, platform=PLATFORM.value,
                         mfu=MFU.value)
  except _common._expected_errors() as e:  # pylint: disable=protected-access
    if _common.VERBOSE.value:
      raise
    print(f"error: {type(e).__name__}: {_common._one_line(e)} (--verbose for the "  # pylint: disable=protected-access
          "traceback)", file=sys.stderr, flush=True)
    sys.exit(1)
  print(planner.format_report(r), flush=True)
  if _common.WORKDIR.value:
    os.makedirs(_common.WORKDIR.value, exist_ok=True)
    with open(os.path.join(_common.WORKDIR.value, "plan.json"), "w") as f:
      json.dump(r, f, indent=2, default=str)


if __name__ == "__main__":
  _common.run_app(main)
