"""Resolving a config to its paper module: the launcher's only indirection.

A config names its experiment by module path (`config.experiment =
"jaxpapers.papers.stompp.experiment"`); no central registry has to be edited when a
paper is added. The module provides `train_and_evaluate(config, workdir)` and, where
the paper has them, `run_study(config, workdir)` and `benchmark(config, workdir)`.
"""
from __future__ import annotations

import importlib


def load(config, entry: str):
  """Returns `entry` from the module named by `config.experiment`, or a clear error."""
  if "experiment" not in config:
    raise ValueError("config has no 'experiment' field naming the paper module")
  module = importlib.import_module(config.experiment)
  fn = getattr(module, entry, None)
  if fn is None:
    raise AttributeError(f"{config.experiment} defines no {entry}(config, workdir)")
  return fn
