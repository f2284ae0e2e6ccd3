"""Where each array of a run lives on the mesh: parameter rules, FSDP, spread vmapped axes.

The mesh's axis names decide the layout, so one config field (`config.mesh`) turns each
scheme on or off:

  data   batch rows (and the members of a population) split over it
  fsdp   fully sharded data parallel (ZeRO-3 style): every large state leaf (parameters
         and the optimizer moments that mirror them) is split along its largest dimension
         that divides evenly, and the batch rows over data x fsdp; XLA gathers a weight
         where a step needs it whole and reduce-scatters its gradient
  model  tensor parallel (Megatron-style) for leaves a rule names: an MLP's up/gate and
         attention's q/k/v split by output column, down/o by input row, so each pair needs
         one all-reduce

e.g. `mesh=[("data", -1), ("fsdp", 4)]`. A rule is `(regex, spec)`: the regex is searched
in the leaf's path ('params/layers/0/q', 'opt/0/mu/layers/0/q', ...) and `spec` names the
mesh axes of the leaf's *trailing* dimensions, so the same rule covers a stacked layer
axis and the optimizer's copies of the leaf. A rule whose axes the mesh lacks, or whose
dimension does not divide, is skipped for that leaf (it stays replicated along that axis).

`spread` runs a function vmapped over a leading axis (seeds x hyper-parameters, problem
instances, markets) with that axis split over the devices: n rows on n < D devices use the
first n devices (one row each, no padding); otherwise the axis is padded to a multiple of
D and the padding is dropped from the results.
"""
from __future__ import annotations

import math
import re
import weakref
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxpapers.core import mesh as mesh_lib

# Leaves smaller than this stay replicated under FSDP: gathering a norm's gain costs more
# than keeping a copy. `config.fsdp_min_size` overrides it.
FSDP_MIN_SIZE = 2 ** 14

Rule = tuple[str, tuple]


def path_str(path) -> str:
  """'params/layers/0/q' for a jax key path."""
  parts = []
  for k in path:
    for attr in ("key", "idx", "name"):
      if hasattr(k, attr):
        parts.append(str(getattr(k, attr)))
        break
    else:
      parts.append(str(k))
  return "/".join(parts)


def leaf_spec(path: str, shape: Sequence[int], mesh: Mesh, rules: Sequence[Rule] = (),
              fsdp_min_size: int = FSDP_MIN_SIZE) -> P:
  """The PartitionSpec of one leaf: the first matching rule, then FSDP on the rest."""
  axes: list = [None] * len(shape)
  for pattern, spec in rules:
    if not re.search(pattern, path) or len(spec) > len(shape):
      continue
    offset = len(shape) - len(spec)
    for i, name in enumerate(spec):
      if name in mesh.shape and shape[offset + i] % mesh.shape[name] == 0:
        axes[offset + i] = name
    break
  n_fsdp = mesh.shape.get("fsdp", 1)
  if n_fsdp > 1 and math.prod(shape) >= fsdp_min_size:
    free = [i for i in range(len(shape)) if axes[i] is None and shape[i] % n_fsdp == 0]
    if free:
      axes[max(free, key=lambda i: (shape[i], -i))] = "fsdp"
  while axes and axes[-1] is None:
    axes.pop()
  return P(*axes)


def tree_specs(abstract, mesh: Mesh, rules: Sequence[Rule] = (),
               fsdp_min_size: int = FSDP_MIN_SIZE):
  """PartitionSpecs for every leaf of an abstract tree (`jax.eval_shape` output)."""
  return jax.tree_util.tree_map_with_path(
      lambda p, x: leaf_spec(path_str(p), tuple(x.shape), mesh, rules, fsdp_min_size),
      abstract)


def named(mesh: Mesh, specs):
  """NamedShardings from a tree of PartitionSpecs."""
  return jax.tree.map(lambda s: NamedSharding(mesh, s), specs,
                      is_leaf=lambda x: isinstance(x, P))


def spread_spec(mesh: Mesh) -> P:
  """A leading axis split over every device of the mesh."""
  return P(tuple(mesh.axis_names))


def padded_size(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def pad_leading(tree, n_to: int):
  """Pads every leaf's leading axis to n_to rows by repeating its last row."""
  def pad(x):
    x = jnp.asarray(x)
    extra = n_to - x.shape[0]
    if extra == 0:
      return x
    return jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)], axis=0)
  return jax.tree.map(pad, tree)


def _spread_jit(vmapped, m: Mesh, axes, donate_argnums=(), compiler_options=None):
  split = NamedSharding(m, spread_spec(m))
  repl = NamedSharding(m, P())
  return jax.jit(vmapped, in_shardings=tuple(split if ax is not None else repl
                                             for ax in axes), out_shardings=split,
                 donate_argnums=donate_argnums, compiler_options=compiler_options)


