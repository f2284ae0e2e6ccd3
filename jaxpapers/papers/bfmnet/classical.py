"""BFMNet: truthful budget-feasible procurement menus -- classical baselines.

* Singer (FOCS 2010), proportional share for additive valuations: sort sellers by
  v_i / b_i, keep the longest prefix with b_k <= B v_k / v(S_k), pay threshold prices.
* Chen, Gravin and Lu (SODA 2011), RANDOM-SM for submodular valuations: with probability
  2/5 buy only i* at posted price B; otherwise run GREEDY-SM with budget B/2: repeatedly
  take the seller of largest marginal value per bid and stop at the first one with
  b_k > (B/2) m_k(S_{k-1}) / v(S_{k-1} + k); pay threshold prices. For additive v
  GREEDY-SM(B) is exactly Singer's rule, so both share `greedy_ps`. CGL assume every cost
  is at most B; our costs are not, so i* = argmax v({i}) over the sellers *bidding at most
  B* (an unaffordable i* would buy nothing). This stays truthful: whether i is the top
  affordable seller depends on b_i only through b_i <= B, so i faces the posted price B.
* GREEDY-SM(B/2) alone (CGL's greedy branch): truthful and budget feasible on its own.
* Singer's rule GREEDY-SM(B) on submodular markets: a practical reference only (no proof
  of budget feasibility there); its overspends are counted, not hidden.
* Sequential posted prices (SPP), a Bayesian truthful baseline: visit sellers in order of
  largest marginal value given those already bought; offer seller j the price
  alpha B m_j(S) / v(N) if the remaining budget covers it; j sells iff b_j <= price. The
  offer and whether it is made depend only on earlier sellers' answers, never on b_j,
  so SPP is DSIC, IR and budget feasible by construction. alpha is tuned per market
  distribution on validation markets (experiment.py).

Threshold payments are exact, not bisected. Run the greedy on the others N \\ {i},
giving picks j_1, j_2, ... with prefixes T_{r-1}; seller i would be picked at step r if
b_i <= A_r = b_{j_r} m_i(T_{r-1}) / m_{j_r}(T_{r-1}) and would pass the stopping rule if
b_i <= C_r = share * m_i(T_{r-1}) / v(T_{r-1} + i). C_r decreases in r (submodularity), so
i wins iff b_i <= max_{r <= k'+1} min(A_r, C_r), where k' is where the others' run stops:
that maximum is i's threshold, and winners are paid it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

_TINY = 1e-12


def _marginals(market, covered_U):
  return market["cover"] @ (market["weights"] * (1.0 - covered_U))


def greedy_ps(market, bids_N, share, excluded_N=None):
  """Greedy proportional-share allocation. Returns a trace of the run for thresholds.

  trace: picked_R (index or -1), active_R (the step is reached), marg_R (picked seller's
  marginal), covered_RxU (coverage before the step); plus win_N.
  """
  n, u = market["cover"].shape
  excluded = jnp.zeros((n,), bool) if excluded_N is None else excluded_N

  def step(carry, _):
    sel, covered, running = carry
    marg = _marginals(market, covered)
    avail = ~sel & ~excluded
    ratio = jnp.where(avail, marg / jnp.maximum(bids_N, _TINY), -jnp.inf)
    j = jnp.argmax(ratio)
    has = avail[j]
    new_cov = jnp.maximum(covered, market["cover"][j])
    v_new = jnp.sum(market["weights"] * new_cov)
    ok = running & has & (bids_N[j] <= share * marg[j] / jnp.maximum(v_new, _TINY))
    trace = {"picked": jnp.where(has, j, -1), "active": running, "marg": marg[j],
             "covered": covered}
    sel = sel | ((jnp.arange(n) == j) & ok)
    covered = jnp.where(ok, new_cov, covered)
    return (sel, covered, running & ok), trace

  init = (jnp.zeros((n,), bool), jnp.zeros((u,)), jnp.asarray(True))
  (sel, _, _), trace = jax.lax.scan(step, init, None, length=n)
  return sel, trace


def threshold(market, bids_N, share, i):
  """Seller i's threshold bid for greedy_ps (sup of the bids with which i wins)."""
  n = bids_N.shape[0]
  _, tr = greedy_ps(market, bids_N, share, excluded_N=jnp.arange(n) == i)
  cover_i = market["cover"][i]
  m_i = (1.0 - tr["covered"]) @ (market["weights"] * cover_i)
  v_prev = tr["covered"] @ market["weights"]
  b_j = jnp.where(tr["picked"] >= 0, bids_N[jnp.maximum(tr["picked"], 0)], jnp.inf)
  a = jnp.where((tr["picked"] >= 0) & (tr["marg"] > 0),
                b_j * m_i / jnp.maximum(tr["marg"], _TINY), jnp.inf)
  c = share * m_i / jnp.maximum(v_prev + m_i, _TINY)
  per_step = jnp.where(tr["active"], jnp.minimum(a, c), 0.0)
  return jnp.max(per_step)


