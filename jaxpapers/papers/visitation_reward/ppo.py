"""Success Visitation Matching (arXiv 2606.23640): PPO fine-tuning with the dense rewards.

One call of `finetune` is one whole run (initial-policy rollouts, discriminator warm-up,
then `iterations` x [collect E episodes, reward, GAE, PPO epochs, buffer insert,
discriminator/RND updates]) written as a `lax.scan`, so a population of runs (seeds x
methods x learning rates) is a `vmap` of it under one `jit` (PureJaxRL style). Episodes
have the task's fixed horizon; GAE bootstraps from V(s_H) at the time limit
(`time_limit_gae`). After every iteration the deterministic policy (the mean action) is
evaluated on `eval_episodes` separate episodes (`evaluate`): the success reported beside
the training rollouts' success, which carry the exploration noise.
"""
from __future__ import annotations

import typing

import jax
import jax.numpy as jnp

from jaxpapers.papers.visitation_reward import envs, networks, rewards


def gae(rewards_T, values_T, dones_T, last_value, gamma, lam):
  """Generalised advantage estimation (Schulman et al. 2016), time-major.

  dones_T[t] = 1 when s_{t+1} is terminal (no bootstrap through it). Returns
  (advantages_T, returns_T = advantages + values).
  """
  next_values = jnp.concatenate([values_T[1:], last_value[None]])

  def body(adv, x):
    r, v, nv, d = x
    delta = r + gamma * nv * (1.0 - d) - v
    adv = delta + gamma * lam * (1.0 - d) * adv
    return adv, adv

  _, adv = jax.lax.scan(body, jnp.zeros_like(last_value),
                        (rewards_T, values_T, next_values, dones_T), reverse=True)
  return adv, adv + values_T


def time_limit_gae(rewards_T, values_T1, gamma, lam):
  """GAE for fixed-horizon episodes whose end is a time limit, not a terminal state.

  values_T1 (H+1, E) holds V(s_0..s_H); the last step bootstraps from V(s_H) (no done
  anywhere). Why: with the critic's bootstrap, potential shaping F = gamma Phi(s') -
  Phi(s) leaves every advantage unchanged when V shifts by -Phi (each TD error is the
  same), so the shaped and the sparse problem have the same policy gradient fixed
  points; with done = 1 at the time limit the last TD error gains gamma Phi(s_H) and the
  guarantee is lost (tests/test_visitation_reward.py checks both).
  """
  return gae(rewards_T, values_T1[:-1], jnp.zeros_like(rewards_T), values_T1[-1], gamma, lam)


# Evaluation episodes draw their start states from fold_in(run key, EVAL_STREAM): the
# same states after every iteration (success is then a function of the policy alone)
# and never a key of the training stream (fold_in(key, 0) init, 1 + it iterations).
EVAL_STREAM = 2**31 - 1


def eval_key(key):
  return jax.random.fold_in(key, EVAL_STREAM)


def evaluate(task: envs.Task, actor, key, episodes: int):
  """Success rate of the deterministic policy (mean action, no exploration noise) on
  `episodes` separate episodes: success = the success region reached at any step."""
  k0, k1 = jax.random.split(key)
  s0 = jax.vmap(task.reset)(jax.random.split(k0, episodes))

  def body(carry, k):
    s, hit = carry
    a = networks.actor_mean(actor, jax.vmap(task.obs)(s))
    s = jax.vmap(task.step)(s, a, jax.random.split(k, episodes))
    return (s, hit | jax.vmap(task.success)(s)), None

  (_, hit), _ = jax.lax.scan(body, (s0, jnp.zeros((episodes,), bool)),
                             jax.random.split(k1, task.horizon))
  return hit.mean()


class Policy(typing.NamedTuple):
  actor: list
  log_std: jnp.ndarray
  critic: list


def collect(task: envs.Task, actor, log_std, key, num_envs: int):
  """E episodes of the Gaussian policy: states (H+1, E, S), actions (H, E, A), logp (H, E)."""
  k0, k1 = jax.random.split(key)
  s0 = jax.vmap(task.reset)(jax.random.split(k0, num_envs))

  def body(s, k):
    ka, ks = jax.random.split(k)
    obs = jax.vmap(task.obs)(s)
    mean = networks.actor_mean(actor, obs)
    a = mean + networks.lift(jnp.exp(log_std), mean) * jax.random.normal(ka, mean.shape)
    s2 = jax.vmap(task.step)(s, a, jax.random.split(ks, num_envs))
    return s2, (s2, a, networks.gaussian_logp(mean, log_std, a))

  _, (states, actions, logp) = jax.lax.scan(body, s0, jax.random.split(k1, task.horizon))
  return envs.prepend(s0, states), actions, logp


