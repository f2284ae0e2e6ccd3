"""Two-stage training of LMI-certified neural network observers (abstract 4): the plants.

Each plant is x' = A x + B u + G phi(x) + E d, y = C x + v, with a Lipschitz nonlinearity
phi whose increments satisfy the quadratic constraints
(phi_j(x) - phi_j(xh))^2 <= (x - xh)^T Q_j (x - xh) (used by the S-procedure in lmi.py),
an unknown disturbance d and Gaussian measurement noise v. Observers estimate the extended
state z = [x; d] with the model d' = 0. Integration is a `lax.scan` of RK4 steps with the
input, disturbance and measurement held over each step (zero-order hold).

Plants: damped pendulum, Van der Pol oscillator, single-link flexible-joint arm (Spong),
and the Grumman X-29A lateral-directional model at two published flight conditions
(ND-UA up-and-away, ND-PA powered approach; matrices and source in X29_LATERAL).

Model mismatch (issue 46): each plant is built from named physical parameters
(`nominal_params`; for the X-29A its aerodynamic and control derivatives), and
`true_plant` returns the plant that generates the data when those parameters are off by
+-frac and/or an unmodelled Coulomb friction acts; observers keep `make_plant`'s nominal
model.
"""
from __future__ import annotations

import dataclasses
import inspect
import zlib
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Plant:
  name: str
  A: np.ndarray  # (nx, nx)
  B: np.ndarray  # (nx, nu)
  E: np.ndarray  # (nx, nd) disturbance input
  C: np.ndarray  # (ny, nx)
  G: np.ndarray  # (nx, np) nonlinearity input
  phi: Callable  # x (nx,) -> (np,), jnp
  Q: np.ndarray  # (np, nx, nx) increment bounds of phi (PSD)
  x_box: np.ndarray  # (nx,) half-widths of the initial-state / operating box
  u_amp: float  # input amplitude
  d_amp: float  # disturbance amplitude
  noise: float  # measurement noise std
  # a term of the true plant that no observer models (model-mismatch study), x -> (nx,)
  unmodelled: Callable | None = None

  @property
  def nx(self):
    return self.A.shape[0]

  @property
  def nd(self):
    return self.E.shape[1]

  @property
  def nz(self):
    return self.nx + self.nd

  @property
  def ny(self):
    return self.C.shape[0]

  @property
  def nu(self):
    return self.B.shape[1]

  # Extended (state + disturbance) matrices used by every observer.
  @property
  def Abar(self):
    a = np.zeros((self.nz, self.nz))
    a[:self.nx, :self.nx] = self.A
    a[:self.nx, self.nx:] = self.E
    return a

  @property
  def Bbar(self):
    return np.concatenate([self.B, np.zeros((self.nd, self.nu))], 0)

  @property
  def Cbar(self):
    return np.concatenate([self.C, np.zeros((self.ny, self.nd))], 1)

  @property
  def Gbar(self):
    return np.concatenate([self.G, np.zeros((self.nd, self.G.shape[1]))], 0)

  @property
  def Qbar(self):
    q = np.zeros((self.Q.shape[0], self.nz, self.nz))
    q[:, :self.nx, :self.nx] = self.Q
    return q

  def f(self, x, u, d):
    """Plant vector field (jnp)."""
    out = (jnp.asarray(self.A) @ x + jnp.asarray(self.B) @ u
           + jnp.asarray(self.G) @ self.phi(x) + jnp.asarray(self.E) @ d)
    return out if self.unmodelled is None else out + self.unmodelled(x)

  def fbar(self, z, u):
    """Extended-state model used by observers: x' = f(x, u, d), d' = 0."""
    x, d = z[:self.nx], z[self.nx:]
    return jnp.concatenate([self.f(x, u, d), jnp.zeros((self.nd,), z.dtype)])


def pendulum(noise=0.01, g_l=4.0, b=0.2):
  # g_l = g / l, b = viscous damping
  return Plant(
      name="pendulum", A=np.array([[0.0, 1.0], [0.0, -b]]), B=np.array([[0.0], [1.0]]),
      E=np.array([[0.0], [1.0]]), C=np.array([[1.0, 0.0]]), G=np.array([[0.0], [-g_l]]),
      phi=lambda x: jnp.sin(x[:1]), Q=np.diag([1.0, 0.0])[None],
      x_box=np.array([1.0, 1.0]), u_amp=1.0, d_amp=1.0, noise=noise)


