"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

The binarization rules, the layerwise progression schedule and the stochastic partial
masks with soft refresh.

Every binarizable tensor (a binary layer's latent weights, and the activation that feeds
it) carries a mask M. Its forward value is `where(M, sign(x), clip(x, -1, 1))`:
committed entries are hard binary, the rest are clipped reals. How gradients pass
depends on the rule:

  ste         M = 1 always; sign forward, clipped identity backward (BinaryConnect/BNN).
  stompp      STE-free: committed entries pass no gradient (`stop_gradient(sign x)`), the
              others train through the clip. A committed binary activation therefore
              severs the gradient to everything upstream of it: the "gradient blockade".
  stompp_ste  StoMPP forward, with the STE applied to the frozen (committed) entries only,
              so committed entries pass the clipped-identity gradient.
  fp          full-precision reference: real weights, clipped (hardtanh) activations.

Masks. Each tensor holds a random permutation `ranks` of its entries; at progress p in
[0, 1] the entries with rank < floor(p * n) are committed, so the committed fraction is
exactly floor(p n)/n, the committed set grows monotonically, and which entries commit first
is random (stochastic partial mask). Soft refresh: every `refresh_every` steps, a random
`refresh_frac` of the entries exchange their ranks among themselves, so part of the committed
set is re-drawn while the committed fraction stays exactly on schedule (refresh_frac = 1 is
a hard refresh, 0 a fixed nested mask).

Schedule. Binarization happens in the window [start, end] (fractions of training). With
`order=forward` the window is cut into L equal slots and layer l (input to output) ramps
its p from 0 to 1 in slot l; `reverse` runs the slots from output to input; `all` ramps
every layer together over the whole window. After `end` every entry is committed.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

RULES = ("ste", "stompp", "stompp_ste", "fp")
ORDERS = ("forward", "reverse", "all")


def hard_sign(x):
  """sign with sign(0) = +1, so every committed entry is exactly +-1."""
  return jnp.where(x >= 0, 1.0, -1.0).astype(x.dtype)


def binarize(x, mask, rule: str, is_weight: bool):
  """Forward value and gradient path of a binarizable tensor under `rule`.

  `mask` is boolean and broadcasts against x (activation masks have no batch axis).
  """
  if rule == "fp":
    return x if is_weight else jnp.clip(x, -1.0, 1.0)
  clipped = jnp.clip(x, -1.0, 1.0)
  hard = hard_sign(x)
  if rule == "ste":
    return clipped + jax.lax.stop_gradient(hard - clipped)
  if rule == "stompp":
    return jnp.where(mask, jax.lax.stop_gradient(hard), clipped)
  if rule == "stompp_ste":
    return clipped + jax.lax.stop_gradient(jnp.where(mask, hard - clipped, 0.0))
  raise ValueError(f"unknown binarization rule {rule!r}; use one of {RULES}")


def mask_from_ranks(ranks, p):
  """Entries whose rank is below floor(p * n): exactly that fraction, nested in p."""
  k = jnp.floor(p * ranks.size).astype(jnp.int32)
  return ranks < k


def init_ranks(rng, shape):
  n = 1
  for s in shape:
    n *= s
  return jax.random.permutation(rng, n).astype(jnp.int32).reshape(shape)


def soft_refresh(rng, ranks, frac: float):
  """A random `frac` of the entries exchange ranks among themselves (a permutation stays one)."""
  flat = ranks.reshape(-1)
  n = flat.size
  k_sel, k_perm = jax.random.split(rng)
  chosen = jax.random.bernoulli(k_sel, frac, (n,))
  m = chosen.sum()
  big = jnp.iinfo(jnp.int32).max
  # The chosen entries' rank values in ascending order occupy the first m slots...
  pool = jnp.sort(jnp.where(chosen, flat, big))
  # ...and the chosen entries in random order occupy the first m slots of `order`.
  order = jnp.argsort(jnp.where(chosen, jax.random.uniform(k_perm, (n,)), 2.0))
  first_m = jnp.arange(n) < m
  new_vals = jnp.where(first_m, pool, flat[order])
  return flat.at[order].set(new_vals).reshape(ranks.shape)


def _ramp(x, shape: str):
  x = jnp.clip(x, 0.0, 1.0)
  if shape == "linear":
    return x
  if shape == "cosine":
    return 0.5 - 0.5 * jnp.cos(jnp.pi * x)
  raise ValueError(f"unknown ramp {shape!r}; use linear or cosine")


def layer_progress(step, total_steps: int, num_layers: int, rule: str, order: str,
                   start: float, end: float, ramp: str = "linear"):
  """Committed fraction p_l for each binary layer l (input to output) at `step`: [L]."""
  if rule == "ste":
    return jnp.ones((num_layers,), jnp.float32)
  if rule == "fp":
    return jnp.zeros((num_layers,), jnp.float32)
  if order not in ORDERS:
    raise ValueError(f"unknown order {order!r}; use one of {ORDERS}")
  t0, t1 = start * total_steps, end * total_steps
  t = (jnp.asarray(step, jnp.float32) - t0) / max(t1 - t0, 1.0)
  layers = jnp.arange(num_layers, dtype=jnp.float32)
  if order == "all":
    return _ramp(t * jnp.ones_like(layers), ramp)
  slot = layers if order == "forward" else num_layers - 1 - layers
  return _ramp(t * num_layers - slot, ramp)
