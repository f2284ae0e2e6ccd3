"""Success Visitation Matching (arXiv 2606.23640): SAC fine-tuning (continuous manipulation).

Soft actor-critic (Haarnoja et al. 2018: twin Q, target networks, learned temperature
with target entropy -|A|) started from the behaviour-cloned actor, as in robot-policy
fine-tuning (e.g. RLPD-style). The replay buffer is the episode buffer of rewards.py;
rewards are relabelled at sampling time from the stored observations with the CURRENT
discriminators (the dense terms move as they are retrained), so every method is again
a vector of component weights and a population is one vmap. The actor is
tanh(MLP(obs) + std * eps) with a state-independent log std, so the BC network is its
mean exactly.

RLPD-style variant (`cfg.sac_rlpd`, Ball et al. 2023, "Efficient online RL with offline
data"; issue 48): every minibatch is half demonstrations, half online replay (symmetric
sampling), the critics apply LayerNorm to every hidden pre-activation (bounds the Q
extrapolation to unseen actions that made the plain critic drift), and the
update-to-data ratio is `cfg.sac_utd` gradient steps per environment step (>= 1). The
demonstrations are fresh noisy scripted episodes of the BC data's size and noise (not
the BC episodes themselves). Not taken from RLPD: its ensemble of 10 critics (twin Q
here) and its 256-unit ReLU networks.
"""
from __future__ import annotations

import typing

import jax
import jax.numpy as jnp

from jaxpapers.papers.visitation_reward import envs, networks, rewards
from jaxpapers.papers.visitation_reward.ppo import episode_stats, eval_key, evaluate


class SacState(typing.NamedTuple):
  actor: list
  log_std: jnp.ndarray
  q: tuple  # twin critics
  q_targ: tuple
  log_alpha: jnp.ndarray
  a_opt: typing.Any
  q_opt: typing.Any
  al_opt: typing.Any
  aux: rewards.Aux
  buf: rewards.Buffer


def sample_action(actor, log_std, obs, key):
  """(tanh-squashed action, log-probability with the tanh correction)."""
  u_mean = networks.mlp_apply(actor, obs)
  std = networks.lift(jnp.exp(log_std), u_mean)
  u = u_mean + std * jax.random.normal(key, u_mean.shape)
  logp = networks.gaussian_logp(u_mean, log_std, u)
  logp = logp - jnp.sum(jnp.log(1.0 - jnp.tanh(u) ** 2 + 1e-6), -1)
  return jnp.tanh(u), logp


def layer_norm(h, eps=1e-6):
  """LayerNorm without a learned gain / bias over the last axis."""
  mu = h.mean(-1, keepdims=True)
  return (h - mu) * jax.lax.rsqrt(((h - mu) ** 2).mean(-1, keepdims=True) + eps)


def q_value(q, obs, act, ln: bool = False):
  """Q(s, a); with ln, LayerNorm on every hidden pre-activation (RLPD's critic)."""
  x = jnp.concatenate([obs, act], -1)
  if not ln:
    return networks.mlp_apply(q, x)[..., 0]
  for w, b in q[:-1]:
    h = x @ w
    x = jnp.tanh(layer_norm(h + networks.lift(b, h)))
  w, b = q[-1]
  h = x @ w
  return (h + networks.lift(b, h))[..., 0]


def demo_buffer(task: envs.Task, key, episodes: int, noise: float) -> rewards.Buffer:
  """One buffer row of `episodes` noisy scripted episodes (the demonstrations RLPD
  replays beside the online data), as bc.demonstrations draws them."""
  def pol(obs, s, k):
    return task.expert(s, k) + noise * jax.random.normal(k, (task.act_dim,))
  states, actions = jax.vmap(lambda k: envs.rollout(task, pol, k), out_axes=1)(
      jax.random.split(key, episodes))  # time-major: (H+1, E, ...)
  succ_t, _ = episode_stats(task, states)
  buf = rewards.buffer_init(1, task.horizon, episodes, task.obs_dim, task.act_dim)
  return rewards.buffer_add(buf, jax.vmap(jax.vmap(task.obs))(states), actions, succ_t,
                            jax.vmap(jax.vmap(task.distance))(states))


