"""Motor primitives as adapters of a shared recurrent core (abstract 7): the two stages.

Stage 1 trains a controller end-to-end through the arm on single primitives (random
primitive, random rest posture, noise) with loss = tracking MSE (cm^2) + effort
(mean excitation^2) + hidden-activity penalty + load balancing of the discrete code,
Adam with global-norm clipping (the network's rate cosine-decayed to zero over stage 1
with `lr_decay`). The code (which adapter each primitive selects) is
learned with it: straight-through Gumbel-softmax samples whose temperature anneals
geometrically from `tau_start` to `tau_end` over stage 1, its logits on their own Adam
learning rate (`code_lr`, cosine-decayed to zero over stage 1; the network's 3e-3 moves
a logit by at most ~1 in 400 steps, less than the Gumbel noise, so the code could never
become confident). Stage 2
freezes the controller and trains the high-level policy on random multi-segment paths:
each segment's option is a straight-through Gumbel-softmax sample of the policy's logits
for that stroke, and the gradient reaches only the policy's parameters (the frozen
network's parameters are closed over as constants, and no optimizer state exists for
them). Both stages vmap independent lanes (seeds x learning rates), split over every
device by core.sharding.spread (the evaluations stay on one device); randomness is
fold_in(key(seed), stage, method, step), so a lane gives the same numbers whatever else
runs beside it. Steps run in jitted `lax.scan` chunks between checkpoints.
"""
from __future__ import annotations

import functools
import zlib

import jax
import jax.numpy as jnp
import optax

from jaxpapers.core import population
from jaxpapers.core import sharding
from jaxpapers.papers.motor_adapters import model as model_lib
from jaxpapers.papers.motor_adapters import rollout as rollout_lib


class Hyper(dict):
  """Hashable dict of static hyper-parameters (a jit static argument)."""

  def __hash__(self):
    return hash(tuple(sorted(self.items())))


# XLA's CPU backend spends most of a tiny run compiling the differentiated closed loop;
# `fast_compile` (the smoke settings) compiles without LLVM optimisation (about 2x
# faster to compile, a little slower to run). Numbers are the same up to float rounding.
_FAST = {"xla_backend_optimization_level": 0}


def _jit(**kw):
  """jax.jit with two compiled variants; hp["fast_compile"] (static) picks one."""
  def deco(fn):
    opt, fast = jax.jit(fn, **kw), jax.jit(fn, compiler_options=_FAST, **kw)

    @functools.wraps(fn)
    def call(*args, **kwargs):
      hp = kwargs.get("hp")
      return (fast if hp is not None and hp.get("fast_compile") else opt)(*args, **kwargs)
    call.lower = lambda *a, **k: (fast if k.get("hp", {}).get("fast_compile")  # noqa: E731
                                  else opt).lower(*a, **k)
    return call
  return deco


def _spread(fn, in_axes, fast: bool):
  """`fn` vmapped over the lanes (leading axis), the lanes split over every device by
  `core.sharding.spread`, the lane states (argument 0) donated: each chunk's output states
  are the next chunk's input, so they reuse its memory. With `fast` (smoke settings) the
  program is compiled without LLVM optimisation."""
  return sharding.spread(fn, in_axes=in_axes, donate_argnums=(0,),
                         compiler_options=_FAST if fast else None)


_SPREAD = {}


def _spread_cached(name, make_fn, in_axes, env, hp, length):
  """One spread callable per (stage, env, hp, length), so repeated chunks reuse it."""
  key = (name, env, hp, length)
  if key not in _SPREAD:
    _SPREAD[key] = _spread(make_fn(env, hp, length), in_axes, bool(hp.get("fast_compile")))
  return _SPREAD[key]


def lane_key(seed, *tags):
  key = jax.random.key(seed)
  for tag in tags:
    key = jax.random.fold_in(key, zlib.crc32(str(tag).encode()) % (2**31))
  return key


def _adam(clip: float):
  return optax.chain(optax.clip_by_global_norm(clip), optax.scale_by_adam())


def _apply(params, opt_state, grads, lr, clip, code_lr=None):
  """Adam step; the `code` leaf (if any) uses `code_lr` when given."""
  updates, opt_state = _adam(clip).update(grads, opt_state, params)
  lrs = jax.tree.map(lambda _: lr, params)
  if code_lr is not None:
    lrs["code"] = code_lr
  params = jax.tree.map(lambda p, u, r: p - r * u, params, updates, lrs)
  return params, opt_state