def van_der_pol(noise=0.01, mu=0.5, k=1.0, region=(2.5, 2.5)):
  # x1'' = -k x1 + mu (1 - x1^2) x1' + u + d. phi(x) = -mu x1^2 x2 is Lipschitz only on a
  # bounded region |x1| <= a, |x2| <= b; the increment bound (gradient bounds 2 mu a b
  # and mu a^2, Cauchy-Schwarz) holds there.
  a, b = region
  g1, g2 = 2 * mu * a * b, mu * a * a
  return Plant(
      name="van_der_pol", A=np.array([[0.0, 1.0], [-k, mu]]), B=np.array([[0.0], [1.0]]),
      E=np.array([[0.0], [1.0]]), C=np.array([[1.0, 0.0]]), G=np.array([[0.0], [1.0]]),
      phi=lambda x: -mu * x[:1] ** 2 * x[1:2], Q=np.diag([2 * g1 ** 2, 2 * g2 ** 2])[None],
      x_box=np.array([1.5, 1.5]), u_amp=0.3, d_amp=0.3, noise=noise)


def flexible_joint(noise=0.01, mgl_i=2.0, k_i=5.0, k_j=5.0, b1=0.1, b2=0.2, inv_j=1.0):
  # Spong's single-link flexible-joint arm: link angle q1, motor angle q2; both encoders.
  # mgl_i = MgL / I, k_i = k / I, k_j = k / J (joint stiffness k), b1, b2 viscous damping,
  # inv_j = 1 / J (motor torque and the torque disturbance enter through it).
  a = np.array([[0.0, 1.0, 0.0, 0.0],
                [-k_i, -b1, k_i, 0.0],
                [0.0, 0.0, 0.0, 1.0],
                [k_j, 0.0, -k_j, -b2]])
  return Plant(
      name="flexible_joint", A=a, B=np.array([[0.0], [0.0], [0.0], [inv_j]]),
      E=np.array([[0.0], [0.0], [0.0], [inv_j]]),
      C=np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]),
      G=np.array([[0.0], [-mgl_i], [0.0], [0.0]]), phi=lambda x: jnp.sin(x[:1]),
      Q=np.diag([1.0, 0.0, 0.0, 0.0])[None], x_box=np.array([0.8, 0.8, 0.8, 0.8]),
      u_amp=1.0, d_amp=1.0, noise=noise)


# Grumman X-29A lateral-directional models, states (beta [rad], p, r [rad/s], phi [rad]),
# inputs (aileron, rudder), as published in the public repository
# shahriarta/Ergodic-risk-Policy-Optimization, file risk-lqr-plots_ACC.py (Talebi and Li,
# "Ergodic-Risk Constrained Policy Optimization: The Linear Quadratic Case", ACC 2025),
# whose companion code labels them "Table 9-10 ND-PA" and "Table 13-14 ND-UA" (normal
# digital flight-control mode, powered approach / up-and-away) of the original NASA
# report (not named in that code; see the README). Facts (numbers), entered here by hand.
X29_LATERAL = {
    "ND-UA": dict(
        A=[[-0.1596, 0.07150, -0.9974, 0.04413],
           [-15.20, -2.602, 1.106, 0.0],
           [6.840, -0.1026, -0.06375, 0.0],
           [0.0, 1.0, 0.07168, 0.0]],
        B=[[-0.5980e-03, 0.6718e-03],
           [1.343, 0.2345],
           [0.08974, -0.07097],
           [0.0, 0.0]]),
    "ND-PA": dict(
        A=[[-0.1817, 0.1496, -0.9825, 0.1119],
           [-3.569, -1.704, 0.9045, -0.5531e-06],
           [1.218, -0.08208, -0.1826, -0.4630e-07],
           [0.0, 1.0, 0.1513, 0.0]],
        B=[[-0.4327e-03, 0.3901e-03],
           [0.3713, 0.05486],
           [0.02648, -0.01353],
           [0.0, 0.0]]),
}


# Input amplitude [deg] per condition: about the excitation of the state box below.
U_AMP = {"ND-UA": 0.35, "ND-PA": 0.6}


