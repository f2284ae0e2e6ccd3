"""Metrics as JSON lines in the workdir, progress on stdout, and the NaN guard.

Only process 0 writes files, so a multi-host run produces one `metrics.jsonl`. The
writer takes host values (floats, ints, numpy scalars); the training loop fetches a
step's metrics only after the next step has been dispatched, so the device never waits
for the host.
"""
from __future__ import annotations

import json
import os
import time

import jax
import numpy as np

from jaxpapers.core import workdir as workdir_lib


def is_writer() -> bool:
  return jax.process_index() == 0


def _to_builtin(v):
  if isinstance(v, (np.ndarray, jax.Array)):
    v = np.asarray(v)
    return v.item() if v.size == 1 else v.tolist()
  if isinstance(v, (np.floating, np.integer)):
    return v.item()
  return v


def write_config(workdir: str, config) -> None:
  """Writes `config.json` (the resolved config) into the workdir, on process 0.

  When the workdir already holds a config (a resume), it must describe the same
  computation: `workdir.check_resume` refuses otherwise, naming the differing fields.
  """
  if not is_writer():
    return
  os.makedirs(workdir, exist_ok=True)
  d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  workdir_lib.check_resume(workdir, d)
  # A per-process temporary name: studies may run several launchers on one workdir
  # (e.g. one per rank), and a shared name lets one replace the other's file away.
  tmp = os.path.join(workdir, f"config.json.tmp.{os.getpid()}")
  with open(tmp, "w") as f:
    json.dump(d, f, indent=2, sort_keys=True, default=str)
  os.replace(tmp, os.path.join(workdir, "config.json"))


def check_finite(step: int, metrics: dict) -> None:
  """Raises FloatingPointError naming the step and the offending metrics."""
  bad = []
  for k, v in metrics.items():
    arr = np.asarray(v)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
      bad.append(k)
  if bad:
    raise FloatingPointError(
        f"non-finite {', '.join(sorted(bad))} at step {step}: "
        + ", ".join(f"{k}={_to_builtin(metrics[k])}" for k in sorted(bad)))


def _short(v) -> str:
  """A value for a progress line: 4 significant digits; a long vector as min/mean/max."""
  if isinstance(v, float):
    return f"{v:.4g}"
  if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
    if len(v) <= 4:
      return "[" + ",".join(f"{x:.3g}" for x in v) + "]"
    arr = np.asarray(v, dtype=np.float64)
    return f"[{arr.min():.3g}..{arr.mean():.3g}..{arr.max():.3g}](n={len(v)})"
  return str(v)


def _read_rows(path: str):
  """(line, row or None) for each line; None marks a line cut by a kill."""
  with open(path) as f:
    for line in f:
      try:
        yield line, json.loads(line)
      except json.JSONDecodeError:
        yield line, None


def _rewrite(path: str, keep) -> int:
  """Atomically keeps the lines whose row satisfies `keep`; returns the number dropped."""
  kept, dropped = [], 0
  for line, row in _read_rows(path):
    if row is not None and keep(row):
      kept.append(line if line.endswith("\n") else line + "\n")
    else:
      dropped += 1
  if dropped:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
      f.writelines(kept)
    os.replace(tmp, path)
  return dropped


# Keys the writer adds to train rows from the wall clock: not part of a row's identity.
PROGRESS_KEYS = ("steps_per_s", "eta_s")


def _row_key(row: dict) -> tuple:
  """(split, step, metric names): rows of one computation (e.g. one of several models
  trained in turn and logged at the same steps) never replace another's."""
  names = tuple(sorted(k for k in row if k not in ("step", "split") + PROGRESS_KEYS))
  return row.get("split"), row.get("step"), names


# The row keys a metrics file held when this process first opened it. A resumed or rerun
# job recomputes some of those rows; each recomputed row replaces the stale ones, so the
# file holds every row once however often the job was killed and resumed, while rows one
# process writes under the same key (e.g. one per market cell) all stay.
_STALE: dict[str, set] = {}


