"""Times a config's step: python launch/benchmark.py --config=configs/<name>.py[:args] --workdir=DIR.

Each paper's `benchmark(config, workdir)` prints and returns its numbers (examples/s,
achieved GFLOP/s against the matmul peak measured in the same run, and reference
implementations where the issue asks for them); they are written to benchmark.json.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402


def write_result(result):
  workdir = _common.WORKDIR.value
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "benchmark.json"), "w") as f:
    json.dump(result, f, indent=2, default=str)
  print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
  _common.run_app(_common.main_for("benchmark", on_result=write_result))
