"""Trains one paper: python launch/train.py --config=configs/<name>.py[:args] --workdir=DIR."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

if __name__ == "__main__":
  _common.run_app(_common.main_for("train_and_evaluate"))
