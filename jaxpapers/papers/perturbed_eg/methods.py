"""Perturbed S-EG / S-OGDA (abstract 19): the four methods and the vmapped scan runner.

S-EG (stochastic extragradient, Korpelevich 1976 / Juditsky et al. 2011):
  z_{t+1/2} = P(z_t - gamma_t G(z_t)),  z_{t+1} = P(z_t - eta_t G(z_{t+1/2})),
with two independent oracle calls. S-OGDA in its single-call (Popov 1980 "past
extragradient") form, the optimistic method for constrained problems:
  z_{t+1/2} = P(z_t - gamma_t G_{t-1/2}),  G_{t+1/2} = G(z_{t+1/2}),  z_{t+1} = P(z_t - eta_t G_{t+1/2}).
The perturbed versions run the same steps on the regularised operator
  G(z) = F(z) + xi + mu_t (z - z0),   xi ~ N(0, sigma^2 I) fresh per call,
i.e. on f(x, y) + mu/2 |x - x0|^2 - mu/2 |y - y0|^2 (the abstract's regularisation);
vanilla methods are mu = 0. Step sizes are gamma_t = eta_t (single timescale) unless a
two-timescale baseline asks otherwise.

Runner. Iterations are a `lax.scan` over blocks of `block` steps (Gaussian noise drawn
for a whole block at once from fold_in(key, block), much cheaper than one draw per
step), nested in a scan over blocks; seeds are `vmap`ped inside a lane and the lanes
(independent runs) are spread over every device by `core.sharding.spread`.
A *plan* gives per block and lane the step sizes, mu, whether the lane restarts from z0
at that block, and which output slot (if any) receives its iterate at the block's end.
Two plans cover the paper's two regimes:
  * horizon plan: one run per (variant, horizon T) with constants eta_T, mu_T fixed by T
    (the theory's choice). Runs are packed first-fit-decreasing into lanes of length
    T_max, so the doubling grid 125..1.024e6 (sum ~ 2 T_max) of one variant costs two
    lanes of one scan of T_max steps, instead of sum(T) sequential steps or
    n_horizons * T_max masked steps; vanilla and perturbed variants share the program;
  * anytime plan: one run per variant whose steps decay in t (eta_t = eta (1 + t/t0)^-a,
    etc.), snapshotted at checkpoints (the single-timescale almost-sure regime).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import sharding
from jaxpapers.papers.perturbed_eg import problems

ALGORITHMS = ("eg", "ogda")


@dataclasses.dataclass(frozen=True)
class Method:
  """Static part of a method (hashable)."""
  algorithm: str  # "eg" or "ogda"
  sigma: float  # standard deviation of the Gaussian noise per coordinate and call
  t0: float = 1.0  # time offset of the anytime decays (1 + t / t0)^-exponent

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"unknown algorithm {self.algorithm!r}; known: {ALGORITHMS}")

  @property
  def calls(self) -> int:
    return 2 if self.algorithm == "eg" else 1


class Plan(NamedTuple):
  """Per block x lane tables (numpy), plus what each output slot means."""
  eta: np.ndarray  # (blocks, lanes) base update step
  gamma: np.ndarray  # base extrapolation step
  mu: np.ndarray  # base regularisation
  reset: np.ndarray  # bool: restart from z0 at the start of this block
  slot: np.ndarray  # int: output slot written at the end of this block, -1 for none
  slot_steps: np.ndarray  # (lanes, slots) iterations done when the slot was written
  slot_group: np.ndarray  # (lanes, slots) method variant of the slot's run, -1: unused
  decay: np.ndarray  # (lanes, 3) anytime exponents of eta, gamma, mu (0: constant)


class State(NamedTuple):
  x: jnp.ndarray
  y: jnp.ndarray
  gx: jnp.ndarray  # last extrapolation gradient (S-OGDA only)
  gy: jnp.ndarray
  sx: jnp.ndarray  # running sums of the extrapolation points (averaged iterate)
  sy: jnp.ndarray
  tau: jnp.ndarray  # iterations since the last restart


def pack(lengths, capacity: int) -> list[list[int]]:
  """First-fit decreasing: lanes of item indices with total length <= capacity."""
  lanes: list[list[int]] = []
  loads: list[int] = []
  for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
    for j, load in enumerate(loads):
      if load + lengths[i] <= capacity:
        lanes[j].append(i)
        loads[j] += lengths[i]
        break
    else:
      lanes.append([i])
      loads.append(lengths[i])
  return lanes


def horizon_plan(runs, block: int) -> Plan:
  """One restart per run (group, T, eta, gamma, mu) with constants, packed in lanes.

  Runs of several variants (vanilla and perturbed) share lanes; each run restarts from
  z0 at its first block and writes its last iterate into its slot at its last block.
  """
  bad = [r[1] for r in runs if r[1] % block or r[1] <= 0]
  if bad:
    raise ValueError(f"horizons {bad} are not positive multiples of block={block}")
  lengths = [int(r[1]) for r in runs]
  t_max = max(lengths)
  lanes = pack(lengths, t_max)
  n_blocks, n_lanes = t_max // block, len(lanes)
  n_slots = max(len(lane) for lane in lanes)
  eta = np.zeros((n_blocks, n_lanes), np.float32)  # idle blocks: eta = 0 freezes a lane
  gamma = np.zeros_like(eta)
  mu = np.zeros_like(eta)
  reset = np.zeros((n_blocks, n_lanes), bool)
  slot = np.full((n_blocks, n_lanes), -1, np.int32)
  slot_steps = np.zeros((n_lanes, n_slots), np.int64)
  slot_group = np.full((n_lanes, n_slots), -1, np.int32)
  for j, lane in enumerate(lanes):
    start = 0
    for s, i in enumerate(lane):
      group, t, eta_i, gamma_i, mu_i = runs[i]
      b0, b1 = start // block, (start + t) // block
      eta[b0:b1, j], gamma[b0:b1, j], mu[b0:b1, j] = eta_i, gamma_i, mu_i
      reset[b0, j] = True
      slot[b1 - 1, j] = s
      slot_steps[j, s], slot_group[j, s] = t, group
      start += t
  return Plan(eta, gamma, mu, reset, slot, slot_steps, slot_group,
              np.zeros((n_lanes, 3), np.float32))


def anytime_plan(t_max: int, checkpoints, block: int, eta: float, gamma: float,
                 mu: float, decay=(0.0, 0.0, 0.0)) -> Plan:
  """One run of t_max steps with decaying steps, snapshotted at the checkpoints."""
  checkpoints = sorted({int(c) for c in checkpoints})
  bad = [c for c in checkpoints if c % block or c <= 0 or c > t_max]
  if bad or t_max % block:
    raise ValueError(f"checkpoints {bad} / t_max={t_max} must be multiples of {block} "
                     "in (0, t_max]")
  n_blocks = t_max // block
  slot = np.full((n_blocks, 1), -1, np.int32)
  for s, c in enumerate(checkpoints):
    slot[c // block - 1, 0] = s
  reset = np.zeros((n_blocks, 1), bool)
  reset[0, 0] = True
  full = lambda v: np.full((n_blocks, 1), v, np.float32)  # noqa: E731
  return Plan(full(eta), full(gamma), full(mu), reset, slot,
              np.asarray([checkpoints]), np.zeros((1, len(checkpoints)), np.int32),
              np.asarray([decay], np.float32))


def merge(plans: list[Plan]) -> Plan:
  """Stacks anytime plans of one algorithm as lanes; plan g's slots get group g.

  Lanes of one seed share its noise stream, so merged variants (vanilla vs perturbed)
  are compared under common random numbers.
  """
  n_blocks = {p.eta.shape[0] for p in plans}
  n_slots = {p.slot_steps.shape[1] for p in plans}
  if len(n_blocks) != 1 or len(n_slots) != 1:
    raise ValueError("merged plans need the same length and checkpoints")
  cat = lambda xs: np.concatenate(xs, axis=-1)  # noqa: E731
  return Plan(cat([p.eta for p in plans]), cat([p.gamma for p in plans]),
              cat([p.mu for p in plans]), cat([p.reset for p in plans]),
              cat([p.slot for p in plans]),
              np.concatenate([p.slot_steps for p in plans]),
              np.concatenate([np.full_like(p.slot_group, g) for g, p in enumerate(plans)]),
              np.concatenate([p.decay for p in plans]))


def _init(spec, data):
  gx, gy = problems.operator(spec, data, data.x0, data.y0)
  zx, zy = jnp.zeros_like(data.x0), jnp.zeros_like(data.y0)
  return State(data.x0, data.y0, gx, gy, zx, zy, jnp.zeros((), jnp.int32))


def step(spec: problems.Spec, method: Method, data: problems.Data, state: State,
         eta_t, gamma_t, mu_t, noise):
  """One iteration of (perturbed) S-EG or S-OGDA for one run; noise: (calls, n + m)."""
  n = data.x0.shape[0]

  def oracle(x, y, xi):
    gx, gy = problems.operator(spec, data, x, y)
    return (gx + method.sigma * xi[:n] + mu_t * (x - data.x0),
            gy + method.sigma * xi[n:] + mu_t * (y - data.y0))

  if method.algorithm == "eg":
    gx, gy = oracle(state.x, state.y, noise[0])
  else:  # Popov: reuse the gradient computed at the previous extrapolation point
    gx, gy = state.gx, state.gy
  xh = problems.project_x(spec, state.x - gamma_t * gx)
  yh = problems.project_y(spec, state.y - gamma_t * gy)
  hx, hy = oracle(xh, yh, noise[-1])
  x = problems.project_x(spec, state.x - eta_t * hx)
  y = problems.project_y(spec, state.y - eta_t * hy)
  return State(x, y, hx, hy, state.sx + xh, state.sy + yh, state.tau + 1)


class Snapshots(NamedTuple):
  """Iterates at the plan's slots, each (lanes, slots, seeds, dim)."""
  x: jnp.ndarray
  y: jnp.ndarray
  avg_x: jnp.ndarray
  avg_y: jnp.ndarray