def episode_stats(task, states):
  succ_t = jax.vmap(jax.vmap(task.success))(states)  # (H+1, E)
  return succ_t, succ_t[1:].any(0)


def transition_rewards(task, aux, actor0, states, actions, gamma):
  """Observations (H+1, E, O), success per state (H+1, E) and per episode (E,), the sparse
  reward (H, E) and the unscaled dense components (H, E, C) of a rollout's transitions,
  from the discriminators as they are now (trained on EARLIER rollouts only). `states`
  may be a pytree (brax): only task functions and leafwise slices touch it."""
  succ_t, ep = episode_stats(task, states)
  obs = jax.vmap(jax.vmap(task.obs))(states)
  dist = jax.vmap(jax.vmap(task.distance))(envs.time_slice(states, 1))
  comps = rewards.dense_components(aux, actor0, obs[:-1], obs[1:], dist, gamma, actions)
  return obs, succ_t, ep, succ_t[1:].astype(jnp.float32), comps


class Carry(typing.NamedTuple):
  policy: Policy
  a_opt: typing.Any
  c_opt: typing.Any
  aux: rewards.Aux
  buf: rewards.Buffer


def init(task: envs.Task, cfg, key, actor0):
  """Initial carry and the initial policy's success rate.

  The initial policy's earlier attempts (`prefill_rollouts` x E episodes) fill the
  buffer ("previous trajectories") and warm up the discriminators.
  """
  E, H = cfg.num_envs, task.horizon
  k_init, k_pre, k_aux = jax.random.split(jax.random.fold_in(key, 0), 3)
  kc, ka = jax.random.split(k_init)
  # float32, not weak-typed: a weak-typed log_std made the first chunk's carry another
  # input type than the later chunks' (one more compile of the whole run program)
  policy = Policy(actor0, jnp.full((task.act_dim,), jnp.log(cfg.init_std), jnp.float32),
                  networks.mlp_init(kc, [task.obs_dim, cfg.hidden, cfg.hidden, 1], 1.0))
  opt = networks.adam()
  a_opt, c_opt = opt.init((policy.actor, policy.log_std)), opt.init(policy.critic)
  aux = rewards.aux_init(ka, task.obs_dim, task.act_dim, cfg.hidden)
  buf = rewards.buffer_init(cfg.buffer_rollouts, H, E, task.obs_dim, task.act_dim)
  obs_of = jax.vmap(jax.vmap(task.obs))

  def prefill(carry, k):
    b, a = carry
    states, actions, _ = collect(task, actor0, policy.log_std, k, E)
    succ_t, ep = episode_stats(task, states)
    obs = obs_of(states)
    b = rewards.buffer_add(b, obs, actions, succ_t)
    a = rewards.rnd_update_normaliser(a, obs[1:])
    return (b, a), ep.mean()

  (buf, aux), pre_success = jax.lax.scan(prefill, (buf, aux),
                                         jax.random.split(k_pre, cfg.prefill_rollouts))
  aux = rewards.aux_train(aux, buf, buf.obs[0], k_aux, cfg.aux_init_steps, cfg.aux_batch,
                          cfg.aux_lr)
  return Carry(policy, a_opt, c_opt, aux, buf), pre_success.mean()


