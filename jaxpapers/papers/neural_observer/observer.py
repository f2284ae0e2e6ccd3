"""Two-stage training of LMI-certified neural network observers (abstract 4): the observer.

zhat' = fbar(zhat, u) + L (y - Cbar zhat) + N_theta(zhat, y - Cbar zhat), the neural term a
one-hidden-layer tanh network N = W2 [tanh(W1x zhat/s_z + W1y yt/s_y + b)
- tanh(W1x zhat/s_z + b)], which vanishes at yt = 0 (a correct estimate is a fixed point)
and whose hidden increments obey the slope-restricted sector bound used by lmi.py.
Also: a scanned-RK4 rollout for any observer field, the stage-1 point-guided Lyapunov
hinge at sampled error states, and the two stage-1 guarantees as computations
(probabilistic coverage from the sample count; the local radius inside which every
sampled error state satisfies the decrease condition).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.neural_observer import plants as plants_lib


def init_params(key, nz: int, ny: int, width: int, out_scale: float = 1e-2):
  k1, k2, k3 = jax.random.split(key, 3)
  fan_in = nz + ny
  return dict(
      W1x=jax.random.normal(k1, (width, nz)) / np.sqrt(fan_in),
      W1y=jax.random.normal(k2, (width, ny)) / np.sqrt(fan_in),
      b=jnp.zeros((width,)),
      W2=out_scale * jax.random.normal(k3, (nz, width)) / np.sqrt(width))


def correction(params, zhat, yt, s_z, s_y):
  a = params["W1x"] @ (zhat / s_z) + params["b"]
  return params["W2"] @ (jnp.tanh(a + params["W1y"] @ (yt / s_y)) - jnp.tanh(a))


def lmi_weights(params, Cbar, s_y):
  """(W2, K) of the LMI: K = W1y diag(1/s_y) Cbar maps the error to the hidden increment."""
  return params["W2"], params["W1y"] @ (jnp.asarray(Cbar) / s_y[:, None])


def field(plant: plants_lib.Plant, L, params, s_z, s_y):
  """The observer vector field (zhat, u, y) -> zhat'. params=None: no neural term."""
  Cbar, L = jnp.asarray(plant.Cbar), jnp.asarray(L)

  def f(zhat, u, y):
    yt = y - Cbar @ zhat
    out = plant.fbar(zhat, u) + L @ yt
    if params is not None:
      out = out + correction(params, zhat, yt, s_z, s_y)
    return out
  return f


def rollout(f, zhat0, u_TxU, y_TxY, dt):
  """Estimates zhat_0..zhat_{T-1} of one trajectory (RK4, u and y held over each step)."""
  def step(z, uy):
    u, y = uy
    return plants_lib.rk4_step(lambda s: f(s, u, y), z, dt), z
  _, zs = jax.lax.scan(step, zhat0, (u_TxU, y_TxY))
  return zs


def rollout_batch(f, data, dt):
  return jax.vmap(lambda z0, u, y: rollout(f, z0, u, y, dt))(
      data["zhat0"], data["u"], data["y"])


def errors(zhat, data, nx: int, s_z):
  """Normalised MSE (training / selection) and raw-unit RMSE of states and disturbances."""
  err = zhat - data["z"]
  nmse = jnp.mean(jnp.square(err / jnp.reshape(s_z, (1,) * (err.ndim - 1) + (-1,))))
  return dict(nmse=nmse, rmse_x=jnp.sqrt(jnp.mean(jnp.square(err[..., :nx]))),
              rmse_d=jnp.sqrt(jnp.mean(jnp.square(err[..., nx:]))))


def sample_error_states(plant: plants_lib.Plant, key, n: int, z_box, err_box):
  """Uniform samples of (true extended state z, error e) over the prescribed boxes."""
  k1, k2 = jax.random.split(key)
  z = jax.random.uniform(k1, (n, plant.nz), minval=-1.0, maxval=1.0) * z_box[None]
  e = jax.random.uniform(k2, (n, plant.nz), minval=-1.0, maxval=1.0) * err_box[None]
  return z, e


def error_derivative(plant, L, params, s_z, s_y, z, e):
  """Noise-free e' at true state z and estimate z - e (the input u cancels)."""
  zhat = z - e
  u0 = jnp.zeros((plant.nu,))
  f = field(plant, L, params, s_z, s_y)
  y = jnp.asarray(plant.Cbar) @ z
  return plant.fbar(z, u0) - f(zhat, u0, y)


def decrease_ratio(plant, L, params, P, s_z, s_y, z, e, alpha):
  """q = (V' + alpha V) / V at each sample, V = e^T P e (scale-free in P and |e|)."""
  de = jax.vmap(lambda zz, ee: error_derivative(plant, L, params, s_z, s_y, zz, ee))(z, e)
  Pe = e @ P
  v = jnp.sum(Pe * e, -1)
  return (2.0 * jnp.sum(Pe * de, -1) + alpha * v) / v


def lyapunov_hinge(plant, L, params, R, s_z, s_y, z, e, alpha, margin):
  """Stage-1 point-guided loss: mean hinge on V' + alpha V <= -margin V at the samples."""
  P = R.T @ R + 1e-3 * jnp.eye(R.shape[0])
  q = decrease_ratio(plant, L, params, P, s_z, s_y, z, e, alpha)
  return jnp.mean(jax.nn.relu(q + margin)), jnp.mean(q <= 0.0)


def coverage_epsilon(n: int, beta: float) -> float:
  """If all n i.i.d. uniform samples satisfy the condition, then with confidence
  1 - beta the violating fraction of the domain is below eps = 1 - beta^(1/n)
  (P[all n pass | violation mass > eps] < (1 - eps)^n = beta)."""
  return float(1.0 - beta ** (1.0 / n))


def clopper_pearson_upper(k: int, n: int, beta: float) -> float:
  """One-sided Clopper-Pearson upper bound on a violation probability from k violations in
  n i.i.d. samples: with confidence 1 - beta the violating fraction of the domain is below
  u, where P[Binomial(n, u) <= k] = beta, i.e. u = Beta quantile(1 - beta; k + 1, n - k).
  k = 0 gives coverage_epsilon's 1 - beta^(1/n); k = n gives 1."""
  if not 0 <= k <= n:
    raise ValueError(f"violations k={k} must lie in [0, n={n}]")
  if k == n:
    return 1.0
  import scipy.stats  # only the guarantees need scipy here
  return float(scipy.stats.beta.ppf(1.0 - beta, k + 1, n - k))


def local_radius(q, e, err_box) -> float:
  """Largest r in [0, 1] such that every sample with |e / err_box|_inf < r satisfies
  q < 0: the scaled error box r * err_box on which the sampled decrease holds."""
  q, e = np.asarray(q), np.asarray(e)
  s = np.max(np.abs(e / np.asarray(err_box)), axis=-1)
  bad = s[q >= 0.0]
  return float(bad.min()) if bad.size else 1.0
