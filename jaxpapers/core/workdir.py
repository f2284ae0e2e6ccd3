"""A workdir belongs to one run: the resume config check and the one-launcher lock.

A run writes `config.json` when it starts. When the workdir already holds one, the run is
a resume, and it may only continue the same computation: a field that changes what is
computed (model, data, optimizer, seed, schedule) refuses the resume with one line naming
each differing field and its two values. Fields that only change what is logged or when
(`log_every`, `eval_every`, checkpoint cadence, the study and benchmark groups) or a raised
`train.steps` (or a leaf the config lists in `resume_may_grow`, e.g. a second stage's
`train.policy_steps`) are allowed, and each such change is recorded in `config_changes.jsonl`.
`--force_resume` on the launcher (env `JAXPAPERS_FORCE_RESUME=1`) accepts any change.

The lock is an exclusive `fcntl.flock` on `workdir/.lock` held by process 0 for the whole
run, so a second launcher on a live workdir is refused naming the holder's pid. The OS
drops the lock when the holder dies, so a killed run never leaves a stale lock.
"""
from __future__ import annotations

import fcntl
import json
import os
import time

# Leaf names whose value never changes the computation of a run.
_BOOKKEEPING_LEAVES = frozenset({
    "log_every", "eval_every", "checkpoint_every", "keep_checkpoints", "verbose",
    "print_every", "plot", "progress_every", "resume_may_grow",
    # Where arrays live, not what is computed: a run checkpointed on one mesh resumes on
    # another (orbax restores onto the new shardings; sums may reorder in the last bits).
    "mesh", "fsdp_min_size"})
# Top-level groups that configure studies and benchmarks, not the run.
_BOOKKEEPING_GROUPS = frozenset({"study", "bench"})
# Leaves that may grow on resume (training continues further).
_MAY_GROW = frozenset({"train.steps", "steps"})

FORCE_ENV = "JAXPAPERS_FORCE_RESUME"


class ResumeError(ValueError):
  """The workdir holds another run (different computation, or a live launcher)."""


def _flatten(d, prefix=""):
  out = {}
  for k, v in d.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict):
      out.update(_flatten(v, key + "."))
    else:
      out[key] = v
  return out


def _normalize(v):
  # config.json stores tuples as lists; compare them as JSON would.
  return json.loads(json.dumps(v, default=str))


def _is_bookkeeping(key: str) -> bool:
  parts = key.split(".")
  return parts[-1] in _BOOKKEEPING_LEAVES or parts[0] in _BOOKKEEPING_GROUPS


def compare(old: dict, new: dict) -> tuple[list[str], list[str]]:
  """(refused, allowed): 'field: old -> new' lines between two config dicts."""
  a, b = _flatten(old), _flatten({k: _normalize(v) for k, v in new.items()})
  # A config may name more leaves that only extend training (a later stage's steps).
  may_grow = _MAY_GROW | set(new.get("resume_may_grow", ()) or ())
  refused, allowed = [], []
  for key in sorted(set(a) | set(b)):
    va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
    if va == vb:
      continue
    line = f"{key}: {va!r} -> {vb!r}"
    grows = (key in may_grow and isinstance(va, (int, float)) and
             isinstance(vb, (int, float)) and vb >= va)
    (allowed if _is_bookkeeping(key) or grows else refused).append(line)
  return refused, allowed


def check_resume(workdir: str, config_dict: dict, force: bool | None = None) -> None:
  """Raises ResumeError if `workdir/config.json` describes another computation.

  Allowed changes are appended to `workdir/config_changes.jsonl` with a timestamp.
  """
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  with open(path) as f:
    old = json.load(f)
  refused, allowed = compare(old, config_dict)
  if force is None:
    force = os.environ.get(FORCE_ENV, "") not in ("", "0", "false")
  if refused and not force:
    raise ResumeError(
        f"{workdir} holds a run with another config; refusing to resume it with "
        f"{'; '.join(refused)} (use a new --workdir, or --force_resume to accept)")
  changes = allowed + (refused if force else [])
  if changes:
    with open(os.path.join(workdir, "config_changes.jsonl"), "a") as f:
      f.write(json.dumps({"time": time.time(), "changes": changes,
                          "forced": bool(refused and force)}) + "\n")


class WorkdirLock:
  """Exclusive lock on `workdir/.lock`; `acquire` refuses naming the holder's pid."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, ".lock")
    self._fd = None

  def acquire(self) -> "WorkdirLock":
    os.makedirs(os.path.dirname(self.path), exist_ok=True)
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
      os.close(fd)
      raise ResumeError(
          f"{os.path.dirname(self.path)} is in use by another run (pid {holder}); "
          "wait for it to finish or choose another --workdir") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    os.fsync(fd)
    self._fd = fd
    return self

  def release(self) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *exc):
    self.release()
