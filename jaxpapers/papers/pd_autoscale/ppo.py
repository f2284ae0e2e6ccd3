"""Learned autoscaling of PD-disaggregated LLM serving (abstract 12): PPO-Lagrangian.

The controller is trained with PPO (clipped surrogate, GAE) on the Lagrangian of

  minimise E[sum_t GPUs_t]  subject to  (requests violating TTFT or TPOT) / requests <= budget

which is the abstract's "minimise GPU usage while keeping P99 tail latency within TTFT and
TPOT targets" (P99 <= target  <=>  at most 1% of requests miss it; the budget sits below
1% for a margin). Reward r_t = -GPUs_t / gpu_norm; cost c_t = violations_t - budget x
arrivals_t (normalised by rate_norm x interval). Separate value heads for r and c; the
advantage is A_r - lambda A_c; lambda follows dual ascent on the batch's violation
fraction: lambda <- clip(lambda + lam_lr min(viol / budget - 1, step_cap), 0, lam_max).
The step is linear in the violating fraction, so its expectation is zero exactly where
the MEAN fraction equals the budget. (The first version clipped it to [-1, 1]: then an
episode with no violation moved lambda down as far as one with 40x the budget moved it
up, and lambda settled where about half of the episodes were under budget: the median,
not the mean. In the committed study the mean violating fraction stayed at 6.5-11% while
lambda fell; review rev39, B1.) Below step_cap the step is exact. With dual_log (the
study's default) the same step moves log lambda: a clean iteration multiplies lambda by
exp(-lam_lr), so the early overshoot (the random initial policy violates on 30-50% of
requests) comes down in tens of iterations, where the linear step took lambda / lam_lr
(README, Controller; results/dual_diagnostic.md). We chose the
Lagrangian over a fixed penalty because the penalty weight that makes P99 land at the
target differs by trace family and load, and would itself need a grid search.

Multipliers (`PPOSpec.per_family`): the constraint is the SLO on each workload, so with
per_family=True there is one multiplier per training trace family, each updated from its
own family's violation fraction only, and each family's Lagrangian advantage is
standardised within the family. With one shared multiplier (per_family=False, the
original set-up) a family whose targets no controller can meet within the pool bounds
keeps the shared lambda climbing and pushes every family's pools to the maximum (README,
Results); per family, a large multiplier weighs only its own episodes.

A member (one seed x learning rate) is a train state; `iteration` is one rollout of
`envs` clusters (whole episodes, the GRU carried through) and `update_epochs` passes of
minibatched PPO over full sequences. Members are vmapped (and spread over devices by
core.sharding.spread).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxpapers.papers.pd_autoscale import episode
from jaxpapers.papers.pd_autoscale import policy
from jaxpapers.papers.pd_autoscale import simulator as sim


class PPOSpec(NamedTuple):
  envs: int = 8
  update_epochs: int = 4
  minibatches: int = 2
  clip: float = 0.2
  gamma: float = 0.98
  gae: float = 0.95
  ent: float = 0.01
  vf: float = 0.5
  max_grad_norm: float = 0.5
  budget: float = 0.005
  lam_init: float = 5.0
  # Dual step per iteration: lam_lr x (violating fraction / budget - 1), at most
  # lam_lr x step_cap. A clean iteration lowers lambda by lam_lr (0.05); one at 10x the
  # budget raises it by 0.45.
  lam_lr: float = 0.05
  step_cap: float = 100.0
  lam_max: float = 100.0
  # Log-space dual step (dual_log=True): log lambda += lam_lr x min(fraction / budget - 1,
  # step_cap), lambda in [lam_min, lam_max]. A clean iteration multiplies lambda by
  # exp(-lam_lr), so it comes down from an early overshoot geometrically instead of by
  # lam_lr per iteration (the linear step needed ~1000 iterations; README, Controller).
  dual_log: bool = False
  lam_min: float = 0.01
  n_fam: int = 1  # training trace families (multipliers and per-family metrics)
  per_family: bool = True  # one multiplier per family (False: one shared multiplier)


class TrainState(NamedTuple):
  params: dict  # network weights
  flags: dict  # ablation switches (policy.flags), constant
  opt: tuple
  lam: jax.Array  # [n_fam]; all equal when the multiplier is shared
  step: jax.Array


def optimizer(max_grad_norm):
  return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                     optax.inject_hyperparams(optax.adam)(learning_rate=1e-3))


def init_member(key, lr, flags, ps: policy.PolicySpec, pp: PPOSpec) -> TrainState:
  params = policy.init_params(key, ps)
  opt = optimizer(pp.max_grad_norm).init(params)
  opt[1].hyperparams["learning_rate"] = jnp.asarray(lr, jnp.float32)
  return TrainState(params, flags, opt, jnp.full((pp.n_fam,), pp.lam_init, jnp.float32),
                    jnp.int32(0))


def _gae(rew, val, gamma, lam):
  """Advantages for one episode (T,), bootstrapping the truncated end with its value."""
  nxt = jnp.concatenate([val[1:], val[-1:]])
  delta = rew + gamma * nxt - val

  def step(carry, d):
    carry = d + gamma * lam * carry
    return carry, carry
  _, adv = jax.lax.scan(step, 0.0, delta[::-1])
  return adv[::-1]


def signals(spec: sim.Spec, ps: policy.PolicySpec, pp: PPOSpec, rows):
  # x (1 - gamma): discounted sums of order one, so the value heads start close.
  norm = ps.rate_norm * spec.epoch_s / (1.0 - pp.gamma)
  rew = -rows["gpus"] / ps.gpu_norm * (1.0 - pp.gamma)
  viol = rows["ttft_viol"] + rows["tpot_viol"]
  cost = (viol - pp.budget * rows["arrivals"]) / norm
  return rew, cost, viol


def lagrangian_advantage(adv_r, adv_c, lam, fam, pp: PPOSpec):
  """Standardised A_r - lambda_f A_c per env [envs, T]; fam [envs] is each env's family.

  Shared multiplier: lam's entries are equal and the standardisation is over the batch.
  Per family: each env uses its family's lambda and is standardised with its family's
  envs only (an infeasible family's saturated lambda does not shrink the others' step)."""
  adv = adv_r - lam[fam][:, None] * adv_c
  if not pp.per_family:
    return (adv - adv.mean()) / (adv.std() + 1e-8)
  onehot = (fam[:, None] == jnp.arange(pp.n_fam)[None]).astype(adv.dtype)  # [envs, F]
  cnt = jnp.maximum(onehot.sum(0) * adv.shape[1], 1.0)
  mean = (onehot.T @ adv.sum(1)) / cnt
  var = (onehot.T @ ((adv - mean[fam][:, None]) ** 2).sum(1)) / cnt
  return (adv - mean[fam][:, None]) / (jnp.sqrt(var)[fam][:, None] + 1e-8)


def dual_update(lam, viol, arrivals, fam, pp: PPOSpec):
  """Dual ascent on lambda from the batch's violating fraction: one shared fraction, or
  each family's own (families absent from the batch keep their multiplier)."""
  onehot = (fam[:, None] == jnp.arange(pp.n_fam)[None]).astype(jnp.float32)  # [envs, F]
  v_f, a_f = onehot.T @ viol.sum(1), onehot.T @ arrivals.sum(1)
  frac_f = v_f / jnp.maximum(a_f, 1.0)
  frac = jnp.sum(viol) / jnp.maximum(jnp.sum(arrivals), 1.0)
  # Linear in the fraction (mean-tracking; >= -1 since frac >= 0), capped for safety only.
  step = jnp.minimum(jnp.where(pp.per_family, frac_f, frac) / pp.budget - 1.0, pp.step_cap)
  seen = (onehot.sum(0) > 0) | (not pp.per_family)
  if pp.dual_log:  # the same step on log lambda: still zero on average at the budget
    new = jnp.clip(lam * jnp.exp(pp.lam_lr * step), pp.lam_min, pp.lam_max)
  else:
    new = jnp.clip(lam + pp.lam_lr * step, 0.0, pp.lam_max)
  return jnp.where(seen, new, lam), frac, frac_f


