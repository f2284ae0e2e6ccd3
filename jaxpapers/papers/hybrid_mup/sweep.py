"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): LR sweeps as populations.

`train_members` trains P members of ONE shape (width, pattern, batch, sequence length)
in one jitted program: init, a `lax.scan` over the training steps and the held-out
scoring, all `vmap`ped over the members. A member is (seed, peak LR, parametrization
variant, optimizer); the variant and optimizer enter only as traced numbers (per-role
init std and LR multipliers, attention scale, logit multiplier, an optimizer index), so
SP, muP and its SSM variants under AdamW, global-second-moment Adam and SGD of the same
shape share one compilation (on the 2-core CPU a compile costs more than a short run).

Each member reproduces its run alone through `launch/train.py` (same init key
`split(PRNGKey(seed))[0]`, the same training windows `token_windows(...)(seed, step)`,
the same schedule and update rule), up to float reordering in batched kernels: the
update below is the three optimizers of `parametrizations.optimizer` written on one
shared state, checked against them in the tests.

The member axis is split over every device (`core.sharding.spread`): P members on D
devices train P / D each, so `launch/study.py` on 8 devices runs a cell's population
about 8x faster (tested: the 8-device cell equals the 1-device `jit(vmap)` cell).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import sharding
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm
from jaxpapers.papers.hybrid_mup import model as model_lib
from jaxpapers.papers.hybrid_mup import parametrizations as par_lib


def stack_numerics(nums: list[dict]) -> dict:
  """Members' numerics dicts -> one dict of (P,) arrays."""
  return jax.tree.map(lambda *xs: np.asarray(xs, np.int32 if isinstance(xs[0], int)
                                               else np.float32), *nums)


def unified_init(params):
  zeros = jax.tree.map(jnp.zeros_like, params)
  return {"count": jnp.zeros([], jnp.int32), "mu": zeros, "nu": zeros,
          "nu_g": jnp.zeros([], jnp.float32)}


def unified_update(grads, state, params, *, kind, lr_t, mults, mask, b1, b2, eps,
                   weight_decay, clip_norm, decay_rule: str = "lr", wd_scale=1.0):
  """One step of AdamW (kind 0), global-second-moment Adam (1) or momentum SGD (2).

  Decay: p -= lr (m u + wd p) for decay_rule 'lr' (MuAdamW), lr m (u + wd p) for 'lr_mult',
  with wd = weight_decay x wd_scale (a member's traced factor: 0 turns its decay off, so
  decayed and undecayed members share one program).

  SGD's heavy-ball trace m_t = g_t + b1 m_{t-1} equals mu_t / (1 - b1) for the EMA
  mu_t = b1 mu_{t-1} + (1 - b1) g_t, so all three share the first moment.
  """
  leaves = jax.tree.leaves(grads)
  gnorm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in leaves))
  if clip_norm:
    factor = jnp.where(gnorm > clip_norm, clip_norm / gnorm, 1.0)
    grads = jax.tree.map(lambda g: g * factor, grads)
  n = sum(g.size for g in leaves)
  g2 = sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)) / n
  count = state["count"] + 1
  mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
  nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
  nu_g = b2 * state["nu_g"] + (1 - b2) * g2
  c1 = 1 - b1 ** count.astype(jnp.float32)
  c2 = 1 - b2 ** count.astype(jnp.float32)

  def one(m, v, p, mult, decay):
    adam = (m / c1) / (jnp.sqrt(v / c2) + eps)
    glob = (m / c1) / (jnp.sqrt(nu_g / c2) + eps)
    sgd = m / (1 - b1)
    u = jnp.where(kind == 0, adam, jnp.where(kind == 1, glob, sgd))
    if not (weight_decay and decay):
      return p - lr_t * mult * u
    wd = weight_decay * wd_scale
    if decay_rule == "lr":
      return p - lr_t * (mult * u + wd * p)
    return p - lr_t * mult * (u + wd * p)

  new = jax.tree.map(one, mu, nu, params, mults, mask)
  return new, {"count": count, "mu": mu, "nu": nu, "nu_g": nu_g}, gnorm