# The mapped arguments of `lane_fn`'s program: the lane's plan columns, its decay and its
# carry are split over the devices; the problem data, the key and b0 are replicated.
LANE_AXES = (0, 0, 0, 0, 0, 0, 0, None, None, None)
CARRY_ARG = 6  # the (state, snapshots) carry: input and output of every call


def lane_fn(spec, method, block: int, seeds: int):
  """One lane's run over its plan rows: the function `spread` maps over lanes.

  (eta, gamma, mu, reset, slot) are the lane's (blocks,) columns, decay its (3,)
  exponents, carry its (state, snapshots) with seeds leading; data, key and the global
  index b0 of the first block are shared by every lane. Seeds are vmapped inside (they
  share one noise draw per block, so they cannot be split without changing the numbers).
  """
  def lane(eta, gamma, mu, reset, slot, decay, carry, data, key, b0):
    batched = jax.vmap(functools.partial(step, spec, method, data),
                       in_axes=(0, None, None, None, 0))
    d = data.x0.shape[0] + data.y0.shape[0]
    init = _init(spec, data)
    state0 = jax.tree.map(lambda a: jnp.broadcast_to(a, (seeds,) + a.shape), init)

    def block_fn(carry, xs):
      state, snaps = carry
      b, eta_b, gamma_b, mu_b, reset_b, slot_b = xs
      state = jax.tree.map(lambda s, s0: jnp.where(reset_b, s0, s), state, state0)
      # Step sizes of the whole block (all seeds of a lane share the clock).
      t = (state.tau[0] + jnp.arange(block)).astype(jnp.float32)
      grow = 1.0 + t / method.t0
      eta_t = eta_b * grow ** -decay[0]
      gamma_t = gamma_b * grow ** -decay[1]
      mu_t = mu_b * grow ** -decay[2]
      # One noise stream per seed, shared by the lanes (common random numbers across the
      # horizons and variants of one seed: the RNG dominates the cost on these small
      # problems; seeds stay independent, and every run sees i.i.d. N(0, sigma^2 I)
      # noise). The key does not depend on the lane, so vmapped lanes draw it once per
      # device; the (block, 1, seeds, ...) shape keeps the values of the earlier
      # all-lanes draw, which broadcast one draw over the lane axis.
      noise = jax.random.normal(jax.random.fold_in(key, b),
                                (block, 1, seeds, method.calls, d), jnp.float32)[:, 0]

      def inner(st, xs_t):
        return batched(st, *xs_t), None

      state, _ = jax.lax.scan(inner, state, (eta_t, gamma_t, mu_t, noise))
      count = jnp.maximum(state.tau, 1).astype(jnp.float32)[..., None]
      new = Snapshots(state.x, state.y, state.sx / count, state.sy / count)
      s = jnp.maximum(slot_b, 0)
      snaps = jax.tree.map(lambda buf, val: buf.at[s].set(jnp.where(slot_b >= 0, val,
                                                                    buf[s])), snaps, new)
      return (state, snaps), None

    xs = (b0 + jnp.arange(eta.shape[0]), eta, gamma, mu, reset, slot)
    carry, _ = jax.lax.scan(block_fn, carry, xs)
    return carry

  return lane