def make_iteration(spec: sim.Spec, ps: policy.PolicySpec, pp: PPOSpec, epochs: int):
  """iteration(ts, wl [envs, ...], n0 [envs, 2], key, fam [envs]) -> (ts, metrics) for
  one member; fam is each env's training family (index into the multipliers)."""
  ctrl = policy.controller(spec, ps)
  ep = episode.episode_fn(spec, ctrl, epochs)
  tx = optimizer(pp.max_grad_norm)

  def loss_fn(params, flags, batch):
    full = dict(net=params, flags=flags)
    logits, vr, vc = jax.vmap(lambda x, m: policy.sequence_logits(full, ps, x, m))(
        batch["x"], batch["mask"])
    logp_all = jax.nn.log_softmax(logits, -1)  # [B, T, 2, 5]
    logp = jnp.sum(jnp.take_along_axis(logp_all, batch["a"][..., None], -1)[..., 0], -1)
    ratio = jnp.exp(logp - batch["logp"])
    adv = batch["adv"]
    pg = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - pp.clip, 1 + pp.clip) * adv))
    probs = jnp.exp(logp_all)
    ent = -jnp.mean(jnp.sum(jnp.where(probs > 0, probs * logp_all, 0.0), -1))
    vloss = jnp.mean((vr - batch["ret_r"]) ** 2) + jnp.mean((vc - batch["ret_c"]) ** 2)
    return pg + pp.vf * vloss - pp.ent * ent, dict(pg=pg, v=vloss, ent=ent,
                                                    kl=jnp.mean(batch["logp"] - logp))

  def iteration(ts: TrainState, wl, n0, key, fam):
    k_roll, k_perm = jax.random.split(jax.random.fold_in(key, ts.step))
    fut = jnp.zeros((pp.envs, epochs, 2))
    _, rows = jax.vmap(ep, in_axes=(None, 0, 0, 0, 0))(
        dict(net=ts.params, flags=ts.flags), wl, fut, n0, jax.random.split(k_roll, pp.envs))
    rew, cost, viol = signals(spec, ps, pp, rows)
    adv_r = jax.vmap(lambda r, v: _gae(r, v, pp.gamma, pp.gae))(rew, rows["v_r"])
    adv_c = jax.vmap(lambda r, v: _gae(r, v, pp.gamma, pp.gae))(cost, rows["v_c"])
    adv = lagrangian_advantage(adv_r, adv_c, ts.lam, fam, pp)
    batch = dict(x=rows["x"], mask=rows["mask"], a=rows["a"], logp=rows["logp"], adv=adv,
                 ret_r=adv_r + rows["v_r"], ret_c=adv_c + rows["v_c"])
    mb = pp.envs // pp.minibatches

    def epoch_step(carry, k):
      params, opt = carry
      perm = jax.random.permutation(k, pp.envs)

      def mb_step(carry, i):
        params, opt = carry
        idx = jax.lax.dynamic_slice_in_dim(perm, i * mb, mb)
        sub = jax.tree.map(lambda x: x[idx], batch)
        (_, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(params, ts.flags, sub)
        upd, opt = tx.update(g, opt, params)
        return (optax.apply_updates(params, upd), opt), aux
      return jax.lax.scan(mb_step, (params, opt), jnp.arange(pp.minibatches))

    (params, opt), aux = jax.lax.scan(epoch_step, (ts.params, ts.opt),
                                      jax.random.split(k_perm, pp.update_epochs))
    lam, frac, frac_f = dual_update(ts.lam, viol, rows["arrivals"], fam, pp)
    onehot = (fam[:, None] == jnp.arange(pp.n_fam)[None]).astype(jnp.float32)
    gpus_f = (onehot.T @ rows["gpus"].mean(1)) / jnp.maximum(onehot.sum(0), 1.0)
    metrics = dict(gpus=jnp.mean(rows["gpus"]), viol_frac=frac, lam=jnp.mean(ts.lam),
                   lam_f=ts.lam, viol_f=frac_f, gpus_f=gpus_f, seen_f=onehot.sum(0) > 0,
                   ret=jnp.mean(jnp.sum(rew, -1)), **{k: jnp.mean(v) for k, v in aux.items()})
    return TrainState(params, ts.flags, opt, lam, ts.step + 1), metrics

  return iteration
