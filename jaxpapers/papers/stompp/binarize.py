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


def knobs(rule: str, binary_acts: bool = True) -> dict:
  """The rule as numbers, so rules can be vmapped side by side in one program.

  ste_grad: gradient factor on committed entries (1: clipped-identity STE, 0: none);
  fp: 1 for the full-precision reference (real weights, hardtanh activations);
  binary_acts: 0 for binary-weight networks (activations stay hardtanh reals).
  """
  if rule not in RULES:
    raise ValueError(f"unknown binarization rule {rule!r}; use one of {RULES}")
  return {"ste_grad": jnp.float32(rule in ("ste", "stompp_ste")),
          "fp": jnp.float32(rule == "fp"),
          "binary_acts": jnp.float32(bool(binary_acts))}


def binarize_k(x, mask, k: dict, is_weight: bool):
  """Forward value and gradient path of a binarizable tensor under the rule knobs `k`.

  Committed entries are `sg(sign x) + s * (clip x - sg(clip x))`: exactly +-1 forward
  (the added term is x - x = 0 in floating point) and s times the clipped-identity
  gradient backward. With the schedule's masks this gives every rule: STE is all entries
  committed with s = 1, STE-free StoMPP is s = 0, StoMPP+STE-on-frozen is s = 1.
  """
  clipped = jnp.clip(x, -1.0, 1.0)
  hard = hard_sign(x)
  committed = jax.lax.stop_gradient(hard) + k["ste_grad"] * (
      clipped - jax.lax.stop_gradient(clipped))
  out = jnp.where(mask, committed, clipped)
  if is_weight:  # fp keeps the real weight
    return jnp.where(k["fp"] > 0, x, out)
  # fp and binary-weight networks keep real (hardtanh) activations.
  return jnp.where((k["fp"] > 0) | (k["binary_acts"] == 0), clipped, out)


def binarize(x, mask, rule: str, is_weight: bool):
  """`binarize_k` for a rule named by string; `mask` broadcasts against x."""
  if mask is None or rule == "ste":  # STE: every entry is committed, always
    mask = jnp.asarray(rule == "ste")
  return binarize_k(x, mask, knobs(rule), is_weight)


def mask_from_ranks(ranks, p):
  """Entries whose rank is below floor(p * n): exactly that fraction, nested in p."""
  k = jnp.floor(p * ranks.size).astype(jnp.int32)
  return ranks < k


def init_ranks(rng, shape):
  """A uniformly random permutation of 0..n-1 in `shape` (see `init_ranks_tree`)."""
  return init_ranks_tree(rng, {"r": jnp.zeros(shape, jnp.int32)})["r"]


def _segments(leaves):
  """Flat concatenation bookkeeping: segment id and start offset of every entry."""
  sizes = [int(x.size) for x in leaves]
  offsets = [0]
  for n in sizes[:-1]:
    offsets.append(offsets[-1] + n)
  seg = jnp.concatenate([jnp.full((n,), i, jnp.int32) for i, n in enumerate(sizes)])
  return sizes, offsets, seg  # offsets: Python ints (static slices)


def _split(flat, leaves, sizes, offsets):
  return [flat[o:o + n].reshape(x.shape) for x, n, o in zip(leaves, sizes, offsets)]


def init_ranks_tree(rng, tree):
  """A fresh uniformly random permutation for every leaf of `tree` (shapes only), drawn
  with ONE sort over all leaves keyed by (leaf, random 32 bits): the ranks of a leaf's
  keys. Ties (about n^2 / 2^33 likely) are broken by position and stay a permutation.
  One sort instead of one (or several, as jax.random.permutation) per tensor keeps the
  compile of a deep network's init and refresh small."""
  leaves, treedef = jax.tree.flatten(tree)
  if not leaves:
    return tree
  sizes, offsets, seg = _segments(leaves)
  n = seg.size
  bits = jax.random.bits(rng, (n,), jnp.uint32)
  _, _, order = jax.lax.sort((seg, bits, jnp.arange(n, dtype=jnp.int32)), num_keys=2)
  perm = order - jnp.asarray(offsets, jnp.int32)[seg]  # within each segment: a permutation of 0..n_i-1
  return jax.tree.unflatten(treedef, _split(perm, leaves, sizes, offsets))


