"""BFMNet: truthful budget-feasible procurement menus -- RegretNet-style neural baseline.

The approximate neural baseline the paper compares against (Duetting et al.'s RegretNet,
adapted to procurement): a permutation-equivariant network maps the context and *all*
bids, own bid included, to an allocation probability x_i in [0, 1] and a payment p_i.
IR holds by construction (p_i = x_i b_i + x_i softplus(.) >= x_i b_i), but DSIC and
budget feasibility are only encouraged by an augmented Lagrangian on
  regret_i = max over misreports b' of u_i(b', b_{-i}) - u_i(c_i, b_{-i}),  u = p - c x,
  budget violation = max(sum_i p_i - B, 0).
Misreports are an exhaustive grid plus fresh random points each step (the grid is cheap
for one-dimensional types, so no inner gradient ascent is needed). Allocations are
lotteries; the buyer's value is the multilinear extension (independent lotteries).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class RegretNet(nn.Module):
  hidden: int = 32

  @nn.compact
  def __call__(self, z_NxF, pair_NxNxQ, bids_PxN):
    p_, n = bids_PxN.shape
    h = self.hidden
    zb = jnp.concatenate([jnp.broadcast_to(z_NxF[None], (p_, n, z_NxF.shape[1])),
                          bids_PxN[:, :, None]], axis=-1)
    e = nn.gelu(nn.Dense(h)(nn.gelu(nn.Dense(h)(zb))))                 # P,N,H
    wpair = nn.Dense(h)(nn.gelu(nn.Dense(h)(pair_NxNxQ)))              # N,N,H
    others = (1.0 - jnp.eye(n))[..., None] / max(n - 1, 1)
    agg = jnp.einsum("ijh,pjh->pih", wpair * others, e)
    o = nn.Dense(2)(nn.gelu(nn.Dense(h)(jnp.concatenate([e, agg], axis=-1))))
    x = nn.sigmoid(o[..., 0])
    pay = x * bids_PxN + x * nn.softplus(o[..., 1] - 1.0) * 0.5
    return x, pay


def init_params(rng, model: RegretNet, n: int, n_feat: int = 4, n_pair: int = 2):
  return model.init(rng, jnp.zeros((n, n_feat)), jnp.zeros((n, n, n_pair)),
                    jnp.zeros((1, n)))["params"]


def misreport_utilities(out_fn, costs_N, misreports_NxG):
  """u_i when i bids each misreport (others truthful) and when truthful: (N x G, N).

  `out_fn(bids_PxN) -> (x_PxN, p_PxN)`; all N*G + 1 profiles go through one call.
  """
  n, g = misreports_NxG.shape
  eye = jnp.eye(n, dtype=bool)
  prof = jnp.where(eye[:, None, :], misreports_NxG[:, :, None], costs_N[None, None, :])
  prof = jnp.concatenate([prof.reshape(n * g, n), costs_N[None]], axis=0)
  x, p = out_fn(prof)
  u_all = p - costs_N[None] * x
  u_true = u_all[-1]
  u_mis = u_all[:-1].reshape(n, g, n)
  u_mis_NxG = jnp.einsum("igi->ig", u_mis)
  return u_mis_NxG, u_true, (x[-1], p[-1])


def regret(out_fn, costs_N, misreports_NxG):
  """Per-seller regret max(0, max_g u_i(b'_g) - u_i(c_i)) and the truthful outcome."""
  u_mis, u_true, truthful = misreport_utilities(out_fn, costs_N, misreports_NxG)
  return jnp.maximum(jnp.max(u_mis, axis=1) - u_true, 0.0), truthful