def code_lr(hp, step):
  """Learning rate of the code logits: cosine decay from `code_lr` to zero over the
  first `code_frac` of stage 1 (then zero: the code is frozen), so the assignment settles before the adapters' final fit (the straight-through
  gradient is noisy: at a constant rate near-tied primitives kept switching adapters
  until the last step)."""
  frac = jnp.clip(step / max(hp["steps"] * hp["code_frac"], 1), 0.0, 1.0)
  return hp["code_lr"] * 0.5 * (1 + jnp.cos(jnp.pi * frac))


def lr_factor(hp, step):
  """Multiplier of the network's stage-1 learning rate: cosine decay from 1 to 0 over
  stage 1 when `lr_decay` (issue 49: at a constant rate the 2000-step curves still fell
  9-13% over their last 500 steps), else 1. The code logits keep their own schedule
  (`code_lr`)."""
  if not hp.get("lr_decay"):
    return jnp.float32(1.0)
  frac = jnp.clip(step / max(hp["steps"], 1), 0.0, 1.0)
  return 0.5 * (1 + jnp.cos(jnp.pi * frac))


def temperature(hp, step):
  """Gumbel-softmax temperature at a stage-1 step: geometric from tau_start (soft,
  spreads the straight-through gradient over all adapters) to tau_end."""
  frac = jnp.clip(step / max(hp["steps"], 1), 0.0, 1.0)
  return hp["tau_start"] * (hp["tau_end"] / hp["tau_start"]) ** frac


# ---------------------------------------------------------------- stage 1: primitives

def primitive_options(params, kid, task, n_options: int, key, tau, hard: bool):
  """(B, K) options for tasks (B,): the sampled/argmax code for the adapter kinds, the
  task one-hot (padded to K) for the multitask baseline."""
  logits = params["code"][task]
  if hard:
    code = model_lib.hard_code(logits)
  else:
    code = jax.vmap(lambda k, lg: model_lib.gumbel_straight_through(k, lg, tau))(
        jax.random.split(key, task.shape[0]), logits)
  return jnp.where(kid == 2, jax.nn.one_hot(task, n_options), code)


def primitive_loss(params, kid, env, hp, targets_all, key, hard: bool, tau=1.0):
  """Batch loss on single primitives. targets_all: (N_tasks, T, 2)."""
  n_tasks = targets_all.shape[0]
  kt, ks, kg, kr = jax.random.split(key, 4)
  task = jax.random.randint(kt, (hp["batch"],), 0, n_tasks)
  q0, _ = rollout_lib.random_starts(env, ks, hp["batch"])
  option = primitive_options(params, kid, task, hp["adapters"], kg, tau, hard)
  run = functools.partial(rollout_lib.rollout, params, kid, env)
  hand, tgt, u, hs = jax.vmap(run)(option[:, None], targets_all[task][:, None], q0,
                                   jax.random.split(kr, hp["batch"]))
  mse, dist = jax.vmap(rollout_lib.tracking)(hand, tgt, jnp.ones(hand.shape[:2]))
  effort = jnp.mean(u**2)
  activity = jnp.mean(hs**2)
  # load balancing over the whole code table (all primitives, not the batch); zero
  # weight for the multitask baseline, which has no code
  balance = model_lib.balance_loss(params["code"]) * (kid != 2)
  loss = (mse.mean() + hp["effort"] * effort + hp["activity"] * activity
          + hp["balance"] * balance)
  return loss, {"loss": loss, "mse_cm2": mse.mean(), "err_cm": dist.mean(),
                "effort": effort, "balance": balance, "tau": jnp.asarray(tau)}


def init_lanes(lanes, env, hp, n_tasks: int):
  """Stacked stage-1 states, one per (kind, seed, lr) in `lanes`."""
  def one(kind, seed, lr):
    params = model_lib.init(lane_key(seed, "init", kind), kind, rollout_lib.IN_DIM,
                            hp["hidden"], hp["adapters"], n_tasks, hp["rank"],
                            hp["code_noise"])
    # moves: how many times (step, primitive) the code's argmax changed; last_move:
    # the last step at which any primitive changed adapter (both checkpointed)
    return {"params": params, "opt": _adam(hp["clip"]).init(params),
            "lr": jnp.float32(lr), "seed": jnp.int32(seed),
            "kid": jnp.int32(model_lib.kind_id(kind)), "moves": jnp.int32(0),
            "last_move": jnp.int32(-1)}
  return population.stack([one(*lane) for lane in lanes])


def _step_key(seed, kid, stage: str, step):
  key = jax.random.fold_in(jax.random.key(seed), zlib.crc32(stage.encode()) % (2**31))
  return jax.random.fold_in(jax.random.fold_in(key, kid), step)


