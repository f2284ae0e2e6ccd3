"""BFMNet: truthful budget-feasible procurement menus -- mechanisms under one interface, metrics.

Every mechanism is a `Mechanism(full, seller)`: full(market, bids_N) -> (x_N, pay_N,
value, spend) with x the (expected) allocation, pay the payments, value the buyer's
expected value and spend the largest ex-post total payment; seller(market, bids_N, i) ->
(x_i, pay_i) is seller i's part only (cheaper for the misreport search).

Metrics (the issue's list): buyer value / non-strategic optimum (ratio of sums over
instances); empirical regret from an exhaustive misreport grid (seller i bids every grid
point while the others bid truthfully; regret = max gain over truthful, >= 0); counts of
budget violations (spend > B), IR violations (truthful utility < 0), winners paid below
their bid, and losers paid anything, each with tolerance `tol` for float round-off.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.bfmnet import classical
from jaxpapers.papers.bfmnet import markets as markets_lib
from jaxpapers.papers.bfmnet import mechanism
from jaxpapers.papers.bfmnet import menus
from jaxpapers.papers.bfmnet import regretnet as regretnet_lib
from jaxpapers.papers.bfmnet import rochetnet as rochetnet_lib


class Mechanism(NamedTuple):
  full: Callable
  seller: Callable


def _from_full(full):
  def seller(market, bids, i):
    x, p, _, _ = full(market, bids)
    return x[i], p[i]
  return Mechanism(full, seller)


def bfmnet_mechanism(model, params) -> Mechanism:
  def raw(market):
    return menus.raw_price_fn(model, params, market)

  shrink = model.shrink

  def full(market, bids):
    x, pay = mechanism.outcome(raw(market), market["budget"], bids, shrink)
    return x, pay, markets_lib.value(market, x), jnp.sum(pay)

  def seller(market, bids, i):
    t, _, _ = mechanism.price_one(raw(market), market["budget"], bids, i, shrink=shrink)
    x = (bids[i] <= t).astype(t.dtype)
    return x, t * x
  return Mechanism(full, seller)


def raw_menu_mechanism(model, params) -> Mechanism:
  """The learned menus *without* the budget transformation (ablation: DSIC, not BF)."""
  def full(market, bids):
    x, pay = mechanism.raw_outcome(menus.raw_price_fn(model, params, market), bids)
    return x, pay, markets_lib.value(market, x), jnp.sum(pay)
  return _from_full(full)


def regretnet_mechanism(model, params) -> Mechanism:
  def full(market, bids):
    z, pair = markets_lib.features(market)
    x, p = model.apply({"params": params}, z, pair, bids[None])
    return x[0], p[0], markets_lib.multilinear(market, x[0]), jnp.sum(p[0])
  return _from_full(full)


def rochetnet_mechanism(model, params) -> Mechanism:
  """Bid-independent menus; spend = the largest realised total payment (every seller
  whose chosen option has x > 0 selling at its price)."""
  def menu(market):
    z, pair = markets_lib.features(market)
    return model.apply({"params": params}, z, pair, market["budget"])

  def full(market, bids):
    x_k, pi_k = menu(market)
    x, pi = rochetnet_lib.choose(x_k, pi_k, bids)
    return x, x * pi, markets_lib.multilinear(market, x), jnp.sum(pi * (x > 0))

  def seller(market, bids, i):  # only seller i's own row of the menu and choice
    x_k, pi_k = menu(market)
    x, pi = rochetnet_lib.choose(x_k[i][None], pi_k[i][None], bids[i][None])
    return x[0], x[0] * pi[0]
  return Mechanism(full, seller)


def singer_mechanism() -> Mechanism:
  def full(market, bids):
    x, p = classical.singer(market, bids)
    return x, p, markets_lib.value(market, x), jnp.sum(p)

  def seller(market, bids, i):  # only i's threshold: i wins iff b_i <= it
    thr = classical.threshold(market, bids, market["budget"], i)
    x = (bids[i] <= thr).astype(jnp.float32)
    return x, thr * x
  return Mechanism(full, seller)


def cgl_mechanism(p_top: float = 0.4) -> Mechanism:
  def full(market, bids):
    x, p, br = classical.cgl_random_sm(market, bids, p_top)
    value = (p_top * markets_lib.value(market, br["top"][0])
             + (1 - p_top) * markets_lib.value(market, br["greedy"][0]))
    spend = jnp.maximum(jnp.sum(br["top"][1]), jnp.sum(br["greedy"][1]))
    return x, p, value, spend

  def seller(market, bids, i):
    # i is the top affordable seller iff it bids <= B and tops {i} + the affordable others
    # (computed with b_i set to 0, so nothing else about b_i is read).
    top = classical.top_affordable(market, bids.at[i].set(0.0))
    x_top = ((top == i) & (bids[i] <= market["budget"])).astype(jnp.float32)
    thr = classical.threshold(market, bids, 0.5 * market["budget"], i)
    x_g = (bids[i] <= thr).astype(jnp.float32)
    return (p_top * x_top + (1 - p_top) * x_g,
            p_top * market["budget"] * x_top + (1 - p_top) * thr * x_g)
  return Mechanism(full, seller)


def greedy_half_mechanism() -> Mechanism:
  def full(market, bids):
    x, p = classical.greedy_half(market, bids)
    return x, p, markets_lib.value(market, x), jnp.sum(p)

  def seller(market, bids, i):
    thr = classical.threshold(market, bids, 0.5 * market["budget"], i)
    x = (bids[i] <= thr).astype(jnp.float32)
    return x, thr * x
  return Mechanism(full, seller)


def spp_mechanism(alpha) -> Mechanism:
  """Sequential posted prices with price scale alpha (may be traced: one per cell)."""
  def full(market, bids):
    x, p = classical.spp(market, bids, alpha)
    return x, p, markets_lib.value(market, x), jnp.sum(p)
  return _from_full(full)


def outcomes(mech: Mechanism, markets):
  """Truthful outcomes of a batch (jit-able)."""
  return jax.vmap(lambda m: mech.full(m, m["costs"]))(markets)


def regrets(mech: Mechanism, markets, grid_G):
  """Per-instance, per-seller regret from the exhaustive misreport grid: (B, N).

  Misreport utilities come from `mech.seller` (seller i's own price computation); the
  truthful utility comes from `mech.full` on the truthful profile, a separate code path,
  so a bug that made the seller view follow the bid would not cancel out. The price of
  the independence is float round-off between the two paths (~1e-7), which the metric
  reports as it is.
  """
  def one(market):
    costs = market["costs"]
    n = costs.shape[0]

    def util(i, b):
      x, p = mech.seller(market, jnp.where(jnp.arange(n) == i, b, costs), i)
      return p - costs[i] * x

    u_mis = jax.vmap(lambda i: jax.vmap(lambda b: util(i, b))(grid_G))(jnp.arange(n))
    x, p, _, _ = mech.full(market, costs)
    u_true = p - costs * x
    return jnp.maximum(jnp.max(u_mis, axis=1) - u_true, 0.0)
  return jax.lax.map(one, markets)


def audit(mech: Mechanism, markets, regret_markets=None, grid_G=None):
  """Traceable arrays behind the metrics: truthful outcomes and (optionally) regrets."""
  out = outcomes(mech, markets)
  if regret_markets is None:
    return out, None
  return out, regrets(mech, regret_markets, grid_G)


def summarize(arrays, regret, markets, opt_B, tol: float = 1e-5) -> dict:
  """Host-side metrics of one mechanism on one batch (floats/ints)."""
  x, pay, val, spend = map(np.asarray, arrays)
  costs = np.asarray(markets["costs"])
  budget = np.asarray(markets["budget"])
  util = pay - costs * x
  out = {
      "value_ratio": float(val.sum() / np.asarray(opt_B).sum()),
      "value": float(val.mean()),
      "spend_frac": float((spend / budget).mean()),
      "budget_viol": int((spend > budget * (1 + tol) + tol).sum()),
      "ir_viol": int((util < -tol).sum()),
      "losers_paid": int(((x == 0) & (np.abs(pay) > tol)).sum()),
      "max_overspend": float(np.max(spend / budget - 1.0)),
  }
  if regret is not None:
    r = np.asarray(regret)
    out["regret_mean"] = float(r.mean())
    out["regret_max"] = float(r.max())
  return out


def metrics(mech: Mechanism, markets, opt_B, regret_markets=None, grid_G=None,
            tol: float = 1e-5) -> dict:
  """All reported metrics of one mechanism on a batch (jits `audit` once)."""
  arrays, r = jax.jit(lambda m, rm: audit(mech, m, rm, grid_G))(markets, regret_markets)
  return summarize(arrays, r, markets, opt_B, tol)


def regretnet_out_fn(model, params, market):
  """bids_PxN -> (x_PxN, p_PxN) of the RegretNet baseline on one market."""
  z, pair = markets_lib.features(market)
  return lambda bids: model.apply({"params": params}, z, pair, bids)


def regrets_ascent(model, params, markets, grid_G, steps: int, lr: float):
  """RegretNet regret per (instance, seller): max over the exhaustive grid *and* a
  gradient ascent started from every grid point (Duetting et al.'s test-time search).
  The truthful utility comes from its own network call (no shared batch)."""
  def one(market):
    out_fn = regretnet_out_fn(model, params, market)
    costs = market["costs"]
    n = costs.shape[0]
    start = jnp.broadcast_to(grid_G[None], (n, grid_G.shape[0]))
    found = regretnet_lib.ascend_misreports(out_fn, costs, start, steps, lr,
                                            markets_lib.COST_MAX)
    mis = jnp.concatenate([start, found], axis=1)
    u_mis, _, _ = regretnet_lib.misreport_utilities(out_fn, costs, mis)
    x, p = out_fn(costs[None])
    u_true = p[0] - costs * x[0]
    return jnp.maximum(jnp.max(u_mis, axis=1) - u_true, 0.0)
  return jax.lax.map(one, markets)


def regretnet_expost(model, params, markets, rng, samples: int):
  """Ex-post budget audit of the lottery mechanism on truthful bids, per instance:
  (share of `samples` realised winner sets that overspend, largest realised spend / B)."""
  def one(market, r):
    z, pair = markets_lib.features(market)
    x, _, pi = model.clone(with_win_price=True).apply({"params": params}, z, pair,
                                                      market["costs"][None])
    spends = regretnet_lib.expost_spends(x[0], pi[0], r, samples)
    return (jnp.mean((spends > market["budget"] * (1 + 1e-5)).astype(jnp.float32)),
            jnp.max(spends) / market["budget"])
  rngs = jax.random.split(rng, markets["costs"].shape[0])
  return jax.vmap(one)(markets, rngs)
