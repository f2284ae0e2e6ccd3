"""Online identification under parameter drift: the online estimators.

Every estimator predicts with theta_t before y_t is revealed, then updates on the
instantaneous squared loss l_t(theta) = 0.5 ||y_t - Phi_t theta||^2, whose gradient is
-Phi_t^T r_t with residual r_t = y_t - Phi_t theta_t.

Continuous projected OGD (the paper's algorithm; "continuous" = never restarted):
  theta_{t+1} = Proj_ball(theta_t + eta_t Phi_t^T r_t)
with three step rules:
  fixed     eta_t = eta_0;
  oracle    eta = (2D/G) (V_T / (D T))^{1/3}, D the radius of the known ball and G the
            gradient bound: the blockwise bound (||theta - u|| <= 2D inside the ball)
            R_T <= (T/W) 2D^2/eta + eta G^2 T/2 + G W V_T, optimised first in eta
            (eta = 2D/(G sqrt W)) and then in the window W* = (D T / V_T)^{2/3},
            gives R_T <= 3 G D^{2/3} T^{2/3} V_T^{1/3};
  adaptive  the same formula with V_T / T replaced by a residual-based running estimate
            (README, "Residual-based adaptive step"): blocks of
            W_k = c_W (2D/(G eta_k))^2 steps with eta_k constant inside; the residual
            proxy P_k (`block_proxy`) estimates how far theta* moved in block k from
            the residuals against the block-frozen estimate (debiased half-block
            difference); its noise-free counterpart S_k is the local prediction-error
            signal. After block k, Vhat_k = D + sum_{j<=k} P_j and
            eta_{k+1} = (2D/G)(Vhat_k / (D t_k))^{1/3}.
All steps are capped at eta_max (the LMS stability limit for the regressor scale).

Baselines: restarted OGD (Besbes, Gur & Zeevi 2015: batches of Delta = (D T/V_T)^{2/3}
steps, OGD with eta_s = (2D/G)/sqrt(s) restarted from the centre in each batch), recursive
least squares with forgetting factor lambda, and a Kalman filter for the random-walk
model theta_{t+1} = theta_t + N(0, q I), y_t = Phi_t theta_t + N(0, r I).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

METHODS = ("fixed", "oracle", "adaptive", "restart", "rls", "kalman")


def project_ball(theta, center, radius):
  """Euclidean projection onto {theta : ||theta - center|| <= radius}."""
  diff = theta - center
  norm = jnp.linalg.norm(diff)
  return center + diff * jnp.minimum(1.0, radius / jnp.maximum(norm, 1e-12))


def oracle_step(variation, horizon, radius, grad_bound):
  """eta* = (2D/G) (V_T / (D T))^{1/3}, the step of the oracle-tuned rate."""
  return 2.0 * radius / grad_bound * (variation / (radius * horizon)) ** (1.0 / 3.0)


def oracle_window(variation, horizon, radius):
  """W* = (D T / V_T)^{2/3}, the block length that balances the two terms of the bound."""
  return (radius * horizon / variation) ** (2.0 / 3.0)


def adaptive_step(vhat, elapsed, radius, grad_bound, eta_min, eta_max):
  """The oracle formula with V_T / T replaced by the proxy estimate Vhat_t / t."""
  rate = vhat / jnp.maximum(elapsed, 1.0)
  eta = 2.0 * radius / grad_bound * (rate / radius) ** (1.0 / 3.0)
  return jnp.clip(eta, eta_min, eta_max)


def block_length(eta, radius, hp):
  """W = window_scale * (2D / (G eta))^2, the window whose optimal step is eta.

  Clipped to [min_window, max_window]: the proxy needs a few samples per half-block,
  and a step driven to eta_min by an early zero estimate must still be revisited.
  """
  w = hp["window_scale"] * (2.0 * radius / (hp["grad_bound"] * eta)) ** 2
  w = jnp.clip(jnp.ceil(w), hp["min_window"], hp["max_window"])
  return w.astype(jnp.int32)


def _empty_proxy(ref):
  zero = jnp.zeros_like(ref)
  return dict(ref=ref, count=jnp.zeros((), jnp.int32), res_a=zero, res_b=zero,
              sq_a=jnp.zeros(()), sq_b=jnp.zeros(()), sig_a=zero, sig_b=zero,
              excitation=jnp.zeros(()))


def block_proxy(acc, length):
  """(P_k, S_k): drift of theta* over one block, from residuals and noise-free.

  With a frozen reference, E[sum_{t in half} Phi_t^T r_t] = (W/2) Sigma (theta*_half -
  ref), so the difference B - A of the two half-block sums is (W/2) lambda times the
  displacement of theta* between the half centres, W/2 steps apart; the block drift is
  twice that: 4 ||B - A|| / (W lambda), lambda = tr(Sigma)/d estimated in the block.
  The noise part of ||B - A||^2 is removed by subtracting the within-half sample
  variances (an unbiased U-statistic correction), clipped at zero.
  """
  half = (length // 2).astype(jnp.float32)
  rest = length.astype(jnp.float32) - half
  def noise(sq, s, n):
    return (sq - s @ s / jnp.maximum(n, 1.0)) * n / jnp.maximum(n - 1.0, 1.0)
  diff = acc["res_b"] - acc["res_a"]
  energy = diff @ diff - noise(acc["sq_a"], acc["res_a"], half) - noise(
      acc["sq_b"], acc["res_b"], rest)
  lam = acc["excitation"] / length.astype(jnp.float32)
  scale = 4.0 / (length.astype(jnp.float32) * jnp.maximum(lam, 1e-12))
  proxy = scale * jnp.sqrt(jnp.maximum(energy, 0.0))
  signal = scale * jnp.linalg.norm(acc["sig_b"] - acc["sig_a"])
  return proxy, signal


def init(d, center, hp):
  eye = jnp.eye(d)
  return dict(
      fixed=center, oracle=center, adaptive=center, restart=center,
      rls=center, rls_p=eye / hp["rls_delta"],
      kalman=center, kalman_p=eye * hp["kalman_p0"],
      # adaptive-step bookkeeping: current step, block sums of the residual gradient
      # and of its noise-free counterpart, Vhat and the proxy-vs-signal overhead.
      eta=hp["eta_max"], proxy=_empty_proxy(center),
      blk_len=block_length(hp["eta_max"], hp["radius"], hp),
      # Vhat starts at D: the one move every run needs, from the centre to theta*_1,
      # so an early zero proxy cannot drive the step below the stationary rate t^{-1/3}.
      vhat=hp["radius"], overhead=jnp.zeros(()))


def predictions(state):
  return {m: state[m] for m in METHODS}


def _ogd(theta, phi, y, eta, center, radius):
  r = y - phi @ theta
  return project_ball(theta + eta * (phi.T @ r), center, radius)


def _gain(s, phi_p):
  """P Phi^T S^{-1} for symmetric S; a division when y_t is scalar (cheaper under vmap)."""
  if s.shape[0] == 1:
    return phi_p.T / s[0, 0]
  return jnp.linalg.solve(s, phi_p).T


def _rls(theta, p_mat, phi, y, lam):
  r = y - phi @ theta
  s = lam * jnp.eye(phi.shape[0]) + phi @ p_mat @ phi.T
  gain = _gain(s, phi @ p_mat)
  theta = theta + gain @ r
  p_mat = (p_mat - gain @ phi @ p_mat) / lam
  return theta, 0.5 * (p_mat + p_mat.T)


def _kalman(theta, p_mat, phi, y, q, r_var):
  p_mat = p_mat + q * jnp.eye(p_mat.shape[0])  # random-walk prediction
  r = y - phi @ theta
  s = r_var * jnp.eye(phi.shape[0]) + phi @ p_mat @ phi.T
  gain = _gain(s, phi @ p_mat)
  theta = theta + gain @ r
  p_mat = p_mat - gain @ phi @ p_mat
  return theta, 0.5 * (p_mat + p_mat.T)


def update(state, phi, y, theta_star, t, center, hp):
  """All estimators take one step on (Phi_t, y_t). `theta_star` feeds diagnostics only."""
  rad = hp["radius"]
  new = dict(state)
  new["fixed"] = _ogd(state["fixed"], phi, y, hp["eta_fixed"], center, rad)
  new["oracle"] = _ogd(state["oracle"], phi, y, hp["eta_oracle"], center, rad)

  # Adaptive: the step is constant within a block and re-derived at block ends.
  eta = state["eta"]
  new["adaptive"] = _ogd(state["adaptive"], phi, y, eta, center, rad)
  prox = state["proxy"]
  # Residuals against the block-frozen reference are independent across the block given
  # the drift path, so the estimator's own jitter does not enter the proxy.
  g = phi.T @ (y - phi @ prox["ref"])
  g_sig = phi.T @ (phi @ (theta_star - prox["ref"]))
  count = prox["count"] + 1
  second = count > state["blk_len"] // 2
  upd = dict(
      res_a=prox["res_a"] + jnp.where(second, 0.0, g),
      res_b=prox["res_b"] + jnp.where(second, g, 0.0),
      sq_a=prox["sq_a"] + jnp.where(second, 0.0, g @ g),
      sq_b=prox["sq_b"] + jnp.where(second, g @ g, 0.0),
      sig_a=prox["sig_a"] + jnp.where(second, 0.0, g_sig),
      sig_b=prox["sig_b"] + jnp.where(second, g_sig, 0.0),
      excitation=prox["excitation"] + jnp.sum(phi ** 2) / phi.shape[1])
  end = count >= state["blk_len"]
  proxy, signal = block_proxy(upd, state["blk_len"])
  vhat = state["vhat"] + jnp.where(end, proxy, 0.0)
  next_eta = adaptive_step(vhat, (t + 1).astype(jnp.float32), rad, hp["grad_bound"],
                           hp["eta_min"], hp["eta_max"])
  new["vhat"] = vhat
  new["overhead"] = state["overhead"] + jnp.where(end, jnp.abs(proxy - signal), 0.0)
  new["eta"] = jnp.where(end, next_eta, eta)
  new["blk_len"] = jnp.where(end, block_length(next_eta, rad, hp), state["blk_len"])
  fresh = _empty_proxy(new["adaptive"])
  upd["ref"] = prox["ref"]
  upd["count"] = count
  new["proxy"] = jax.tree.map(lambda f, u: jnp.where(end, f, u), fresh, upd)

  # Restarted OGD: back to the centre at the start of every batch.
  s = t % hp["restart_len"]
  eta_s = jnp.minimum(2.0 * rad / hp["grad_bound"] / jnp.sqrt(s + 1.0), hp["eta_max"])
  nxt = _ogd(state["restart"], phi, y, eta_s, center, rad)
  new["restart"] = jnp.where(s == hp["restart_len"] - 1, center, nxt)

  new["rls"], new["rls_p"] = _rls(state["rls"], state["rls_p"], phi, y, hp["rls_lambda"])
  new["kalman"], new["kalman_p"] = _kalman(state["kalman"], state["kalman_p"], phi, y,
                                           hp["kalman_q"], hp["kalman_r"])
  return new
