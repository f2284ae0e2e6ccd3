"""Success Visitation Matching (arXiv 2606.23640): the sparse-reward tasks.

Pure-JAX planar manipulation tasks (point-mass reach, push a block to a goal, a 2-link
arm that picks an object and places it at a goal) and gymnax's MountainCarContinuous,
all behind one functional interface so that a whole fine-tuning run is one jitted
`lax.scan`. A state is a flat float32 vector here (a pytree such as brax's `State` for
the brax wrappers: the learners stack and slice states leaf by leaf, `prepend` and
`time_slice`); every task gives the sparse outcome reward
r(s, a, s') = 1[success(s')] (the paper's "1 when the task is completed, else 0"),
a hand-shaped distance (for the distance baseline only) and a scripted, imperfect
demonstrator used to make the noisy behaviour-cloning data. Episodes have a fixed
horizon and never terminate early. The horizon is a time limit, not a terminal state:
the learners bootstrap from the critic at it (PPO's GAE from V(s_H), SAC's TD target at
every stored transition), so the objective they optimise is the infinite-horizon
discounted one, the setting of the invariance check in tabular.py (treating the time
limit as terminal would break the shaping guarantee; see ppo.time_limit_gae).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

_DT = 0.1  # seconds per control step for the planar tasks


def _unit(v, eps=1e-6):
  return v / jnp.maximum(jnp.linalg.norm(v), eps)


@dataclasses.dataclass(frozen=True)
class Task:
  """Base class: subclasses define the methods below (all pure, vmappable)."""
  name: str = "task"
  state_dim: int = 0
  obs_dim: int = 0
  act_dim: int = 0
  horizon: int = 50

  def reset(self, key):  # -> state (state_dim,)
    raise NotImplementedError

  def step(self, state, action, key):  # -> next state; action is clipped to [-1, 1]
    raise NotImplementedError

  def obs(self, state):  # -> (obs_dim,)
    raise NotImplementedError

  def success(self, state):  # -> bool scalar
    raise NotImplementedError

  def distance(self, state):  # -> hand-shaped distance to completion (>= 0)
    raise NotImplementedError

  def expert(self, state, key):  # -> scripted demonstrator action in [-1, 1]
    raise NotImplementedError

  def reward(self, next_state):
    """The sparse outcome reward: 1 when the task is completed, else 0."""
    return self.success(next_state).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class PointReach(Task):
  """A damped point mass pushed by a bounded force to a random goal (radius 0.05)."""
  name: str = "point_reach"
  state_dim: int = 6  # position (2), velocity (2), goal (2)
  obs_dim: int = 6
  act_dim: int = 2
  horizon: int = 40
  radius: float = 0.05

  def reset(self, key):
    kp, kg = jax.random.split(key)
    p = jax.random.uniform(kp, (2,), minval=-1.0, maxval=1.0)
    g = jax.random.uniform(kg, (2,), minval=-1.0, maxval=1.0)
    return jnp.concatenate([p, jnp.zeros(2), g])

  def step(self, state, action, key):
    del key
    a = jnp.clip(action, -1.0, 1.0)
    p, v, g = state[:2], state[2:4], state[4:]
    v = 0.8 * v + 0.2 * a  # terminal speed 1 unit/s
    p = jnp.clip(p + _DT * v, -1.2, 1.2)
    return jnp.concatenate([p, v, g])

  def obs(self, state):
    return state

  def success(self, state):
    return jnp.linalg.norm(state[:2] - state[4:]) < self.radius

  def distance(self, state):
    return jnp.linalg.norm(state[:2] - state[4:])

  def expert(self, state, key):
    del key
    p, v, g = state[:2], state[2:4], state[4:]
    return jnp.clip(3.0 * (g - p) - 1.0 * v, -1.0, 1.0)


@dataclasses.dataclass(frozen=True)
class PushBlock(Task):
  """A kinematic round pusher moves a round block; success: block within 0.1 of goal."""
  name: str = "push_block"
  state_dim: int = 6  # pusher (2), block (2), goal (2)
  obs_dim: int = 6
  act_dim: int = 2
  horizon: int = 60
  contact: float = 0.15  # pusher radius + block radius
  radius: float = 0.1
  speed: float = 1.0  # units/s at |a| = 1

  def reset(self, key):
    ka, kb, kg = jax.random.split(key, 3)
    a = jax.random.uniform(ka, (2,), minval=-1.0, maxval=1.0)
    b = jax.random.uniform(kb, (2,), minval=-0.5, maxval=0.5)
    g = jax.random.uniform(kg, (2,), minval=-0.7, maxval=0.7)
    # A pusher spawned inside the block is moved out along the separating direction.
    d = a - b
    a = jnp.where(jnp.linalg.norm(d) < self.contact, b + self.contact * _unit(d), a)
    return jnp.concatenate([a, b, g])

  def step(self, state, action, key):
    del key
    u = jnp.clip(action, -1.0, 1.0)
    a, b, g = state[:2], state[2:4], state[4:]
    a = jnp.clip(a + _DT * self.speed * u, -1.2, 1.2)
    d = b - a
    dist = jnp.linalg.norm(d)
    # Contact: the block is pushed out to the contact distance along the centre line.
    b = jnp.where(dist < self.contact, a + self.contact * _unit(d), b)
    b = jnp.clip(b, -1.0, 1.0)
    return jnp.concatenate([a, b, g])

  def obs(self, state):
    return state

  def success(self, state):
    return jnp.linalg.norm(state[2:4] - state[4:]) < self.radius

  def distance(self, state):
    a, b, g = state[:2], state[2:4], state[4:]
    return jnp.linalg.norm(b - g) + 0.5 * jnp.linalg.norm(a - b)

  def expert(self, state, key):
    del key
    a, b, g = state[:2], state[2:4], state[4:]
    u = _unit(g - b)
    pre = b - (self.contact + 0.03) * u  # behind the block, on the goal line
    behind = jnp.dot(a - b, u) < -0.05  # already on the pushing side
    lateral = jnp.linalg.norm((a - b) - jnp.dot(a - b, u) * u)
    # Go around the block (sideways first) when on the wrong side, else line up and push.
    side = _unit(jnp.array([-u[1], u[0]]) * jnp.sign(jnp.dot(a - b, jnp.array([-u[1], u[0]])) + 1e-6))
    around = b + 0.25 * side - 0.1 * u
    target = jnp.where(behind, jnp.where(lateral < 0.05, b + 0.05 * u, pre), around)
    return jnp.clip(8.0 * (target - a), -1.0, 1.0)


@dataclasses.dataclass(frozen=True)
class ArmPlace(Task):
  """A planar 2-link arm (links 0.5) picks a point object and places it at a goal.

  Action: joint velocities (2, 0.1 rad per step at |a| = 1) and a gripper command
  (> 0 closes). Closing within 0.08 of the object grasps it; a held object moves with
  the end effector; opening releases it where it is. Success: the object rests (not
  held) within 0.08 of the goal.
  """
  name: str = "arm_place"
  state_dim: int = 7  # joint angles (2), object (2), held (1), goal (2)
  # cos/sin of the joints (4), end effector (2), object (2), held, goal (2), and the
  # two relative vectors object - effector, goal - object (4)
  obs_dim: int = 15
  act_dim: int = 3
  horizon: int = 60
  radius: float = 0.08
  grasp: float = 0.08

  @staticmethod
  def fk(q):
    e1 = 0.5 * jnp.array([jnp.cos(q[0]), jnp.sin(q[0])])
    return e1 + 0.5 * jnp.array([jnp.cos(q[0] + q[1]), jnp.sin(q[0] + q[1])])

  def _reachable(self, key):
    kr, kt = jax.random.split(key)
    r = jax.random.uniform(kr, (), minval=0.35, maxval=0.9)
    t = jax.random.uniform(kt, (), minval=-jnp.pi, maxval=jnp.pi)
    return r * jnp.array([jnp.cos(t), jnp.sin(t)])

  def reset(self, key):
    kq, ko, kg = jax.random.split(key, 3)
    q = jax.random.uniform(kq, (2,), minval=-jnp.pi, maxval=jnp.pi)
    return jnp.concatenate([q, self._reachable(ko), jnp.zeros(1), self._reachable(kg)])

  def step(self, state, action, key):
    del key
    u = jnp.clip(action, -1.0, 1.0)
    q, o, held, g = state[:2], state[2:4], state[4] > 0.5, state[5:]
    q = q + 0.1 * u[:2]
    q = jnp.arctan2(jnp.sin(q), jnp.cos(q))
    ee = self.fk(q)
    close = u[2] > 0.0
    held = jnp.where(close, held | (jnp.linalg.norm(ee - o) < self.grasp), False)
    o = jnp.where(held, ee, o)
    return jnp.concatenate([q, o, held.astype(jnp.float32)[None], g])

  def obs(self, state):
    q = state[:2]
    ee, o, g = self.fk(q), state[2:4], state[5:]
    return jnp.concatenate([jnp.cos(q), jnp.sin(q), ee, state[2:], o - ee, g - o])

  def success(self, state):
    return (jnp.linalg.norm(state[2:4] - state[5:]) < self.radius) & (state[4] < 0.5)

  def distance(self, state):
    ee, o, g = self.fk(state[:2]), state[2:4], state[5:]
    return jnp.linalg.norm(o - g) + jnp.where(state[4] > 0.5, 0.0, jnp.linalg.norm(ee - o))

  def expert(self, state, key):
    del key
    q, o, held, g = state[:2], state[2:4], state[4] > 0.5, state[5:]
    ee = self.fk(q)
    target = jnp.where(held, g, o)
    s1, c1 = jnp.sin(q[0]), jnp.cos(q[0])
    s12, c12 = jnp.sin(q[0] + q[1]), jnp.cos(q[0] + q[1])
    jac = 0.5 * jnp.array([[-s1 - s12, -s12], [c1 + c12, c12]])
    # Damped least squares IK step towards the target.
    dq = jac.T @ jnp.linalg.solve(jac @ jac.T + 0.01 * jnp.eye(2), target - ee)
    near_obj = jnp.linalg.norm(ee - o) < 0.6 * self.grasp
    at_goal = jnp.linalg.norm(o - g) < 0.5 * self.radius
    grip = jnp.where(held, jnp.where(at_goal, -1.0, 1.0), jnp.where(near_obj, 1.0, -1.0))
    return jnp.concatenate([jnp.clip(dq / 0.1, -1.0, 1.0), grip[None]])


@dataclasses.dataclass(frozen=True)
class MountainCar(Task):
  """gymnax's MountainCarContinuous-v0 dynamics with the sparse reward 1[position >= 0.45].

  gymnax's own reward (-0.1 a^2 per step, +100 at the goal) is replaced by the sparse
  outcome reward; its termination is ignored (fixed horizon, see module docstring).
  State: (position, velocity, time).
  """
  name: str = "mountain_car"
  state_dim: int = 3
  obs_dim: int = 2
  act_dim: int = 1
  horizon: int = 120

  def _env(self):
    import gymnax  # lazy: only this task needs gymnax (pip install "gymnax==1.0.1" six)
    return gymnax.make("MountainCarContinuous-v0")

  def _to_env_state(self, state):
    from gymnax.environments.classic_control import continuous_mountain_car as mc
    return mc.EnvState(time=state[2].astype(jnp.int32), position=state[0],
                       velocity=state[1])

  def reset(self, key):
    env, params = self._env()
    _, s = env.reset_env(key, params)
    return jnp.stack([s.position, jnp.asarray(s.velocity, jnp.float32), jnp.float32(0.0)])

  def step(self, state, action, key):
    env, params = self._env()
    a = jnp.clip(action, -1.0, 1.0)
    _, s, _, _, _ = env.step_env(key, self._to_env_state(state), a, params)
    return jnp.stack([s.position, s.velocity, state[2] + 1.0]).astype(jnp.float32)

  def obs(self, state):
    return jnp.stack([state[0], 10.0 * state[1]])

  def success(self, state):
    return state[0] >= 0.45

  def distance(self, state):
    return jnp.maximum(0.45 - state[0], 0.0)

  def expert(self, state, key):
    del key
    # Energy pumping: push along the velocity (left when at rest).
    return jnp.where(state[1] > 0.0, 1.0, -1.0)[None]


TASKS = {"point_reach": PointReach(), "push_block": PushBlock(), "arm_place": ArmPlace(),
         "mountain_car": MountainCar()}


def make(name: str) -> Task:
  if name in ("brax_reacher", "brax_pusher"):
    from jaxpapers.papers.visitation_reward import brax_tasks  # lazy: brax is heavy
    return brax_tasks.make(name)
  if name not in TASKS:
    raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(TASKS))}, "
                     "brax_reacher, brax_pusher")
  return TASKS[name]


def prepend(s0, states):
  """[s0, s1, ..., sH] along a new leading axis, for flat states and state pytrees alike.

  brax's `State` is a pytree (pipeline_state, obs, reward, done, metrics, info), so a
  jnp.concatenate on it fails (it was how this code first stacked states); every leaf is
  stacked instead.
  """
  return jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), s0, states)


def time_slice(states, lo=None, hi=None):
  """states[lo:hi] along the time axis of every leaf (flat states or pytrees)."""
  return jax.tree.map(lambda x: x[lo:hi], states)


def rollout(task: Task, policy, key, horizon: int | None = None):
  """One episode of `policy(obs, key) -> action`: (states (H+1, S), actions (H, A))."""
  horizon = horizon or task.horizon
  k0, k1 = jax.random.split(key)
  s0 = task.reset(k0)

  def body(s, k):
    ka, ks = jax.random.split(k)
    a = jnp.clip(policy(task.obs(s), s, ka), -1.0, 1.0)
    s2 = task.step(s, a, ks)
    return s2, (s2, a)

  _, (states, actions) = jax.lax.scan(body, s0, jax.random.split(k1, horizon))
  return prepend(s0, states), actions
