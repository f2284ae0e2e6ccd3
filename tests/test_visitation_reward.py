"""Tests for visitation_reward: dynamics and success detection, the discriminator's
reward sign, the tabular invariance check (and its counter-example), the dense
components on one-hot states against NumPy (the shaping term potential-based, the
per-step log D / log-odds rewards not), time-limit bootstrapping, GAE against a NumPy
loop, state pytrees (brax's State), deterministic evaluation, Holm's correction, exact
resume, and bad input."""
import dataclasses
import os
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.papers.visitation_reward import bc, brax_tasks, envs, experiment, ppo, rewards
from jaxpapers.papers.visitation_reward import networks, sac, tabular
from jaxpapers.papers.visitation_reward import stats as vr_stats

KEY = jax.random.key(0)


def test_point_reach_dynamics_and_success():
  t = envs.make("point_reach")
  s = jnp.array([0.0, 0.0, 0.5, 0.0, 0.3, 0.0])
  s2 = t.step(s, jnp.array([2.0, -1.0]), KEY)  # the action is clipped to [-1, 1]
  v = 0.8 * np.array([0.5, 0.0]) + 0.2 * np.array([1.0, -1.0])
  np.testing.assert_allclose(s2[:4], np.concatenate([0.1 * v, v]), rtol=1e-6)
  assert not bool(t.success(s2)) and float(t.reward(s2)) == 0.0
  at_goal = s.at[:2].set(jnp.array([0.27, 0.02]))  # 0.036 from the goal, radius 0.05
  assert bool(t.success(at_goal)) and float(t.reward(at_goal)) == 1.0


def test_push_block_contact_pushes_along_the_centre_line():
  t = envs.make("push_block")
  s = jnp.array([0.0, 0.0, 0.2, 0.0, 0.9, 0.9])
  s2 = t.step(s, jnp.array([1.0, 0.0]), KEY)  # pusher to x = 0.1, 0.1 from the block
  np.testing.assert_allclose(s2[:2], [0.1, 0.0], atol=1e-6)
  np.testing.assert_allclose(s2[2:4], [0.1 + t.contact, 0.0], atol=1e-6)
  far = t.step(jnp.array([-0.8, 0.0, 0.2, 0.0, 0.9, 0.9]), jnp.array([1.0, 0.0]), KEY)
  np.testing.assert_allclose(far[2:4], [0.2, 0.0])  # no contact: the block stays
  assert bool(t.success(jnp.array([0.0, 0.0, 0.85, 0.85, 0.9, 0.9])))
  assert not bool(t.success(s2))


def test_arm_forward_kinematics_grasp_and_place():
  t = envs.make("arm_place")
  q = jnp.array([0.3, 0.7])
  np.testing.assert_allclose(
      t.fk(q), [0.5 * np.cos(0.3) + 0.5 * np.cos(1.0), 0.5 * np.sin(0.3) + 0.5 * np.sin(1.0)],
      rtol=1e-6)
  ee = t.fk(q)
  goal = t.fk(q + jnp.array([0.1, 0.0]))
  s = jnp.concatenate([q, ee + 0.01, jnp.zeros(1), goal])
  held = t.step(s, jnp.array([0.0, 0.0, 1.0]), KEY)  # close next to the object
  assert float(held[4]) == 1.0
  carried = t.step(held, jnp.array([1.0, 0.0, 1.0]), KEY)  # rotate joint 1 by 0.1
  np.testing.assert_allclose(carried[2:4], goal, atol=1e-6)
  assert not bool(t.success(carried))  # at the goal but still held
  placed = t.step(carried, jnp.array([0.0, 0.0, -1.0]), KEY)
  assert float(placed[4]) == 0.0 and bool(t.success(placed))
  np.testing.assert_allclose(placed[2:4], goal, atol=1e-6)


def test_mountain_car_matches_gymnax_and_the_closed_form():
  gymnax = pytest.importorskip("gymnax")
  t = envs.make("mountain_car")
  s = jnp.array([-0.5, 0.01, 3.0])
  s2 = t.step(s, jnp.array([0.7]), KEY)
  v = 0.01 + 0.7 * 0.0015 - 0.0025 * np.cos(3 * -0.5)
  np.testing.assert_allclose(s2[:3], [-0.5 + v, v, 4.0], rtol=1e-5)
  env, params = gymnax.make("MountainCarContinuous-v0")
  _, ref, _, _, _ = env.step_env(KEY, t._to_env_state(s), jnp.array([0.7]), params)
  np.testing.assert_allclose([ref.position, ref.velocity], s2[:2], rtol=1e-6)
  assert bool(t.success(jnp.array([0.46, 0.0, 0.0])))
  assert not bool(t.success(jnp.array([0.44, 0.0, 0.0])))


def test_brax_sparse_success_from_observation():
  class FakeState:  # brax State's observation is all the success test reads
    def __init__(self, obs):
      self.obs = jnp.asarray(obs)
  reacher = brax_tasks.make("brax_reacher")
  near = np.zeros(11)
  near[-3:] = [0.01, 0.01, 0.0]
  far = np.zeros(11)
  far[-3:] = [0.05, 0.0, 0.0]
  assert float(reacher.reward(FakeState(near))) == 1.0
  assert float(reacher.reward(FakeState(far))) == 0.0
  pusher = brax_tasks.make("brax_pusher")
  obs = np.zeros(23)
  obs[17:20], obs[20:23] = [0.5, 0.2, 0.0], [0.52, 0.2, -0.3]  # z differs: table plane only
  assert float(pusher.reward(FakeState(obs))) == 1.0
  obs[17] = 0.6
  assert float(pusher.reward(FakeState(obs))) == 0.0