def minibatch_update(cfg, carry, batch, actor_lr):
  """One clipped-PPO gradient step on a minibatch (obs, act, logp_old, adv, ret):
  ((policy, actor opt, critic opt), (pg loss, mean |ratio - 1|)). The bulk of a PPO
  iteration's compute (epochs x minibatches of these), and what `experiment.plan` plans."""
  pol, a_opt, c_opt = carry
  opt = networks.adam()

  def loss_fn(params, o, a, lp, ad, rt):
    actor, log_std, critic = params
    ad = (ad - ad.mean()) / (ad.std() + 1e-8)
    lp_new = networks.gaussian_logp(networks.actor_mean(actor, o), log_std, a)
    ratio = jnp.exp(lp_new - lp)
    pg = -jnp.minimum(ratio * ad, jnp.clip(ratio, 1 - cfg.clip, 1 + cfg.clip) * ad).mean()
    v = networks.mlp_apply(critic, o)[..., 0]
    return pg + 0.5 * jnp.mean((v - rt) ** 2), (pg, jnp.mean(jnp.abs(ratio - 1)))

  grads, aux_out = jax.grad(loss_fn, has_aux=True)(
      (pol.actor, pol.log_std, pol.critic), *batch)
  (actor, log_std), a_opt = networks.adam_step(opt, (pol.actor, pol.log_std), a_opt,
                                               grads[:2], actor_lr)
  critic, c_opt = networks.adam_step(opt, pol.critic, c_opt, grads[2], cfg.critic_lr)
  return (Policy(actor, log_std, critic), a_opt, c_opt), aux_out


def run(task: envs.Task, cfg, carry: Carry, key, actor0, lr, weights, start, n: int):
  """Iterations start .. start + n - 1 of PPO fine-tuning from `carry`.

  `lr` is the actor's Adam step size; `weights` (C,) weigh the dense components
  (rewards.COMPONENTS) on top of the sparse reward. Iteration keys are
  fold_in(key, 1 + iteration), so running in chunks equals running at once.
  """
  E, gamma = cfg.num_envs, cfg.gamma
  k_eval = eval_key(key)

  def ppo_epochs(pol, a_opt, c_opt, batch, key, actor_lr):
    obs, act, logp_old, adv, ret = batch
    n = obs.shape[0]
    mb = n // cfg.minibatches

    def epoch(carry, k):
      perm = jax.random.permutation(k, n).reshape(cfg.minibatches, mb)

      def minibatch(carry, idx):
        return minibatch_update(cfg, carry, (obs[idx], act[idx], logp_old[idx], adv[idx],
                                             ret[idx]), actor_lr)

      return jax.lax.scan(minibatch, carry, perm)

    (pol, a_opt, c_opt), _ = jax.lax.scan(epoch, (pol, a_opt, c_opt),
                                          jax.random.split(key, cfg.epochs))
    return pol, a_opt, c_opt

  def iteration(carry, it):
    pol, a_opt, c_opt, aux, buf = carry
    kr, kp, kd = jax.random.split(jax.random.fold_in(key, 1 + it), 3)
    states, actions, logp = collect(task, pol.actor, pol.log_std, kr, E)
    obs, succ_t, ep, sparse, comps = transition_rewards(task, aux, actor0, states, actions,
                                                        gamma)
    reward = sparse + comps @ weights
    values = networks.mlp_apply(pol.critic, obs)[..., 0]  # (H+1, E)
    adv, ret = time_limit_gae(reward, values, gamma, cfg.lam)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    actor_lr = jnp.where(it < cfg.critic_warmup, 0.0, lr)
    pol, a_opt, c_opt = ppo_epochs(pol, a_opt, c_opt,
                                   (flat(obs[:-1]), flat(actions), flat(logp), flat(adv),
                                    flat(ret)), kp, actor_lr)
    buf = rewards.buffer_add(buf, obs, actions, succ_t)
    aux = rewards.rnd_update_normaliser(aux, obs[1:])
    aux = rewards.aux_train(aux, buf, obs[1:], kd, cfg.aux_steps, cfg.aux_batch, cfg.aux_lr)
    metrics = {"success": ep.mean(), "sparse_return": sparse.sum(0).mean(),
               "eval_success": evaluate(task, pol.actor, k_eval, cfg.eval_episodes),
               "dense_abs": jnp.abs(comps @ weights).mean(),
               "buffer_success": buf.episode_success.mean()}
    return Carry(pol, a_opt, c_opt, aux, buf), metrics

  return jax.lax.scan(iteration, carry, start + jnp.arange(n))


def finetune(task: envs.Task, cfg, key, actor0, lr, weights):
  """A whole run: (initial success, per-iteration metrics, final carry)."""
  carry, init_success = init(task, cfg, key, actor0)
  carry, metrics = run(task, cfg, carry, key, actor0, lr, weights, 0, cfg.iterations)
  return init_success, metrics, carry