# The X-29A's physical parameters: its aerodynamic and control derivatives, i.e. the
# entries of rows beta', p', r' of A (sideslip, roll and yaw moment derivatives; not the
# kinematic sin(alpha0), -cos(alpha0), the gravity term g cos(theta0)/V, nor the
# negligible bank-angle entries of rows p', r') and of B (aileron, rudder). Named "A10" =
# A[1, 0] etc.
X29_DERIVS = ("A00", "A10", "A11", "A12", "A20", "A21", "A22",
              "B00", "B01", "B10", "B11", "B20", "B21")


def x29_lateral(noise=0.005, condition="ND-UA", **derivs):
  """Grumman X-29A lateral-directional model at flight condition ND-UA or ND-PA.

  The published linear model x' = A x + B u (X29_LATERAL) with its gravity entry
  A[0, 3] = g cos(theta0) / V (bank angle into sideslip rate) restored to the nonlinear
  (g cos(theta0) / V) sin(phi): the plant's linearisation at phi = 0 is the published A
  (tests check its eigenvalues). A side gust d enters the sideslip equation. Measured:
  p, r, phi (rate gyros, attitude); beta is not. Inputs in the report's units (deg).
  derivs: entries named in X29_DERIVS replaced (the mismatch study's true plant).
  """
  m = X29_LATERAL[condition]
  a, b = np.array(m["A"]), np.array(m["B"])
  for k, v in derivs.items():
    if k not in X29_DERIVS:
      raise ValueError(f"unknown X-29 derivative {k!r}; known: {', '.join(X29_DERIVS)}")
    (a if k[0] == "A" else b)[int(k[1]), int(k[2])] = v
  g_v = a[0, 3]
  a = a.copy()
  a[0, 3] = 0.0  # carried by the nonlinear term G sin(phi)
  return Plant(
      name="x29" if condition == "ND-UA" else "x29_pa", A=a, B=b,
      E=np.array([[1.0], [0.0], [0.0], [0.0]]),
      C=np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]),
      G=np.array([[g_v], [0.0], [0.0], [0.0]]), phi=lambda x: jnp.sin(x[3:4]),
      Q=np.diag([0.0, 0.0, 0.0, 1.0])[None], x_box=np.array([0.1, 0.3, 0.2, 0.4]),
      u_amp=U_AMP[condition], d_amp=0.1, noise=noise)


PLANTS = {"pendulum": pendulum, "van_der_pol": van_der_pol,
          "flexible_joint": flexible_joint, "x29": x29_lateral,
          "x29_pa": lambda noise=0.005, **kw: x29_lateral(noise, "ND-PA", **kw)}


def make_plant(name: str, noise_scale: float = 1.0, params: dict | None = None) -> Plant:
  """The nominal plant (params None) or the plant with physical parameters `params`."""
  if name not in PLANTS:
    raise ValueError(f"unknown plant {name!r}; known: {', '.join(PLANTS)}")
  p = PLANTS[name](**(params or {}))
  return dataclasses.replace(p, noise=p.noise * noise_scale)


def nominal_params(name: str) -> dict:
  """The named physical parameters of a plant and their nominal values."""
  if name not in PLANTS:
    raise ValueError(f"unknown plant {name!r}; known: {', '.join(PLANTS)}")
  if name.startswith("x29"):
    m = X29_LATERAL["ND-UA" if name == "x29" else "ND-PA"]
    return {k: float(m[k[0]][int(k[1])][int(k[2])]) for k in X29_DERIVS}
  sig = inspect.signature(PLANTS[name])
  return {k: float(v.default) for k, v in sig.parameters.items()
          if k not in ("noise", "region")}


def mismatch_signs(name: str) -> dict:
  """+1 / -1 per physical parameter: the direction each is off in the true plant. Drawn
  once from a generator seeded by the plant's name (crc32), so the true plant is the same
  for every seed, method and run."""
  rng = np.random.default_rng(zlib.crc32(name.encode()))
  return {k: float(rng.choice([-1.0, 1.0])) for k in nominal_params(name)}


# Unmodelled Coulomb friction of the mechanical plants: level [acceleration units] on the
# velocity it opposes, smoothed by tanh(v / FRICTION_V) (a stiction-free Coulomb model;
# the smoothing keeps RK4 at dt = 0.04 stable). Pendulum: on omega; flexible joint: on
# the link velocity q1' (not in the disturbance channel, which is motor-side).
FRICTION_STATE = {"pendulum": 1, "flexible_joint": 1}
FRICTION_V = 0.05


