"""Orbax checkpoints in `workdir/checkpoints`: keep the last N, resume without being asked.

Orbax writes each step into a temporary directory and renames it when complete, so a run
killed at any instant leaves only whole checkpoints. Together with data that is a pure
function of (seed, step) and randomness from `fold_in(rng, step)`, restoring the latest
step and continuing reproduces an uninterrupted run bit for bit.
"""
from __future__ import annotations

import logging
import os
import time
import weakref

import jax
import orbax.checkpoint as ocp


def _abstract(tree):
  def one(x):
    if isinstance(x, jax.Array):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return x
  return jax.tree.map(one, tree)


class CheckpointError(RuntimeError):
  """No checkpoint in the workdir can be restored."""


def _one_line(e: BaseException) -> str:
  text = f"{type(e).__name__}: {e}".strip().splitlines()
  first = text[0] if text else type(e).__name__
  return first[:300]


# Every Checkpointer not yet closed: a launcher that stops on an error closes them first
# (`close_all`), so an in-flight async write finishes (or fails) before the one-line
# error is printed, instead of orbax reporting it with a traceback at interpreter exit.
_OPEN: "weakref.WeakSet[Checkpointer]" = weakref.WeakSet()


def close_all() -> None:
  """Waits for and closes every open Checkpointer, quietly: the caller reports the cause."""
  quiet = [logging.getLogger(n) for n in ("absl", "orbax", "")]
  levels = [lg.level for lg in quiet]
  for lg in quiet:
    lg.setLevel(logging.CRITICAL)
  try:
    for ckpt in list(_OPEN):
      try:
        ckpt.close()
      except Exception:  # pylint: disable=broad-except
        pass  # a write that fails now is lost; the error being reported is the cause
  finally:
    for lg, level in zip(quiet, levels):
      lg.setLevel(level)


class Checkpointer:
  """Thin wrapper over `ocp.CheckpointManager` for one pytree state."""

  def __init__(self, workdir: str, keep: int = 3):
    directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.directory = directory
    self.manager = ocp.CheckpointManager(
        directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True, cleanup_tmp_directories=True))
    # Orbax removes a killed run's temporary directories in a background thread that
    # only its next `save` waits for (not `close`): a run that stops before saving (a
    # project error right after restoring) would exit under that thread, and orbax
    # logs ~40 lines of "cannot schedule new futures after interpreter shutdown" after
    # the one-line error (issue 36). Waiting here costs one directory listing.
    await_cleanup = getattr(self.manager, "_maybe_await_cleanup_tmp_directory", None)
    if await_cleanup is not None:
      await_cleanup()
    self._closed = False
    _OPEN.add(self)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def restore_or(self, state):
    """Returns (state, step): the newest checkpoint that restores, or (state, 0).

    A checkpoint whose arrays have other shapes than the state (another layout) is
    refused with one line and left in place. One that fails to restore (a truncated
    file, damaged metadata) is moved to `checkpoints_unreadable/` with one line saying why, and
    the next older one is tried; if none restores, the run refuses with one line rather
    than silently starting over.
    """
    steps = sorted(self.manager.all_steps(), reverse=True)
    abstract = _abstract(state)
    reasons = []
    for step in steps:
      mismatch = self._shape_mismatch(step, abstract)
      if mismatch:  # a whole checkpoint of another layout: refuse, never quarantine it
        raise CheckpointError(
            f"checkpoint {step} in {self.directory} holds arrays of other shapes than "
            f"this run builds ({mismatch}); a population resumes on the device count it "
            "was padded for, any other change needs a new --workdir")
      try:
        restored = self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
      except Exception as e:  # orbax raises many types; each means "unreadable"
        reason = _one_line(e)
        reasons.append(f"step {step}: {reason}")
        print(f"skipping checkpoint {step}: {reason}", flush=True)
        self._quarantine(step)
        continue
      return restored, int(step)
    if reasons:
      raise CheckpointError(
          f"no checkpoint in {self.directory} restores ({'; '.join(reasons)}); "
          "move the directory away to start over")
    return state, 0

  def _shape_mismatch(self, step: int, abstract) -> str | None:
    """'saved ... vs built ...' when the checkpoint's array shapes differ from the state's.

    Compares the multisets of leaf shapes (the metadata's tree may order or name
    containers differently from the live state). Unreadable metadata returns None and is
    left to the restore to diagnose.
    """
    try:
      saved = [tuple(x.shape) for x in jax.tree.leaves(self.manager.item_metadata(step).tree)
               if hasattr(x, "shape")]
    except Exception:  # damaged metadata: the restore below quarantines it
      return None
    built = [tuple(x.shape) for x in jax.tree.leaves(abstract) if hasattr(x, "shape")]
    if not saved or sorted(saved) == sorted(built):
      return None
    diff_saved = sorted(set(saved) - set(built))[:3]
    diff_built = sorted(set(built) - set(saved))[:3]
    return f"saved {diff_saved or 'other counts'} vs built {diff_built or 'other counts'}"

  def _quarantine(self, step: int) -> None:
    """Moves an unreadable checkpoint aside so the resumed run can save that step anew."""
    if jax.process_index() != 0:
      return
    src = os.path.join(self.directory, str(step))
    dst_dir = self.directory + "_unreadable"
    os.makedirs(dst_dir, exist_ok=True)
    dst = os.path.join(dst_dir, f"{step}.{int(time.time())}")
    if os.path.exists(src):
      os.replace(src, dst)
    self.manager.reload()

  def save(self, step: int, state, force: bool = False) -> None:
    self.manager.save(int(step), args=ocp.args.StandardSave(state), force=force)

  def close(self) -> None:
    if self._closed:
      return
    self._closed = True
    _OPEN.discard(self)
    try:
      self.manager.wait_until_finished()
    finally:
      self.manager.close()