@functools.lru_cache(maxsize=None)
def lane_program(spec, method, block: int, seeds: int):
  """`lane_fn` with its lanes split over every device (one compilation per shape). The
  carry (argument 6) is donated: each chunk of blocks returns the carry the next chunk
  takes, so the new carry reuses the old one's memory (`spread` copies a carry it did not
  return itself, e.g. the initial one)."""
  return sharding.spread(lane_fn(spec, method, block, seeds), in_axes=LANE_AXES,
                         donate_argnums=(CARRY_ARG,))


def init_carry(spec, data, n_lanes: int, n_slots: int, seeds: int):
  """(state, snapshots) before the first block: every lane and seed at z0."""
  init = _init(spec, data)
  tile = lambda a: jnp.broadcast_to(a, (n_lanes, seeds) + a.shape)  # noqa: E731
  zeros = lambda a: jnp.zeros((n_lanes, n_slots, seeds, a.shape[-1]), a.dtype)  # noqa: E731
  return (jax.tree.map(tile, init),
          Snapshots(zeros(data.x0), zeros(data.y0), zeros(data.x0), zeros(data.y0)))


def run(spec: problems.Spec, method: Method, data: problems.Data, plan_arrays, key,
        *, block: int, n_slots: int, seeds: int) -> Snapshots:
  """Runs every lane of a plan for `seeds` independent noise streams (one program)."""
  eta = plan_arrays[0]
  carry = init_carry(spec, data, eta.shape[1], n_slots, seeds)
  return run_blocks(spec, method, data, plan_arrays, key, carry, jnp.asarray(0),
                    block=block, seeds=seeds)[1]


def lane_args(plan_arrays, carry):
  """The plan's (blocks, lanes) tables as per-lane rows, then decay and the carry."""
  eta, gamma, mu, reset, slot, decay = plan_arrays
  return tuple(jnp.asarray(a).T for a in (eta, gamma, mu, reset, slot)) + (
      jnp.asarray(decay), carry)


def run_blocks(spec, method, data, plan_arrays, key, carry, b0, *, block: int, seeds: int):
  """Advances (state, snapshots) through the plan rows given (global blocks b0, b0+1, ...).

  The lanes are split over every device (`core.sharding.spread`). Running the blocks in
  several calls gives bitwise the same carry as one call (the noise of block b is drawn
  from fold_in(key, b) with the global index b).
  """
  fn = lane_program(spec, method, block, seeds)
  return fn(*lane_args(plan_arrays, carry), data, key, jnp.asarray(b0))


def run_plan(spec, method, data, plan: Plan, key, seeds: int, block: int) -> Snapshots:
  arrays = tuple(jnp.asarray(a) for a in plan[:5]) + (jnp.asarray(plan.decay),)
  return run(spec, method, data, arrays, key, block=block,
             n_slots=plan.slot_steps.shape[1], seeds=seeds)