def train_members(config, data: text_lib.TokenData, hybrid: model_lib.Hybrid,
                  members: list[dict], windows: dict, *, chunk: int = 0,
                  mapper=sharding.spread, update_groups: dict | None = None,
                  spectral: bool = False, schedule_steps: int | None = None) -> dict:
  """Trains `members` ([{seed, lr, num}]) of `hybrid`'s shape; returns per-member arrays.

  A member's num may hold 'wd_scale' (its weight decay is optim.weight_decay x wd_scale;
  every member of a call then needs it).

  windows: {'val': (Nv, T+1), 'test': (Nt, T+1)} held-out windows (Nv, Nt multiples of
  the batch size) scored after training. They are scored by extra iterations of the same
  scanned step with the update switched off, so training and scoring share one compiled
  body (compiles dominate the study's time on 2 CPU cores).
  chunk: members per compiled call (0: all); the last call is padded with copies.
  mapper: turns the per-member function into the batched program (default: vmapped with
  the member axis over every device; `lambda f: jax.jit(jax.vmap(f))` runs on one).
  update_groups: {group: [leaf path, ...]} (`update_groups(hybrid)`): then stats also
  hold 'upd/<group>' = ||W_t+1 - W_t||_F / ||W_t||_F over the group's leaves, every step,
  and with `spectral` also 'spec/<group>' (`update_ratios`: the operator-norm ratio).
  schedule_steps: the LR schedule's length (default: the steps trained), so a short run can
  train the first steps of a longer run's schedule (the same members' first steps).
  Held-out steps run the forward pass alone (a `lax.cond` on the unbatched train flag).
  Returns {'val_bpb', 'test_bpb', 'final_loss', 'diverged', 'loss_curve', 'stats'}; stats
  are the coordinate check's activation scales {name: (P, steps)} (model.forward).
  """
  o = config.optim
  if o.momentum != o.b1:
    raise ValueError("the unified update needs optim.momentum == optim.b1")
  steps, B, T = config.train.steps, config.train.batch_size, config.data.seq_len
  seeds = sorted({m["seed"] for m in members})
  get = text_lib.token_windows(data.train, B, T)
  train_toks = np.stack([np.stack([get(s, t) for s in seeds]) for t in range(steps)])
  names = list(windows)
  eval_toks = []
  for k in names:
    w = windows[k]
    if len(w) % B:
      raise ValueError(f"{len(w)} {k} windows are not a multiple of the batch size {B}")
    eval_toks += [np.broadcast_to(c[None], (len(seeds), B, T + 1)) for c in w.reshape(-1, B, T + 1)]
  toks = np.concatenate([train_toks, np.stack(eval_toks)]) if eval_toks else train_toks
  is_train = np.arange(len(toks)) < steps
  mask = hybrid.decay_mask
  nbytes = {k: float(data.token_bytes[windows[k][:, 1:]].sum()) for k in names}

  def one_member(seed_idx, key, lr, num):
    init_rng, _ = jax.random.split(key)
    params = hybrid.init(init_rng, num)
    sched = lm.schedule(config, lr, schedule_steps or steps)
    mults = hybrid.lr_mults(num)

    def loss_fn(p, toks_n):
      logits, stats = hybrid.forward(p, toks_n[seed_idx][:, :-1], num)
      nats = optax_xent(logits, toks_n[seed_idx][:, 1:])
      return jnp.mean(nats), (jnp.sum(nats), stats)

    ratios = lambda new_p, p: update_ratios(new_p, p, update_groups or {}, spectral=spectral)

    def train_step(carry, toks_n, t):
      params, opt, div = carry
      (loss, (nats, stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, toks_n)
      new_p, new_opt, gnorm = unified_update(
          grads, opt, params, kind=num["opt_kind"], lr_t=sched(t), mults=mults, mask=mask,
          b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay, clip_norm=o.clip_norm,
          decay_rule=o.get("decay_rule", "lr"), wd_scale=num.get("wd_scale", 1.0))
      ok = jnp.isfinite(loss) & jnp.isfinite(gnorm) & ~div
      keep = lambda a, b: jnp.where(ok, a, b)
      stats = {**stats, **ratios(new_p, params)}
      params = jax.tree.map(keep, new_p, params)
      opt = jax.tree.map(keep, new_opt, opt)
      div = div | ~ok
      return (params, opt, div), (jnp.where(div, jnp.nan, loss), jnp.where(div, jnp.nan, nats),
                                  stats)

    def eval_step(carry, toks_n, t):
      del t
      params, opt, div = carry
      loss, (nats, stats) = loss_fn(params, toks_n)
      stats = {**stats, **{k: jnp.zeros([], jnp.float32) for k in ratios(params, params)}}
      return carry, (jnp.where(div, jnp.nan, loss), jnp.where(div, jnp.nan, nats), stats)

    def step(carry, xs):
      toks_n, t, train = xs
      # `train` is the same for every member (unbatched), so the cond stays a branch
      return jax.lax.cond(train, train_step, eval_step, carry, toks_n, t)

    _, (losses, nats, stats) = jax.lax.scan(
        step, (params, unified_init(params), jnp.zeros([], bool)),
        (toks, jnp.arange(len(toks)), is_train))
    return losses, nats, stats

  run = mapper(one_member)

  P = len(members)
  chunk = chunk or P
  parts = []
  for start in range(0, P, chunk):
    part = members[start:start + chunk]
    part = part + [part[-1]] * (chunk - len(part))
    seed_idx = np.asarray([seeds.index(m["seed"]) for m in part], np.int32)
    keys = jnp.stack([jax.random.PRNGKey(m["seed"]) for m in part])
    lrs = np.asarray([m["lr"] for m in part], np.float32)
    parts.append(jax.device_get(run(seed_idx, keys, lrs,
                                    stack_numerics([m["num"] for m in part]))))
  losses, nats, stats = (jax.tree.map(lambda *xs: np.concatenate(xs)[:P], *[p[i] for p in parts])
                         for i in range(3))
  out = {"loss_curve": losses[:, :steps],
         "stats": {k: v[:, :steps] for k, v in stats.items()}}
  at = steps
  for k in names:
    n = len(windows[k]) // B
    out[f"{k}_bpb"] = nats[:, at:at + n].sum(1) / (math.log(2) * nbytes[k])
    at += n
  out["diverged"] = ~np.isfinite(losses[:, steps - 1])
  last = max(1, steps // 10)
  out["final_loss"] = losses[:, steps - last:steps].mean(1)
  return out


def _by_path(tree) -> dict:
  return {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def update_ratios(new_params, params, groups: dict, spectral: bool = False) -> dict:
  """{'upd/<group>': ||new - old||_F / ||old||_F} over each group's leaves (paths); with
  `spectral` also {'spec/<group>': the mean over the group's matrices of ||new - old||_2 /
  ||old||_2} (operator norms of the last two axes, i.e. of each (fan_in, fan_out) matrix of
  a leaf's leading repeat axis): the ratio muP's spectral condition (Yang, Simon and
  Bernstein 2023) keeps at Theta(1) in width."""
  new, old = _by_path(new_params), _by_path(params)
  out = {f"upd/{g}": jnp.sqrt(sum(jnp.sum(jnp.square(new[k] - old[k])) for k in ks)
                              / sum(jnp.sum(jnp.square(old[k])) for k in ks))
         for g, ks in groups.items()}
  if spectral:
    op = lambda x: jnp.linalg.norm(x.reshape((-1,) + x.shape[-2:]), ord=2, axis=(-2, -1))
    for g, ks in groups.items():
      r = jnp.concatenate([op(new[k] - old[k]) / op(old[k]) for k in ks])
      out[f"spec/{g}"] = jnp.mean(r)
  return out


# leaf name -> group of the update-to-weight ratio (`update_groups`)
UPDATE_GROUP = {"embed": "embed", "unembed": "unembed", "q": "attn_qkvo", "k": "attn_qkvo",
                "v": "attn_qkvo", "o": "attn_qkvo", "gate": "mlp", "up": "mlp", "down": "mlp",
                "in_x": "mamba_in", "in_z": "mamba_in", "out": "mamba_out",
                "x_dt": "ssm_dt", "dt_proj": "ssm_dt", "x_b": "ssm_b", "x_c": "ssm_c",
                "conv_w": "conv"}


def update_groups(hybrid: model_lib.Hybrid) -> dict:
  """{group: [leaf path]} of the matrices (and conv) whose ||dW||/||W|| is tracked."""
  from jaxpapers.nn import params as params_lib  # pylint: disable=g-import-not-at-top
  out = {}
  for path, _ in jax.tree_util.tree_flatten_with_path(hybrid.specs, is_leaf=params_lib.is_spec)[0]:
    name = getattr(path[-1], "key", None)
    if name in UPDATE_GROUP:
      out.setdefault(UPDATE_GROUP[name], []).append(jax.tree_util.keystr(path))
  return out


def optax_xent(logits_BxTxV, targets_BxT):
  import optax  # pylint: disable=g-import-not-at-top
  return optax.softmax_cross_entropy_with_integer_labels(
      logits_BxTxV.astype(jnp.float32), targets_BxT)