def sample_transitions(b: rewards.Buffer, key, n: int):
  """n uniform transitions (obs, next obs, act, success(s'), distance(s')) among the
  filled rows of the buffer."""
  k_, h1, e, o = b.obs.shape
  flat = jax.random.randint(key, (n,), 0, jnp.minimum(b.count, k_) * (h1 - 1) * e)
  ki, rest = flat // ((h1 - 1) * e), flat % ((h1 - 1) * e)
  ti, ei = rest // e, rest % e
  return (b.obs[ki, ti, ei], b.obs[ki, ti + 1, ei], b.act[ki, ti, ei],
          b.state_success[ki, ti + 1, ei].astype(jnp.float32), b.dist[ki, ti + 1, ei])


def replay_batch(buf: rewards.Buffer, demos, key, n: int):
  """A minibatch of n transitions: all from the online replay, or (RLPD's symmetric
  sampling, `demos` a buffer) the first n - n // 2 online and the last n // 2 from the
  demonstrations."""
  if demos is None:
    return sample_transitions(buf, key, n)
  k1, k2 = jax.random.split(key)
  return jax.tree.map(lambda x, y: jnp.concatenate([x, y]),
                      sample_transitions(buf, k1, n - n // 2),
                      sample_transitions(demos, k2, n // 2))


def updates_per_iteration(cfg, task) -> int:
  """Gradient steps per iteration: `sac_utd` x env steps when set, else `sac_updates`."""
  utd = getattr(cfg, "sac_utd", 0.0)
  return max(1, round(utd * cfg.num_envs * task.horizon)) if utd > 0 else cfg.sac_updates


def collect(task: envs.Task, actor, log_std, key, num_envs: int):
  k0, k1 = jax.random.split(key)
  s0 = jax.vmap(task.reset)(jax.random.split(k0, num_envs))

  def body(s, k):
    ka, ks = jax.random.split(k)
    a, _ = sample_action(actor, log_std, jax.vmap(task.obs)(s), ka)
    s2 = jax.vmap(task.step)(s, a, jax.random.split(ks, num_envs))
    return s2, (s2, a)

  _, (states, actions) = jax.lax.scan(body, s0, jax.random.split(k1, task.horizon))
  return envs.prepend(s0, states), actions


def finetune(task: envs.Task, cfg, key, actor0, lr, weights):
  """A whole SAC run: (initial success, per-iteration metrics, final state).

  `cfg` needs the PPO run settings plus sac_updates (gradient steps per iteration),
  sac_batch, sac_buffer (rollouts kept), tau.
  """
  E, H, gamma = cfg.num_envs, task.horizon, cfg.gamma
  k_eval = eval_key(key)
  k_init, k_pre, k_aux = jax.random.split(jax.random.fold_in(key, 0), 3)
  kq1, kq2, ka = jax.random.split(k_init, 3)
  obs_of = jax.vmap(jax.vmap(task.obs))
  dist_of = jax.vmap(jax.vmap(task.distance))
  sizes = [task.obs_dim + task.act_dim, cfg.hidden, cfg.hidden, 1]
  q = (networks.mlp_init(kq1, sizes), networks.mlp_init(kq2, sizes))
  # float32, not weak-typed (as ppo.init's): a weak-typed log_std is another carry type
  # than the updated one, so JAX re-traces the scans with it promoted (and a carry passed
  # between calls would compile the program twice). Same values either way.
  log_std = jnp.full((task.act_dim,), jnp.log(cfg.init_std), jnp.float32)
  opt = networks.adam()
  aux = rewards.aux_init(ka, task.obs_dim, task.act_dim, cfg.hidden)
  buf = rewards.buffer_init(cfg.sac_buffer, H, E, task.obs_dim, task.act_dim)
  log_alpha = jnp.log(jnp.float32(cfg.sac_alpha))
  st = SacState(actor0, log_std, q, q, log_alpha, opt.init((actor0, log_std)), opt.init(q),
                opt.init(log_alpha), aux, buf)

  def add(st, states, actions):
    succ_t, ep = episode_stats(task, states)
    obs = obs_of(states)
    buf = rewards.buffer_add(st.buf, obs, actions, succ_t, dist_of(states))
    aux = rewards.rnd_update_normaliser(st.aux, obs[1:])
    return st._replace(buf=buf, aux=aux), ep.mean(), obs

  def prefill(st, k):
    states, actions = collect(task, actor0, log_std, k, E)
    st, s, _ = add(st, states, actions)
    return st, s

  st, pre = jax.lax.scan(prefill, st, jax.random.split(k_pre, cfg.prefill_rollouts))
  st = st._replace(aux=rewards.aux_train(st.aux, st.buf, st.buf.obs[0], k_aux,
                                         cfg.aux_init_steps, cfg.aux_batch, cfg.aux_lr))

  rlpd = bool(getattr(cfg, "sac_rlpd", False))
  demos = demo_buffer(task, jax.random.fold_in(key, 5), cfg.bc_episodes, cfg.bc_noise) \
      if rlpd else None
  qv_ = lambda q, o, a: q_value(q, o, a, ln=rlpd)  # noqa: E731

  def update(st: SacState, k, actor_lr):
    ks, ka1, ka2 = jax.random.split(k, 3)
    obs, nobs, act, r, d = replay_batch(st.buf, demos, ks, cfg.sac_batch)
    comps = rewards.dense_components(st.aux, actor0, obs, nobs, d, gamma, act)
    r = r + comps @ weights
    alpha = jnp.exp(st.log_alpha)
    a2, logp2 = sample_action(st.actor, st.log_std, nobs, ka1)
    q_next = jnp.minimum(qv_(st.q_targ[0], nobs, a2), qv_(st.q_targ[1], nobs, a2))
    target = jax.lax.stop_gradient(r + gamma * (q_next - alpha * logp2))

    def q_loss(qs):
      return sum(jnp.mean((qv_(qi, obs, act) - target) ** 2) for qi in qs)

    qg = jax.grad(q_loss)(st.q)
    qs, q_opt = networks.adam_step(opt, st.q, st.q_opt, qg, cfg.critic_lr)

    def pi_loss(params):
      actor, ls = params
      a, logp = sample_action(actor, ls, obs, ka2)
      qv = jnp.minimum(qv_(qs[0], obs, a), qv_(qs[1], obs, a))
      return jnp.mean(alpha * logp - qv), logp

    pg, logp = jax.grad(pi_loss, has_aux=True)((st.actor, st.log_std))
    (actor, ls), a_opt = networks.adam_step(opt, (st.actor, st.log_std), st.a_opt, pg, actor_lr)
    ag = jax.grad(lambda la: -jnp.mean(jnp.exp(la) * jax.lax.stop_gradient(
        logp + (-task.act_dim))))(st.log_alpha)
    log_alpha, al_opt = networks.adam_step(opt, st.log_alpha, st.al_opt, ag, cfg.critic_lr)
    q_targ = jax.tree.map(lambda t, s: (1 - cfg.tau) * t + cfg.tau * s, st.q_targ, qs)
    return st._replace(actor=actor, log_std=ls, q=qs, q_targ=q_targ, log_alpha=log_alpha,
                       a_opt=a_opt, q_opt=q_opt, al_opt=al_opt), None

  def iteration(st, it):
    kr, ku, kd = jax.random.split(jax.random.fold_in(key, 1 + it), 3)
    states, actions = collect(task, st.actor, st.log_std, kr, E)
    st, succ, obs = add(st, states, actions)
    actor_lr = jnp.where(it < cfg.critic_warmup, 0.0, lr)
    st, _ = jax.lax.scan(lambda s, k: update(s, k, actor_lr), st,
                         jax.random.split(ku, updates_per_iteration(cfg, task)))
    st = st._replace(aux=rewards.aux_train(st.aux, st.buf, obs[1:], kd, cfg.aux_steps,
                                           cfg.aux_batch, cfg.aux_lr))
    # the deterministic policy is tanh(MLP mean) = networks.actor_mean, as for PPO
    return st, {"success": succ, "alpha": jnp.exp(st.log_alpha),
                "eval_success": evaluate(task, st.actor, k_eval, cfg.eval_episodes)}

  st, metrics = jax.lax.scan(iteration, st, jnp.arange(cfg.iterations))
  return pre.mean(), metrics, st