def _reacher_fk(q):
  l1, l2 = brax_tasks.REACHER_LINKS
  return np.array([l1 * np.cos(q[0]) + l2 * np.cos(q[0] + q[1]),
                   l1 * np.sin(q[0]) + l2 * np.sin(q[0] + q[1])])


def test_reacher_inverse_kinematics_reaches_the_target():
  """The scripted reacher demonstrator's IK: the fingertip lands on the target for both
  elbows; an out-of-reach target is clipped to the reach along its direction."""
  rng = np.random.default_rng(0)
  for _ in range(5):
    r, a = rng.uniform(0.03, 0.2), rng.uniform(-np.pi, np.pi)
    target = np.array([r * np.cos(a), r * np.sin(a)])
    for elbow in (1.0, -1.0):
      q = np.asarray(brax_tasks.reacher_ik(jnp.asarray(target, jnp.float32), elbow))
      assert np.sign(q[1]) == elbow
      np.testing.assert_allclose(_reacher_fk(q), target, atol=1e-5)
  q = np.asarray(brax_tasks.reacher_ik(jnp.array([0.5, 0.0]), 1.0))
  np.testing.assert_allclose(_reacher_fk(q), [0.21, 0.0], atol=1e-4)


@pytest.mark.skipif(not os.environ.get("JAXPAPERS_BRAX"),
                    reason="compiles brax for ~30 s on CPU; set JAXPAPERS_BRAX=1")
def test_brax_reacher_runs():
  """With brax present (setup.py's `brax` extra): the wrapper's sparse reward, the link
  lengths the demonstrator assumes against brax's own fingertip, the scripted
  demonstrator reaching every target without noise, and the learners' path on brax's
  State pytree (a PPO rollout and its rewards)."""
  pytest.importorskip("brax")
  t = envs.make("brax_reacher")
  s = t.reset(KEY)
  s2 = t.step(s, jnp.zeros(2), KEY)
  assert float(t.reward(s2)) == float(jnp.linalg.norm(s2.obs[-3:-1]) < t.radius)
  q = np.asarray(s2.pipeline_state.q)
  np.testing.assert_allclose(_reacher_fk(q[:2]) - q[2:4], np.asarray(s2.obs[8:10]), atol=1e-5)
  states, _ = jax.jit(jax.vmap(lambda k: envs.rollout(t, lambda o, st, k: t.expert(st, k), k)))(
      jax.random.split(KEY, 8))
  assert bool(jax.vmap(jax.vmap(t.success))(states)[:, 1:].any(1).all())
  # the planner's brax term: one env step of B = (envs + eval) x horizon / updates envs
  config = config_lib.load("configs/visitation_reward.py:smoke,tasks=brax_reacher")
  p = experiment.plan(config)
  assert "brax env step" in p.label
  _, stepped = jax.eval_shape(p.fn, *p.args)
  assert stepped[0].obs.shape[-2:] == ((4 + 4) * 50 // (1 * 2), t.obs_dim)
  # the learners' path on brax's State pytree (issue 48): a rollout and its rewards
  actor = networks.mlp_init(KEY, [t.obs_dim, 8, t.act_dim], 0.01)
  states, actions, _ = ppo.collect(t, actor, jnp.zeros(t.act_dim), KEY, 2)
  obs, _, _, sparse, comps = ppo.transition_rewards(
      t, rewards.aux_init(KEY, t.obs_dim, t.act_dim, 8), actor, states, actions, 0.98)
  assert obs.shape == (t.horizon + 1, 2, t.obs_dim) and sparse.shape == (t.horizon, 2)
  assert np.all(np.isfinite(np.asarray(comps)))


def _gae_numpy(r, v, d, last, gamma, lam):
  T = len(r)
  adv = np.zeros_like(r)
  run = np.zeros_like(last)
  for t in reversed(range(T)):
    nv = last if t == T - 1 else v[t + 1]
    delta = r[t] + gamma * nv * (1 - d[t]) - v[t]
    run = delta + gamma * lam * (1 - d[t]) * run
    adv[t] = run
  return adv


def test_gae_matches_numpy_loop():
  rng = np.random.default_rng(0)
  r, v = rng.normal(size=(9, 3)), rng.normal(size=(9, 3))
  d = (rng.random((9, 3)) < 0.2).astype(np.float64)
  last = rng.normal(size=3)
  adv, ret = ppo.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(d), jnp.asarray(last),
                     0.97, 0.9)
  ref = _gae_numpy(r, v, d, last, 0.97, 0.9)
  np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ret, ref + v, rtol=1e-5, atol=1e-6)
  # lambda = 1 without dones: discounted return-to-go plus the bootstrap, minus V.
  adv1, _ = ppo.gae(jnp.asarray(r), jnp.asarray(v), jnp.zeros((9, 3)), jnp.asarray(last),
                    0.97, 1.0)
  disc = 0.97 ** np.arange(9)
  g0 = (disc[:, None] * r).sum(0) + 0.97**9 * last
  np.testing.assert_allclose(adv1[0], g0 - v[0], rtol=1e-5)


