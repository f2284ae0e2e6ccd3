"""Trains one paper: python launch/train.py --config=configs/<name>.py[:args] --workdir=DIR."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from absl import app  # noqa: E402

import _common  # noqa: E402
from jaxpapers.core import experiment  # noqa: E402


def main(argv):
  del argv
  config, workdir = _common.start()
  experiment.load(config, "train_and_evaluate")(config, workdir)


if __name__ == "__main__":
  app.run(main)
