"""Success Visitation Matching (arXiv 2606.23640): brax reacher / pusher, sparse success.

brax's dense rewards are replaced by the sparse outcome reward 1[success(s')]:
reacher succeeds when the fingertip is within `radius` of the target (the last three
observation entries are fingertip - target), pusher when the object is within `radius`
of the goal in the table plane (observation entries 17:20 object, 20:23 goal). The
state is brax's own `State` pytree, which the learners handle like the flat states of
the pure-JAX tasks (leaf by leaf, `envs.prepend` / `envs.time_slice`).

reacher has a scripted demonstrator (`reacher_expert`: joint-space PD control to the
closed-form inverse kinematics of the 2-link arm), so it runs end to end like the
pure-JAX tasks (noisy demonstrations -> BC -> PPO fine-tuning); pusher has none that
works (`pusher_expert_attempt` succeeds in 0.47 of episodes without noise; README "Not
done"), so `expert` refuses it. Both use
brax's default `generalized` backend. Measured on one core of this CPU (README "brax
reacher"): reacher's 50-step rollout of 16 environments compiles in ~7 s and runs at
~15k env steps/s, pusher's in ~27 s (reset + rollout) at ~2k env steps/s.
brax is imported lazily: `pip install "brax==0.14.2"` (setup.py's `brax` extra).
"""
from __future__ import annotations

import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp

from jaxpapers.papers.visitation_reward import envs

# reacher.xml: link0 from the base to joint1 is 0.1 long, the fingertip sits 0.11 past
# joint1; motors have gear 200 on joints with armature 1 and damping 1, so a unit action
# gives ~200 rad/s^2 (the links' own inertia is negligible against the armature).
REACHER_LINKS = (0.1, 0.11)
REACHER_GEAR = 200.0


@functools.lru_cache(maxsize=None)
def brax_env(env_name: str, backend: str = "generalized"):
  """The brax environment, built once per process (building parses the MJCF file; the
  wrapper's methods are traced many times per program). Built with concrete arrays even
  when first asked for inside a trace: a cached env holding tracers would leak them."""
  from brax import envs as brax_envs  # lazy: heavy import, optional dependency
  with jax.ensure_compile_time_eval():
    return brax_envs.get_environment(env_name, backend=backend)


def reacher_ik(target, elbow):
  """Joint angles (theta0, theta1) that put the fingertip at `target` (2-link closed form,
  the elbow on the side of `elbow`'s sign); unreachable targets are clipped to the arm's
  reach."""
  l1, l2 = REACHER_LINKS
  c1 = (jnp.sum(target**2) - l1**2 - l2**2) / (2 * l1 * l2)
  t1 = jnp.where(elbow >= 0, 1.0, -1.0) * jnp.arccos(jnp.clip(c1, -0.995, 1.0))
  t0 = jnp.arctan2(target[1], target[0]) - jnp.arctan2(l2 * jnp.sin(t1), l1 + l2 * jnp.cos(t1))
  return jnp.stack([t0, t1])


def reacher_expert(q, qd, omega: float = 8.0):
  """Joint-space PD control to the inverse-kinematics solution for reacher's target.

  q, qd: brax's generalized coordinates (arm angles q[0:2], target position q[2:4]).
  qdd* = omega^2 (q_ik - q) - 2 omega qd (critically damped), action = qdd* / gear
  (qdd ~ gear x action with the unit armature). The demonstrator reads the simulator's
  joint state (a privileged observation; the cloned policy sees only brax's
  observation). Why scripted: no training, so demonstrations cost one rollout; with the
  BC data's action noise its episodes both succeed and fail (README "brax reacher").
  """
  target = q[2:4]
  q_ik = reacher_ik(target, q[1])
  err = q_ik - q[:2]
  err = jnp.arctan2(jnp.sin(err), jnp.cos(err))  # joint 0 is unlimited: shortest way
  qdd = omega**2 * err - 2.0 * omega * qd[:2]
  return jnp.clip(qdd / REACHER_GEAR, -1.0, 1.0)


def _pusher_features(q7, q, bsys, link):
  """The wrist's U (pusher.xml: a crossbar along the roll link's y at its origin, two
  prongs along its x): crossbar centre, the U's opening direction (x axis, weighted 0.1
  against metres) and the height of its y axis (0 = U plane level)."""
  from brax import kinematics, math as bmath  # lazy: optional dependency
  x, _ = kinematics.forward(bsys, q.at[:7].set(q7), jnp.zeros(bsys.qd_size()))
  a = bmath.rotate(jnp.array([1.0, 0.0, 0.0]), x.rot[link])
  b = bmath.rotate(jnp.array([0.0, 1.0, 0.0]), x.rot[link])
  return jnp.concatenate([x.pos[link], 0.1 * a, 0.1 * b[2:3]])


