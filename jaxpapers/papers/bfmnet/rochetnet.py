"""BFMNet: truthful budget-feasible procurement menus -- RochetNet-style menu baseline.

RochetNet (Duetting et al. 2019) learns, for one agent, a menu of (allocation, payment)
options and lets the agent pick its utility-maximising one, so it is DSIC by
construction. Adapted to procurement with single-parameter sellers: seller i is shown K
options (x_ik, pi_ik) -- sell with probability x_ik, and if sold be paid pi_ik -- plus the
null option (0, 0); it takes the option maximising x_ik (pi_ik - b_i) (ties go to the
null option, then to the lower index). The menu is a function of the *public* market
context only (values, overlaps, budget), never of any bid, so:
  * DSIC and IR ex post: the seller faces a fixed menu; a sale happens only under an
    option with pi_ik > b_i = c_i (its utility is positive), and the null option is free.
  * Budget feasibility ex post, for every bid profile and every realisation of the
    lotteries: the worst case is every seller selling at its largest option price, so
    the prices are scaled by min(1, B / sum_i max_k pi_ik) (a bid-independent factor).
    This is also necessary: with bid-independent menus a profile where every seller
    takes its most expensive option exists (costs just below those prices).
Option 0 is deterministic (x = 1), so the class contains non-adaptive posted prices with
sum_i p_i <= B. The buyer's value is F(x), the expected value of the realised set (as for
RegretNet). Training relaxes the seller's choice to a softmax over the options'
utilities with temperature tau (RochetNet's softmax relaxation), evaluation takes the
argmax.

What it cannot do: a menu that ignores the other bids must reserve budget for the case
where everyone sells, so with n sellers and budget B the average worst-case price is
B / n; BFMNet's menus read the others' bids (monotonically) and only pay for the sellers
that do sell. The study measures how much that costs.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

# The menu network's context MLP (same class, so the parameter names match too).
from jaxpapers.papers.bfmnet.menus import _MLP


class RochetMenu(nn.Module):
  """Menus (x_NxK, pi_NxK) of one market from its public context (z_NxF, pair_NxNxQ)."""
  hidden: int = 32
  options: int = 4

  @nn.compact
  def __call__(self, z_NxF, pair_NxNxQ, budget):
    n = z_NxF.shape[0]
    h, k = self.hidden, self.options
    e = _MLP((h, h))(z_NxF)
    pin = jnp.concatenate([jnp.broadcast_to(e[:, None], (n, n, h)),
                           jnp.broadcast_to(e[None, :], (n, n, h)), pair_NxNxQ], -1)
    others = (1.0 - jnp.eye(n))[..., None] / max(n - 1, 1)
    ctx = jnp.sum(_MLP((h, h))(pin) * others, axis=1)
    out = _MLP((h, 2 * k))(jnp.concatenate([e, ctx], -1))
    # Option 0 sells for sure (a posted price); the others are lotteries.
    x = jnp.concatenate([jnp.ones((n, 1)), nn.sigmoid(out[:, 1:k] + 1.0)], axis=1)
    pi = (budget / n) * nn.softplus(out[:, k:] + 1.0)
    worst = jnp.sum(jnp.max(pi, axis=1))
    return x, pi * jnp.minimum(1.0, budget / worst)


def init_params(rng, model: RochetMenu, n: int, n_feat: int = 4, n_pair: int = 2):
  return model.init(rng, jnp.zeros((n, n_feat)), jnp.zeros((n, n, n_pair)),
                    jnp.asarray(1.0))["params"]


def choose(x_NxK, pi_NxK, bids_N):
  """Hard choice: (x_N, pi_N) of each seller's utility-maximising option (0, 0 if none
  has positive utility)."""
  util = x_NxK * (pi_NxK - bids_N[:, None])
  util = jnp.concatenate([jnp.zeros_like(bids_N)[:, None], util], axis=1)
  k = jnp.argmax(util, axis=1)                                  # first max: null wins ties
  x0 = jnp.concatenate([jnp.zeros_like(bids_N)[:, None], x_NxK], 1)
  p0 = jnp.concatenate([jnp.zeros_like(bids_N)[:, None], pi_NxK], 1)
  pick = jax.nn.one_hot(k, x0.shape[1], dtype=x0.dtype)
  return jnp.sum(pick * x0, 1), jnp.sum(pick * p0, 1)


def soft_choice(x_NxK, pi_NxK, bids_N, tau):
  """Relaxed sale probability: softmax over the options' utilities (null included)."""
  util = x_NxK * (pi_NxK - bids_N[:, None])
  util = jnp.concatenate([jnp.zeros_like(bids_N)[:, None], util], axis=1)
  q = jax.nn.softmax(util / tau, axis=1)
  return jnp.sum(q[:, 1:] * x_NxK, axis=1)
