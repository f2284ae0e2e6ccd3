"""Typed `key=value` arguments for `get_config(arg)` and config validation.

A config file is `configs/<name>.py` with `get_config(arg=None)`. The launcher passes the
text after the colon (`configs/stompp.py:depth=8,order=reverse`) as `arg`. `parse_arg`
turns it into a ConfigDict typed by the defaults the config declares, so a typo or an
unknown key fails loudly instead of silently training the default.
"""
from __future__ import annotations

import ml_collections

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _cast(key: str, text: str, default):
  if isinstance(default, bool):  # before int: bool is an int subclass
    low = text.lower()
    if low in _TRUE:
      return True
    if low in _FALSE:
      return False
    raise ValueError(f"config arg {key!r}: expected true/false, got {text!r}")
  if isinstance(default, int):
    try:
      return int(text)
    except ValueError:
      raise ValueError(f"config arg {key!r}: expected an int, got {text!r}") from None
  if isinstance(default, float):
    try:
      return float(text)
    except ValueError:
      raise ValueError(f"config arg {key!r}: expected a float, got {text!r}") from None
  if isinstance(default, (tuple, list)):
    # Tuples are written with '+' because ',' separates arguments: depths=2+4+8.
    item = default[0] if default else ""
    return tuple(_cast(key, t, item) for t in text.split("+") if t)
  return text


def parse_arg(arg: str | None, smoke_args: dict | None = None,
              paper_args: dict | None = None, **defaults) -> ml_collections.ConfigDict:
  """Parses 'k1=v1,k2=v2' into a ConfigDict typed by `defaults`.

  Every key must appear in `defaults`; the error names the unknown key and lists the
  known ones. A bare key `smoke` means `smoke=true` for boolean defaults.

  `smoke_args` are the values a `smoke` run uses for other args (e.g. fewer steps). They
  are applied first and explicit arguments after, whatever their order in `arg`, so
  `:smoke,batch_size=4` runs the smoke setting with batch size 4.

  `paper_args` are, in the same way, the values of a `paper` run: the sizes the paper
  itself reports, for `launch/plan.py` and accelerators (`:paper,steps=100` keeps the
  paper's shapes with fewer steps). `smoke` and `paper` together are refused.
  """
  explicit = {}
  for item in (arg or "").split(","):
    item = item.strip()
    if not item:
      continue
    key, sep, text = item.partition("=")
    key = key.strip()
    if key not in defaults:
      raise ValueError(
          f"unknown config arg {key!r}; known args: {', '.join(sorted(defaults))}")
    if not sep:
      if not isinstance(defaults[key], bool):
        raise ValueError(f"config arg {key!r} needs a value ({key}=...)")
      text = "true"
    explicit[key] = _cast(key, text.strip(), defaults[key])
  out = dict(defaults)
  chosen = [name for name, preset in (("smoke", smoke_args), ("paper", paper_args))
            if explicit.get(name, defaults.get(name, False)) and preset]
  if len(chosen) > 1:
    raise ValueError("config args 'smoke' and 'paper' exclude each other: smoke is the "
                     "seconds-long check, paper the paper's own sizes")
  for name in chosen:
    for key, value in (smoke_args if name == "smoke" else paper_args).items():
      if key not in defaults:
        raise ValueError(f"{name}_args names {key!r}, which is not a config arg")
      out[key] = value
  out.update(explicit)
  return ml_collections.ConfigDict(out)


def lock(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Locks the structure so that a later `config.unknwon = 1` raises, naming the key."""
  config.lock()
  return config


def override(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """Returns a copy with dotted-key overrides applied ('optim.lr': 0.1).

  Used by studies to derive variants; an unknown dotted key raises naming the key.
  """
  new = ml_collections.ConfigDict(config.to_dict())
  for dotted, value in overrides.items():
    node = new
    *parents, leaf = dotted.split(".")
    for p in parents:
      if p not in node:
        raise KeyError(f"unknown config key {dotted!r} (no {p!r})")
      node = node[p]
    if leaf not in node:
      raise KeyError(f"unknown config key {dotted!r}")
    node[leaf] = value
  return new


def load(spec: str) -> ml_collections.ConfigDict:
  """Loads `configs/<name>.py[:args]` from Python (notebooks, studies, tests).

  The path is tried as given (relative to the working directory) and then relative to the
  repository root that holds this package, so a notebook anywhere in a clone can call
  `config_lib.load("configs/stompp.py:smoke")` without path hacks.
  """
  import importlib.util
  import os

  path, _, arg = spec.partition(":")
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  for candidate in (path, os.path.join(root, path)):
    if os.path.isfile(candidate):
      break
  else:
    raise FileNotFoundError(f"config file {path} not found (nor under {root})")
  name = "jaxpapers_config_" + os.path.basename(candidate)[:-3]
  module_spec = importlib.util.spec_from_file_location(name, candidate)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg or None)


def mesh_axes(items) -> list:
  """[('data', -1), ('fsdp', 4)] from the arg form ('data:-1', 'fsdp:4').

  Written `mesh=data:-1+fsdp:4` on the command line; a bad item names itself.
  """
  out = []
  for item in items:
    name, sep, size = str(item).partition(":")
    try:
      out.append((name.strip(), int(size) if sep else -1))
    except ValueError:
      raise ValueError(f"config arg 'mesh': item {item!r} is not name:size "
                       "(e.g. mesh=data:-1+fsdp:4)") from None
    if not out[-1][0]:
      raise ValueError(f"config arg 'mesh': item {item!r} has no axis name")
  return out
