"""Success Visitation Matching (arXiv 2606.23640): the dense rewards and the baselines'.

The method (section "Choices" of the README): a discriminator D(s, a) is trained on the
state-action visitations of earlier trajectories, label 1 for every (s, a) of a
successful episode and 0 for every (s, a) of a failed one, class-balanced, so its
log-odds estimate log d_success(s, a) / d_fail(s, a). Its success probability at the
initial policy's action defines a potential Phi(s) = scale * sigma(D(s, mu_0(s))), and
the dense process reward is the potential difference

    r_dense(s, a, s') = gamma * Phi(s') - Phi(s),

added to the sparse outcome reward. Moving into state-actions that successful episodes
visit (and away from those failed ones visit) is rewarded at every step, yet every
policy's discounted return changes by the same -Phi(s_0), so the optimal policy is
unchanged (Ng et al. 1999; checked exactly in tabular.py).

The paper's per-step reading (methods `logd` and `logodds`): the same discriminator read
at the visited (s_t, a_t) as a reward, scale * log D(s_t, a_t) (GAIL / VICE style) or
scale * [log D - log(1 - D)] = scale * logit D(s_t, a_t) (the log density ratio
log d_success / d_fail under class balance). Neither is a potential difference, so
neither carries the no-change-of-optimal-policy guarantee (tests build a tabular MDP
where both change it).

Baselines: VICE-like success-only classifier C(s) (success states vs all visited
states; reward scale * max(log sigma(C(s')), -5)), the hand-shaped -scale * distance(s'),
and RND (scale * |f(s') - f_hat(s')|^2 / running std). Every lane of a population
computes all components and weighs them by its method's one-hot weights, so methods are
`vmap` lanes of one program.
"""
from __future__ import annotations

import typing

import jax
import jax.numpy as jnp

from jaxpapers.papers.visitation_reward import networks

METHODS = ("sparse", "svm", "vice", "distance", "rnd", "logd", "logodds")
COMPONENTS = ("svm", "vice", "distance", "rnd", "logd", "logodds")  # dense terms, in order
# Floors / clips of the log terms: a discriminator saturates on states it never saw, and
# one unbounded per-step reward would swamp the sparse 1 (VICE's floor is the same -5).
LOG_FLOOR = -5.0


def method_weights(method: str, scales) -> jnp.ndarray:
  """(len(COMPONENTS),) weights of the dense components for `method` (scales: dict component->scale)."""
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
  return jnp.asarray([scales[c] if c == method else 0.0 for c in COMPONENTS], jnp.float32)


class Buffer(typing.NamedTuple):
  """The last K rollouts (E episodes each): what "earlier trajectories" means here."""
  obs: jnp.ndarray  # (K, H+1, E, O)
  act: jnp.ndarray  # (K, H, E, A)
  state_success: jnp.ndarray  # (K, H+1, E) success(s_t)
  episode_success: jnp.ndarray  # (K, E) any success in the episode
  dist: jnp.ndarray  # (K, H+1, E) hand-shaped distance (SAC relabels rewards from it)
  count: jnp.ndarray  # rollouts inserted so far


def buffer_init(k, horizon, envs, obs_dim, act_dim) -> Buffer:
  return Buffer(jnp.zeros((k, horizon + 1, envs, obs_dim)), jnp.zeros((k, horizon, envs, act_dim)),
                jnp.zeros((k, horizon + 1, envs), bool), jnp.zeros((k, envs), bool),
                jnp.zeros((k, horizon + 1, envs)), jnp.zeros((), jnp.int32))


def buffer_add(buf: Buffer, obs, act, state_success, dist=None) -> Buffer:
  i = buf.count % buf.obs.shape[0]
  ep = state_success[1:].any(0)
  dist = jnp.zeros(state_success.shape) if dist is None else dist
  return Buffer(buf.obs.at[i].set(obs), buf.act.at[i].set(act),
                buf.state_success.at[i].set(state_success), buf.episode_success.at[i].set(ep),
                buf.dist.at[i].set(dist), buf.count + 1)


class Aux(typing.NamedTuple):
  """Parameters and optimiser states of the discriminators and RND."""
  disc: list  # D(s, a) -> logit, success vs failure visitations (the method)
  disc_opt: typing.Any
  vice: list  # C(s) -> logit, success states vs all visited states (VICE-like)
  vice_opt: typing.Any
  rnd_target: list  # fixed random features
  rnd_pred: list
  rnd_opt: typing.Any
  rnd_sq: jnp.ndarray  # EMA of the squared intrinsic reward (normaliser)


def aux_init(key, obs_dim, act_dim, hidden) -> Aux:
  kd, kv, kt, kp = jax.random.split(key, 4)
  opt = networks.adam()
  disc = networks.mlp_init(kd, [obs_dim + act_dim, hidden, hidden, 1], 0.01)
  vice = networks.mlp_init(kv, [obs_dim, hidden, hidden, 1], 0.01)
  tgt = networks.mlp_init(kt, [obs_dim, hidden, 16])
  pred = networks.mlp_init(kp, [obs_dim, hidden, 16])
  return Aux(disc, opt.init(disc), vice, opt.init(vice), tgt, pred, opt.init(pred),
             jnp.ones(()))


def disc_logit(params, obs, act):
  return networks.mlp_apply(params, jnp.concatenate([obs, act], -1))[..., 0]


def potential(aux: Aux, actor0, obs, scale):
  """Phi(s) = scale * P(success | s, mu_0(s)) under the (s, a) discriminator."""
  return scale * jax.nn.sigmoid(disc_logit(aux.disc, obs, networks.actor_mean(actor0, obs)))


