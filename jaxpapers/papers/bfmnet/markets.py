"""BFMNet: truthful budget-feasible procurement menus -- markets, valuations, optimum.

A procurement market: a buyer with budget B, n sellers with private costs c_i, and a
public valuation v(S) of the procured set. Both valuation classes of the study are
weighted coverage functions over a universe of U = 2n elements, v(S) = sum_u w_u
1[S covers u]: *additive* has seller i cover only element i (v_i = w_i, the other n
elements weigh nothing); *submodular* (coverage) has each seller cover a random subset,
each element covered by about 3 sellers, so marginal values overlap.

The relaxation used in training is the multilinear extension of the coverage function,
F(q) = sum_u w_u (1 - prod_i (1 - q_i cover_iu)): the expected value of the procured set
when seller i is procured independently with probability q_i (exact for additive).

The non-strategic optimum that normalises the buyer's value is a knapsack (additive) or a
budgeted maximum coverage (submodular) with the *true* costs, solved exactly by a MILP
(scipy/HiGHS), with a time limit (a timed-out solve keeps its best feasible solution, a
lower bound on the optimum; the study reports how many timed out).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

COST_DISTRIBUTIONS = ("uniform", "skewed", "bimodal")
VALUATIONS = ("additive", "submodular")
COST_MAX = 1.0  # every cost distribution is supported on [0, COST_MAX]


def _cost_table(rng, n: int):
  """Costs of every distribution from one key: (len(COST_DISTRIBUTIONS), n)."""
  r1, r2, r3, r4 = jax.random.split(rng, 4)
  uniform = jax.random.uniform(r1, (n,))
  skewed = jax.random.uniform(r2, (n,)) ** 2            # mostly cheap sellers, mean 1/3
  # Cheap sellers around 0.2 and expensive ones around 0.8: posted prices must choose.
  hi = jax.random.bernoulli(r3, 0.5, (n,))
  bimodal = jnp.where(hi, 0.8, 0.2) + jax.random.uniform(r4, (n,), minval=-0.15, maxval=0.15)
  return jnp.stack([uniform, skewed, bimodal])


def cell_ids(valuation: str, dist: str):
  """(valuation id, cost-distribution id): markets of one shape differ only by these."""
  if valuation not in VALUATIONS:
    raise ValueError(f"unknown valuation {valuation!r}; known: {VALUATIONS}")
  if dist not in COST_DISTRIBUTIONS:
    raise ValueError(f"unknown cost distribution {dist!r}; known: {COST_DISTRIBUTIONS}")
  return jnp.asarray([VALUATIONS.index(valuation), COST_DISTRIBUTIONS.index(dist)])


def sample_market(rng, n: int, ids, budget_per_seller: float):
  """One instance: dict of costs_N, weights_U, cover_NxU (0/1 floats), budget ().

  `ids` = cell_ids(valuation, dist) may be traced, so one compiled program serves every
  (valuation, distribution) cell of a given n: additive markets use the same universe of
  U = 2n elements, seller i owning element i and elements n..2n-1 weighing nothing.
  """
  rc, rw, rs = jax.random.split(rng, 3)
  u = 2 * n
  weights = jax.random.uniform(rw, (u,))
  # Each element is covered by ~3 sellers; an element nobody covers is re-given to one
  # random seller so that no weight is unreachable.
  cover = jax.random.bernoulli(rs, min(1.0, 3.0 / n), (n, u)).astype(jnp.float32)
  owner = jax.random.randint(jax.random.fold_in(rs, 1), (u,), 0, n)
  orphan = cover.sum(0) == 0
  cover = jnp.maximum(cover, jax.nn.one_hot(owner, n).T * orphan[None, :])
  additive = ids[0] == 0
  own = jnp.concatenate([jnp.eye(n), jnp.zeros((n, n))], axis=1)
  cover = jnp.where(additive, own, cover)
  weights = jnp.where(additive, weights * (jnp.arange(u) < n), weights)
  costs = _cost_table(rc, n)[ids[1]]
  return {"costs": costs, "weights": weights, "cover": cover,
          "budget": jnp.asarray(budget_per_seller * n, jnp.float32)}


def sample_markets(rng, batch: int, n: int, ids, budget_per_seller: float):
  """A batch of independent instances (leading axis = batch)."""
  return jax.vmap(lambda r: sample_market(r, n, ids, budget_per_seller))(
      jax.random.split(rng, batch))


def value(market, win_N):
  """v(S) for a 0/1 (or boolean) winner vector: weight of the covered elements."""
  covered = jnp.max(market["cover"] * win_N.astype(jnp.float32)[:, None], axis=0)
  return jnp.sum(market["weights"] * covered)


def multilinear(market, q_N):
  """F(q): expected coverage when seller i is procured independently w.p. q_i."""
  miss_U = jnp.prod(1.0 - market["cover"] * q_N[:, None], axis=0)
  return jnp.sum(market["weights"] * (1.0 - miss_U))


def singleton_values(market):
  return market["cover"] @ market["weights"]


def features(market):
  """Public, bid-independent context: per-seller z_NxF and pairwise pair_NxNxP.

  z_i = (v_i / mean v, v_i / max v, B / (n E[c]), log n); pair_ij = (overlap_ij / v_i,
  v_j / mean v) with overlap_ij = v_i + v_j - v({i, j}) (zero for additive). Values are
  normalised so one network shape serves every n.
  """
  n = market["cover"].shape[0]
  v = singleton_values(market)
  vbar = jnp.mean(v) + 1e-9
  both = jnp.einsum("iu,ju,u->ij", market["cover"], market["cover"], market["weights"])
  overlap = both / (v[:, None] + 1e-9)
  b_feat = market["budget"] / (0.5 * n)
  z = jnp.stack([v / vbar, v / (jnp.max(v) + 1e-9), jnp.full((n,), b_feat),
                 jnp.full((n,), jnp.log(n) / 4.0)], axis=-1)
  pair = jnp.stack([overlap, jnp.broadcast_to(v[None, :] / vbar, (n, n))], axis=-1)
  return z, pair


def optimum(market, time_limit: float = 2.0) -> tuple[float, bool]:
  """Non-strategic optimum with true costs (host, scipy MILP): (value, solved_to_optimality).

  Variables x_i (procure i) and y_u (element u covered): max w.y s.t. y_u <= sum_i
  cover_iu x_i, c.x <= B, binary x, y in [0, 1] (integral at the optimum).
  """
  cover = np.asarray(market["cover"], np.float64)
  w = np.asarray(market["weights"], np.float64)
  c = np.asarray(market["costs"], np.float64)
  budget = float(market["budget"])
  n, u = cover.shape
  obj = np.concatenate([np.zeros(n), -w])
  a_cov = np.concatenate([-cover.T, np.eye(u)], axis=1)        # y_u - sum_i cover x_i <= 0
  a_bud = np.concatenate([c, np.zeros(u)])[None, :]
  cons = [optimize.LinearConstraint(a_cov, -np.inf, 0.0),
          optimize.LinearConstraint(a_bud, -np.inf, budget)]
  integrality = np.concatenate([np.ones(n), np.zeros(u)])
  res = optimize.milp(obj, constraints=cons, integrality=integrality,
                      bounds=optimize.Bounds(0.0, 1.0),
                      options={"time_limit": time_limit, "disp": False})
  if res.x is None:
    raise RuntimeError(f"MILP for the optimum failed: {res.message}")
  x = res.x[:n] > 0.5
  val = float(np.sum(w * (cover[x].max(0) if x.any() else 0.0)))
  return val, bool(res.status == 0)


def optimum_batch(markets, time_limit: float = 2.0) -> tuple[np.ndarray, int]:
  """Optimum of every instance of a batch; returns (values_B, number not proven optimal)."""
  host = jax.tree.map(np.asarray, markets)
  b = host["costs"].shape[0]
  vals, timeouts = np.zeros(b), 0
  for k in range(b):
    vals[k], ok = optimum(jax.tree.map(lambda x: x[k], host), time_limit)
    timeouts += int(not ok)
  return vals, timeouts
