"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- the LoFT optimizer.

LoFT (Tastan et al., "LoFT: Low-Rank Adaptation That Behaves Like Full Fine-Tuning")
keeps LoRA's parametrization and changes the optimizer so that the low-rank factors
follow what AdamW would do to the full matrix:
1. alternating updates: B on even steps (it starts at zero), A on odd steps;
2. gradient rescaling by the other factor's inverse Gram matrix (a Riemannian /
   ScaledGD step): g_A <- g_A (B B^T + 1e-6 I)^-1, g_B <- (A^T A + 1e-8 I)^-1 g_B;
3. momentum re-projection when the other factor moved: the first moment lives in the
   factor's coordinates and is mapped by R = Gram^-1 (new^T old) so that the implied
   full-matrix momentum is kept;
4. second-moment re-projection: per row of the factor the r x r outer products of the
   rescaled gradient are accumulated, from which the full-matrix (in, out) second
   moment is recovered exactly; the full-matrix Adam direction m_full / (sqrt(v_full)+eps)
   is projected back onto the factor.
Kernels are (in, out) with dK = A @ B (the authors' code writes dW = B_t A_t).
Deviations, both small: everything in a step uses the factors from the step's start
(the reference code re-reads A after updating it within the same step), and the r x r
row products are re-projected as R P R^T, the transform implied by g -> R g (the
reference writes R^T P R). Non-LoRA trainables are not supported (we have none).
Returns the unit-learning-rate direction; the caller multiplies by -lr * schedule.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class LoftState(NamedTuple):
  count: jax.Array
  mA: dict
  mB: dict
  pA: dict
  pB: dict
  oldA: dict
  oldB: dict


def _per_module(params, fn):
  return {name: fn(p) for name, p in params.items()}


def loft(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-4) -> optax.GradientTransformationExtraArgs:
  """LoFT-AdamW direction for a tree {module: {"A": (L, in, r), "B": (L, r, out)}}."""

  def init(params):
    for name, p in params.items():
      if set(p) != {"A", "B"}:
        raise ValueError(f"LoFT needs exactly LoRA factors A, B; module {name} has {set(p)}")
    zeros = lambda k: _per_module(params, lambda p: jnp.zeros_like(p[k]))
    pA = _per_module(params, lambda p: jnp.zeros(p["A"].shape + (p["A"].shape[-1],)))
    pB = _per_module(params, lambda p: jnp.zeros(
        p["B"].shape[:-2] + (p["B"].shape[-1], p["B"].shape[-2], p["B"].shape[-2])))
    return LoftState(jnp.zeros([], jnp.int32), zeros("A"), zeros("B"), pA, pB,
                     _per_module(params, lambda p: p["A"]),
                     _per_module(params, lambda p: p["B"]))

  def module_step(gA, gB, A, B, mA, mB, pA, pB, oldA, oldB, count):
    r = A.shape[-1]
    eye = jnp.eye(r, dtype=A.dtype)
    sA = jnp.linalg.inv(B @ B.T + 1e-6 * eye)
    sB = jnp.linalg.inv(A.T @ A + 1e-8 * eye)
    gA, gB = gA @ sA, sB @ gB
    has_old = count > 0
    RA = sA @ (B @ oldB.T)          # m_A^T <- RA m_A^T keeps B m_A^T fixed
    RB = (oldA.T @ A) @ sB          # m_B^T <- m_B^T RB keeps A m_B fixed
    mA = jnp.where(has_old, mA @ RA.T, mA)
    pA = jnp.where(has_old, jnp.einsum("ab,ibc,dc->iad", RA, pA, RA), pA)
    mB = jnp.where(has_old, RB.T @ mB, mB)
    pB = jnp.where(has_old, jnp.einsum("ba,obc,cd->oad", RB, pB, RB), pB)
    mA = b1 * mA + (1 - b1) * gA
    mB = b1 * mB + (1 - b1) * gB
    pA = b2 * pA + (1 - b2) * gA[:, :, None] * gA[:, None, :]
    gBt = gB.T
    pB = b2 * pB + (1 - b2) * gBt[:, :, None] * gBt[:, None, :]
    t = (count + 1).astype(A.dtype)
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    # A step: full momentum mA @ B, second moment v[i, o] = B[:, o]^T pA[i] B[:, o].
    vA = jnp.maximum(jnp.einsum("iab,ao,bo->io", pA, B, B), 0.0)
    dA = (mA @ B) / (jnp.sqrt(vA / bc2) + eps)
    dA = (dA @ B.T) @ sA / bc1
    # B step: full momentum A @ mB, v[i, o] = A[i]^T pB[o] A[i].
    vB = jnp.maximum(jnp.einsum("oab,ia,ib->io", pB, A, A), 0.0)
    dB = (A @ mB) / (jnp.sqrt(vB / bc2) + eps)
    dB = sB @ (A.T @ dB) / bc1
    update_A = (count % 2) == 1
    dA = jnp.where(update_A, dA, 0.0)
    dB = jnp.where(update_A, 0.0, dB)
    return dA, dB, mA, mB, pA, pB

  def update(updates, state, params=None, **extra):
    del extra
    if params is None:
      raise ValueError("LoFT needs params")
    out, mA, mB, pA, pB = {}, {}, {}, {}, {}
    for name, g in updates.items():
      p = params[name]
      step = jax.vmap(module_step, in_axes=(0,) * 10 + (None,))
      dA, dB, mA[name], mB[name], pA[name], pB[name] = step(
          g["A"], g["B"], p["A"], p["B"], state.mA[name], state.mB[name],
          state.pA[name], state.pB[name], state.oldA[name], state.oldB[name], state.count)
      out[name] = {"A": dA, "B": dB}
    new = LoftState(state.count + 1, mA, mB, pA, pB,
                    _per_module(params, lambda p: p["A"]),
                    _per_module(params, lambda p: p["B"]))
    return out, new

  return optax.GradientTransformationExtraArgs(init, update)
