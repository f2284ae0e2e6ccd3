"""BFMNet: truthful budget-feasible procurement menus -- the menu network.

The network maps the public market context (per-seller values, pairwise overlaps, budget)
and the *other* sellers' bids to seller i's menu. A seller has a single private number
(its cost) and the allocation is deterministic, so a menu is {(0, 0), (1, t_i)}: "sell
at the posted price t_i or not" (by Myerson's characterisation every deterministic DSIC
mechanism for single-parameter sellers is of this form). Self-bid-independence is
structural: seller i's own bid enters the aggregation only through a weight w_ii that is
exactly zero, so t_i(b) does not change in the last bit when b_i does.

Architecture (permutation-equivariant, one network for every n):
  e_i   = MLP(z_i)                                   public embedding
  w_ij  = softplus(MLP(e_i, e_j, pair_ij)) (j != i)  bid-independent, non-negative weights
  phi_j = sigmoid(s * (b_j - loc(e_j)))              per-channel, non-decreasing in b_j
  a_i   = sum_{j != i} w_ij * phi_j / (n - 1)          others' bids, non-decreasing in each
  t0_i  = softplus(g(e_i, ctx_i) + sum_k h_k(e_i, ctx_i) m_k(a_i)),
with h_k >= 0 and m a monotone MLP (non-negative weights, ReLU). Hence t0_i is
non-decreasing in every *other* seller's bid -- the property that lets the budget
transformation (mechanism.py) compute its worst case exactly without any grid.

Singer priors (`prior`, issue 17; additive markets): s_i(b_{-i}) = Singer's threshold
price (classical.singer_prices_additive), itself self-bid-independent and non-decreasing
in every other bid. `feature`: s_i / price_scale is one more input of the monotone MLP
(next to the channels a_i), so t0_i is non-decreasing in s_i and through it in every
b_j. `residual`: t0_i = s_i * 2 sigmoid(g * logit_i) with a learned gain g = max(gamma, 0)
>= 0, gamma = 0 at init, so t0 starts *exactly* at Singer's prices (at gamma = 0 the
gradient of max is 1/2, so the gain can still move): a product of two non-negative
functions that are non-decreasing in every other bid. (A first version with
g = softplus(-4) ~ 0.02 at init started 1-3% above Singer's prices and kept only 72% of
Singer's value: Singer's prices nearly exhaust the budget, and the transformation cuts
any excess hard.) `gain0` > 0 starts the correction live (the gain's gradient can push
a zero gain below 0, where max(., 0) stops it for good). Both stay in the class the budget
proof needs. `shrink` is the transformation's evaluation point (mechanism.py), carried
by the model so that training and every evaluation use the same mechanism.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxpapers.papers.bfmnet import classical
from jaxpapers.papers.bfmnet import markets as markets_lib

PRIORS = ("none", "feature", "residual")


class _MLP(nn.Module):
  features: tuple[int, ...]

  @nn.compact
  def __call__(self, x):
    for k, f in enumerate(self.features):
      x = nn.Dense(f)(x)
      if k < len(self.features) - 1:
        x = nn.gelu(x)
    return x


class _MonotoneMLP(nn.Module):
  """Coordinate-wise non-decreasing map: non-negative weights and monotone activations."""
  hidden: int
  out: int

  @nn.compact
  def __call__(self, a):
    d = a.shape[-1]
    w1 = nn.softplus(self.param("w1", nn.initializers.normal(0.5), (d, self.hidden)))
    b1 = self.param("b1", nn.initializers.zeros, (self.hidden,))
    w2 = nn.softplus(self.param("w2", nn.initializers.normal(0.5), (self.hidden, self.out)))
    b1 = b1.reshape((1,) * (a.ndim - 1) + (self.hidden,))
    return nn.relu(a @ w1 + b1) @ w2 / self.hidden


class MenuNet(nn.Module):
  """Posted-price menus t0_PxN for P bid profiles of one market (z_NxF, pair_NxNxP)."""
  hidden: int = 32
  channels: int = 16   # monotone bid channels aggregated over the other sellers
  monotone: int = 8    # outputs of the monotone MLP mixed by non-negative gates
  offset: float = 0.0  # initial prices ~ softplus(O(1) - offset) * price_scale
  prior: str = "none"  # none | feature | residual (Singer's prices, see above)
  shrink: float = 0.0  # the transformation's evaluation point (1 - shrink) t0_i
  gain0: float = 0.0  # residual: initial gain gamma (0: start exactly at Singer's prices)

  @nn.compact
  def __call__(self, z_NxF, pair_NxNxQ, bids_PxN, price_scale=1.0, prior_PxN=None):
    """prior_PxN: Singer's prices / price_scale (required unless prior == 'none')."""
    n = z_NxF.shape[0]
    h, c = self.hidden, self.channels
    e_NxH = _MLP((h, h))(z_NxF)
    pin = jnp.concatenate([jnp.broadcast_to(e_NxH[:, None, :], (n, n, h)),
                           jnp.broadcast_to(e_NxH[None, :, :], (n, n, h)),
                           pair_NxNxQ], axis=-1)
    pout = _MLP((h, c + h))(pin)
    others_NxN = 1.0 - jnp.eye(n)
    norm = 1.0 / max(n - 1, 1)
    # Non-negative weights that are exactly 0 on the diagonal: b_i never reaches t0_i.
    w_NxNxC = nn.softplus(pout[..., :c]) * others_NxN[..., None] * norm
    ctx_NxH = jnp.sum(pout[..., c:] * others_NxN[..., None], axis=1) * norm
    loc_NxC = nn.sigmoid(nn.Dense(c)(e_NxH))
    scale_C = 1.0 + nn.softplus(self.param("scale", nn.initializers.constant(2.0), (c,)))
    phi_PxNxC = nn.sigmoid(scale_C[None, None, :]
                           * (bids_PxN[:, :, None] - loc_NxC[None, :, :]))
    a_PxNxC = jnp.einsum("ijc,pjc->pic", w_NxNxC, phi_PxNxC)
    if self.prior == "feature":
      a_PxNxC = jnp.concatenate([a_PxNxC, prior_PxN[:, :, None]], axis=-1)
    m_PxNxM = _MonotoneMLP(h, self.monotone)(a_PxNxC)
    head = _MLP((h, self.monotone + 1))(jnp.concatenate([e_NxH, ctx_NxH], axis=-1))
    gate_NxM = nn.softplus(head[:, 1:])
    logit_PxN = (head[None, :, 0] + jnp.mean(gate_NxM[None] * m_PxNxM, axis=-1)
                 - self.offset)
    if self.prior == "residual":
      g = jnp.maximum(self.param("residual_gain", nn.initializers.constant(self.gain0), ()),
                      0.0)
      return price_scale * prior_PxN * 2.0 * nn.sigmoid(g * logit_PxN)
    # Prices in units of the budget per seller (a positive, bid-independent factor, so
    # monotonicity is kept): the initial raw menus neither overspend nor starve.
    return price_scale * nn.softplus(logit_PxN)


def init_params(rng, model: MenuNet, n: int, n_feat: int = 4, n_pair: int = 2):
  if model.prior not in PRIORS:
    raise ValueError(f"prior={model.prior!r}; known: {PRIORS}")
  z = jnp.zeros((n, n_feat))
  pair = jnp.zeros((n, n, n_pair))
  return model.init(rng, z, pair, jnp.zeros((1, n)), 1.0, jnp.zeros((1, n)))["params"]


def raw_price_fn(model: MenuNet, params, market):
  """Closure bids_PxN -> t0_PxN for one market, the interface mechanism.py expects."""
  z_NxF, pair_NxNxQ = markets_lib.features(market)
  scale = market["budget"] / market["costs"].shape[0]
  if model.prior == "none":
    return lambda bids_PxN: model.apply({"params": params}, z_NxF, pair_NxNxQ, bids_PxN,
                                        scale)
  return lambda bids_PxN: model.apply(
      {"params": params}, z_NxF, pair_NxNxQ, bids_PxN, scale,
      classical.singer_prices_additive(market, bids_PxN) / scale)


def num_params(params) -> int:
  return sum(x.size for x in jax.tree.leaves(params))
