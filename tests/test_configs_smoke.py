"""A few steps of every config's smoke variant, through the same entry as the launcher."""
import glob
import importlib.util
import json
import os

import pytest

from jaxpapers.core import experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def load_config(path, arg):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


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
