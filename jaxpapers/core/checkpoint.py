"""Orbax checkpoints in `workdir/checkpoints`: keep the last N, resume without being asked.

Orbax writes each step into a temporary directory and renames it when complete, so a run
killed at any instant leaves only whole checkpoints. Together with data that is a pure
function of (seed, step) and randomness from `fold_in(rng, step)`, restoring the latest
step and continuing reproduces an uninterrupted run bit for bit.
"""
from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp


def _abstract(tree):
  def one(x):
    if isinstance(x, jax.Array):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return x
  return jax.tree.map(one, tree)


class Checkpointer:
  """Thin wrapper over `ocp.CheckpointManager` for one pytree state."""

  def __init__(self, workdir: str, keep: int = 3):
    directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.manager = ocp.CheckpointManager(
        directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True, cleanup_tmp_directories=True))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def restore_or(self, state):
    """Returns (state, step): the latest checkpoint laid out like `state`, or (state, 0)."""
    step = self.manager.latest_step()
    if step is None:
      return state, 0
    restored = self.manager.restore(step, args=ocp.args.StandardRestore(_abstract(state)))
    return restored, int(step)

  def save(self, step: int, state, force: bool = False) -> None:
    self.manager.save(int(step), args=ocp.args.StandardSave(state), force=force)

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()
