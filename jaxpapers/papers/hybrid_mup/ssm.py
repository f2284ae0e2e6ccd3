"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): the selective scan.

The S6 recurrence of Mamba (Gu & Dao 2023, arXiv 2312.00752, Algorithm 2 and eq. 2-4):
for every channel d and state index n, with input-dependent step Delta_t (B, T, D),
input matrix B_t (B, T, N) and output matrix C_t (B, T, N), and a diagonal continuous
state matrix A (D, N) with negative entries,

  h_t = Abar_t * h_{t-1} + Bbar_t * x_t,        y_t = sum_n C_t[n] h_t[:, n]

Two discretizations of (A, B) with step Delta:
  exact ZOH       Abar = exp(Delta A),  Bbar = (Delta A)^-1 (exp(Delta A) - 1) Delta B
                  = (exp(Delta A) - 1) / A * B   (A diagonal)            [the theory side]
  simplified ZOH  Abar = exp(Delta A),  Bbar = Delta B   (Euler step for B)
                  [what Mamba's reference kernels compute; the field-standard practice]

The recurrence is a first-order linear one, so it runs as a parallel prefix scan
(`lax.associative_scan`) with the associative operator
  (a1, b1) o (a2, b2) = (a1 a2, a2 b1 + b2)
over (Abar_t, Bbar_t x_t); `scan_sequential` is the step-by-step `lax.scan` of the same
recurrence, used as the reference in tests and selectable for speed on CPU.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

DISCRETIZATIONS = ("simplified", "zoh")


def discretize(delta_BxTxD, a_DxN, b_BxTxN, method: str = "simplified"):
  """(Abar, Bbar) each (B, T, D, N) for a diagonal A and input-dependent Delta and B."""
  dA = delta_BxTxD[..., None] * a_DxN[None, None]
  abar = jnp.exp(dA)
  if method == "simplified":
    bbar = delta_BxTxD[..., None] * b_BxTxN[:, :, None, :]
  elif method == "zoh":
    # expm1(dA) / A keeps precision for small Delta A (where it tends to Delta).
    bbar = (jnp.expm1(dA) / a_DxN[None, None]) * b_BxTxN[:, :, None, :]
  else:
    raise ValueError(f"unknown discretization {method!r}; expected one of {DISCRETIZATIONS}")
  return abar, bbar


def _combine(left, right):
  a1, b1 = left
  a2, b2 = right
  return a1 * a2, a2 * b1 + b2


def scan_associative(abar_BxTxDxN, bx_BxTxDxN):
  """All states h_t (B, T, D, N) from h_0 = 0, as a parallel prefix scan over T."""
  _, h = jax.lax.associative_scan(_combine, (abar_BxTxDxN, bx_BxTxDxN), axis=1)
  return h


def scan_sequential(abar_BxTxDxN, bx_BxTxDxN):
  """The same states, one time step after the other (the recurrence as written)."""
  def step(h, ab):
    a, b = ab
    h = a * h + b
    return h, h
  h0 = jnp.zeros_like(bx_BxTxDxN[:, 0])
  _, hs = jax.lax.scan(step, h0, (jnp.moveaxis(abar_BxTxDxN, 1, 0),
                                  jnp.moveaxis(bx_BxTxDxN, 1, 0)))
  return jnp.moveaxis(hs, 0, 1)


SCANS = {"associative": scan_associative, "sequential": scan_sequential}


def selective_scan(x_BxTxD, delta_BxTxD, a_DxN, b_BxTxN, c_BxTxN, d_D, *,
                   method: str = "simplified", scan: str = "associative"):
  """y (B, T, D) of the selective SSM with skip D: y_t = C_t . h_t + D * x_t."""
  if scan not in SCANS:
    raise ValueError(f"unknown scan {scan!r}; expected one of {sorted(SCANS)}")
  abar, bbar = discretize(delta_BxTxD, a_DxN, b_BxTxN, method)
  h = SCANS[scan](abar, bbar * x_BxTxD[..., None])
  y = jnp.einsum("btdn,btn->btd", h, c_BxTxN)
  return y + x_BxTxD * d_D[None, None]
