"""BFMNet: truthful budget-feasible procurement menus -- RegretNet-style neural baseline.

The approximate neural baseline the paper compares against (Duetting et al.'s RegretNet,
adapted to procurement): a permutation-equivariant network maps the context and *all*
bids, own bid included, to an allocation probability x_i in [0, 1] and a payment p_i.
IR holds ex post by construction: a winner of the lottery is paid
pi_i = b_i + softplus(.) / 2 >= b_i, so the expected payment is p_i = x_i pi_i. DSIC and
budget feasibility are only encouraged by an augmented Lagrangian on
  regret_i = max over misreports b' of u_i(b', b_{-i}) - u_i(c_i, b_{-i}),  u = p - c x,
  budget violation = E[max(sum_{i in S} pi_i - B, 0)] / B  over realised winner sets S.
Misreports, as in Duetting et al. (2019): an inner gradient ascent on the misreported bid
(`ascend_misreports`, from random starting points, projected on [0, COST_MAX]) plus a
coarse grid. The budget is checked *ex post*: S is drawn from the independent lotteries
(relaxed Concrete/Gumbel-sigmoid draws in training so the penalty has a gradient; hard
draws in the audit, `expost_spends`). The buyer's value is the multilinear extension
F(x), the expected value of the realised set.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class RegretNet(nn.Module):
  hidden: int = 32
  with_win_price: bool = False   # also return pi = payment on a win (clone(...=True))

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
    pi = bids_PxN + nn.softplus(o[..., 1] - 1.0) * 0.5       # paid on a win, >= bid
    if self.with_win_price:
      return x, x * pi, pi
    return x, x * pi


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


def ascend_misreports(out_fn, costs_N, init_NxM, steps: int, lr: float, hi: float = 1.0):
  """Gradient ascent on each seller's misreport (others truthful), projected on [0, hi].

  Row i of `init_NxM` holds M starting bids for seller i; each (i, m) is an independent
  ascent on u_i(b'_im, c_{-i}) (one batched call per step). Returns the final misreports,
  without gradient (the outer problem treats the found misreports as fixed, as RegretNet
  does).
  """
  n, m = init_NxM.shape
  eye = jnp.eye(n, dtype=bool)

  def total_util(mis_NxM):
    prof = jnp.where(eye[:, None, :], mis_NxM[:, :, None], costs_N[None, None, :])
    x, p = out_fn(prof.reshape(n * m, n))
    u = (p - costs_N[None] * x).reshape(n, m, n)
    return jnp.sum(jnp.einsum("imi->im", u))   # each (i, m) term depends on mis[i, m] only

  grad = jax.grad(total_util)

  def step(mis, _):
    return jnp.clip(mis + lr * grad(mis), 0.0, hi), None

  mis, _ = jax.lax.scan(step, jax.lax.stop_gradient(init_NxM), None, length=steps)
  return jax.lax.stop_gradient(mis)


def relaxed_spend(x_N, pi_N, rng, samples: int, temp: float):
  """Realised spend sum_{i in S} pi_i for `samples` relaxed (Gumbel-sigmoid) draws of S.
  pi comes from the network directly (dividing p by a vanishing x would give NaN
  gradients)."""
  pi = pi_N
  logit = jnp.log(jnp.clip(x_N, 1e-6, 1.0)) - jnp.log(jnp.clip(1.0 - x_N, 1e-6, 1.0))
  u = jax.random.uniform(rng, (samples,) + x_N.shape, minval=1e-6, maxval=1.0 - 1e-6)
  w = jax.nn.sigmoid((logit[None] + jnp.log(u) - jnp.log1p(-u)) / temp)
  return w @ pi


def expost_spends(x_N, pi_N, rng, samples: int):
  """Realised spends of `samples` hard draws of the independent lotteries: (samples,)."""
  win = jax.random.uniform(rng, (samples,) + x_N.shape) < x_N[None]
  return win.astype(pi_N.dtype) @ pi_N
