"""Device mesh, batch sharding and multi-process start.

One code path for 1 CPU, 8 forced CPU devices, a GPU, a TPU slice or several hosts: the
mesh is built from `config.mesh` (e.g. `[("data", -1)]`, -1 = all remaining devices),
batches are split along the `data` axis (data x fsdp when the mesh has an 'fsdp' axis)
with `NamedSharding`, and parameters are placed by `core/sharding.py` (replicated unless
the mesh has an 'fsdp' or 'model' axis). In a multi-process run each process
builds only its own slice of the global batch; `jax.make_array_from_process_local_data`
assembles the global array without any host ever holding all of it.
"""
from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def initialize_distributed(coordinator: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> None:
  """Calls `jax.distributed.initialize` only when the run is launched multi-process.

  Explicit flags win; otherwise JAX's own cluster detection (SLURM, TPU pods, ...) is used
  when `JAXPAPERS_DISTRIBUTED=1`. A single-process run does nothing.
  """
  if coordinator:
    if num_processes is None or process_id is None:
      raise ValueError("--coordinator_address needs --num_processes and --process_id")
    jax.distributed.initialize(coordinator_address=coordinator,
                               num_processes=num_processes, process_id=process_id,
                               heartbeat_timeout_seconds=heartbeat_timeout_s())
  elif os.environ.get("JAXPAPERS_DISTRIBUTED") == "1":
    jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat_timeout_s())


def heartbeat_timeout_s() -> int:
  """Seconds before the survivors of a dead process abort.

  JAX's default (100 s) suits pods, where a slow host is normal; a CPU run on one machine
  (tests, laptops) learns of a dead peer in 15 s instead. `JAXPAPERS_HEARTBEAT_TIMEOUT_S`
  overrides both.
  """
  if "JAXPAPERS_HEARTBEAT_TIMEOUT_S" in os.environ:
    return int(os.environ["JAXPAPERS_HEARTBEAT_TIMEOUT_S"])
  return 15 if os.environ.get("JAX_PLATFORMS", "") == "cpu" else 100


def make_mesh(axes=(("data", -1),)) -> Mesh:
  """Builds a Mesh over all devices from [(name, size)], one size may be -1."""
  axes = [tuple(a) for a in axes]
  names = [a[0] for a in axes]
  sizes = [int(a[1]) for a in axes]
  n = jax.device_count()
  if sizes.count(-1) > 1:
    raise ValueError(f"mesh {axes}: at most one axis may be -1")
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if n % known:
      raise ValueError(f"mesh {axes}: {n} devices not divisible by {known}")
    sizes[sizes.index(-1)] = n // known
  if int(np.prod(sizes)) != n:
    raise ValueError(f"mesh {axes} needs {int(np.prod(sizes))} devices, have {n}")
  devices = np.asarray(jax.devices()).reshape(sizes)
  return Mesh(devices, names)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_axes(mesh: Mesh) -> tuple:
  """The mesh axes batch rows are split over: every axis but 'model' (tensor parallel).

  With an 'fsdp' axis the batch is split over data x fsdp, as FSDP (ZeRO-3) does.
  """
  return tuple(a for a in mesh.axis_names if a != "model")


def batch_shards(mesh: Mesh) -> int:
  """How many pieces the batch rows are split into."""
  return int(np.prod([mesh.shape[a] for a in batch_axes(mesh)]))


def batch_sharding(mesh: Mesh, axis=None) -> NamedSharding:
  """Leading dimension split over `axis` (default: `batch_axes`), the rest replicated."""
  return NamedSharding(mesh, P(batch_axes(mesh) if axis is None else axis))


def local_batch_slice(global_batch: int) -> slice:
  """The rows of the global batch that this process feeds."""
  n = jax.process_count()
  if global_batch % n:
    raise ValueError(f"global batch {global_batch} not divisible by {n} processes")
  per = global_batch // n
  i = jax.process_index()
  return slice(i * per, (i + 1) * per)


def shard_batch(mesh: Mesh, local_batch, axis=None):
  """Turns this process's numpy slice of the batch into global sharded arrays."""
  sharding = batch_sharding(mesh, axis)
  names = sharding.spec[0] if isinstance(sharding.spec[0], tuple) else (sharding.spec[0],)
  n_shards = int(np.prod([mesh.shape[a] for a in names]))

  def put(x):
    x = np.asarray(x)
    global_rows = x.shape[0] * jax.process_count()
    if global_rows % n_shards:
      raise ValueError(
          f"global batch {global_rows} not divisible by the {n_shards} shards of mesh "
          f"axes {names}")
    return jax.make_array_from_process_local_data(sharding, x)

  return jax.tree.map(put, local_batch)
