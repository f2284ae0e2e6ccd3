"""One pre-flight pass every launcher runs before a paper compiles or trains anything.

A bad value should cost a second and one line, not a traceback from inside optax after a
minute of compiling. The checks here are the ones no paper can want otherwise, keyed on
leaf names the configs share:

  counts    leaves named in POSITIVE (batch sizes, seed counts, widths, cadences, chunks
            of a loop: a chunk of 0 never advances it ...)
            and every leaf named `steps` must be >= 1 (a config lists the dotted fields
            that may be 0, such as an optional pre-training stage, in its tuple
            `may_be_zero`); any int leaf whose name says it counts (steps, batch, size,
            seeds, every, width, iters) must be >= 0
  numbers   no float anywhere may be NaN; learning rates (lr, learning_rate, *_lr, lrs)
            must be finite and > 0
  paths     a non-empty string leaf named path, dir, drawings, demos or *_path /
            *_dir / *_file / *_paths / *_dirs must exist (it names user data; empty:
            the offline default), and a file must start as its suffix says (.npz, .npy,
            HDF5, UTF-8 tables: `check_file`)
  workdir   must be a directory or creatable

A paper adds its own checks as `validate(config)` in its experiment module (raise
ValueError / FileNotFoundError naming the field); `preflight` calls it after these.
Every error names the dotted config field and its value.
"""
from __future__ import annotations

import codecs
import math
import os
import zipfile

POSITIVE = frozenset({
    "batch_size", "eval_batch_size", "batch", "seeds", "n_seeds", "num_seeds",
    "iterations", "epochs", "num_envs", "envs", "instances", "horizon", "width", "depth",
    "hidden", "hidden_dim", "dim", "n_layers", "n_heads", "seq_len", "total_steps",
    "log_every", "eval_every", "checkpoint_every", "ckpt_every", "keep_checkpoints",
    "updates", "episodes", "minibatches", "n_train", "policy_batch", "aux_batch",
    "n_points", "chunk", "lane_group", "row_chunk",
})
_COUNT_WORDS = ("steps", "batch", "size", "seeds", "every", "width", "iters")
_PATH_SUFFIXES = ("_path", "_dir", "_file", "_paths", "_dirs")
_PATH_NAMES = frozenset({"path", "dir", "data_dir", "drawings", "demos"})


def _leaves(tree, prefix=""):
  for key, value in tree.items():
    name = f"{prefix}{key}"
    if isinstance(value, dict):
      yield from _leaves(value, name + ".")
    else:
      yield name, key, value


def _is_lr(key: str) -> bool:
  return key in ("lr", "lrs", "learning_rate", "learning_rates") or key.endswith("_lr")


def check_config(config) -> None:
  """Raises ValueError / FileNotFoundError naming the first bad field."""
  may_be_zero = tuple(config.get("may_be_zero", ()))
  for name, key, value in _leaves(config.to_dict()):
    scalar = not isinstance(value, (tuple, list))
    values = (value,) if scalar else value
    for v in values:
      if isinstance(v, bool):
        continue
      if isinstance(v, int):
        # A tuple holds ids or a grid (seeds=(0, 1, 2)); only a scalar is a count.
        positive = (key in POSITIVE or key == "steps") and name not in may_be_zero
        if scalar and positive and v < 1:
          raise ValueError(f"config field {name}={value!r} must be >= 1")
        if any(w in key for w in _COUNT_WORDS) and v < 0:
          raise ValueError(f"config field {name}={value!r} must be >= 0")
      if isinstance(v, (int, float)) and not isinstance(v, bool):
        if isinstance(v, float) and math.isnan(v):
          raise ValueError(f"config field {name}={value!r} is NaN")
        if _is_lr(key) and not (math.isfinite(v) and v > 0):
          raise ValueError(f"config field {name}={value!r}: a learning rate must be "
                           "finite and > 0")
      if (isinstance(v, str) and v and not v.startswith("tfds:")
          and (key in _PATH_NAMES or key.endswith(_PATH_SUFFIXES))):
        if not os.path.exists(v):
          raise FileNotFoundError(f"config field {name}={v!r}: no such file or directory "
                                  "(give the path to the data, or leave it empty for the "
                                  "offline default)")
        if (key in ("dir", "data_dir") or key.endswith(("_dir", "_dirs"))) and os.path.isfile(v):
          raise NotADirectoryError(f"config field {name}={v!r} is a file; expected a "
                                   "directory")
        check_file(name, v)


# File formats recognised by their first bytes (HDF5 may sit behind a user block of
# 512 * 2^k bytes); a file that starts otherwise is refused before anything is read.
_HDF5 = b"\x89HDF\r\n\x1a\n"
# Tables and JSON must be UTF-8; plain .txt corpora are read with errors="replace".
_TEXT = (".csv", ".tsv", ".json", ".jsonl")


def _head(path: str, n: int, offset: int = 0) -> bytes:
  with open(path, "rb") as f:
    f.seek(offset)
    return f.read(n)


def check_file(name: str, path: str) -> None:
  """Raises ValueError naming the field when a data file's first bytes are not its format.

  Keyed on the suffix (.npz, .npy, .h5/.hdf5/.hf5, .csv/.tsv/.json/.jsonl); other files
  and directories are left to their loader.
  """
  if not os.path.isfile(path):
    return
  ext = os.path.splitext(path)[1].lower()
  why = None
  if ext == ".npz" and not zipfile.is_zipfile(path):
    why = "not a NumPy .npz archive (no zip structure)"
  elif ext == ".npy" and _head(path, 6) != b"\x93NUMPY":
    why = "not a NumPy .npy file (no NUMPY header)"
  elif ext in (".h5", ".hdf5", ".hf5") and not any(
      _head(path, 8, off) == _HDF5 for off in (0, 512, 1024, 2048, 4096)):
    why = "not an HDF5 file (no HDF5 signature)"
  elif ext in _TEXT:
    try:  # an incremental decoder: a character cut at the end of the sample is no error
      codecs.getincrementaldecoder("utf-8")().decode(_head(path, 1 << 16), final=False)
    except UnicodeDecodeError as e:
      why = f"not UTF-8 text (byte {e.start}: {e.reason})"
  if why:
    raise ValueError(f"config field {name}={path!r}: {why}")


def check_workdir(workdir: str) -> None:
  if not workdir:
    raise ValueError("--workdir is empty")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise NotADirectoryError(f"--workdir={workdir} is a file, not a directory")
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise NotADirectoryError(f"--workdir={workdir} cannot be created: "
                             f"{e.strerror or e}") from None


def preflight(config, workdir: str, module=None) -> None:
  """The shared checks, then the paper's own `validate(config)` if its module has one."""
  check_config(config)
  check_workdir(workdir)
  own = getattr(module, "validate", None) if module is not None else None
  if callable(own):
    own(config)
