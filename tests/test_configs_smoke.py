"""A few steps of every config's smoke variant, through the same entry as the launcher."""
import glob
import json
import os

import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.core import experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def load_config(path, arg):
  """The launcher's and the notebooks' loader (config_lib.load), with `arg` after ':'."""
  return config_lib.load(f"{path}:{arg}")


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p)[:-3] for p in CONFIGS])
def test_smoke_config_trains(path, tmp_path):
  config = load_config(path, "smoke=true")
  experiment.load(config, "train_and_evaluate")(config, str(tmp_path))
  with open(tmp_path / "config.json") as f:
    assert json.load(f)["experiment"] == config.experiment
  assert (tmp_path / "metrics.jsonl").exists()


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p)[:-3] for p in CONFIGS])
def test_unknown_config_arg_is_named(path):
  with pytest.raises(ValueError, match="no_such_key"):
    load_config(path, "no_such_key=1")