def true_plant(name: str, noise_scale: float = 1.0, mismatch: float = 0.0,
               friction: float = 0.0) -> Plant:
  """The plant that generates the data of the model-mismatch study: every physical
  parameter p of `nominal_params` set to p (1 + mismatch * s_p), s_p = mismatch_signs,
  plus an unmodelled Coulomb friction of level `friction` (pendulum and flexible joint
  only). Every observer keeps make_plant(name)'s nominal model."""
  if friction and name not in FRICTION_STATE:
    raise ValueError(f"no friction model for {name!r}; plants with one: "
                     f"{', '.join(FRICTION_STATE)}")
  if not 0.0 <= mismatch < 1.0:
    raise ValueError(f"mismatch must lie in [0, 1), got {mismatch}")
  nom, sgn = nominal_params(name), mismatch_signs(name)
  params = {k: v * (1.0 + mismatch * sgn[k]) for k, v in nom.items()} if mismatch else None
  p = make_plant(name, noise_scale, params)
  extra = None
  if friction:
    i, nx = FRICTION_STATE[name], p.nx

    def extra(x):
      return -friction * jnp.tanh(x[i] / FRICTION_V) * jnp.eye(nx)[i]
  return dataclasses.replace(p, name=f"{name}~mismatch{mismatch:g}~friction{friction:g}",
                             unmodelled=extra)


def rk4_step(f, x, dt):
  """One classical Runge-Kutta step of x' = f(x) (inputs held over the step)."""
  k1 = f(x)
  k2 = f(x + 0.5 * dt * k1)
  k3 = f(x + 0.5 * dt * k2)
  k4 = f(x + dt * k3)
  return x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def simulate(plant: Plant, x0, u_TxU, d_TxD, dt):
  """States x_0..x_{T-1} (T, nx) under zero-order-hold u, d (scanned RK4)."""
  def step(x, ud):
    u, d = ud
    return rk4_step(lambda s: plant.f(s, u, d), x, dt), x
  _, xs = jax.lax.scan(step, x0, (u_TxU, d_TxD))
  return xs


def signals(plant: Plant, key, steps: int, dt: float):
  """Random excitation u(t) (two sinusoids per channel) and disturbance d(t) (offset +
  slow sinusoid), sampled on the grid; a pure function of the key."""
  k = jax.random.split(key, 6)
  t = jnp.arange(steps) * dt
  amp_u = plant.u_amp * jax.random.uniform(k[0], (2, plant.nu), minval=0.3, maxval=1.0)
  w_u = jax.random.uniform(k[1], (2, plant.nu), minval=0.3, maxval=2.0)
  ph_u = jax.random.uniform(k[2], (2, plant.nu), maxval=2 * jnp.pi)
  u = jnp.sum(amp_u[None] * jnp.sin(w_u[None] * t[:, None, None] + ph_u[None]), axis=1)
  off = plant.d_amp * jax.random.uniform(k[3], (plant.nd,), minval=-1.0, maxval=1.0)
  w_d = jax.random.uniform(k[4], (plant.nd,), minval=0.1, maxval=0.6)
  ph_d = jax.random.uniform(k[5], (plant.nd,), maxval=2 * jnp.pi)
  d = off[None] + 0.5 * plant.d_amp * jnp.sin(w_d[None] * t[:, None] + ph_d[None])
  return u, d


def make_dataset(plant: Plant, key, n: int, steps: int, dt: float, err_box: np.ndarray):
  """n trajectories: u, d, true extended state z, noisy y, and observer initial z0hat.

  The observer starts at zhat_0 = z_0 - e_0, e_0 uniform in the error box (the
  disturbance estimate therefore starts off by up to its box half-width).
  """
  def one(k):
    k1, k2, k3, k4 = jax.random.split(k, 4)
    x0 = jax.random.uniform(k1, (plant.nx,), minval=-1.0, maxval=1.0) * plant.x_box
    u, d = signals(plant, k2, steps, dt)
    xs = simulate(plant, x0, u, d, dt)
    z = jnp.concatenate([xs, d], axis=1)
    y = xs @ jnp.asarray(plant.C).T + plant.noise * jax.random.normal(
        k3, (steps, plant.ny))
    e0 = jax.random.uniform(k4, (plant.nz,), minval=-1.0, maxval=1.0) * err_box
    return dict(u=u, d=d, z=z, y=y, zhat0=z[0] - e0)
  return jax.vmap(one)(jax.random.split(key, n))
