"""Success Visitation Matching (arXiv 2606.23640): the invariance claim, checked exactly.

On finite MDPs with a sparse success reward (1 on entering an absorbing goal), an
initial policy's earlier episodes are split into successful and failed ones; their
exact state-action visitation counts give the tabular discriminator
D(s, a) = n_succ(s, a) / (n_succ(s, a) + n_fail(s, a)) (class-balanced). Value iteration
then solves the MDP under

* the sparse reward r,
* the method's transformed reward r + gamma Phi(s') - Phi(s) with
  Phi(s) = scale * D(s, mu_0(s)) (mu_0: the initial policy's most likely action), and
* a counter-example: the raw discriminator reward r + scale * logit D(s, a) (what a
  GAIL/VICE-style reward would use directly),

and compares the greedy optimal policies. The transformed reward must leave them
unchanged (and Q' = Q - Phi exactly); the counter-example may change them, which shows
the check can fail. NumPy only: this is the independent reference for the claim.
"""
from __future__ import annotations

import numpy as np


def random_goal_mdp(rng, n_states: int = 12, n_actions: int = 3, branching: int = 2):
  """P (S, A, S) with an absorbing goal (last state) and an absorbing trap (state S-2)."""
  P = np.zeros((n_states, n_actions, n_states))
  for s in range(n_states):
    for a in range(n_actions):
      nxt = rng.choice(n_states, size=branching, replace=False)
      P[s, a, nxt] = rng.dirichlet(np.ones(branching))
  for s in (n_states - 1, n_states - 2):
    P[s] = 0.0
    P[s, :, s] = 1.0
  return P


def sparse_reward(P):
  """r(s, a, s') = 1 when s' is the goal (last state), as an expected R (S, A)."""
  goal = P.shape[0] - 1
  return P[:, :, goal].copy()


def value_iteration(P, R_sas, gamma: float, tol: float = 1e-12, max_iter: int = 100_000):
  """Q* for rewards R_sas (S, A, S) (or (S, A)), by value iteration to `tol`."""
  R = R_sas if R_sas.ndim == 2 else np.einsum("sat,sat->sa", P, R_sas)
  Q = np.zeros(R.shape)
  for _ in range(max_iter):
    Q_new = R + gamma * P @ Q.max(1)
    if np.max(np.abs(Q_new - Q)) < tol:
      return Q_new
    Q = Q_new
  raise RuntimeError("value iteration did not converge")


def visitation_discriminator(P, pi0, rng, episodes: int = 400, horizon: int = 30,
                             start: int = 0):
  """Tabular D(s, a) from sampled episodes of pi0 (S, A), success = reaching the goal."""
  S, A, _ = P.shape
  goal = S - 1
  n = np.zeros((2, S, A))
  for _ in range(episodes):
    s, visits, ok = start, [], False
    for _ in range(horizon):
      a = rng.choice(A, p=pi0[s])
      visits.append((s, a))
      s = rng.choice(S, p=P[s, a])
      if s == goal:
        ok = True
        break
    for s_, a_ in visits:
      n[int(ok), s_, a_] += 1
  freq = n / np.maximum(n.sum((1, 2), keepdims=True), 1)  # class-balanced visitations
  return (freq[1] + 1e-3) / (freq[1] + freq[0] + 2e-3)


def greedy(Q, atol: float = 1e-9):
  """Set of optimal actions per state (ties kept), as a boolean (S, A) mask."""
  return Q >= Q.max(1, keepdims=True) - atol


def check(P, D, pi0, gamma: float, scale: float):
  """Optimal-policy comparison of sparse vs transformed vs counter-example rewards."""
  R = sparse_reward(P)
  S = P.shape[0]
  phi = scale * D[np.arange(S), pi0.argmax(1)]
  shaped = R + gamma * P @ phi - phi[:, None]
  logit = np.log(D) - np.log1p(-D)
  raw = R + scale * logit
  Q, Qs, Qr = (value_iteration(P, x, gamma) for x in (R, shaped, raw))
  return {"Q": Q, "Q_shaped": Qs, "Q_raw": Qr, "phi": phi,
          "shaped_same": bool(np.array_equal(greedy(Q).argmax(1), greedy(Qs).argmax(1))
                              and np.array_equal(greedy(Q), greedy(Qs))),
          "raw_same": bool(np.array_equal(greedy(Q), greedy(Qr))),
          "q_shift_err": float(np.max(np.abs(Qs - (Q - phi[:, None]))))}


def study(n_mdps: int = 50, seed: int = 0, gamma: float = 0.95, scale: float = 1.0):
  """The invariance check over random goal MDPs: counts and the largest |Q' - (Q - Phi)|."""
  rng = np.random.default_rng(seed)
  shaped_same = raw_same = 0
  err = 0.0
  for _ in range(n_mdps):
    P = random_goal_mdp(rng)
    pi0 = rng.dirichlet(np.ones(P.shape[1]), size=P.shape[0])
    D = visitation_discriminator(P, pi0, rng)
    out = check(P, D, pi0, gamma, scale)
    shaped_same += out["shaped_same"]
    raw_same += out["raw_same"]
    err = max(err, out["q_shift_err"])
  return {"mdps": n_mdps, "shaped_policy_unchanged": shaped_same,
          "raw_policy_unchanged": raw_same, "max_q_shift_error": err}
