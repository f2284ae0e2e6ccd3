"""Samplers of lhdlm's diffusion models: ancestral and tau-leaping, `steps` as an argument.

Both start from the prior at t = 1 (all masks; uniform tokens for UDLM) and walk a uniform
grid 1 = t_0 > ... > t_N = 0 in one `lax.scan`.

Ancestral: z_s ~ p(z_s | z_t) = sum_x p(x | z_t) q(z_s | z_t, x), with the model's
p(x | z_t) proportional to xhat_x q(z_t | x) (the reverse process the ELBO scores). For
the hierarchical CTMC with equal rates, L = int_s^t lam = gamma ln((1-s)/(1-t)):
  from mask:  token v w.p. alpha_s (1 - e^-L (1 + L)) xhat_v / m_t,
              cluster c w.p. c_s (1 - e^-L) (Gamma xhat)_c / m_t,  else stays masked;
  from c:     token v w.p. alpha_s L e^-L / c_t * xhat_v Gamma[c,v] / (Gamma xhat)_c, else stays.
Tau-leaping (Campbell et al. 2022): the model's reverse rates at t held over the step,
each position makes at most one jump with probability 1 - exp(-rate * dt) (the exact
jump law of a constant rate), destination proportional to the rates.
The last step (s = 0) always lands on a clean token (alpha_0 = 1), and a token drawn
from cluster c always has Gamma[c, v] > 0, so a sample never contains cluster or mask ids.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxpapers.papers.lhdlm import diffusion as dif

T_MAX = 1.0 - 1e-4


def _draw(rng, logw):
  return jax.random.categorical(rng, logw, axis=-1)


_CACHE = {}


def sample(rng, model, params, batch: int, length: int, steps: int, method: str = "ancestral"):
  """(batch, length) int32 clean tokens from a trained diffusion `model` (model.Diffusion)."""
  if method not in ("ancestral", "tau_leaping"):
    raise ValueError(f"sampler {method!r}; expected 'ancestral' or 'tau_leaping'")
  if model.kind == "ar":
    raise ValueError("the AR model is sampled left to right, not by a diffusion sampler")
  key = (id(model), batch, length, steps, method)
  if key not in _CACHE:  # one compiled program per model and shape
    _CACHE[key] = (model, jax.jit(lambda r, p: _sample(r, model, p, batch, length, steps,
                                                      method)))
  return _CACHE[key][1](rng, params)


def _sample(rng, model, params, batch, length, steps, method):
  V, C, g = model.V, model.C, model.gamma
  lg = model.log_gamma(params) if model.kind in ("hdlm", "lhdlm") else None
  apply = model.lm_model.apply
  ts = jnp.linspace(T_MAX, 0.0, steps + 1)
  k0, rng = jax.random.split(rng)
  if model.kind == "udlm":
    z0 = jax.random.randint(k0, (batch, length), 0, V)
  else:
    z0 = jnp.full((batch, length), model.mask_id, jnp.int32)

  def step(z, inp):
    t, s, key = inp
    tb = jnp.full((batch,), t)
    logp = jax.nn.log_softmax(model.logits(apply, params, z, tb).astype(jnp.float32), -1)
    fn = {"mdlm": _mdlm_step, "udlm": _udlm_step}.get(model.kind, _hier_step)
    return fn(key, z, logp, t, s, V, C, g, lg, method), None

  keys = jax.random.split(rng, steps)
  z, _ = jax.lax.scan(step, z0, (ts[:-1], ts[1:], keys))
  return z


def _jump(key, z, stay_logw, move_logw_BxTxK, targets_K):
  """Stay with weight exp(stay_logw) or move to targets_K[k] with exp(move_logw[..., k])."""
  logw = jnp.concatenate([stay_logw[..., None], move_logw_BxTxK], axis=-1)
  k = _draw(key, logw)
  return jnp.where(k == 0, z, targets_K[jnp.clip(k - 1, 0, len(targets_K) - 1)])


def _mdlm_step(key, z, logp, t, s, V, C, g, lg, method):
  a_t, a_s = dif.alpha(t, g), dif.alpha(s, g)
  if method == "ancestral":
    p_move = (a_s - a_t) / (1 - a_t)
  else:
    rate = g * a_t / (1 - t) / (1 - a_t)
    p_move = jnp.where(s == 0, 1.0, 1 - jnp.exp(-rate * (t - s)))
  stay = jnp.log1p(-jnp.minimum(p_move, 1.0) + 1e-30) * jnp.ones(z.shape)
  new = _jump(key, z, stay, jnp.log(p_move + 1e-30) + logp, jnp.arange(V))
  return jnp.where(z == V, new, z)


def _hier_step(key, z, logp, t, s, V, C, g, lg, method):
  a_t, c_t, m_t, lam = dif.hier_schedule(t, g)
  a_s, c_s, _, _ = dif.hier_schedule(s, g)
  log_gx = jax.nn.logsumexp(logp[..., None, :] + lg[None, None], axis=-1)       # (B,T,C)
  if method == "ancestral":
    L = g * (jnp.log1p(-s) - jnp.log1p(-t))
    p_tok_m = a_s * (1 - jnp.exp(-L) * (1 + L)) / m_t
    p_cl_m = c_s * (1 - jnp.exp(-L)) / m_t
    p_tok_c = a_s * L * jnp.exp(-L) / c_t
  else:
    dt = t - s
    r_m = lam * c_t / m_t            # total rate out of the mask (into clusters)
    r_c = lam * a_t / c_t            # total rate out of a cluster (into its tokens)
    last = s == 0
    p_tok_m = jnp.where(last, 1.0, 0.0)
    p_cl_m = jnp.where(last, 0.0, 1 - jnp.exp(-r_m * dt))
    p_tok_c = jnp.where(last, 1.0, 1 - jnp.exp(-r_c * dt))
  # from the mask: tokens (xhat), clusters (Gamma xhat), or stay
  move_m = jnp.concatenate([jnp.log(p_tok_m + 1e-30) + logp,
                            jnp.log(p_cl_m + 1e-30) + log_gx], axis=-1)
  stay_m = jnp.log(jnp.maximum(1 - p_tok_m - p_cl_m, 0.0) + 1e-30) * jnp.ones(z.shape)
  k1, k2 = jax.random.split(key)
  from_mask = _jump(k1, z, stay_m, move_m, jnp.arange(V + C))
  # from cluster c: token v with xhat_v Gamma[c, v] / (Gamma xhat)_c, or stay
  cidx = jnp.clip(z - V, 0, C - 1)
  lgc = lg[cidx]                                                                 # (B,T,V)
  lgxc = jnp.take_along_axis(log_gx, cidx[..., None], -1)
  move_c = jnp.log(p_tok_c + 1e-30) + logp + lgc - lgxc
  stay_c = jnp.log(jnp.maximum(1 - p_tok_c, 0.0) + 1e-30) * jnp.ones(z.shape)
  from_cl = _jump(k2, z, stay_c, move_c, jnp.arange(V))
  return jnp.where(z == V + C, from_mask, jnp.where(z >= V, from_cl, z))


def _udlm_step(key, z, logp, t, s, V, C, g, lg, method):
  a_t, a_s = dif.alpha(t, g), dif.alpha(s, g)
  xhat = jnp.exp(logp)
  onehot = jax.nn.one_hot(z, V)
  if method == "ancestral":
    # p(z_s = y | z_t) proportional to q(z_t | z_s = y) q_s(y | xhat)
    a_ts = a_t / a_s
    q_t_given_y = a_ts * onehot + (1 - a_ts) / V
    w = q_t_given_y * (a_s * xhat + (1 - a_s) / V)
    return _draw(key, jnp.log(w + 1e-30))
  # tau-leaping: rates beta/V q_t(y|xhat)/q_t(z|xhat) to every y != z
  beta = g / (1 - t)
  qm = a_t * xhat + (1 - a_t) / V
  qz = jnp.sum(qm * onehot, -1, keepdims=True)
  rates = jnp.where(onehot > 0, 0.0, beta / V * qm / qz)
  total = jnp.sum(rates, -1)
  p_move = jnp.where(s == 0, 0.0, 1 - jnp.exp(-total * (t - s)))
  logw = jnp.log(rates + 1e-30) - jnp.log(total[..., None] + 1e-30) + jnp.log(
      p_move[..., None] + 1e-30)
  k1, k2 = jax.random.split(key)
  moved = _jump(k1, z, jnp.log(1 - p_move + 1e-30), logw, jnp.arange(V))
  # the last step (s = 0) draws the clean token from the model's p(x | z_t)
  final = _draw(k2, logp + jnp.log(a_t * onehot + (1 - a_t) / V))
  return jnp.where(s == 0, final, moved)
