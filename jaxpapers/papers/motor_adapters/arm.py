"""Motor primitives as adapters of a shared recurrent core (abstract 7): the arm.

A differentiable planar two-joint arm driven by six lumped Hill-type muscles, in the
spirit of MotorNet's `RigidTendonArm26` (Codol et al. 2024). Every number below comes
from the sources MotorNet itself cites; the equations are written here from those
sources, not from MotorNet's code:

* Skeleton (masses, lengths, centre-of-mass distances, inertias about the centre of mass,
  joint limits shoulder 0..135 deg, elbow 0..155 deg): Nijhof & Kouwenhoven (2000),
  "Simulation of multijoint arm movements", via MotorNet's arm26 defaults. The rigid-body
  equations are the textbook two-link planar arm M(q) qdd + C(q, qd) = tau (no gravity:
  the arm moves in the horizontal plane).
* Muscle geometry: the lumped six-muscle polynomial model (Nijhof & Kouwenhoven 2000):
  musculotendon length L_m(q) = a0_m + sum_j a1_jm (q_j - a3_j) + a2_jm (q_j - a3_j)^2,
  moment arm r_jm = dL_m/dq_j. Order: pectoralis, deltoid, brachioradialis, triceps
  lateral, biceps, triceps long. Flexors have r < 0 (they shorten as the joint flexes), so
  their force gives a positive (flexing) torque tau = -r^T F.
* Muscle (rigid tendon): Thelen (2003) "Adjustment of muscle mechanics model parameters
  to simulate dynamic contractions in older adults": active force-length
  exp(-(l - 1)^2 / gamma), passive force-length (exp(kPE (l - 1) / eps0) - 1) /
  (exp(kPE) - 1), force-velocity from Thelen's eq. 6 solved for force (derived in
  `force_velocity`), maximal shortening velocity (0.25 + 0.75 a) * 10 optimal lengths/s,
  first-order activation dynamics with tau = tau_act (0.5 + 1.5 a) when rising and
  tau_deact / (0.5 + 1.5 a) when falling (Thelen eq. 1-2). Maximal isometric forces,
  tendon slack lengths and optimal fibre lengths are the arm26 values.

Integration is semi-implicit Euler with `substeps` sub-steps per control step; joint
limits clip the angle and zero any velocity that pushes further past the limit.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

MUSCLES = ("pectoralis", "deltoid", "brachioradialis", "triceps_lat", "biceps",
           "triceps_long")
FLEXORS_SHOULDER = (0, 4)  # pectoralis, biceps (biarticular)
EXTENSORS_SHOULDER = (1, 5)  # deltoid, triceps long (biarticular)
FLEXORS_ELBOW = (2, 4)  # brachioradialis, biceps
EXTENSORS_ELBOW = (3, 5)  # triceps lateral, triceps long


class ArmParams(NamedTuple):
  """Constants of the arm (all arrays float32; a pytree so it can be closed over)."""
  m1: float = 1.82  # kg, upper arm
  m2: float = 1.43  # kg, forearm + hand
  l1: float = 0.309  # m
  l2: float = 0.333  # m
  l1g: float = 0.135  # m, shoulder to upper-arm centre of mass
  l2g: float = 0.165  # m, elbow to forearm centre of mass
  i1: float = 0.051  # kg m^2, about the centre of mass
  i2: float = 0.057  # kg m^2
  damping: float = 0.1  # N m s / rad joint viscosity (MotorNet's `damping`; ours > 0)
  q_lo: tuple = (0.0, 0.0)  # rad
  q_hi: tuple = (float(np.deg2rad(135.0)), float(np.deg2rad(155.0)))
  f_max: tuple = (838.0, 1207.0, 1422.0, 1549.0, 414.0, 603.0)  # N
  l_tendon: tuple = (0.039, 0.066, 0.172, 0.187, 0.204, 0.217)  # m
  l_opt: tuple = (0.134, 0.140, 0.092, 0.093, 0.137, 0.127)  # m
  a0: tuple = (0.151, 0.2322, 0.2859, 0.2355, 0.3329, 0.2989)
  # a1[j][m]: linear moment-arm coefficients (row 0 shoulder, row 1 elbow)
  a1: tuple = ((-0.03, 0.03, 0.0, 0.0, -0.03, 0.03),
               (0.0, 0.0, -0.014, 0.025, -0.016, 0.03))
  a2: tuple = ((0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
               (0.0, 0.0, -4e-3, -2.2e-3, -5.7e-3, -3.2e-3))
  a3: tuple = (float(np.pi / 2), 0.0)  # rad, angle offsets of the polynomial
  # Thelen (2003) muscle constants
  gamma: float = 0.45  # width of the active force-length Gaussian
  k_pe: float = 5.0  # passive exponential shape
  eps0: float = 0.6  # passive strain at one f_max
  a_f: float = 0.25  # force-velocity shape factor
  f_len: float = 1.4  # max normalised eccentric force
  v_max: float = 10.0  # optimal lengths per second
  tau_act: float = 0.015  # s
  tau_deact: float = 0.05  # s
  a_min: float = 0.001


class ArmState(NamedTuple):
  q: jax.Array  # (2,) shoulder, elbow angle (rad)
  qd: jax.Array  # (2,) angular velocity (rad/s)
  act: jax.Array  # (6,) muscle activation in [a_min, 1]


def _arr(x):
  return jnp.asarray(x, jnp.float32)


def mass_matrix(p: ArmParams, q):
  c2 = jnp.cos(q[1])
  m11 = p.m1 * p.l1g**2 + p.i1 + p.m2 * (p.l2g**2 + p.l1**2 + 2 * p.l1 * p.l2g * c2) + p.i2
  m12 = p.m2 * (p.l2g**2 + p.l1 * p.l2g * c2) + p.i2
  m22 = p.m2 * p.l2g**2 + p.i2
  return jnp.stack([jnp.stack([m11, m12]), jnp.stack([m12, m22])])


def coriolis(p: ArmParams, q, qd):
  """C(q, qd): velocity-product torques of the two-link arm."""
  h = p.m2 * p.l1 * p.l2g * jnp.sin(q[1])
  return jnp.stack([-h * (2 * qd[0] * qd[1] + qd[1] ** 2), h * qd[0] ** 2])


def kinetic_energy(p: ArmParams, q, qd):
  return 0.5 * qd @ mass_matrix(p, q) @ qd


def skeleton_accel(p: ArmParams, q, qd, tau):
  """M(q)^-1 (tau - C): the 2x2 inverse written out (cheaper than a solver call)."""
  m = mass_matrix(p, q)
  rhs = tau - coriolis(p, q, qd)
  det = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
  return jnp.stack([m[1, 1] * rhs[0] - m[0, 1] * rhs[1],
                    m[0, 0] * rhs[1] - m[1, 0] * rhs[0]]) / det


def fingertip(p: ArmParams, q):
  """Hand position (m) in the shoulder frame."""
  return jnp.stack([p.l1 * jnp.cos(q[0]) + p.l2 * jnp.cos(q[0] + q[1]),
                    p.l1 * jnp.sin(q[0]) + p.l2 * jnp.sin(q[0] + q[1])])


def inverse_kinematics(p: ArmParams, xy):
  """Joint angles (elbow-flexed branch, elbow in (0, pi)) placing the hand at xy."""
  x, y = xy[..., 0], xy[..., 1]
  c2 = (x**2 + y**2 - p.l1**2 - p.l2**2) / (2 * p.l1 * p.l2)
  q2 = jnp.arccos(jnp.clip(c2, -1.0, 1.0))
  q1 = jnp.arctan2(y, x) - jnp.arctan2(p.l2 * jnp.sin(q2), p.l1 + p.l2 * jnp.cos(q2))
  return jnp.stack([q1, q2], -1)


def musculotendon(p: ArmParams, q, qd):
  """(length (6,), velocity (6,), moment arms (2, 6)) of the lumped muscles."""
  dq = (q - _arr(p.a3))[:, None]  # (2, 1)
  a1, a2 = _arr(p.a1), _arr(p.a2)
  length = _arr(p.a0) + jnp.sum(a1 * dq + a2 * dq**2, axis=0)
  moment = a1 + 2 * a2 * dq  # dL/dq
  velocity = qd @ moment
  return length, velocity, moment


def force_velocity(p: ArmParams, v_norm, act):
  """Thelen (2003) eq. 6 solved for f = F / (a f_L) given the fibre velocity.

  With w = (0.25 + 0.75 a) v_max and V = v / w (lengthening > 0), Thelen's
  V = (f - 1) / (1 + f / A_f) (shortening) gives f = A_f (1 + V) / (A_f - V), and
  V = (f - 1)(F_len - 1) / ((2 + 2 / A_f)(F_len - f)) (lengthening) gives
  f = (F_len - 1 + k V F_len) / (F_len - 1 + k V), k = 2 + 2 / A_f.
  """
  vv = v_norm / ((0.25 + 0.75 * act) * p.v_max)
  conc = p.a_f * (1 + vv) / (p.a_f - jnp.minimum(vv, 0.0))
  k = 2 + 2 / p.a_f
  vp = jnp.maximum(vv, 0.0)
  ecc = (p.f_len - 1 + k * vp * p.f_len) / (p.f_len - 1 + k * vp)
  return jnp.where(vv <= 0, jnp.maximum(conc, 0.0), ecc)


def muscle_force(p: ArmParams, act, length, velocity):
  """Tendon force (N) of the six muscles (rigid tendon: fibre length = L - tendon)."""
  l_opt = _arr(p.l_opt)
  l_norm = jnp.maximum(length - _arr(p.l_tendon), 1e-3) / l_opt
  v_norm = velocity / l_opt
  f_l = jnp.exp(-((l_norm - 1) ** 2) / p.gamma)
  f_pe = jnp.maximum((jnp.exp(p.k_pe * (l_norm - 1) / p.eps0) - 1) / (jnp.exp(p.k_pe) - 1),
                     0.0)
  f_v = force_velocity(p, v_norm, act)
  return (act * f_l * f_v + f_pe) * _arr(p.f_max)


def activation_rate(p: ArmParams, u, act):
  """Thelen (2003) eq. 1-2: faster rise than decay, both activation dependent."""
  u = jnp.clip(u, p.a_min, 1.0)
  s = 0.5 + 1.5 * act
  tau = jnp.where(u > act, p.tau_act * s, p.tau_deact / s)
  return (u - act) / tau


def apply_joint_limits(p: ArmParams, q, qd):
  lo, hi = _arr(p.q_lo), _arr(p.q_hi)
  qd = jnp.where((q <= lo) & (qd < 0), 0.0, qd)
  qd = jnp.where((q >= hi) & (qd > 0), 0.0, qd)
  return jnp.clip(q, lo, hi), qd


def joint_torque(p: ArmParams, state: ArmState):
  length, velocity, moment = musculotendon(p, state.q, state.qd)
  force = muscle_force(p, state.act, length, velocity)
  return -moment @ force - p.damping * state.qd, force


def substep(p: ArmParams, state: ArmState, u, dt, load_torque=None):
  """One semi-implicit Euler step of muscles + skeleton (u: excitations (6,))."""
  tau, _ = joint_torque(p, state)
  if load_torque is not None:
    tau = tau + load_torque
  qdd = skeleton_accel(p, state.q, state.qd, tau)
  act = jnp.clip(state.act + dt * activation_rate(p, u, state.act), p.a_min, 1.0)
  qd = state.qd + dt * qdd
  q = state.q + dt * qd
  q, qd = apply_joint_limits(p, q, qd)
  return ArmState(q, qd, act)


def step(p: ArmParams, state: ArmState, u, dt: float, substeps: int):
  """One control step of `dt` seconds: the excitation is held for `substeps` sub-steps."""
  h = dt / substeps
  for _ in range(substeps):  # static and small (1-4): unrolled on purpose
    state = substep(p, state, u, h)
  return state


def rest_state(p: ArmParams, q) -> ArmState:
  q = _arr(q)
  return ArmState(q, jnp.zeros_like(q), jnp.full(q.shape[:-1] + (6,), p.a_min, jnp.float32))


def proprioception(p: ArmParams, state: ArmState):
  """Normalised fibre lengths and velocities (12,): what muscle spindles report."""
  length, velocity, _ = musculotendon(p, state.q, state.qd)
  l_opt = _arr(p.l_opt)
  return jnp.concatenate([(length - _arr(p.l_tendon)) / l_opt - 1.0,
                          velocity / (l_opt * p.v_max)])