def _stale_keys(path: str) -> set:
  if path not in _STALE:
    rows = [row for _, row in _read_rows(path)] if os.path.exists(path) else []
    if None in rows:  # a line cut by a kill: drop it before anything is appended to it
      _rewrite(path, lambda r: True)
    _STALE[path] = {_row_key(r) for r in rows if r is not None}
  return _STALE[path]


def truncate_after(workdir: str, step: int, drop_at_step: tuple = (), *,
                   splits: tuple | None = None, tag: str | None = None) -> int:
  """Drops the rows a resumed run will write again: those past `step`, and the rows of
  `drop_at_step` splits at `step`. Atomic; returns the number of rows dropped.

  The one call every resuming loop makes, right after restoring its checkpoint, with
  `step` in the unit its rows are written in (e.g. environment steps, not iterations);
  the rows a killed run wrote past its checkpoint would otherwise appear twice, and rows
  before it must stay. Only rows of `splits` (all when None), and with `tag` only rows
  holding a metric with `tag` as whole '/'-separated parts of its name (`tag/loss`,
  `cell/tag/loss`; a tag may hold '/' itself), are touched: a loop that shares the file
  with other loops (other stages, other models logged at the same steps) drops only its
  own rows.
  """
  path = os.path.join(workdir, "metrics.jsonl")
  if not is_writer() or not os.path.exists(path):
    return 0

  def mine(row):
    return ((splits is None or row.get("split") in splits) and
            (tag is None or any(f"/{tag}/" in f"/{k}/" for k in row
                                if k not in ("step", "split"))))

  def keep(row):
    s = row.get("step", 0)
    return not (mine(row) and (s > step or (s == step and row.get("split") in drop_at_step)))

  dropped = _rewrite(path, keep)
  stale = _stale_keys(path)
  stale.intersection_update({_row_key(row) for _, row in _read_rows(path) if row is not None})
  return dropped


class MetricsWriter:
  """Appends `{"step": s, "split": ..., **metrics}` lines to `workdir/metrics.jsonl`."""

  def __init__(self, workdir: str | None, total_steps: int | None = None,
               verbose: bool = True):
    self.path = os.path.join(workdir, "metrics.jsonl") if workdir else None
    if self.path and is_writer():
      os.makedirs(workdir, exist_ok=True)
      _stale_keys(self.path)
    self.total_steps = total_steps
    self.verbose = verbose and is_writer()
    self._t0 = None
    self._s0 = None

  def write(self, step: int, metrics: dict, split: str = "train") -> None:
    row = {"step": int(step), "split": split}
    row.update({k: _to_builtin(v) for k, v in metrics.items()})
    if split == "train":
      row.update(self._progress(step))
    if self.path and is_writer():
      stale = _stale_keys(self.path)
      key = _row_key(row)
      if key in stale:  # recomputed after a resume or rerun: replaces the old row(s)
        _rewrite(self.path, lambda r: _row_key(r) != key)
        stale.discard(key)
      with open(self.path, "a") as f:
        f.write(json.dumps(row) + "\n")
    if self.verbose:
      shown = " ".join(f"{k}={_short(v)}" for k, v in row.items()
                       if k not in ("step", "split"))
      print(f"[{split} {step}] {shown}", flush=True)

  def truncate_after(self, step: int, drop_at_step: tuple = (), **kw) -> int:
    """`truncate_after` on this writer's file, for loops handed a writer, not a workdir."""
    if not self.path:
      return 0
    return truncate_after(os.path.dirname(self.path), step, drop_at_step, **kw)

  def _progress(self, step: int) -> dict:
    now = time.perf_counter()
    if self._t0 is None:
      self._t0, self._s0 = now, step
      return {}
    rate = (step - self._s0) / max(now - self._t0, 1e-9)
    out = {"steps_per_s": rate}
    if self.total_steps is not None and rate > 0:
      out["eta_s"] = max(self.total_steps - step, 0) / rate
    return out


def read_metrics(workdir: str, split: str | None = None) -> list[dict]:
  """Reads back `metrics.jsonl` (for tests, studies and notebooks)."""
  path = os.path.join(workdir, "metrics.jsonl")
  rows = []
  with open(path) as f:
    for line in f:
      row = json.loads(line)
      if split is None or row.get("split") == split:
        rows.append(row)
  return rows