def train_lane(env, hp, length):
  """(state, start, targets_all) -> (state, mean metrics): `length` stage-1 steps of one
  lane (the program every lane runs; `train_chunk` maps it over the lanes)."""
  def lane(state, start, targets_all):
    def body(st, step):
      key = _step_key(st["seed"], st["kid"], "primitives", step)
      grads, m = jax.grad(primitive_loss, has_aux=True)(
          st["params"], st["kid"], env, hp, targets_all, key, False,
          temperature(hp, step))
      grads = jax.tree.map(jnp.multiply, grads, model_lib.grad_mask(grads, st["kid"]))
      params, opt = _apply(st["params"], st["opt"], grads,
                           st["lr"] * lr_factor(hp, step), hp["clip"], code_lr(hp, step))
      moved = jnp.sum(jnp.argmax(params["code"], -1) != jnp.argmax(st["params"]["code"], -1))
      moved = moved * (st["kid"] != 2)
      m = {**m, "code_distinct": jnp.sum(jax.nn.one_hot(jnp.argmax(params["code"], -1),
                                                         hp["adapters"]).max(0))}
      return {**st, "params": params, "opt": opt, "moves": st["moves"] + moved,
              "last_move": jnp.where(moved > 0, step, st["last_move"])}, m
    state, ms = jax.lax.scan(body, state, start + jnp.arange(length))
    return state, jax.tree.map(jnp.mean, ms)
  return lane


def train_chunk(states, start, targets_all, *, env, hp, length):
  """`length` stage-1 steps for every lane; returns (states, mean metrics per lane).
  The lanes (kind x seed x lr) are split over every device (core.sharding.spread)."""
  return _spread_cached("train", train_lane, (0, None, None), env, hp, length)(
      states, start, targets_all)


def eval_primitives(params, kid, targets_all, q0, key, *, env, hp):
  """Every task from every start q0 (n, 2) with hard codes: (per-task mean distance
  (cm), per-task selected option, hidden states (N_tasks, n, T, H): the activity whose
  subspaces are compared across primitives). One lane; vmap over lanes outside."""
  n_tasks = targets_all.shape[0]
  def one_task(task):
    option = primitive_options(params, kid, task[None], hp["adapters"], key, 1.0, True)[0]
    run = lambda q, k: rollout_lib.rollout(  # noqa: E731
        params, kid, env, option[None], targets_all[task][None], q, k)
    hand, tgt, _, hs = jax.vmap(run)(q0, jax.random.split(jax.random.fold_in(key, task),
                                                           q0.shape[0]))
    _, dist = jax.vmap(rollout_lib.tracking)(hand, tgt, jnp.ones(hand.shape[:2]))
    return dist.mean(), jnp.argmax(option), hs
  return jax.lax.map(one_task, jnp.arange(n_tasks))


# ---------------------------------------------------------------- stage 2: high level

def sequence_loss(pparams, net_params, kid, env, hp, feats, targets, mask, q0, key,
                  hard: bool):
  """Tracking loss of multi-segment paths with options chosen by the policy.

  feats (B, S, F), targets (B, S, T, 2), mask (B, S) valid segments, q0 (B, 2).
  """
  logits = model_lib.policy_logits(pparams, feats)  # (B, S, K)
  logits = logits + model_lib.option_mask(kid, logits.shape[-1], hp["tasks"])[None, None]
  kg, kr = jax.random.split(key)
  if hard:
    options = model_lib.hard_code(logits)
  else:
    gk = jax.random.split(kg, logits.shape[0] * logits.shape[1]).reshape(
        logits.shape[:2])
    options = jax.vmap(jax.vmap(
        lambda k, lg: model_lib.gumbel_straight_through(k, lg, hp["policy_tau"])))(
            gk, logits)
  net = jax.tree.map(jax.lax.stop_gradient, net_params)  # frozen: no path to the net
  run = functools.partial(rollout_lib.rollout, net, kid, env)
  b = feats.shape[0]
  hand, tgt, _, _ = jax.vmap(run)(options, targets, q0, jax.random.split(kr, b))
  step_mask = jnp.repeat(mask.astype(jnp.float32), targets.shape[2], axis=1)
  mse, dist = jax.vmap(rollout_lib.tracking)(hand, tgt, step_mask)
  return mse.mean(), {"mse_cm2": mse.mean(), "err_cm": dist.mean(), "per_path": dist,
                      "choice": jnp.argmax(options, -1), "hand": hand, "target": tgt}


def init_policy_lanes(lanes, feat_dim: int, hidden: int, n_opt: int, clip: float):
  """One policy per (kind, seed, lr) in `lanes`."""
  def one(kind, seed, lr):
    pp = model_lib.policy_init(lane_key(seed, "policy", kind), feat_dim, hidden, n_opt)
    return {"params": pp, "opt": _adam(clip).init(pp), "lr": jnp.float32(lr),
            "seed": jnp.int32(seed), "kid": jnp.int32(model_lib.kind_id(kind))}
  return population.stack([one(*lane) for lane in lanes])


