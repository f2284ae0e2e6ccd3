"""Two-stage training of LMI-certified neural network observers (abstract 4): the LMIs.

Observer error e = z - zhat of zhat' = Abar zhat + Bbar u + Gbar phi(xhat) + L (y - Cbar zhat)
+ N(zhat, y - Cbar zhat), with the one-hidden-layer correction
N(zhat, yt) = W2 [tanh(a + W1y yt) - tanh(a)], a = W1x zhat + b (network.py). Noise-free,
  e' = (Abar - L Cbar) e + Gbar p - W2 w,
  p = phi(x) - phi(xhat):        p_j^2 <= e^T Q_j e            (Lipschitz increments)
  w = tanh(a + K e) - tanh(a):   w_i (w_i - (K e)_i) <= 0      (tanh slope in [0, 1]),
with K = W1y Cbar. The slope bound holds for every a, so the quadratic constraint on w is
uniform in zhat, and the S-procedure with multipliers mu_j, lam_i >= 0 gives, for
xi = [e; p; w], the LMI in (P, mu, lam)
  F = [[A_L^T P + P A_L + alpha P + sum_j mu_j Q_j, P G,       -P W2 + K^T Lam / 2],
       [G^T P,                                     -diag(mu),  0                 ],
       [-W2^T P + Lam K / 2,                        0,         -Lam              ]] < 0,
which certifies V = e^T P e with V' <= -alpha V for every error and every state (global
in e; for Van der Pol, inside the region where its Q_j hold). SDPs go through cvxpy
(Clarabel, SCS fallback); every certificate is re-checked here in NumPy by eigenvalues.
"""
from __future__ import annotations

import time

import cvxpy as cp
import jax.numpy as jnp
import numpy as np


def assemble_numpy(P, mu, lam, A_L, G, W2, K, Q, alpha):
  """The certificate matrix F as a NumPy array (the independent check)."""
  P, mu, lam = np.asarray(P, np.float64), np.asarray(mu, np.float64), np.asarray(
      lam, np.float64)
  A_L, G, W2, K, Q = (np.asarray(m, np.float64) for m in (A_L, G, W2, K, Q))
  ee = A_L.T @ P + P @ A_L + alpha * P + np.einsum("j,jab->ab", mu, Q)
  ep = P @ G
  ew = -P @ W2 + 0.5 * K.T * lam[None, :]
  npp, h = G.shape[1], W2.shape[1]
  top = np.concatenate([ee, ep, ew], 1)
  mid = np.concatenate([ep.T, -np.diag(mu), np.zeros((npp, h))], 1)
  bot = np.concatenate([ew.T, np.zeros((h, npp)), -np.diag(lam)], 1)
  F = np.concatenate([top, mid, bot], 0)
  return 0.5 * (F + F.T)


def assemble_jax(P, mu, lam, A_L, G, W2, K, Q, alpha):
  """Same matrix in JAX: affine in the network weights (W2, K) for fixed (P, mu, lam)."""
  ee = A_L.T @ P + P @ A_L + alpha * P + jnp.einsum("j,jab->ab", mu, Q)
  ep = P @ G
  ew = -P @ W2 + 0.5 * K.T * lam[None, :]
  npp, h = G.shape[1], W2.shape[1]
  top = jnp.concatenate([ee, ep, ew], 1)
  mid = jnp.concatenate([ep.T, -jnp.diag(mu), jnp.zeros((npp, h))], 1)
  bot = jnp.concatenate([ew.T, jnp.zeros((h, npp)), -jnp.diag(lam)], 1)
  F = jnp.concatenate([top, mid, bot], 0)
  return 0.5 * (F + F.T)


def verify(cert: dict, A_L, G, W2, K, Q, alpha, tol: float = 1e-7) -> dict:
  """Independent acceptance test of a certificate: NumPy eigenvalues of the assembled F,
  of P and the multiplier signs. margin = -lambda_max(F) (> tol to accept)."""
  P = np.asarray(cert["P"], np.float64)
  mu, lam = np.asarray(cert["mu"], np.float64), np.asarray(cert["lam"], np.float64)
  F = assemble_numpy(P, mu, lam, A_L, G, W2, K, Q, alpha)
  fmax = float(np.linalg.eigvalsh(F)[-1])
  pmin = float(np.linalg.eigvalsh(0.5 * (P + P.T))[0])
  ok = (fmax < -tol and pmin > tol and bool(np.all(mu >= 0)) and bool(np.all(lam >= 0))
        and bool(np.all(np.isfinite(F))))
  return dict(valid=bool(ok), margin=-fmax, min_eig_P=pmin)