def rnd_error(aux: Aux, obs):
  f = networks.mlp_apply(aux.rnd_target, obs)
  return jnp.mean((networks.mlp_apply(aux.rnd_pred, obs) - f) ** 2, -1)


def dense_components(aux: Aux, actor0, obs, next_obs, next_dist, gamma, act):
  """(..., 6) unscaled dense terms per transition (s, a, s'), in COMPONENTS order:
  [svm shaping gamma Phi(s') - Phi(s), vice, -distance, rnd, log D(s, a), logit D(s, a)].

  Only the first is potential-based; the last two are the paper's per-step reading of the
  discriminator at the visited state-action (floored / clipped at LOG_FLOOR)."""
  svm = gamma * potential(aux, actor0, next_obs, 1.0) - potential(aux, actor0, obs, 1.0)
  vice = jnp.maximum(jax.nn.log_sigmoid(networks.mlp_apply(aux.vice, next_obs)[..., 0]),
                     LOG_FLOOR)
  rnd = rnd_error(aux, next_obs) / jnp.sqrt(aux.rnd_sq + 1e-8)
  logit = disc_logit(aux.disc, obs, act)
  logd = jnp.maximum(jax.nn.log_sigmoid(logit), LOG_FLOOR)
  logodds = jnp.clip(logit, LOG_FLOOR, -LOG_FLOOR)
  return jnp.stack([svm, vice, -next_dist, rnd, logd, logodds], -1)


def _bce(logits, labels):
  return -(labels * jax.nn.log_sigmoid(logits) + (1 - labels) * jax.nn.log_sigmoid(-logits))


def _sample(key, mask, n):
  """n flat indices drawn uniformly among True entries of `mask` (index 0 if none).

  Inverse-CDF on the running count: O(N + n log N), where a categorical over N entries
  would draw n x N Gumbel variates (that dominated the run time).
  """
  csum = jnp.cumsum(mask.reshape(-1).astype(jnp.int32))
  u = jax.random.randint(key, (n,), 0, jnp.maximum(csum[-1], 1))
  return jnp.searchsorted(csum, u, side="right")


def aux_train(aux: Aux, buf: Buffer, new_obs, key, steps: int, batch: int, lr: float) -> Aux:
  """`steps` Adam steps of each discriminator on the buffer and of RND on `new_obs`.

  Discriminator minibatches are class balanced: half from successful episodes' (s, a),
  half from failed ones'; a class absent from the buffer drops its term.
  """
  opt = networks.adam()
  k_, h1, e, o = buf.obs.shape
  h = h1 - 1
  filled = jnp.arange(k_) < buf.count
  sa_obs = buf.obs[:, :h].reshape(-1, o)
  sa_act = buf.act.reshape(-1, buf.act.shape[-1])
  ep = jnp.broadcast_to(buf.episode_success[:, None, :], (k_, h, e))
  valid = jnp.broadcast_to(filled[:, None, None], (k_, h, e))
  pos, neg = ep & valid, (~ep) & valid
  has_pos, has_neg = pos.any(), neg.any()
  st_obs = buf.obs.reshape(-1, o)
  st_valid = jnp.broadcast_to(filled[:, None, None], (k_, h1, e))
  st_pos = buf.state_success & st_valid
  has_goal = st_pos.any()
  flat_new = new_obs.reshape(-1, o)

  def body(a: Aux, k):
    k1, k2, k3, k4, k5 = jax.random.split(k, 5)
    ip, ineg = _sample(k1, pos, batch // 2), _sample(k2, neg, batch // 2)

    def dloss(p):
      lp = _bce(disc_logit(p, sa_obs[ip], sa_act[ip]), 1.0).mean()
      ln = _bce(disc_logit(p, sa_obs[ineg], sa_act[ineg]), 0.0).mean()
      return jnp.where(has_pos, lp, 0.0) + jnp.where(has_neg, ln, 0.0)

    jp, jall = _sample(k3, st_pos, batch // 2), _sample(k4, st_valid, batch // 2)

    def vloss(p):
      lp = _bce(networks.mlp_apply(p, st_obs[jp])[..., 0], 1.0).mean()
      ln = _bce(networks.mlp_apply(p, st_obs[jall])[..., 0], 0.0).mean()
      return jnp.where(has_goal, lp, 0.0) + ln

    idx = jax.random.randint(k5, (batch,), 0, flat_new.shape[0])

    def rloss(p):
      f = networks.mlp_apply(a.rnd_target, flat_new[idx])
      return jnp.mean((networks.mlp_apply(p, flat_new[idx]) - f) ** 2)

    disc, disc_opt = networks.adam_step(opt, a.disc, a.disc_opt, jax.grad(dloss)(a.disc), lr)
    vice, vice_opt = networks.adam_step(opt, a.vice, a.vice_opt, jax.grad(vloss)(a.vice), lr)
    pred, rnd_opt = networks.adam_step(opt, a.rnd_pred, a.rnd_opt,
                                       jax.grad(rloss)(a.rnd_pred), lr)
    return a._replace(disc=disc, disc_opt=disc_opt, vice=vice, vice_opt=vice_opt,
                      rnd_pred=pred, rnd_opt=rnd_opt), None

  aux, _ = jax.lax.scan(body, aux, jax.random.split(key, steps))
  return aux


def rnd_update_normaliser(aux: Aux, next_obs, decay: float = 0.9) -> Aux:
  err = rnd_error(aux, next_obs)
  return aux._replace(rnd_sq=decay * aux.rnd_sq + (1 - decay) * jnp.mean(err**2))