def greedy_ps_mechanism(market, bids_N, share):
  """(win_N, pay_N) of greedy proportional share with exact threshold payments."""
  sel, _ = greedy_ps(market, bids_N, share)
  thr = jax.vmap(lambda i: threshold(market, bids_N, share, i))(
      jnp.arange(bids_N.shape[0]))
  win = sel.astype(jnp.float32)
  return win, thr * win


def singer(market, bids_N):
  """Singer's proportional-share mechanism (additive): greedy_ps with the full budget."""
  return greedy_ps_mechanism(market, bids_N, market["budget"])


def top_affordable(market, bids_N):
  """i* = argmax v({i}) among sellers bidding at most B (lowest index on ties); -1 if none."""
  v1 = market["cover"] @ market["weights"]
  ok = bids_N <= market["budget"]
  top = jnp.argmax(jnp.where(ok, v1, -jnp.inf))
  return jnp.where(jnp.any(ok), top, -1)


def cgl_random_sm(market, bids_N, p_top: float = 0.4):
  """Chen-Gravin-Lu RANDOM-SM as the distribution over its two branches.

  Returns the expected allocation/payment and each branch's (win, pay): with probability
  p_top i* (the top affordable seller) is offered the posted price B, otherwise
  GREEDY-SM(B/2). Both branches are universally truthful and budget feasible ex post.
  """
  top = top_affordable(market, bids_N)
  n = bids_N.shape[0]
  top_win = (jnp.arange(n) == top).astype(jnp.float32)
  top_pay = top_win * market["budget"]
  g_win, g_pay = greedy_ps_mechanism(market, bids_N, 0.5 * market["budget"])
  x = p_top * top_win + (1 - p_top) * g_win
  p = p_top * top_pay + (1 - p_top) * g_pay
  return x, p, {"top": (top_win, top_pay), "greedy": (g_win, g_pay)}


def greedy_half(market, bids_N):
  """CGL's GREEDY-SM with budget B/2 alone (truthful, budget feasible)."""
  return greedy_ps_mechanism(market, bids_N, 0.5 * market["budget"])


def spp(market, bids_N, alpha):
  """Sequential posted prices (see the module docstring): (win_N, pay_N)."""
  n, u = market["cover"].shape
  scale = alpha * market["budget"] / jnp.maximum(jnp.sum(market["weights"]
                                                         * jnp.max(market["cover"], 0)),
                                                 _TINY)

  def step(carry, _):
    visited, covered, left, win, pay = carry
    marg = _marginals(market, covered)
    j = jnp.argmax(jnp.where(visited, -jnp.inf, marg))
    price = scale * marg[j]
    offered = price <= left
    sold = offered & (bids_N[j] <= price)
    hot = jnp.arange(n) == j
    covered = jnp.where(sold, jnp.maximum(covered, market["cover"][j]), covered)
    return (visited | hot, covered, left - jnp.where(sold, price, 0.0),
            win | (hot & sold), jnp.where(hot & sold, price, pay)), None

  init = (jnp.zeros((n,), bool), jnp.zeros((u,)), market["budget"],
          jnp.zeros((n,), bool), jnp.zeros((n,)))
  (_, _, _, win, pay), _ = jax.lax.scan(step, init, None, length=n)
  return win.astype(jnp.float32), pay


def singer_prices_additive(market, bids_PxN):
  """Singer's threshold prices t_i(b_{-i}) for every seller and profile, closed form.

  For additive values, i wins Singer's rule at bid b iff (b / v_i)(v_i + V_<(b / v_i))
  <= B with V_<(r) the value of the others whose ratio b_l / v_l is below r; the left side
  increases in r, so the threshold ratio is the largest r with that property:
      t_i / v_i = max( max_{j != i} min(r_j, B / (v_i + V_<(r_j))),  B / (v_i + v(N - i)) )
  (a candidate per interval between consecutive ratios of the others; candidates of
  intervals where the cap lies below the interval are dominated by the previous one).
  b_i is never read (masked), so the result is self-bid-independent by construction; it
  is non-decreasing in every other bid b_j: raising b_j can only remove j from the sets
  V_<, which lowers the left side and enlarges i's winning set. On coverage markets
  v_i = v({i}) gives an additive proxy with the same two properties. O(n^3) per profile
  (tested against the greedy-trace `threshold`).
  """
  v = market["cover"] @ market["weights"]
  n = v.shape[0]
  others = ~jnp.eye(n, dtype=bool)                            # [i, l]: l != i

  def one(bids_N):
    r = bids_N / jnp.maximum(v, _TINY)
    below = (r[None, :] < r[:, None]).astype(v.dtype)         # [j, l]: r_l < r_j
    v_below = jnp.einsum("jl,l,il->ij", below, v, others.astype(v.dtype))
    cand = jnp.minimum(r[None, :], market["budget"] / (v[:, None] + v_below))
    cand = jnp.where(others, cand, -jnp.inf)
    last = market["budget"] / (v + jnp.sum(v) - v)
    return v * jnp.maximum(jnp.max(cand, axis=1), last)
  return jax.vmap(one)(bids_PxN)