class CertificateSDP:
  """max t s.t. F(P, mu, lam) + t I <= 0, I <= P, tr P <= kappa nz, 0 <= mu, lam <= kappa,
  t <= cap.

  Written with cvxpy parameters (A_L, W2, K, cap) so one compiled problem is re-solved as
  the network changes (DPP). t > 0 means a strict certificate exists for these weights;
  the returned (P, mu, lam) also define the stage-2 penalty when t <= 0. Training solves
  with cap = 1 (any certificate with margin 1 will do, and it keeps P's scale moderate
  for the penalty); with the cap the optimum is not unique once t = 1 is reachable, so
  the reported margin uses `solve(..., cap=None)`: the optimal t of the uncapped problem
  (t <= mu_j <= kappa already bounds it), a property of the weights, not of the solver's
  path.
  """

  def __init__(self, nz, npp, h, G, Q, alpha, kappa=1e3, solver="CLARABEL"):
    self.solver = solver
    self.A_L = cp.Parameter((nz, nz))
    self.W2 = cp.Parameter((nz, h))
    self.K = cp.Parameter((h, nz))
    self.P = cp.Variable((nz, nz), symmetric=True)
    self.mu = cp.Variable(npp)
    self.lam = cp.Variable(h)
    self.t = cp.Variable()
    self.cap = cp.Parameter(nonneg=True)
    self.kappa = kappa
    P = self.P
    ee = self.A_L.T @ P + P @ self.A_L + alpha * P
    for j in range(npp):
      ee = ee + self.mu[j] * Q[j]
    ep = P @ G
    ew = -P @ self.W2 + 0.5 * self.K.T @ cp.diag(self.lam)
    F = cp.bmat([[ee, ep, ew],
                 [ep.T, -cp.diag(self.mu), np.zeros((npp, h))],
                 [ew.T, np.zeros((h, npp)), -cp.diag(self.lam)]])
    n = nz + npp + h
    cons = [0.5 * (F + F.T) + self.t * np.eye(n) << 0, P >> np.eye(nz),
            cp.trace(P) <= kappa * nz, self.mu >= 0, self.lam >= 0, self.mu <= kappa,
            self.lam <= kappa, self.t <= self.cap]
    self.problem = cp.Problem(cp.Maximize(self.t), cons)

  def solve(self, A_L, W2, K, cap: float | None = 1.0,
            time_limit: float | None = None) -> dict:
    """cap=None: uncapped (t <= 2 kappa never binds since t <= mu_j <= kappa).
    time_limit: Clarabel's wall-clock limit [s] (the width-timing only)."""
    self.A_L.value, self.W2.value, self.K.value = (np.asarray(A_L, np.float64),
                                                   np.asarray(W2, np.float64),
                                                   np.asarray(K, np.float64))
    self.cap.value = 2.0 * self.kappa if cap is None else float(cap)
    opts = {} if time_limit is None else dict(time_limit=float(time_limit))
    t0 = time.perf_counter()
    try:
      self.problem.solve(solver=self.solver, **opts)
    except cp.error.SolverError:
      if opts:  # a timed-out solve is reported as such, not retried
        return dict(status="time_limit", solve_s=time.perf_counter() - t0, t=np.nan)
      self.problem.solve(solver="SCS")  # fallback; the NumPy check still decides
    if self.P.value is None:
      if opts:
        return dict(status=self.problem.status, solve_s=time.perf_counter() - t0,
                    t=np.nan)
      raise RuntimeError(f"certificate SDP failed: status {self.problem.status}")
    return dict(P=np.array(self.P.value), mu=np.maximum(np.array(self.mu.value), 0.0),
                lam=np.maximum(np.array(self.lam.value), 0.0), t=float(self.t.value),
                status=self.problem.status, solve_s=time.perf_counter() - t0)


def design_gain(Abar, Cbar, G, Q, alpha, t_min=1e-3, kappa=1e3, solver="CLARABEL"):
  """Lipschitz-observer gain L = P^-1 Y from the LMI (network off) with the smallest
  ||Y||_F: [[Abar^T P + P Abar - Cbar^T Y^T - Y Cbar + alpha P + sum mu_j Q_j, P G],
  [G^T P, -diag(mu)]] <= -t_min I, I <= P, tr P <= kappa nz."""
  nz, ny, npp = Abar.shape[0], Cbar.shape[0], G.shape[1]
  P = cp.Variable((nz, nz), symmetric=True)
  Y = cp.Variable((nz, ny))
  mu = cp.Variable(npp)
  ee = Abar.T @ P + P @ Abar - Cbar.T @ Y.T - Y @ Cbar + alpha * P
  for j in range(npp):
    ee = ee + mu[j] * Q[j]
  F = cp.bmat([[ee, P @ G], [G.T @ P, -cp.diag(mu)]])
  cons = [0.5 * (F + F.T) << -t_min * np.eye(nz + npp), P >> np.eye(nz),
          cp.trace(P) <= kappa * nz, mu >= 0]
  prob = cp.Problem(cp.Minimize(cp.norm(Y, "fro")), cons)
  prob.solve(solver=solver)
  if Y.value is None or prob.status not in ("optimal", "optimal_inaccurate"):
    raise ValueError(f"no Lipschitz observer gain for decay alpha={alpha}: {prob.status}")
  L = np.linalg.solve(P.value, Y.value)
  return L, dict(P=np.array(P.value), mu=np.maximum(np.array(mu.value), 0.0),
                 lam=np.zeros(0))