def soft_refresh_tree(rng, tree, frac):
  """`soft_refresh` of every leaf at once: in each leaf a random `frac` of the entries
  exchange ranks among themselves, done with two sorts over all leaves together."""
  leaves, treedef = jax.tree.flatten(tree)
  if not leaves:
    return tree
  sizes, offsets, seg = _segments(leaves)
  flat = jnp.concatenate([x.reshape(-1) for x in leaves])
  n = flat.size
  k_sel, k_perm = jax.random.split(rng)
  chosen = jax.random.bernoulli(k_sel, frac, (n,))
  big = jnp.iinfo(jnp.int32).max
  iota = jnp.arange(n, dtype=jnp.int32)
  # Per leaf, the chosen entries' rank values in ascending order fill its first m slots...
  _, pool = jax.lax.sort((seg, jnp.where(chosen, flat, big)), num_keys=2)
  # ...and the chosen entries' positions, in random order, fill its first m slots of order.
  _, _, order = jax.lax.sort(
      (seg, jnp.where(chosen, jax.random.uniform(k_perm, (n,)), 2.0), iota), num_keys=2)
  m = jax.ops.segment_sum(chosen.astype(jnp.int32), seg, num_segments=len(leaves))
  first_m = (iota - jnp.asarray(offsets, jnp.int32)[seg]) < m[seg]
  new_vals = jnp.where(first_m, pool, flat[order])
  out = flat.at[order].set(new_vals)
  return jax.tree.unflatten(treedef, _split(out, leaves, sizes, offsets))


def soft_refresh(rng, ranks, frac: float):
  """A random `frac` of the entries exchange ranks among themselves (a permutation stays one)."""
  return soft_refresh_tree(rng, {"r": ranks}, frac)["r"]


def _ramp(x, shape: str):
  x = jnp.clip(x, 0.0, 1.0)
  if shape == "linear":
    return x
  if shape == "cosine":
    return 0.5 - 0.5 * jnp.cos(jnp.pi * x)
  raise ValueError(f"unknown ramp {shape!r}; use linear or cosine")


ORDER_CODES = {"forward": 0, "reverse": 1, "all": 2}


def schedule(rule: str, order: str, start: float, end: float) -> dict:
  """The schedule as numbers (vmappable): mode 0 scheduled, 1 always committed (STE),
  2 never committed (fp); order code; window [start, end] as fractions of training."""
  if order not in ORDERS:
    raise ValueError(f"unknown order {order!r}; use one of {ORDERS}")
  if rule not in RULES:
    raise ValueError(f"unknown binarization rule {rule!r}; use one of {RULES}")
  if not 0.0 <= start < end <= 1.0:
    raise ValueError(f"binarization window needs 0 <= start < end <= 1, got [{start}, {end}]")
  mode = {"ste": 1, "fp": 2}.get(rule, 0)
  return {"mode": jnp.int32(mode), "order": jnp.int32(ORDER_CODES[order]),
          "start": jnp.float32(start), "end": jnp.float32(end)}


def progress_k(step, total_steps: int, num_layers: int, sched: dict, ramp: str = "linear"):
  """Committed fraction p_l for each binary layer l (input to output) at `step`: [L]."""
  t0, t1 = sched["start"] * total_steps, sched["end"] * total_steps
  t = (jnp.asarray(step, jnp.float32) - t0) / jnp.maximum(t1 - t0, 1.0)
  layers = jnp.arange(num_layers, dtype=jnp.float32)
  slot = jnp.where(sched["order"] == 1, num_layers - 1 - layers, layers)
  p = jnp.where(sched["order"] == 2, _ramp(t * jnp.ones_like(layers), ramp),
                _ramp(t * num_layers - slot, ramp))
  return jnp.where(sched["mode"] == 1, 1.0, jnp.where(sched["mode"] == 2, 0.0, p))


def layer_progress(step, total_steps: int, num_layers: int, rule: str, order: str,
                   start: float, end: float, ramp: str = "linear"):
  """`progress_k` for a rule and order named by string."""
  return progress_k(step, total_steps, num_layers, schedule(rule, order, start, end), ramp)
