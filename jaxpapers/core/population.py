"""Population training: P members (seeds x float hyper-parameters) as one `loop.Task`.

A paper's Task is built by `make_task(seed, hparams)`, where `hparams` is a dict of
float hyper-parameters that do not change shapes (peak LR, weight decay, an init scale,
...). `population_task` turns it into one Task whose state holds every member stacked
along a leading axis: init and train_step are `vmap`ped over the members' states and
hyper-parameters (carried in the state as arrays, so a checkpoint restores them), and the
whole population runs through the unchanged `loop.train`: one jit, donated buffers,
progress lines, checkpoints and exact resume, as for a single run.

Member i reproduces its run alone (`loop.train` with config.seed = seed_i and those
hyper-parameters) up to float reordering inside batched kernels: its init key and step
keys are derived from its own seed exactly as `loop.train` derives them, and its batches
come from its own seed's `train_batch` (members that share a seed share one copy of the
batch). Train metrics are vectors over members; eval metrics come back as one scalar per
member, named `<metric>/<i>` (the loop averages scalars), see `unstack`.

A member whose loss or gradient norm turns non-finite (a too-large LR in a sweep) is
frozen at its last finite state and flagged in the `diverged` metric, instead of
stopping the population through the loop's NaN guard; its train metrics read 0 from then
on and its eval metrics NaN, so a selection by `np.nanargmin` skips it.

On the mesh: the member axis is split over every device (`core/sharding.py`), padded to
a multiple of the device count with copies of the last member, so P members on D
devices cost about P / D members' time; the padding never shows: train metrics are
vectors over the real members, eval metrics name only real members, and `unstack` /
`member` index real members. The padded size is part of the checkpoint's shapes, so a
population resumes on the same device count (or any count its size divides into).

Restrictions: `make_task`'s step functions may depend on the seed only through batches
and the rng (they are built once, with the first member's seed, and vmapped); every
member is evaluated on the first member's `eval_batches` (a held-out set that does not
depend on the seed).
"""
from __future__ import annotations

import itertools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import loop
from jaxpapers.core import sharding as sharding_lib


def grid(seeds: Sequence[int], **values) -> list[dict]:
  """Members for every combination: grid([0, 1], lr=[1e-3, 1e-2]) -> 4 dicts, seed fastest."""
  names = list(values)
  out = []
  for combo in itertools.product(*(values[n] for n in names)):
    for s in seeds:
      out.append({"seed": int(s), **{n: float(v) for n, v in zip(names, combo)}})
  return out


def _check(members):
  if not members:
    raise ValueError("a population needs at least one member")
  keys = set(members[0])
  if "seed" not in keys:
    raise ValueError("every population member needs a 'seed'")
  for i, m in enumerate(members):
    if set(m) != keys:
      raise ValueError(f"population member {i} has keys {sorted(m)}, member 0 {sorted(keys)}")
  return sorted(keys - {"seed"})