def policy_lane(env, hp, length):
  """(policy state, frozen net, start, pool...) -> (policy state, metrics): `length`
  policy steps of one lane. The gradient of the loss with respect to the network is
  computed too and reported (`net_grad_max`, the largest |entry| over the chunk): it is
  exactly zero, logged as evidence."""
  def lane(pst, net, start, pool_feats, pool_targets, pool_q0):
    def body(st, step):
      key = _step_key(st["seed"], st["kid"], "policy", step)
      ki, kl = jax.random.split(key)
      idx = jax.random.randint(ki, (hp["policy_batch"],), 0, pool_feats.shape[0])
      mask = jnp.ones(pool_feats.shape[:2], bool)[idx]
      (grads, g_net), m = jax.grad(sequence_loss, argnums=(0, 1), has_aux=True)(
          st["params"], net, st["kid"], env, hp, pool_feats[idx], pool_targets[idx],
          mask, pool_q0[idx], kl, False)
      params, opt = _apply(st["params"], st["opt"], grads, st["lr"], hp["clip"])
      g_max = jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in jax.tree.leaves(g_net)]))
      return {**st, "params": params, "opt": opt}, {"mse_cm2": m["mse_cm2"],
                                                      "err_cm": m["err_cm"],
                                                      "net_grad_max": g_max}
    pst, ms = jax.lax.scan(body, pst, start + jnp.arange(length))
    ms = {**jax.tree.map(jnp.mean, ms), "net_grad_max": jnp.max(ms["net_grad_max"])}
    return pst, ms
  return lane


def policy_chunk(pstates, net_lanes, start, pool_feats, pool_targets, pool_q0, *, env,
                 hp, length):
  """`length` policy steps per lane; `net_lanes` (frozen) has the same lane axis. Only
  the policy state is returned: the network cannot change here. Lanes are split over
  every device (core.sharding.spread)."""
  return _spread_cached("policy", policy_lane, (0, 0, None, None, None, None), env, hp,
                        length)(pstates, net_lanes, start, pool_feats, pool_targets,
                                pool_q0)


def eval_with_options(net_params, kid, options, targets, mask, q0, key, *, env):
  """Paths driven with given one-hot options (B, S, K): the policy's argmax choices, or
  the 'oracle' high level that picks each stroke's own primitive code (or task input).
  Per-path mean distance (cm), per-step distances (B, S*T), hand and targets
  (B, S*T, 2). One lane; vmap outside."""
  run = functools.partial(rollout_lib.rollout, net_params, kid, env)
  hand, tgt, _, _ = jax.vmap(run)(options, targets, q0,
                                  jax.random.split(key, options.shape[0]))
  step_mask = jnp.repeat(mask.astype(jnp.float32), targets.shape[2], axis=1)
  _, dist = jax.vmap(rollout_lib.tracking)(hand, tgt, step_mask)
  return {"per_path": dist, "dist_steps": jnp.linalg.norm(hand - tgt, axis=-1) * 100,
          "hand": hand, "target": tgt}


@functools.partial(jax.jit, static_argnames=("n_tasks",))
def policy_options_lanes(pparams, kids, feats, *, n_tasks):
  """The trained policies' evaluation options: the argmax over each lane's allowed
  options (the multitask baseline: its n_tasks task inputs), (L, B, S, K)."""
  def one(pp, kid):
    logits = model_lib.policy_logits(pp, feats)
    logits = logits + model_lib.option_mask(kid, logits.shape[-1], n_tasks)[None, None]
    return model_lib.hard_code(logits)
  return jax.vmap(one)(pparams, kids)


# Lane-vmapped evaluations as module-level jitted functions, so repeated calls (tests,
# notebooks, resumed runs) reuse one compiled program per shape. Both evaluations of
# multi-segment paths (the policy's choices and the oracle options) run through the
# same program.

@_jit(static_argnames=("env", "hp"))
def eval_primitives_lanes(params, kids, targets_all, q0, key, *, env, hp):
  return jax.vmap(lambda p, k: eval_primitives(p, k, targets_all, q0, key, env=env,
                                               hp=hp))(params, kids)


@_jit(static_argnames=("env", "hp"))
def eval_with_options_lanes(net_params, kids, options, targets, mask, q0, key, *, env,
                            hp):
  return jax.vmap(lambda nt, k, o: eval_with_options(nt, k, o, targets, mask, q0, key,
                                                     env=env))(net_params, kids, options)
