"""BFMNet: truthful budget-feasible procurement menus -- the ex-post budget transformation.

Input: raw self-bid-independent posted prices t0_i(b_{-i}) (menus.py), non-decreasing in
every other seller's bid. Raw payments are P0_j(b) = t0_j(b_{-j}) 1[b_j <= t0_j(b_{-j})].

Transformation (instance level, per seller i, using only b_{-i}):
  b^(i)  = b with b_i replaced by t0_i(b_{-i})            (i's highest still-accepting bid)
  cap_i  = B - sum_{j != i} P0_j(b^(i))                   (others' worst-case raw spend)
  t_i    = min(t0_i, max(cap_i, 0)).
Seller i sells at t_i iff b_i <= t_i; it is then paid t_i, otherwise nothing.

Claim: the mechanism is exactly DSIC, IR and budget feasible on every bid profile.
  * DSIC and IR: t_i is built from t0_i(b_{-i}) and b^(i), neither of which reads b_i, so
    seller i faces a take-it-or-leave-it price; bidding c_i sells iff c_i <= t_i, giving
    utility max(t_i - c_i, 0), the best any bid can give, and never negative.
  * Payments only shrink: if j sells in the final mechanism, b_j <= t_j <= t0_j, so j
    also sold in the raw one and P_j = t_j <= t0_j = P0_j; otherwise P_j = 0 <= P0_j.
  * Budget: if nobody is paid, spending is 0 <= B. Otherwise pick any paid seller i:
    b_i <= t_i <= t0_i, so b is below b^(i) in coordinate i and equal elsewhere; P0_j is
    non-decreasing in b_i (t0_j is, and so is the acceptance 1[b_j <= t0_j]), hence
    sum_{j != i} P_j(b) <= sum_{j != i} P0_j(b) <= sum_{j != i} P0_j(b^(i)) = B - cap_i,
    and total spending = t_i + sum_{j != i} P_j(b) <= cap_i + B - cap_i = B.
  * Already-feasible menus are untouched: if the raw mechanism is budget feasible at every
    profile, then at b^(i) (where i sells at t0_i) t0_i + sum_{j != i} P0_j(b^(i)) <= B,
    i.e. cap_i >= t0_i and t_i = t0_i.
The worst case over i's own bid is evaluated at one point (b^(i)) because of the
monotone architecture: no discretisation grid and no Lipschitz constant are involved.

Shrunk evaluation point (`shrink` = d in [0, 1), issue 17): i is offered at most
s_i = (1 - d) t0_i and the worst case is taken at b^(i) = (s_i, b_{-i}):
  t_i = min(s_i, max(cap_i, 0)),  cap_i = B - sum_{j != i} P0_j(s_i, b_{-i}).
The proof above goes through with s_i in place of t0_i (a paid i has b_i <= t_i <= s_i;
a final winner j has b_j <= t_j <= s_j <= t0_j, so P_j <= P0_j). d = 0 is the map above.
Why: b^(i) with b_i = t0_i is the *closed* end of i's acceptance interval. For
threshold menus (Singer's) it is a tie profile: i's ratio equals that of the seller who
sets its threshold, and there the others' thresholds jump up (i no longer counts as
ranked before them), so sum_j P0_j(b^(i)) exceeds its limit from below and the cap binds
although Singer never overspends. Just below the threshold (d > 0) the others' raw
payments are Singer's own, cap_i >= t0_i, and Singer passes with prices scaled by
(1 - d) (singer_gap measures both).

Training uses the same map with the acceptance indicators replaced by sigmoids of
temperature tau and max(cap, 0) by tau softplus(cap / tau) (the relaxation); evaluation
and every guarantee use the hard map above.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def _accept(price, bid, tau):
  if tau is None:
    return (bid <= price).astype(price.dtype)
  return jax.nn.sigmoid((price - bid) / tau)


def price_one(raw_fn, budget, bids_N, i, tau=None, shrink=0.0):
  """Seller i's final posted price t_i(b_{-i}) and its raw price t0_i and cap_i.

  `raw_fn(bids_PxN) -> t0_PxN` must be self-bid-independent and non-decreasing in the
  other bids (MenuNet is). b_i is overwritten before anything is computed, so the result
  cannot depend on it.
  """
  n = bids_N.shape[0]
  is_i = jnp.arange(n) == i
  b_minus_i = jnp.where(is_i, 0.0, bids_N)       # i's bid is never read below
  t0_i = raw_fn(b_minus_i[None])[0, i]
  s_i = t0_i if not shrink else (1.0 - shrink) * t0_i
  b_hat = jnp.where(is_i, s_i, b_minus_i)        # b^(i)
  t0_hat = raw_fn(b_hat[None])[0]
  pay0 = t0_hat * _accept(t0_hat, b_hat, tau) * (~is_i)
  cap = budget - jnp.sum(pay0)
  if tau is None:
    floor = jnp.maximum(cap, 0.0)
  else:
    # Relaxation only: a softplus floor keeps a gradient when the cap is negative, telling
    # the others' raw prices to make room (max(cap, 0) would be flat there).
    floor = tau * jax.nn.softplus(cap / tau)
  return jnp.minimum(s_i, floor), t0_i, cap


def prices(raw_fn, budget, bids_N, tau=None, shrink=0.0):
  """Final prices, raw prices and caps of all sellers (vmap of price_one over i)."""
  n = bids_N.shape[0]
  return jax.vmap(lambda i: price_one(raw_fn, budget, bids_N, i, tau, shrink))(
      jnp.arange(n))


def outcome(raw_fn, budget, bids_N, shrink=0.0):
  """Hard outcome: (win_N as 0/1 floats, pay_N). Losers are paid nothing."""
  t, _, _ = prices(raw_fn, budget, bids_N, shrink=shrink)
  win = (bids_N <= t).astype(t.dtype)
  return win, t * win


def raw_outcome(raw_fn, bids_N):
  """Before the transformation (for diagnostics: how often it binds, raw overspend)."""
  n = bids_N.shape[0]
  t0 = jax.vmap(lambda i: raw_fn(jnp.where(jnp.arange(n) == i, 0.0, bids_N)[None])[0, i])(
      jnp.arange(n))
  win = (bids_N <= t0).astype(t0.dtype)
  return win, t0 * win
