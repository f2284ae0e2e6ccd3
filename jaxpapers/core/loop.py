"""The generic supervised loop: init -> jitted step -> periodic eval -> checkpoints.

A paper supplies a `Task` of pure functions; the loop owns everything else: the mesh,
sharded batches built per process from (seed, step), one jit of the step with the state
donated, `fold_in(rng, step)` randomness, metrics read one step late (so the host never
stalls the device), the NaN/inf guard naming the step, orbax checkpoints and automatic
resume from the workdir. Non-supervised papers write their own `train_and_evaluate` and
reuse the pieces (config, metrics, checkpoint, mesh) directly.

Where the state lives: `core/sharding.py` places every leaf from the mesh's axis names
(replicated on a ('data',) mesh; FSDP with an 'fsdp' axis; the Task's tensor-parallel
rules with a 'model' axis). The state is built directly in those shardings from
`jax.eval_shape(init)`, so no host ever holds the whole model, and a checkpoint restores
onto whatever mesh the resumed run has.

Config fields read: seed, mesh, fsdp_min_size (optional), train.{steps, batch_size,
log_every, eval_every, checkpoint_every, keep_checkpoints}, eval.batch_size.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import mesh as mesh_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import sharding as sharding_lib


@dataclasses.dataclass(frozen=True)
class Task:
  """What a paper provides to the supervised loop (all pure, all jittable).

  init(rng) -> state pytree.
  train_step(state, batch, rng, step) -> (state, metrics); metrics must include the
    scalars 'loss' and 'grad_norm' so the NaN guard sees both the loss and the gradients.
  eval_step(state, batch) -> dict of sums over the rows where batch['mask'] is 1, with
    'count' = number of real rows; the loop divides every other entry by the total count.
  train_batch(step, rows) -> numpy batch: the process-local `rows` of the global batch at
    `step`, a pure function of (seed, step).
  eval_batches(rows) -> iterable of numpy batches (with 'mask') over the evaluation set.
  sharding_rules: tensor-parallel `(regex, spec)` rules (see core/sharding.py), used when
    the mesh has a 'model' axis.
  state_specs(mesh, abstract_state) -> PartitionSpec tree: replaces the rule/FSDP
    placement entirely (a population splits its member axis instead).
  """
  init: Callable[[jax.Array], Any]
  train_step: Callable[..., tuple]
  eval_step: Callable[[Any, dict], dict]
  train_batch: Callable[[int, slice], dict]
  eval_batches: Callable[[slice], Iterable[dict]]
  sharding_rules: tuple = ()
  state_specs: Callable | None = None


def state_shardings(config, mesh, task: Task, abstract_state):
  """NamedShardings for every leaf of the state (see core/sharding.py)."""
  if task.state_specs is not None:
    specs = task.state_specs(mesh, abstract_state)
  else:
    specs = sharding_lib.tree_specs(
        abstract_state, mesh, task.sharding_rules,
        int(config.get("fsdp_min_size", sharding_lib.FSDP_MIN_SIZE)))
  return sharding_lib.named(mesh, specs)


def evaluate(task: Task, state, mesh, eval_fn, batch_size: int) -> dict:
  rows = mesh_lib.local_batch_slice(batch_size)
  totals = None
  for batch in task.eval_batches(rows):
    sums = eval_fn(state, mesh_lib.shard_batch(mesh, batch))
    totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
  totals = jax.device_get(totals)
  count = float(totals.pop("count"))
  return {k: float(v) / count for k, v in totals.items()}


def validate(config, mesh) -> None:
  """Checks the loop's config fields before anything is initialized or compiled."""
  t = config.train
  for name in ("steps", "batch_size", "log_every", "eval_every", "checkpoint_every",
               "keep_checkpoints"):
    if int(t[name]) < 1:
      raise ValueError(f"train.{name} must be >= 1, got {t[name]}")
  shards = mesh_lib.batch_shards(mesh)
  axes = " x ".join(f"'{a}'" for a in mesh_lib.batch_axes(mesh))
  for name, bs in (("train.batch_size", t.batch_size),
                   ("eval.batch_size", config.eval.batch_size)):
    if int(bs) < 1:
      raise ValueError(f"{name} must be >= 1, got {bs}")
    if bs % jax.process_count() or bs % shards:
      raise ValueError(
          f"{name}={bs} must be divisible by {jax.process_count()} processes and by the "
          f"{shards} {axes} shards of the mesh")