def pusher_expert_attempt(state, z_high=-0.15, z_push=-0.275, back=0.13):
  """A scripted pusher controller that does NOT work reliably (README "Not done": 0.47
  success without noise, 0.28 at the BC noise), so no study uses it; kept as the start
  for a follow-up. Task-space damped least squares (Jacobian by jax.jacfwd of brax's
  forward kinematics) on the wrist's U: open it along object -> goal, level; go above
  a point `back` behind the object on the goal line, lower to the object's height,
  push the crossbar to 0.07 short of the goal, hold once the object is within 0.03.
  Fails where the U cannot point along the push (objects beside the goal on the far
  side) and close to the base (the arm cannot reach down there)."""
  env = brax_env("pusher")
  link = env.sys.link_names.index("r_wrist_roll_link")
  q, qd, o = state.pipeline_state.q, state.pipeline_state.qd, state.obs
  obj, goal = o[17:19], o[20:22]
  feat = functools.partial(_pusher_features, q=q, bsys=env.sys, link=link)
  f = feat(q[:7])
  c = f[:3]
  u = (goal - obj) / (jnp.linalg.norm(goal - obj) + 1e-6)
  rel = c[:2] - obj
  pre = obj - back * u
  pushing = (rel @ u < -0.03) & (jnp.abs(rel @ jnp.array([-u[1], u[0]])) < 0.03) & (
      c[2] < z_push + 0.03)
  done = jnp.linalg.norm(goal - obj) < 0.03
  xy = jnp.where(done, c[:2], jnp.where(pushing, goal - 0.07 * u, pre))
  z = jnp.where(done, c[2], jnp.where(pushing | (jnp.linalg.norm(c[:2] - pre) < 0.06),
                                      z_push, z_high))
  target = jnp.concatenate([xy, z[None], 0.1 * jnp.array([u[0], u[1], 0.0]), jnp.zeros(1)])
  err = target - f
  err = err.at[:3].multiply(jnp.minimum(1.0, jnp.where(pushing, 0.06, 0.1) /
                                        (jnp.linalg.norm(err[:3]) + 1e-6)))
  jac = jax.jacfwd(feat)(q[:7])
  dq = jac.T @ jnp.linalg.solve(jac @ jac.T + 0.003 * jnp.eye(7), 8.0 * err)
  return jnp.clip((dq - qd[:7]) / 2.0, -1.0, 1.0)  # velocity servo; torque = 2 x action


@dataclasses.dataclass(frozen=True)
class BraxSparse(envs.Task):
  env_name: str = "reacher"
  radius: float = 0.02

  def _env(self):
    return brax_env(self.env_name)

  def reset(self, key):
    return self._env().reset(key)

  def step(self, state, action, key):
    del key
    return self._env().step(state, jnp.clip(action, -1.0, 1.0))

  def obs(self, state):
    return state.obs

  def distance(self, state):
    o = state.obs
    if self.env_name == "reacher":
      return jnp.linalg.norm(o[-3:-1])  # fingertip - target in the plane
    return jnp.linalg.norm(o[17:19] - o[20:22])  # object - goal on the table

  def success(self, state):
    return self.distance(state) < self.radius

  def expert(self, state, key):
    del key
    if self.env_name == "reacher":
      ps = state.pipeline_state
      return reacher_expert(ps.q, ps.qd)
    raise NotImplementedError(f"no scripted demonstrator for brax {self.env_name}")


def make(name: str) -> BraxSparse:
  if name == "brax_reacher":
    return BraxSparse(name=name, env_name="reacher", obs_dim=11, act_dim=2, horizon=50,
                      radius=0.02)
  if name == "brax_pusher":
    return BraxSparse(name=name, env_name="pusher", obs_dim=23, act_dim=7, horizon=100,
                      radius=0.05)
  raise ValueError(f"unknown brax task {name!r}; known: brax_reacher, brax_pusher")


def demonstrator_success(task: BraxSparse, key, episodes: int, noise: float, expert=None):
  """Episode success rate of the scripted demonstrator (`expert(state, key)`, default
  the task's) with N(0, noise^2) action noise (the BC data's noise model,
  bc.demonstrations)."""
  expert = expert or task.expert
  def pol(obs, state, k):
    return expert(state, k) + noise * jax.random.normal(k, (task.act_dim,))
  states, _ = jax.vmap(lambda k: envs.rollout(task, pol, k))(jax.random.split(key, episodes))
  return jax.vmap(jax.vmap(task.success))(states)[:, 1:].any(1).mean()


if __name__ == "__main__" and sys.argv[1:] == ["pusher"]:
  # python -m jaxpapers.papers.visitation_reward.brax_tasks pusher: the failed pusher
  # controller's episode success (README "Not done").
  pusher = make("brax_pusher")
  run = jax.jit(lambda n: demonstrator_success(
      pusher, jax.random.key(0), 32, n, lambda s, k: pusher_expert_attempt(s)))
  for n in (0.0, 0.5):
    print(f"brax_pusher controller attempt, action noise {n}: episode success "
          f"{float(run(jnp.float32(n))):.3f} (32 episodes)")
elif __name__ == "__main__":
  # python -m jaxpapers.papers.visitation_reward.brax_tasks: the reacher demonstrator's
  # episode success without noise and at the BC data's noise (0.5) and twice that.
  reacher = make("brax_reacher")
  run = jax.jit(lambda n: demonstrator_success(reacher, jax.random.key(0), 64, n))
  for n in (0.0, 0.5, 1.0):
    print(f"brax_reacher demonstrator, action noise {n}: episode success "
          f"{float(run(jnp.float32(n))):.3f} (64 episodes)")
