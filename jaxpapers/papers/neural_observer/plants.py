"""Two-stage training of LMI-certified neural network observers (abstract 4): the plants.

Each plant is x' = A x + B u + G phi(x) + E d, y = C x + v, with a Lipschitz nonlinearity
phi whose increments satisfy the quadratic constraints
(phi_j(x) - phi_j(xh))^2 <= (x - xh)^T Q_j (x - xh) (used by the S-procedure in lmi.py),
an unknown disturbance d and Gaussian measurement noise v. Observers estimate the extended
state z = [x; d] with the model d' = 0. Integration is a `lax.scan` of RK4 steps with the
input, disturbance and measurement held over each step (zero-order hold).

Plants: damped pendulum, Van der Pol oscillator, single-link flexible-joint arm (Spong),
and an X-29-like lateral-directional aircraft model. The X-29 matrices are a labelled
STAND-IN with the published model's structure (see README: the published numbers were not
found with the tools available here).
"""
from __future__ import annotations

import dataclasses
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
    return (jnp.asarray(self.A) @ x + jnp.asarray(self.B) @ u
            + jnp.asarray(self.G) @ self.phi(x) + jnp.asarray(self.E) @ d)

  def fbar(self, z, u):
    """Extended-state model used by observers: x' = f(x, u, d), d' = 0."""
    x, d = z[:self.nx], z[self.nx:]
    return jnp.concatenate([self.f(x, u, d), jnp.zeros((self.nd,), z.dtype)])


def pendulum(noise=0.01):
  g_l, b = 4.0, 0.2  # g/l and viscous damping
  return Plant(
      name="pendulum", A=np.array([[0.0, 1.0], [0.0, -b]]), B=np.array([[0.0], [1.0]]),
      E=np.array([[0.0], [1.0]]), C=np.array([[1.0, 0.0]]), G=np.array([[0.0], [-g_l]]),
      phi=lambda x: jnp.sin(x[:1]), Q=np.diag([1.0, 0.0])[None],
      x_box=np.array([1.0, 1.0]), u_amp=1.0, d_amp=1.0, noise=noise)


def van_der_pol(noise=0.01, mu=0.5, region=(2.5, 2.5)):
  # phi(x) = -mu x1^2 x2 is Lipschitz only on a bounded region |x1| <= a, |x2| <= b; the
  # increment bound (gradient bounds 2 mu a b and mu a^2, Cauchy-Schwarz) holds there.
  a, b = region
  g1, g2 = 2 * mu * a * b, mu * a * a
  return Plant(
      name="van_der_pol", A=np.array([[0.0, 1.0], [-1.0, mu]]), B=np.array([[0.0], [1.0]]),
      E=np.array([[0.0], [1.0]]), C=np.array([[1.0, 0.0]]), G=np.array([[0.0], [1.0]]),
      phi=lambda x: -mu * x[:1] ** 2 * x[1:2], Q=np.diag([2 * g1 ** 2, 2 * g2 ** 2])[None],
      x_box=np.array([1.5, 1.5]), u_amp=0.3, d_amp=0.3, noise=noise)


def flexible_joint(noise=0.01):
  # Spong's single-link flexible-joint arm: link angle q1, motor angle q2; both encoders.
  mgl_i, k_i, k_j, b1, b2, inv_j = 2.0, 5.0, 5.0, 0.1, 0.2, 1.0
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


def x29_lateral(noise=0.005):
  """X-29-like lateral-directional model, x = (beta, p, r, phi), u = (aileron, rudder).

  STAND-IN numbers (not the published X-29 data): the stability-axis structure of the
  4-state lateral-directional equations (Stengel, Flight Dynamics, ch. 5/7) with
  fighter-like derivatives: Dutch roll ~ 2.2 rad/s lightly damped, fast roll mode, slow
  spiral. Gravity enters as (g/V) sin(phi) (the nonlinear term); a side gust d enters
  the sideslip equation. Measured: p, r, phi (rate gyros, attitude); beta is not.
  """
  y_b, l_b, l_p, l_r, n_b, n_p, n_r = -0.25, -8.0, -2.5, 0.6, 4.5, -0.05, -0.35
  alpha0, g_v = 0.1, 9.81 / 150.0
  a = np.array([[y_b, np.sin(alpha0), -np.cos(alpha0), 0.0],
                [l_b, l_p, l_r, 0.0],
                [n_b, n_p, n_r, 0.0],
                [0.0, 1.0, np.tan(0.05), 0.0]])
  b = np.array([[0.0, 0.03], [8.0, 1.0], [-0.5, -2.0], [0.0, 0.0]])
  return Plant(
      name="x29", A=a, B=b, E=np.array([[1.0], [0.0], [0.0], [0.0]]),
      C=np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]),
      G=np.array([[g_v], [0.0], [0.0], [0.0]]), phi=lambda x: jnp.sin(x[3:4]),
      Q=np.diag([0.0, 0.0, 0.0, 1.0])[None], x_box=np.array([0.1, 0.3, 0.2, 0.4]),
      u_amp=0.1, d_amp=0.1, noise=noise)


PLANTS = {"pendulum": pendulum, "van_der_pol": van_der_pol,
          "flexible_joint": flexible_joint, "x29": x29_lateral}


def make_plant(name: str, noise_scale: float = 1.0) -> Plant:
  if name not in PLANTS:
    raise ValueError(f"unknown plant {name!r}; known: {', '.join(PLANTS)}")
  p = PLANTS[name]()
  return dataclasses.replace(p, noise=p.noise * noise_scale)


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