def _where_rows(ok_P, new, old):
  def pick(a, b):
    return jnp.where(ok_P.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
  return jax.tree.map(pick, new, old)


def population_task(make_task: Callable[[int, dict], loop.Task], members: Sequence[dict],
                    *, freeze_diverged: bool = True, pad_to: int | None = None) -> loop.Task:
  """One Task training every member of `members` ([{'seed': int, name: float, ...}]).

  `pad_to` (default: the device count) is what the member count is padded to a multiple
  of, so the member axis splits evenly over the devices.
  """
  names = _check(members)
  n_real = len(members)
  n_pad = sharding_lib.padded_size(n_real, pad_to or jax.device_count())
  members = list(members) + [members[-1]] * (n_pad - n_real)
  seeds = [int(m["seed"]) for m in members]
  uniq = sorted(set(seeds))
  seed_idx = np.asarray([uniq.index(s) for s in seeds], np.int32)
  hp0 = {n: np.asarray([float(m[n]) for m in members], np.float32) for n in names}
  # Host-side data functions: one task per distinct seed (its batches), with concrete
  # hyper-parameters of the first member of that seed (batches must not depend on them).
  data_tasks = [make_task(s, {n: members[seeds.index(s)][n] for n in names}) for s in uniq]
  n_members = len(members)

  def traced(hp):
    return make_task(seeds[0], hp)

  def init(rng):
    del rng  # each member's keys come from its own seed, as in its run alone

    def one(seed_key, hp):
      init_rng, step_rng = jax.random.split(seed_key)
      return traced(hp).init(init_rng), step_rng

    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    hp = {n: jnp.asarray(v) for n, v in hp0.items()}
    states, step_rngs = jax.vmap(one)(keys, hp)
    return {"members": states, "hparams": hp, "step_rng": step_rngs,
            "diverged": jnp.zeros((n_members,), bool)}

  def train_step(state, batch, rng, step):
    del rng
    batch_P = jax.tree.map(lambda x: jnp.moveaxis(x, 1, 0)[seed_idx], batch)

    def one(s, hp, step_rng, b):
      return traced(hp).train_step(s, b, jax.random.fold_in(step_rng, step), step)

    new, m = jax.vmap(one)(state["members"], state["hparams"], state["step_rng"], batch_P)
    diverged = state["diverged"]
    if freeze_diverged:
      ok = jnp.isfinite(m["loss"]) & jnp.isfinite(m["grad_norm"]) & ~diverged
      new = _where_rows(ok, new, state["members"])
      diverged = ~ok
      m = {k: jnp.where(diverged, jnp.zeros_like(v), v)
           if jnp.issubdtype(v.dtype, jnp.floating) else v for k, v in m.items()}
    m["diverged"] = diverged.astype(jnp.int32)
    m = {k: v[:n_real] for k, v in m.items()}
    return {**state, "members": new, "diverged": diverged}, m

  def eval_step(state, batch):
    sums = jax.vmap(lambda s, hp: traced(hp).eval_step(s, batch))(
        state["members"], state["hparams"])
    out = {"count": sums.pop("count")[0]}
    for k, v in sums.items():
      v = jnp.where(state["diverged"], jnp.nan, v.astype(jnp.float32))
      for i in range(n_real):
        out[f"{k}/{i}"] = v[i]
    return out

  def state_specs(mesh, abstract):
    # Every leaf leads with the (padded) member axis: split it over all devices (a
    # `pad_to` that the mesh does not divide leaves the population replicated).
    spread = n_pad % mesh.size == 0
    spec = sharding_lib.spread_spec(mesh) if spread else jax.sharding.PartitionSpec()
    return jax.tree.map(lambda x: spec, abstract)

  def train_batch(step, rows):
    parts = [t.train_batch(step, rows) for t in data_tasks]
    return jax.tree.map(lambda *xs: np.stack(xs, axis=1), *parts)

  return loop.Task(init=init, train_step=train_step, eval_step=eval_step,
                   train_batch=train_batch, eval_batches=data_tasks[0].eval_batches,
                   state_specs=state_specs)


def unstack(metrics: dict, n_members: int) -> list[dict]:
  """Per-member dicts from population metrics: '<k>/<i>' scalars or length-P vectors."""
  out = [dict() for _ in range(n_members)]
  for k, v in metrics.items():
    name, sep, idx = k.rpartition("/")
    if sep and idx.isdigit():
      out[int(idx)][name] = v
    elif np.ndim(v) == 1 and len(v) == n_members:
      for i in range(n_members):
        out[i][k] = np.asarray(v)[i].item()
  return out


@jax.jit
def stack(trees):
  """Trees of one structure stacked leaf by leaf along a new leading (member) axis, as ONE
  program: an eager jnp.stack per leaf compiles a stack, a copy and a slice per leaf
  shape. Python scalars keep the weak type an eager jnp.stack gives them."""
  return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def member(state, i: int):
  """Member i's own state (as its run alone would hold it)."""
  return jax.tree.map(lambda x: x[i], state["members"])
