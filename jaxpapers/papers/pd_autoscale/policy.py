"""Learned autoscaling of PD-disaggregated LLM serving (abstract 12): the RL controller.

The policy (abstract: "a recurrent network to track multi-timescale workload trends and
pod lifecycle states", "hard masks and anti-oscillation cooldowns"):

  features  request rate and prompt-token rate at EMAs of 15 s, 60 s and 300 s plus the
            last interval's value, mean output length, prefill queue (requests, tokens) and
            busy fraction, decode queue, KV utilisation, pods starting / ready / draining
            per pool, the last interval's TTFT and TPOT violation fractions (delayed SLO
            feedback: a request's TPOT is known only when it finishes), and which
            directions the cooldowns allow;
  network   Dense(64, tanh) -> GRU(64) -> two categorical heads (prefill, decode) over
            pod deltas {-2, -1, 0, +1, +2} and two value heads (GPU reward, SLO cost);
            `recurrent=False` replaces the GRU by a Dense layer (the ablation);
  masks     a delta is allowed only if the pool stays within [min, max] pods counting
            starting pods, and a removal only takes ready pods (a starting pod cannot be
            cancelled);
  cooldowns no scale-down within `cooldown_down_s` after a scale-up of that pool, no
            scale-up within `cooldown_up_s` after a scale-down (anti-oscillation).

Without masks (flag masks=False) the policy samples every delta and what the cluster
cannot do is a no-op; without cooldowns (cooldowns=False) reversals are always allowed.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxpapers.papers.pd_autoscale import episode
from jaxpapers.papers.pd_autoscale import simulator as sim

DELTAS = jnp.array([-2, -1, 0, 1, 2], jnp.int32)
N_ACT = 5
EMA_S = (15.0, 60.0, 300.0)
N_FEAT = 2 * (len(EMA_S) + 1) + 2 + 5 + 6 + 2 + 4


class PolicySpec(NamedTuple):
  """Static sizes; the ablation switches are per-member `flags` (one compiled program)."""
  hidden: int = 64
  cooldown_down_s: float = 60.0
  cooldown_up_s: float = 30.0
  rate_norm: float = 8.0  # requests/s that map to feature 1
  gpu_norm: float = 10.0


def _dense(key, n_in, n_out, scale=1.0):
  w = jax.random.normal(key, (n_in, n_out)) * scale / jnp.sqrt(n_in)
  return dict(w=w, b=jnp.zeros((n_out,)))


def init_params(key, ps: PolicySpec):
  k = jax.random.split(key, 8)
  h = ps.hidden
  return dict(inp=_dense(k[0], N_FEAT, h), gru_x=_dense(k[1], h, 3 * h),
              gru_h=_dense(k[2], h, 3 * h), mlp=_dense(k[3], h, h),
              pi_p=_hold(_dense(k[4], h, N_ACT, 0.01)), pi_d=_hold(_dense(k[5], h, N_ACT, 0.01)),
              v_r=_dense(k[6], h, 1), v_c=_dense(k[7], h, 1))


def _hold(d, bias=2.0):
  """Starts the policy mostly holding (delta 0 ~ 65%), exploring the other deltas."""
  d["b"] = d["b"].at[N_ACT // 2].set(bias)
  return d


def _apply(d, x):
  return x @ d["w"] + d["b"]


def flags(recurrent=True, masks=True, cooldowns=True):
  return dict(recurrent=jnp.bool_(recurrent), masks=jnp.bool_(masks),
              cooldowns=jnp.bool_(cooldowns))


def core(params, ps: PolicySpec, h, x, recurrent=True):
  """One step of the network: (new hidden, logits_p, logits_d, v_r, v_c).

  recurrent=False (the ablation): a Dense layer on the current features, no memory."""
  z = jnp.tanh(_apply(params["inp"], x))
  gx, gh = _apply(params["gru_x"], z), _apply(params["gru_h"], h)
  H = ps.hidden
  r = jax.nn.sigmoid(gx[..., :H] + gh[..., :H])
  u = jax.nn.sigmoid(gx[..., H:2 * H] + gh[..., H:2 * H])
  n = jnp.tanh(gx[..., 2 * H:] + r * gh[..., 2 * H:])
  h_new = (1 - u) * n + u * h
  y = jnp.where(recurrent, h_new, jnp.tanh(_apply(params["mlp"], z)))
  h = jnp.where(recurrent, h_new, jnp.zeros_like(h))
  return (h, _apply(params["pi_p"], y), _apply(params["pi_d"], y),
          _apply(params["v_r"], y)[..., 0], _apply(params["v_c"], y)[..., 0])


def action_mask(spec: sim.Spec, ps: PolicySpec, obs, last_up, last_down, e, cooldowns=True):
  """[2, 5] booleans: which deltas each pool may take now."""
  masks = []
  for i, (pool, lo, hi) in enumerate((("p", spec.min_prefill, spec.max_prefill),
                                      ("d", spec.min_decode, spec.max_decode))):
    active = obs[f"{pool}_ready"] + obs[f"{pool}_starting"]
    ready = obs[f"{pool}_ready"]
    dl = DELTAS.astype(jnp.float32)
    ok = (active + dl <= hi) & (active + dl >= lo) & (-dl <= ready)
    cool_down = cooldowns & ((e - last_up[i]) * spec.epoch_s < ps.cooldown_down_s)
    cool_up = cooldowns & ((e - last_down[i]) * spec.epoch_s < ps.cooldown_up_s)
    ok = ok & ~((dl < 0) & cool_down) & ~((dl > 0) & cool_up)
    ok = ok | (DELTAS == 0)  # doing nothing is always allowed
    masks.append(ok)
  return jnp.stack(masks)


def features(spec: sim.Spec, ps: PolicySpec, obs, ema, mask):
  rate = obs["arrivals"] / spec.epoch_s / ps.rate_norm
  toks = obs["arrived_tokens"] / spec.epoch_s / (ps.rate_norm * 1000.0)
  rp = jnp.maximum(obs["p_ready"], 1.0)
  rd = jnp.maximum(obs["d_ready"], 1.0)
  mean_out = jnp.where(obs["finished"] > 0, obs["out_tokens"] / jnp.maximum(obs["finished"], 1),
                       ema["out"])
  f = [rate, toks, *ema["rate"], *ema["toks"], mean_out / 200.0, ema["out"] / 200.0,
       obs["queue"] / (4.0 * rp), obs["queue_tokens"] / (spec.token_budget * rp),
       obs["prefill_busy"] / (spec.epoch_s * rp), obs["dqueue"] / (4.0 * rd), obs["kv_util"],
       obs["p_starting"] / spec.max_prefill, obs["p_ready"] / spec.max_prefill,
       obs["p_draining"] / spec.max_prefill, obs["d_starting"] / spec.max_decode,
       obs["d_ready"] / spec.max_decode, obs["d_draining"] / spec.max_decode,
       obs["ttft_viol"] / jnp.maximum(obs["first_tokens"], 1.0),
       obs["tpot_viol"] / jnp.maximum(obs["finished"], 1.0),
       mask[0, 0] | mask[0, 1], mask[0, 3] | mask[0, 4], mask[1, 0] | mask[1, 1],
       mask[1, 3] | mask[1, 4]]
  return jnp.clip(jnp.stack([jnp.asarray(v, jnp.float32) for v in f]), -10.0, 10.0)


def update_ema(spec: sim.Spec, ps: PolicySpec, ema, obs, first):
  rate = obs["arrivals"] / spec.epoch_s / ps.rate_norm
  toks = obs["arrived_tokens"] / spec.epoch_s / (ps.rate_norm * 1000.0)
  out = jnp.where(obs["finished"] > 0, obs["out_tokens"] / jnp.maximum(obs["finished"], 1),
                  ema["out"])
  a = jnp.array([min(spec.epoch_s / s, 1.0) for s in EMA_S])
  a = jnp.where(first, 1.0, a)
  return dict(rate=(1 - a) * ema["rate"] + a * rate, toks=(1 - a) * ema["toks"] + a * toks,
              out=(1 - a[1]) * ema["out"] + a[1] * out)


def controller(spec: sim.Spec, ps: PolicySpec, greedy: bool = False):
  """The policy as an episode.Controller over params = dict(net=..., flags=flags(...));
  aux returns what PPO needs per decision."""

  def init(params):
    del params
    k = len(EMA_S)
    return dict(h=jnp.zeros((ps.hidden,)), ema=dict(rate=jnp.zeros((k,)), toks=jnp.zeros((k,)),
                                                   out=jnp.float32(200.0)),
                last_up=jnp.full((2,), -10 ** 6, jnp.int32),
                last_down=jnp.full((2,), -10 ** 6, jnp.int32))

  def act(params, cs, obs, key):
    fl = params["flags"]
    e = obs["epoch"].astype(jnp.int32)
    ema = update_ema(spec, ps, cs["ema"], obs, e <= 1)
    mask = action_mask(spec, ps, obs, cs["last_up"], cs["last_down"], e, fl["cooldowns"])
    x = features(spec, ps, obs, ema, mask)
    h, lp, ld, vr, vc = core(params["net"], ps, cs["h"], x, fl["recurrent"])
    logits = jnp.where(mask | ~fl["masks"], jnp.stack([lp, ld]), -1e9)
    if greedy:
      a = jnp.argmax(logits, axis=-1)
    else:
      a = jax.random.categorical(key, logits, axis=-1)
    logp = jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), a[:, None], -1))
    delta = DELTAS[a]
    # Unmasked (ablation): what the cluster cannot do (or a cooldown forbids) is a no-op.
    delta = jnp.where(jnp.take_along_axis(mask, a[:, None], -1)[:, 0], delta, 0)
    active = jnp.stack([obs["p_ready"] + obs["p_starting"],
                        obs["d_ready"] + obs["d_starting"]]).astype(jnp.int32)
    target = active + delta
    last_up = jnp.where(delta > 0, e, cs["last_up"])
    last_down = jnp.where(delta < 0, e, cs["last_down"])
    cs = dict(h=h, ema=ema, last_up=last_up, last_down=last_down)
    aux = dict(x=x, a=a, logp=logp, v_r=vr, v_c=vc, mask=mask, delta=delta)
    return cs, target[0], target[1], aux

  return episode.Controller("ppo_greedy" if greedy else "ppo", init, act)


def sequence_logits(params, ps: PolicySpec, xs, masks):
  """Re-runs the network over a whole episode's features xs [T, F] from a zero state."""
  fl = params["flags"]

  def step(h, inp):
    x, m = inp
    h, lp, ld, vr, vc = core(params["net"], ps, h, x, fl["recurrent"])
    logits = jnp.where(m | ~fl["masks"], jnp.stack([lp, ld]), -1e9)
    return h, (logits, vr, vc)
  _, out = jax.lax.scan(step, jnp.zeros((ps.hidden,)), (xs, masks))
  return out