def train(config, workdir: str, task: Task):
  """Runs (or resumes) training; returns (final state, final eval metrics)."""
  mesh = mesh_lib.make_mesh(config.mesh)
  validate(config, mesh)
  metrics_lib.write_config(workdir, config)
  rng = jax.random.PRNGKey(config.seed)
  init_rng, step_rng = jax.random.split(rng)
  state_sh = state_shardings(config, mesh, task, jax.eval_shape(task.init, init_rng))
  # Each device materializes only its own shards of the initial state.
  state = jax.jit(task.init, out_shardings=state_sh)(init_rng)
  ckpt = checkpoint_lib.Checkpointer(workdir, keep=config.train.keep_checkpoints)
  try:
    return _train(config, workdir, task, mesh, state, state_sh, ckpt, step_rng)
  finally:
    # Also on errors, so that orbax's shutdown noise never buries the cause.
    ckpt.close()


def jit_step(task: Task, mesh, state_sh, step_rng):
  """The training step jitted with the state's shardings and its buffers donated."""
  repl = mesh_lib.replicated(mesh)

  def step_fn(state, batch, step):
    return task.train_step(state, batch, jax.random.fold_in(step_rng, step), step)

  return jax.jit(step_fn, donate_argnums=0,
                 in_shardings=(state_sh, mesh_lib.batch_sharding(mesh), repl),
                 out_shardings=(state_sh, repl))


def plan_step(config, task: Task):
  """(jitted step, abstract arguments) for `launch/plan.py`: nothing is allocated.

  The batch's shape and dtype come from one call of `task.train_batch` (host data, small);
  the state is `jax.eval_shape(init)` carrying the shardings `train` would give it.
  """
  mesh = mesh_lib.make_mesh(config.mesh)
  validate(config, mesh)
  init_rng, step_rng = jax.random.split(jax.random.PRNGKey(config.seed))
  abstract = jax.eval_shape(task.init, init_rng)
  state_sh = state_shardings(config, mesh, task, abstract)
  state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                       abstract, state_sh)
  data_sh = mesh_lib.batch_sharding(mesh)
  batch = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=data_sh),
      task.train_batch(0, slice(None)))
  step = jax.ShapeDtypeStruct((), jnp.int32, sharding=mesh_lib.replicated(mesh))
  return jit_step(task, mesh, state_sh, step_rng), (state, batch, step)


def _train(config, workdir, task, mesh, state, state_sh, ckpt, step_rng):
  repl = mesh_lib.replicated(mesh)
  data_sharding = mesh_lib.batch_sharding(mesh)
  state, start = ckpt.restore_or(state)
  total = config.train.steps
  if start > total:
    raise ValueError(
        f"train.steps={total} is below the step {start} already checkpointed in "
        f"{workdir}; raise steps or use a new --workdir")
  # Rows a killed run wrote past its checkpoint would otherwise appear twice.
  metrics_lib.truncate_after(workdir, start,
                             drop_at_step=("test",) if start == total else ())

  step_fn = jit_step(task, mesh, state_sh, step_rng)
  eval_fn = jax.jit(task.eval_step, in_shardings=(state_sh, data_sharding),
                    out_shardings=repl)

  writer = metrics_lib.MetricsWriter(workdir, total_steps=total)
  rows = mesh_lib.local_batch_slice(config.train.batch_size)
  eval_bs = config.eval.batch_size

  def report(step, m):
    m = jax.device_get(m)
    metrics_lib.check_finite(step, m)
    if step % config.train.log_every == 0 or step == total:
      writer.write(step, m)

  pending = None
  final_eval = None
  if start:
    print(f"resumed from step {start} in {workdir}", flush=True)
  for step in range(start + 1, total + 1):
    batch = mesh_lib.shard_batch(mesh, task.train_batch(step - 1, rows))
    state, m = step_fn(state, batch, jnp.asarray(step - 1, jnp.int32))
    if pending is not None:  # read the previous step's metrics after dispatching this one
      report(*pending)
    pending = (step, m)
    if step % config.train.eval_every == 0 or step == total:
      report(*pending)
      pending = None
      final_eval = evaluate(task, state, mesh, eval_fn, eval_bs)
      writer.write(step, final_eval, split="test")
    if step % config.train.checkpoint_every == 0 or step == total:
      if pending is not None:  # never checkpoint a state the NaN guard has not seen
        report(*pending)
        pending = None
      ckpt.save(step, state)
  if pending is not None:
    report(*pending)
  if final_eval is None:  # resumed at the end: evaluate the restored state
    final_eval = evaluate(task, state, mesh, eval_fn, eval_bs)
    writer.write(total, final_eval, split="test")
  return state, final_eval