def spread_mesh(m: Mesh, n: int) -> Mesh:
  """The mesh `spread` uses for n rows: the first n devices when n < m.size in a single
  process (idle devices would otherwise compute copies of the last row), else `m`.

  With several processes every one must hold a shard of the result, so the whole mesh is
  kept and the rows are padded."""
  if n >= m.size or jax.process_count() > 1:
    return m
  return Mesh(np.asarray(m.devices).reshape(-1)[:n], ("spread",))


def _axes(in_axes, n_args):
  axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * n_args
  if len(axes) != n_args or any(ax not in (0, None) for ax in axes):
    raise ValueError(f"spread: in_axes must be 0 or None per argument, got {in_axes}")
  return axes


def _leading(args, axes) -> int:
  sizes = {jax.tree.leaves(a)[0].shape[0] for a, ax in zip(args, axes)
           if ax is not None and jax.tree.leaves(a)}
  if len(sizes) != 1:
    raise ValueError(f"spread: mapped arguments disagree on the leading axis: {sizes}")
  return sizes.pop()


def spread(fn: Callable, mesh: Mesh | None = None, *, in_axes=0, donate_argnums=(),
           compiler_options: dict | None = None):
  """`fn` vmapped over the leading axis of its arguments, that axis split over the mesh.

  Returns a callable with fn's arguments; `in_axes` is 0 (mapped) or None (replicated)
  per argument, or one of them for all. n rows on n < D devices run on the first n
  devices (`spread_mesh`); otherwise the leading axis is padded to a multiple of D by
  repeating its last row and the padding is dropped from every output, which therefore
  has leading axis n, as `jax.vmap(fn)` would give. Each device computes ceil(n / D) rows,
  so a grid of 8k points on 8 devices takes about the time of k on one. The mesh defaults
  to every device (built on first call).

  `donate_argnums` donates those arguments' buffers to the outputs (a chunked study passes
  its state back in each chunk, so the old state's memory is reused). Only buffers this
  callable returned on its previous call are donated: any other argument (the caller's
  initial state, which it may still use) is copied first, so donation never deletes an
  array the caller did not get from here.

  `compiler_options` go to XLA's compile (e.g. `{"xla_backend_optimization_level": 0}`
  for smoke runs, which compile about twice as fast and run slower).
  """
  vmapped = jax.vmap(fn, in_axes=in_axes)
  cache = {"returned": {}}

  def ours(x) -> bool:
    ref = cache["returned"].get(id(x))
    return ref is not None and ref() is x

  def guard(a):  # a copy unless every leaf is one of our previous outputs
    return jax.tree.map(lambda x: x if ours(x) else jnp.array(x, copy=True), a)

  def call(*args):
    axes = _axes(in_axes, len(args))
    if "mesh" not in cache:
      cache["mesh"] = mesh or mesh_lib.make_mesh()
    n = _leading(args, axes)
    m = spread_mesh(cache["mesh"], n)
    n_pad = padded_size(n, m.size)
    split = NamedSharding(m, spread_spec(m))
    repl = NamedSharding(m, P())
    args = [guard(a) if i in donate_argnums else a for i, a in enumerate(args)]
    args = [jax.device_put(pad_leading(a, n_pad), split) if ax is not None
            else jax.device_put(a, repl) for a, ax in zip(args, axes)]
    key = m.size
    if key not in cache:  # one jit per mesh; it retraces only for new shapes
      cache[key] = _spread_jit(vmapped, m, axes, donate_argnums, compiler_options)
    out = cache[key](*args)
    if n != n_pad:
      out = jax.tree.map(lambda x: x[:n], out)
    if donate_argnums:
      cache["returned"] = {id(x): weakref.ref(x) for x in jax.tree.leaves(out)}
    return out

  return call


def spread_plan(fn: Callable, *args, mesh: Mesh | None = None, in_axes=0, donate_argnums=(),
                compiler_options: dict | None = None):
  """(jitted program, abstract arguments) of `spread(fn)(*args)`, for `core.planner.Plan`.

  `args` may be arrays or `jax.ShapeDtypeStruct`s (nothing is allocated): the mapped
  ones are padded exactly as `spread` pads them, on the mesh `spread` would use, and
  every argument carries the sharding `spread` would give it, so the planner compiles the
  very program a study runs.
  """
  axes = _axes(in_axes, len(args))
  n = _leading(args, axes)
  m = spread_mesh(mesh or mesh_lib.make_mesh(), n)
  n_pad = padded_size(n, m.size)
  split = NamedSharding(m, spread_spec(m))
  repl = NamedSharding(m, P())

  def abstract(x, ax):
    shape = tuple(x.shape) if ax is None else (n_pad,) + tuple(x.shape[1:])
    return jax.ShapeDtypeStruct(shape, x.dtype, sharding=repl if ax is None else split)

  out = tuple(jax.tree.map(lambda x, ax=ax: abstract(x, ax), a) for a, ax in zip(args, axes))
  return (_spread_jit(jax.vmap(fn, in_axes=in_axes), m, axes, donate_argnums,
                      compiler_options), out)
