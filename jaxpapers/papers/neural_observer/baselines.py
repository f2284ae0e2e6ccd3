"""Two-stage training of LMI-certified neural network observers (abstract 4): baselines.

Classical observers of the extended state z = [x; d] (model d' = 0):
- Luenberger: nonlinear model copy + the LMI-designed Lipschitz gain L (lmi.design_gain)
  with its decay rate alpha tuned on validation.
- High-gain (Khalil): nonlinear model copy + gain placing the poles of Abar - L Cbar at
  p0 / eps, eps tuned on validation (for the chain-form plants this is the classical
  L = [a1/eps, a2/eps^2, ...]).
- Extended-state observer (Han / Gao linear ESO): the LINEAR model only, everything else
  (nonlinearity and disturbance) lumped into the extended state, poles at the bandwidth
  -w0 (Ackermann for one output; slightly spread poles for several), w0 tuned on
  validation. Its disturbance estimate is the lumped state minus the model nonlinearity.
- Luenberger by pole placement (the textbook design): nonlinear model copy + the gain
  placing the poles of the model's linearisation at the origin, A_lin - L Cbar, at the
  bandwidth -w0 (spread as for the ESO), w0 tuned on validation.
- Open loop: the nominal model simulated from the initial estimate with no measurement
  feedback (L = 0): the trivial observer every other one must beat clearly.
- EKF: discrete extended Kalman filter on the RK4 step of the extended model, random-walk
  disturbance with process-noise scale tuned on validation, R = noise^2.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.signal

from jaxpapers.papers.neural_observer import plants as plants_lib


def ackermann_observer(A, C, poles):
  """Observer gain for one output placing eig(A - L C) at `poles` (repeated allowed)."""
  n = A.shape[0]
  obs = np.concatenate([C @ np.linalg.matrix_power(A, k) for k in range(n)], 0)
  if np.linalg.matrix_rank(obs) < n:
    raise ValueError("plant is not observable from its single output")
  coeffs = np.real(np.poly(poles))  # s^n + c1 s^(n-1) + ... + cn
  phi = sum(c * np.linalg.matrix_power(A, n - k) for k, c in enumerate(coeffs))
  en = np.zeros((n, 1))
  en[-1, 0] = 1.0
  return phi @ np.linalg.solve(obs, en)


def place_gain(A, C, poles):
  """eig(A - L C) = poles: Ackermann for one output, scipy place_poles otherwise."""
  if C.shape[0] == 1:
    return ackermann_observer(A, C, poles)
  return scipy.signal.place_poles(A.T, C.T, poles).gain_matrix.T


def bandwidth_poles(n: int, w0: float, multi: bool):
  # place_poles cannot place a pole with multiplicity above rank(C): spread them by 10%.
  return -w0 * (1.0 + 0.1 * np.arange(n)) if multi else -w0 * np.ones(n)


def high_gain_gain(plant: plants_lib.Plant, eps: float):
  return place_gain(plant.Abar, plant.Cbar,
                    bandwidth_poles(plant.nz, 1.0, plant.ny > 1) / eps)


def eso_gain(plant: plants_lib.Plant, w0: float):
  return place_gain(plant.Abar, plant.Cbar, bandwidth_poles(plant.nz, w0, plant.ny > 1))


def linearisation(plant: plants_lib.Plant):
  """d fbar / dz at z = 0, u = 0: the extended model's Jacobian at the origin (the
  nonlinearity's slope included, unlike Abar)."""
  f = lambda z: plant.fbar(z, jnp.zeros(plant.nu))  # noqa: E731
  return np.asarray(jax.jacfwd(f)(jnp.zeros(plant.nz)), np.float64)


def luenberger_pp_gain(plant: plants_lib.Plant, w0: float):
  return place_gain(linearisation(plant), plant.Cbar,
                    bandwidth_poles(plant.nz, w0, plant.ny > 1))


def eso_field(plant: plants_lib.Plant, L):
  A, B, C, L = (jnp.asarray(m) for m in (plant.Abar, plant.Bbar, plant.Cbar, L))

  def f(zhat, u, y):
    return A @ zhat + B @ u + L @ (y - C @ zhat)
  return f


def eso_disturbance(plant: plants_lib.Plant, zhat):
  """ESO lumped state -> disturbance estimate: subtract the known nonlinearity's share
  (least squares through E) at the estimated state."""
  x = zhat[..., :plant.nx]
  lumped = zhat[..., plant.nx:]
  gphi = jnp.einsum("ij,...j->...i", jnp.asarray(plant.G),
                    jnp.vectorize(plant.phi, signature="(n)->(m)")(x))
  share = jnp.einsum("di,...i->...d", jnp.asarray(np.linalg.pinv(plant.E)), gphi)
  return jnp.concatenate([x, lumped - share], -1)


def ekf(plant: plants_lib.Plant, zhat0, u_TxU, y_TxY, dt, q_d: float, q_x: float,
        p0_diag, s_z):
  """Posterior estimates zhat_{k|k} (T, nz) of one trajectory."""
  C = jnp.asarray(plant.Cbar)
  R = (plant.noise ** 2 + 1e-8) * jnp.eye(plant.ny)
  qd = jnp.concatenate([q_x * jnp.square(s_z[:plant.nx]),
                        q_d * jnp.square(s_z[plant.nx:])]) * dt
  Qd = jnp.diag(qd)

  def step(carry, uy):
    z, S = carry
    u, y = uy
    Sy = C @ S @ C.T + R
    K = jnp.linalg.solve(Sy, C @ S).T
    z = z + K @ (y - C @ z)
    S = (jnp.eye(plant.nz) - K @ C) @ S
    S = 0.5 * (S + S.T)
    post = z
    fstep = lambda s: plants_lib.rk4_step(lambda v: plant.fbar(v, u), s, dt)
    F = jax.jacfwd(fstep)(z)
    z = fstep(z)
    S = F @ S @ F.T + Qd
    return (z, S), post
  _, zs = jax.lax.scan(step, (zhat0, jnp.diag(p0_diag)), (u_TxU, y_TxY))
  return zs


def ekf_batch(plant, data, dt, q_d, q_x, p0_diag, s_z):
  return jax.vmap(lambda z0, u, y: ekf(plant, z0, u, y, dt, q_d, q_x, p0_diag, s_z))(
      data["zhat0"], data["u"], data["y"])