def test_discriminator_rewards_moving_towards_successful_visitations():
  """Successful episodes live at x > 0, failed ones at x < 0: after training, the dense
  reward of a step towards x > 0 is positive, the reverse step negative."""
  k_, h, e, o = 2, 5, 8, 2
  rng = np.random.default_rng(0)
  sign = np.where(np.arange(e) < e // 2, 1.0, -1.0)  # first half succeed
  obs = np.abs(rng.normal(size=(k_, h + 1, e, o))) * sign[None, None, :, None]
  act = rng.normal(size=(k_, h, e, 1)) * 0.1
  state_success = np.zeros((k_, h + 1, e), bool)
  state_success[:, -1, : e // 2] = True
  buf = rewards.buffer_init(k_, h, e, o, 1)
  for i in range(k_):
    buf = rewards.buffer_add(buf, jnp.asarray(obs[i], jnp.float32),
                             jnp.asarray(act[i], jnp.float32), jnp.asarray(state_success[i]))
  assert bool(buf.episode_success[0, 0]) and not bool(buf.episode_success[0, -1])
  aux = rewards.aux_init(KEY, o, 1, 16)
  aux = jax.jit(rewards.aux_train, static_argnums=(4, 5, 6))(
      aux, buf, buf.obs[0], KEY, 150, 64, 3e-3)
  actor0 = [(jnp.zeros((o, 1)), jnp.zeros(1))]  # mu_0(s) = 0
  bad, good = jnp.array([[-1.0, -1.0]]), jnp.array([[1.0, 1.0]])
  zeros, a0 = jnp.zeros(1), jnp.zeros((1, 1))
  up = rewards.dense_components(aux, actor0, bad, good, zeros, 0.99, a0)[0]
  down = rewards.dense_components(aux, actor0, good, bad, zeros, 0.99, a0)[0]
  assert float(up[0]) > 0.3 and float(down[0]) < -0.3
  # The VICE-like classifier prefers the success states too.
  assert float(up[1]) > float(down[1])
  # The per-step rewards (log D, log-odds at the visited (s, a)) are higher in the
  # successful region: here they are read at s = bad for `up`, s = good for `down`.
  assert float(down[4]) > float(up[4]) and float(down[5]) > float(up[5])


def test_potential_shaping_keeps_the_tabular_optimal_policy():
  rng = np.random.default_rng(1)
  raw_changed = 0
  for _ in range(4):
    P = tabular.random_goal_mdp(rng)
    pi0 = rng.dirichlet(np.ones(P.shape[1]), size=P.shape[0])
    D = tabular.visitation_discriminator(P, pi0, rng, episodes=100)
    out = tabular.check(P, D, pi0, gamma=0.95, scale=1.0)
    assert out["shaped_same"]
    assert out["q_shift_err"] < 1e-8  # Q' = Q - Phi(s) exactly
    raw_changed += not out["raw_same"]
  assert raw_changed >= 1  # the counter-example reward does change the optimal policy


def test_value_iteration_against_linear_solve():
  rng = np.random.default_rng(2)
  P = tabular.random_goal_mdp(rng, n_states=6, n_actions=2)
  Q = tabular.value_iteration(P, tabular.sparse_reward(P), 0.9)
  pi = Q.argmax(1)
  Ppi = P[np.arange(6), pi]
  V = np.linalg.solve(np.eye(6) - 0.9 * Ppi, tabular.sparse_reward(P)[np.arange(6), pi])
  np.testing.assert_allclose(Q.max(1), V, atol=1e-9)


def test_bad_input_names_the_problem():
  with pytest.raises(ValueError, match="unknown task 'nope'"):
    envs.make("nope")
  with pytest.raises(ValueError, match="unknown method 'gail'"):
    rewards.method_weights("gail", {c: 1.0 for c in rewards.COMPONENTS})
  with pytest.raises(ValueError, match="unknown method"):
    config_lib.load("configs/visitation_reward.py:method=gail")


def test_smoke_train_resumes_exactly(tmp_path):
  config = config_lib.load("configs/visitation_reward.py:smoke,iterations=3")
  full = experiment.train_and_evaluate(config, str(tmp_path / "full"))
  part = str(tmp_path / "part")
  assert experiment.train_and_evaluate(config, part, stop_after=1) == {}
  resumed = experiment.train_and_evaluate(config, part)
  np.testing.assert_array_equal(full["success"], resumed["success"])
  assert np.all(np.isfinite(full["success"]))
  assert full["success"].shape == (3, 1)

  # Every metrics row of the uninterrupted run is there after the resume, once, equal
  # (timing keys aside): the truncation on resume is in the rows' unit (env steps).
  from tests import _runs  # pylint: disable=g-import-not-at-top
  assert len(_runs.metrics_rows(tmp_path / "full")) == 5  # eval at 0, 3 iterations, summary
  _runs.assert_same_metrics(part, tmp_path / "full")


def test_a_run_alone_equals_the_same_run_beside_others(tmp_path):
  # seed 1 alone (lane 0 of a padded group) and beside seeds 0 and 2 (lane 1 of the first
  # group, the second group padded): the same numbers, bit for bit. Before runs were
  # executed in fixed groups, a lane's success curve changed with the population size.
  # Same shapes as the resume test above, so no new compilation.
  many = config_lib.load("configs/visitation_reward.py:smoke,iterations=3,seeds=3")
  alone = config_lib.load("configs/visitation_reward.py:smoke,iterations=3,seed=1")
  s_many = experiment.train_and_evaluate(many, str(tmp_path / "many"))["success"]
  s_alone = experiment.train_and_evaluate(alone, str(tmp_path / "alone"))["success"]
  assert s_many.shape == (3, 3) and s_alone.shape == (3, 1)
  np.testing.assert_array_equal(s_alone[:, 0], s_many[:, 1])


def test_study_group_spread_over_8_devices_matches_one_device():
  # Issue 51: a study group's lanes (seed x method x lr x scale) are split over every
  # device by core.sharding.spread. One group of the smoke study (point_reach, sparse and
  # svm, two seeds; 4 lanes on 4 of the 8 devices) must give the previous 1-device program's
  # numbers, jax.jit(jax.vmap(one whole run)).
  assert jax.device_count() == 8
  config = config_lib.load("configs/visitation_reward.py:smoke")
  rc = experiment.run_cfg(config)
  grid = [(m, 3e-4, 1.0, s) for m in ("sparse", "svm") for s in (0, 1)]
  seeds, lrs, weights = experiment._lanes(grid, config)
  one = jax.jit(jax.vmap(experiment.population_lane("point_reach", rc),
                         in_axes=(0, 0, 0, None)))
  ref = one(seeds, lrs, weights, None)
  assert len(jax.tree.leaves(ref)[0].devices()) == 1
  out = experiment.population("point_reach", rc, seeds, lrs, weights, group=4)
  assert len(jax.tree.leaves(out)[0].devices()) == 4  # one lane per device
  for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(out)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
  # the dense term is live in the svm lanes, so the lanes are not copies of one run
  assert np.abs(np.asarray(ref[1]["dense_abs"])[2:]).max() > 0


def test_in_groups_pads_runs_in_fixed_groups_and_keeps_lane_order():
  calls = []

  def fn(x, y):
    calls.append(x.shape[0])
    return {"sum": x + y["b"], "x": x}

  x = jnp.arange(7.0)
  out = experiment.in_groups(fn, 3, x, {"b": 10 * x})
  assert calls == [3, 3, 3]  # every call sees exactly the group size
  np.testing.assert_array_equal(out["sum"], 11 * np.arange(7.0))
  np.testing.assert_array_equal(out["x"], np.arange(7.0))


def test_buffer_sampling_is_uniform_over_the_mask():
  mask = jnp.array([False, True, False, True, True, False])
  idx = np.asarray(rewards._sample(KEY, mask, 6000))
  counts = np.bincount(idx, minlength=6)
  assert counts[[0, 2, 5]].sum() == 0
  np.testing.assert_allclose(counts[[1, 3, 4]] / 6000, 1 / 3, atol=0.03)


def test_recorded_demonstrations_load_and_clone_like_the_scripted_ones(tmp_path):
  h5py = pytest.importorskip("h5py")
  task = envs.make("point_reach")
  key = jax.random.fold_in(KEY, 3)
  kd = jax.random.split(key, 3)[0]  # the key behaviour_clone gives the demonstrator
  obs, act = (np.asarray(x) for x in bc.demonstrations(task, kd, 2, 0.5))
  per = obs.shape[0] // 2
  path = str(tmp_path / "demos.hdf5")
  with h5py.File(path, "w") as f:  # robomimic layout; obs split into two low-dim keys
    for i in range(2):
      g = f.create_group(f"data/demo_{i}")
      g["obs/a_pos"] = obs[i * per:(i + 1) * per, :2]
      g["obs/b_rest"] = obs[i * per:(i + 1) * per, 2:]
      g["actions"] = act[i * per:(i + 1) * per]
  o, a = bc.load_demonstrations(path, task.obs_dim, task.act_dim)
  np.testing.assert_array_equal(o, obs)
  np.testing.assert_array_equal(a, act)
  npz = str(tmp_path / "demos.npz")
  np.savez(npz, obs=obs, actions=act)
  o2, _ = bc.load_demonstrations(npz, task.obs_dim, task.act_dim)
  np.testing.assert_array_equal(o2, obs)
  # cloning the loaded file gives the policy cloned from the demonstrator's own episodes
  from_file = bc.behaviour_clone(task, key, 16, 2, 0.5, 20, demos=(o, a))
  scripted = bc.behaviour_clone(task, key, 16, 2, 0.5, 20)
  for x, y in zip(jax.tree.leaves(from_file), jax.tree.leaves(scripted)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  with pytest.raises(FileNotFoundError, match="missing.hdf5"):
    bc.load_demonstrations(str(tmp_path / "missing.hdf5"), task.obs_dim, task.act_dim)
  with pytest.raises(ValueError, match=r"the task needs \(N, 3\)"):
    bc.load_demonstrations(npz, 3, task.act_dim)


# ---- issue 48: the paper's per-step rewards beside the potential-based one -------------

def _mlp_np(params, x):
  """The MLP forward pass in float64 NumPy (independent of networks.mlp_apply)."""
  for w, b in params[:-1]:
    x = np.tanh(x @ np.asarray(w, np.float64) + np.asarray(b, np.float64))
  w, b = params[-1]
  return x @ np.asarray(w, np.float64) + np.asarray(b, np.float64)


def _one_hot_setup(key, n_states, act_dim, hidden=8):
  """aux with a random (untrained, non-trivial) discriminator and a random mu_0."""
  k1, k2, k3 = jax.random.split(key, 3)
  aux = rewards.aux_init(k1, n_states, act_dim, hidden)
  aux = aux._replace(disc=networks.mlp_init(k2, [n_states + act_dim, hidden, hidden, 1], 2.0))
  actor0 = networks.mlp_init(k3, [n_states, hidden, act_dim], 1.0)
  eye = np.eye(n_states)
  mu0 = np.tanh(_mlp_np(actor0, eye))
  phi = 1.0 / (1.0 + np.exp(-_mlp_np(aux.disc, np.concatenate([eye, mu0], 1))[:, 0]))
  return aux, actor0, eye, phi


def _components(aux, actor0, eye, s, a_vec, s2, gamma):
  f = jax.jit(rewards.dense_components, static_argnums=(5,))
  return np.asarray(f(aux, actor0, jnp.asarray(eye[s], jnp.float32),
                      jnp.asarray(eye[s2], jnp.float32), jnp.zeros(len(s)), gamma,
                      jnp.asarray(a_vec, jnp.float32)), np.float64)


def test_dense_components_on_one_hot_states_against_numpy():
  """On one-hot states the svm term is exactly gamma Phi(s') - Phi(s) with Phi(s) =
  sigma(D(s, mu_0(s))) recomputed in NumPy (whatever the action taken), so it
  telescopes along any path; logd / logodds are log D(s, a) and log D - log(1 - D) at the
  visited action (floored / clipped at -5 / +-5) and do depend on it."""
  S, A, gamma = 6, 2, 0.9
  aux, actor0, eye, phi = _one_hot_setup(jax.random.key(11), S, A)
  assert phi.max() - phi.min() > 0.1  # a non-constant potential
  s, s2 = np.repeat(np.arange(S), S), np.tile(np.arange(S), S)
  rng = np.random.default_rng(0)
  act = rng.uniform(-1, 1, (S * S, A))
  c = _components(aux, actor0, eye, s, act, s2, gamma)
  np.testing.assert_allclose(c[:, 0], gamma * phi[s2] - phi[s], atol=2e-6)
  c_other = _components(aux, actor0, eye, s, rng.uniform(-1, 1, (S * S, A)), s2, gamma)
  np.testing.assert_array_equal(c_other[:, 0], c[:, 0])  # the action does not enter
  path = rng.integers(0, S, 9)  # a path s_0..s_8: sum gamma^t F_t = gamma^8 Phi(s_8) - Phi(s_0)
  f = c.reshape(S, S, -1)[path[:-1], path[1:], 0]
  np.testing.assert_allclose((gamma ** np.arange(8) * f).sum(),
                             gamma**8 * phi[path[-1]] - phi[path[0]], atol=1e-5)
  logit = _mlp_np(aux.disc, np.concatenate([eye[s], act], 1))[:, 0]
  d = 1.0 / (1.0 + np.exp(-logit))
  assert np.abs(logit).max() < 5  # inside the clip: the exact formulas apply
  np.testing.assert_allclose(c[:, 4], np.log(d), atol=2e-5)
  np.testing.assert_allclose(c[:, 5], np.log(d) - np.log1p(-d), atol=2e-5)
  assert np.abs(c_other[:, 4] - c[:, 4]).max() > 1e-3


def _value_iteration(P, R, gamma, iters=3000):
  """Q* of (P (S, A, S), R (S, A)) by plain value iteration (NumPy, float64)."""
  Q = np.zeros(R.shape)
  for _ in range(iters):
    Q = R + gamma * P @ Q.max(1)
  return Q


def test_per_step_discriminator_rewards_change_the_optimal_policy():
  """Tabular MDPs, one-hot states and actions: adding the svm term keeps every optimal
  action (Q' = Q - Phi), adding log D(s, a) or the log-odds does not: in these random
  goal MDPs with a random discriminator they change a unique optimal action."""
  S, A, gamma = 8, 3, 0.9
  rng = np.random.default_rng(3)
  changed = {4: 0, 5: 0}
  for i in range(3):
    P = tabular.random_goal_mdp(rng, n_states=S, n_actions=A)
    aux, actor0, eye, phi = _one_hot_setup(jax.random.key(100 + i), S, A)
    s, a, s2 = (x.reshape(-1) for x in np.meshgrid(np.arange(S), np.arange(A), np.arange(S),
                                                    indexing="ij"))
    c = _components(aux, actor0, eye, s, np.eye(A)[a], s2, gamma).reshape(S, A, S, -1)
    R = P[:, :, -1]  # 1 on entering (or staying in) the goal, the last state
    Q = _value_iteration(P, R, gamma)
    top = np.sort(Q, 1)
    unique = top[:, -1] - top[:, -2] > 1e-3  # states with a unique optimal action
    unique[-2:] = False  # absorbing goal and trap: every action is the same there
    assert unique.any()
    for comp in (0, 4, 5):
      Rc = R + np.einsum("sat,sat->sa", P, c[..., comp])
      Qc = _value_iteration(P, Rc, gamma)
      if comp == 0:
        np.testing.assert_allclose(Qc, Q - phi[:, None], atol=1e-4)
        assert np.array_equal(Qc[unique].argmax(1), Q[unique].argmax(1))
      else:
        changed[comp] += int(np.any(Qc[unique].argmax(1) != Q[unique].argmax(1)))
  assert changed[4] >= 1 and changed[5] >= 1, changed  # measured: 2 and 2 of 3


def test_time_limit_bootstrap_keeps_shaping_invariant():
  """The horizon is a time limit: GAE bootstraps from V(s_H). Then shaping F = gamma
  Phi(s') - Phi(s) with the critic shifted by -Phi leaves every advantage unchanged; with
  the time limit treated as terminal (done = 1, no bootstrap) step t's advantage gains
  exactly (gamma lam)^(H-1-t) gamma Phi(s_H): the guarantee then fails."""
  rng = np.random.default_rng(4)
  H, E, gamma, lam = 7, 3, 0.95, 0.8
  r, V, phi = rng.normal(size=(H, E)), rng.normal(size=(H + 1, E)), rng.normal(size=(H + 1, E))
  F = gamma * phi[1:] - phi[:-1]
  adv, ret = ppo.time_limit_gae(jnp.asarray(r), jnp.asarray(V), gamma, lam)
  np.testing.assert_allclose(adv, _gae_numpy(r, V[:-1], np.zeros((H, E)), V[-1], gamma, lam),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ret, np.asarray(adv) + V[:-1], rtol=1e-6, atol=1e-6)
  adv_s, _ = ppo.time_limit_gae(jnp.asarray(r + F), jnp.asarray(V - phi), gamma, lam)
  np.testing.assert_allclose(adv_s, adv, atol=1e-5)
  done = np.zeros((H, E))
  done[-1] = 1.0
  term = _gae_numpy(r, V[:-1], done, V[-1], gamma, lam)
  term_s = _gae_numpy(r + F, (V - phi)[:-1], done, (V - phi)[-1], gamma, lam)
  k = (gamma * lam) ** (H - 1 - np.arange(H))[:, None]
  np.testing.assert_allclose(term_s - term, k * gamma * phi[-1][None], atol=1e-9)


class FakeBraxState(typing.NamedTuple):
  """The fields of brax.envs.base.State: a pytree, not an array."""
  pipeline_state: jnp.ndarray
  obs: jnp.ndarray
  reward: jnp.ndarray
  done: jnp.ndarray
  metrics: dict
  info: dict


@dataclasses.dataclass(frozen=True)
class PytreeTask(envs.Task):
  """push_block behind a brax-style State pytree (the brax wrappers' state layout)."""
  name: str = "push_block"
  state_dim: int = 6
  obs_dim: int = 6
  act_dim: int = 2
  horizon: int = 12
  inner: envs.Task = envs.PushBlock()

  def _wrap(self, s, steps):
    return FakeBraxState(s, self.inner.obs(s), self.inner.reward(s), jnp.float32(0.0),
                         {"distance": self.inner.distance(s)}, {"steps": steps})

  def reset(self, key):
    return self._wrap(self.inner.reset(key), jnp.int32(0))

  def step(self, state, action, key):
    return self._wrap(self.inner.step(state.pipeline_state, action, key),
                      state.info["steps"] + 1)

  def obs(self, state):
    return state.obs

  def success(self, state):
    return self.inner.success(state.pipeline_state)

  def distance(self, state):
    return self.inner.distance(state.pipeline_state)

  def expert(self, state, key):
    return self.inner.expert(state.pipeline_state, key)


def test_learners_run_on_pytree_states_like_brax():
  """The brax path: states are pytrees (brax's State). Collection (PPO, SAC), the
  rewards of a rollout and the demonstrations (envs.rollout) give the flat task's
  numbers (a jnp.concatenate on the state pytree failed here before)."""
  tree, flat = PytreeTask(), dataclasses.replace(envs.PushBlock(), horizon=12)
  actor = networks.mlp_init(jax.random.key(5), [6, 8, 2], 1.0)
  log_std = jnp.full((2,), -1.0)
  st, at, _ = ppo.collect(tree, actor, log_std, KEY, 3)
  sf, af, _ = ppo.collect(flat, actor, log_std, KEY, 3)
  assert isinstance(st, FakeBraxState) and st.obs.shape == (13, 3, 6)
  np.testing.assert_array_equal(st.pipeline_state, sf)
  np.testing.assert_array_equal(at, af)
  np.testing.assert_array_equal(st.info["steps"][:, 0], np.arange(13))
  st2, _ = sac.collect(tree, actor, log_std, KEY, 3)
  sf2, _ = sac.collect(flat, actor, log_std, KEY, 3)
  np.testing.assert_array_equal(st2.pipeline_state, sf2)
  aux = rewards.aux_init(KEY, 6, 2, 8)
  out_t = ppo.transition_rewards(tree, aux, actor, st, at, 0.98)
  out_f = ppo.transition_rewards(flat, aux, actor, sf, af, 0.98)
  for x, y in zip(out_t, out_f):
    np.testing.assert_array_equal(x, y)
  dt = bc.demonstrations(tree, KEY, 2, 0.5)
  df = bc.demonstrations(flat, KEY, 2, 0.5)
  np.testing.assert_array_equal(dt[0], df[0])


def test_evaluate_is_the_deterministic_policy_success_rate():
  """ppo.evaluate against a Python loop of the mean action (no exploration noise)."""
  task = dataclasses.replace(envs.PointReach(), horizon=15)
  # a linear controller tanh(3 (g - p) - v): reaches some goals within 15 steps, not all
  w = np.zeros((6, 2), np.float32)
  w[0:2] = -3 * np.eye(2)
  w[2:4] = -np.eye(2)
  w[4:6] = 3 * np.eye(2)
  actor = [(jnp.asarray(w), jnp.zeros(2))]
  key = jax.random.key(9)
  n = 8
  got = float(ppo.evaluate(task, actor, key, n))
  k0, _ = jax.random.split(key)
  s = np.asarray(jax.vmap(task.reset)(jax.random.split(k0, n)), np.float64)
  hit = np.zeros(n, bool)
  for _ in range(15):
    a = np.clip(np.tanh(_mlp_np(actor, s)), -1, 1)
    v = 0.8 * s[:, 2:4] + 0.2 * a
    s = np.concatenate([np.clip(s[:, :2] + 0.1 * v, -1.2, 1.2), v, s[:, 4:]], 1)
    hit |= np.linalg.norm(s[:, :2] - s[:, 4:], axis=1) < task.radius
  assert 0 < hit.mean() < 1  # a setting where counting episodes can go wrong
  assert got == hit.mean()


def test_holm_and_paired_p_against_hand_computation():
  # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04,
  # running max 0.02, 0.03, 0.06, 0.06.
  np.testing.assert_allclose(vr_stats.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
  # 0.5 x 2 = 1 (capped), then 0.9 x 1 = 0.9 raised to the running max 1: monotone
  np.testing.assert_allclose(vr_stats.holm([0.5, 0.9]), [1.0, 1.0])
  # d = 1, 2, 3: t = 2 / (1 / sqrt 3) = 2 sqrt 3 with 2 degrees of freedom, whose two-sided
  # p has the closed form 1 - t / sqrt(2 + t^2).
  t = 2 * np.sqrt(3)
  assert abs(vr_stats.paired_p([1.0, 2.0, 3.0]) - (1 - t / np.sqrt(2 + t**2))) < 1e-12
  assert vr_stats.paired_p([0.0, 0.0, 0.0]) == 1.0
  curves = {"sparse": np.zeros((3, 4)), "svm": np.zeros((3, 4)) + [[0, 1, 2, 3]],
            "logd": np.zeros((3, 4))}
  curves["svm"] = curves["svm"] * np.array([[1.0], [2.0], [3.0]]) / 6
  res = {"t": {"curves": curves, "chosen_lr": dict.fromkeys(curves, 1e-3),
               "chosen_scale": dict.fromkeys(curves, 1.0)}}
  rows = {r["method"]: r for r in vr_stats.table_rows(res)}
  # svm's AUC differences are 1/6, 2/6, 3/6: p as above; two tests: Holm doubles it
  assert abs(rows["svm"]["p"] - (1 - t / np.sqrt(2 + t**2))) < 1e-12
  assert abs(rows["svm"]["Holm p"] - 2 * rows["svm"]["p"]) < 1e-12
  assert rows["logd"]["Holm p"] == 1.0 and "p" not in rows["sparse"]


def test_phi_diagnostic_numbers_against_hand_values():
  """The Phi-tracks-progress diagnostic (phi_diag): a potential equal to -distance is a
  perfect tracker (positive control: every Spearman 1, AUROC 1 when successful episodes
  end closer), a potential independent of progress is not (Spearman near 0), and the
  AUROC equals the pairwise count by hand (ties 1/2)."""
  from jaxpapers.papers.visitation_reward import phi_diag
  assert phi_diag.auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75  # 3 of 4 pairs
  assert phi_diag.auroc([0.5, 0.5], [0, 1]) == 0.5
  assert np.isnan(phi_diag.auroc([0.1, 0.2], [1, 1]))
  rng = np.random.default_rng(0)
  H = 12
  dist = {"expert": np.linspace(1, 0, H + 1)[None].repeat(4, 0),  # the expert closes in
          "bc": 0.5 + 0.1 * rng.random((4, H + 1)), "random": 1 + rng.random((4, H + 1))}
  succ = {k: v < 0.05 for k, v in dist.items()}
  good = phi_diag.summarise({k: -v for k, v in dist.items()}, dist, succ)
  for k in ("rho_expert", "rho_bc", "rho_random", "rho_pooled", "rho_time_expert"):
    assert good[k] == pytest.approx(1.0)
  assert good["success_expert"] == 1.0 and good["success_random"] == 0.0
  # pooled AUROC by brute-force pair counting (states of successful episodes vs failed)
  sc = np.concatenate([-dist[k].ravel() for k in ("expert", "bc", "random")])
  lab = np.concatenate([np.broadcast_to(succ[k].any(1, keepdims=True), succ[k].shape).ravel()
                        for k in ("expert", "bc", "random")])
  diff = sc[lab][:, None] - sc[~lab][None, :]
  assert good["auroc_episode_success"] == pytest.approx(
      (diff > 0).mean() + 0.5 * (diff == 0).mean())
  noise = phi_diag.summarise({k: rng.random(v.shape) for k, v in dist.items()}, dist, succ)
  assert abs(noise["rho_pooled"]) < 0.2 and abs(noise["rho_random"]) < 0.4


def test_phi_diagnostic_reference_rollouts():
  """The diagnostic's reference policies on point_reach: the scripted expert succeeds in
  every episode, uniform random actions in none, and the distance falls along the
  expert's episodes."""
  from jaxpapers.papers.visitation_reward import phi_diag
  task = envs.make("point_reach")
  actor0 = networks.mlp_init(KEY, [task.obs_dim, 8, 8, task.act_dim], 0.01)
  ro = phi_diag.rollouts(task, actor0, KEY, 4)
  _, dist, succ = ro["expert"]
  assert bool(np.asarray(succ).any(1).all())
  assert np.all(np.asarray(dist)[:, -1] < np.asarray(dist)[:, 0])
  assert not bool(np.asarray(ro["random"][2]).any())


def test_rlpd_sac_components():
  """RLPD-style SAC's parts (issue 48): LayerNorm critic (normalised hidden layers: the Q
  value is unchanged when a hidden layer's pre-activation is scaled and shifted; off, it
  is the plain MLP), symmetric replay (the first half of a batch online, the second half
  demonstrations), update-to-data ratio (utd x env steps per iteration), and the
  demonstration buffer holding exactly bc.demonstrations' episodes for the same key."""
  h = jax.random.normal(KEY, (5, 7))
  ln = sac.layer_norm(h)
  np.testing.assert_allclose(ln.mean(-1), 0, atol=1e-6)
  np.testing.assert_allclose((ln**2).mean(-1), 1, atol=1e-4)
  q = networks.mlp_init(KEY, [3 + 2, 8, 8, 1])
  o, a = jax.random.normal(KEY, (4, 3)), jnp.ones((4, 2))
  np.testing.assert_allclose(sac.q_value(q, o, a), networks.mlp_apply(q, jnp.concatenate(
      [o, a], -1))[..., 0], rtol=1e-6)
  (w1, b1), rest = q[0], q[1:]
  q2 = [(3.0 * w1, 3.0 * b1 + 0.0)] + list(rest)  # scaled first layer: LN undoes it
  np.testing.assert_allclose(sac.q_value(q2, o, a, ln=True), sac.q_value(q, o, a, ln=True),
                             rtol=1e-4, atol=1e-5)
  assert not np.allclose(sac.q_value(q2, o, a), sac.q_value(q, o, a))
  task = envs.make("point_reach")
  demos = sac.demo_buffer(task, KEY, 3, 0.5)
  d_obs, d_act = bc.demonstrations(task, KEY, 3, 0.5)
  H = task.horizon
  np.testing.assert_allclose(np.asarray(demos.obs[0, :H]).transpose(1, 0, 2).reshape(-1, 6),
                             d_obs, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(demos.act[0]).transpose(1, 0, 2).reshape(-1, 2),
                             d_act, rtol=1e-6)
  online = rewards.buffer_init(2, H, 4, task.obs_dim, task.act_dim)
  online = rewards.buffer_add(online, -jnp.ones((H + 1, 4, 6)), jnp.zeros((H, 4, 2)),
                              jnp.zeros((H + 1, 4), bool))
  obs, nobs, act, r, d = sac.replay_batch(online, demos, KEY, 10)
  assert np.all(np.asarray(obs[:5]) == -1) and not np.any(np.asarray(obs[5:]) == -1)
  # point_reach's observation is its state, so the stored distance is distance(s')
  np.testing.assert_allclose(d[5:], jax.vmap(task.distance)(nobs[5:]), rtol=1e-6)
  assert np.all(np.asarray(sac.replay_batch(online, None, KEY, 10)[0]) == -1)
  rc = experiment.run_cfg(config_lib.load(
      "configs/visitation_reward.py:algo=sac,rlpd=True,sac_utd=1,num_envs=4"))
  assert sac.updates_per_iteration(rc, task) == 4 * H and rc.sac_rlpd
  assert sac.updates_per_iteration(rc._replace(sac_utd=0.0), task) == rc.sac_updates


def test_stats_merge_joins_study_pieces():
  """Pieces of one study (methods run as separate invocations) join per task: the table
  equals the one from a single results dict; a method in two pieces must be the same run
  (identical curves and choices), else it is an error."""
  rng = np.random.default_rng(3)
  c = {m: rng.random((4, 6)) for m in ("sparse", "svm", "vice")}
  full = {"t": {"curves": c, "chosen_lr": {m: 1e-3 for m in c},
                "chosen_scale": {m: 1.0 for m in c}, "val_auc": {}}}
  a = {"t": {"curves": {"svm": c["svm"]}, "chosen_lr": {"svm": 1e-3},
             "chosen_scale": {"svm": 1.0}, "val_auc": {}}}
  b = {"t": {"curves": {"vice": c["vice"], "sparse": c["sparse"]},
             "chosen_lr": {"vice": 1e-3, "sparse": 1e-3},
             "chosen_scale": {"vice": 1.0, "sparse": 1.0}, "val_auc": {}}}
  merged = vr_stats.table_rows(vr_stats.merge([a, b]))
  assert [r["method"] for r in merged] == ["sparse", "svm", "vice"]
  assert merged == vr_stats.table_rows(full)
  assert vr_stats.table_rows(vr_stats.merge([a, b, a])) == merged  # the same run twice
  a2 = {"t": dict(a["t"], curves={"svm": c["svm"] + 1e-7})}
  with pytest.raises(ValueError, match="differs between two pieces"):
    vr_stats.merge([a, b, a2])
