"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- the quantizer.

LPR constrains the numerical precision of the weights and biases of chosen layers, during
training and at inference, to cut a network's capacity to reconstruct rare patterns
(abstract 16). This module is the whole method: a *parameter transform*
`lpr(params) -> params'` that any Flax model can apply before `model.apply`, so every
detector (AE, VAE, DAE, MemAE, Deep SVDD, Deep SAD, MLP classifier) gets LPR without a
special case.

Two number formats (the abstract leaves the format open):
  * "fixed": signed fixed point with `bits` total bits, `int_bits` integer bits and
    `bits - 1 - int_bits` fractional bits: q(w) = clip(round(w / s) * s, -2^I, 2^I - s),
    s = 2^-(bits - 1 - int_bits). The grid is absolute, so small weights collapse to 0.
  * "mantissa": floating point with `bits` explicit mantissa bits (exponent and sign
    kept), i.e. w = 1.f * 2^e with f rounded to `bits` binary digits: relative error at
    most 2^-(bits+1); bfloat16 has 7 such bits, float16 10, float32 23.

Gradients pass the rounding with the straight-through estimator (Bengio et al. 2013):
the forward pass uses q(w), the backward pass treats dq/dw as 1 everywhere (also where
clipping happened), so the full-precision master weights keep receiving the gradient of
the loss at the quantized point, as in quantization-aware training. `bits` may be a traced
array; `bits <= 0` means "LPR off" (identity), which lets one compiled program vmap over
{off, 2, 4, 8, ...} bits.
"""
from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp

MODES = ("fixed", "mantissa")


def quantize_fixed(w: jax.Array, bits, int_bits: int = 1) -> jax.Array:
  """Rounds to the signed fixed-point grid with `bits` total and `int_bits` integer bits."""
  frac = jnp.asarray(bits, jnp.float32) - 1.0 - int_bits
  step = jnp.exp2(-frac).astype(w.dtype)
  hi = (2.0 ** int_bits - step).astype(w.dtype)
  lo = jnp.asarray(-(2.0 ** int_bits), w.dtype)
  return jnp.clip(jnp.round(w / step) * step, lo, hi)


def quantize_mantissa(w: jax.Array, bits) -> jax.Array:
  """Keeps `bits` explicit mantissa bits of each float32, sign and exponent unchanged.

  Rounds to nearest (ties away from zero) on the IEEE-754 bit pattern: add half of the
  dropped range, clear the dropped bits; a mantissa carry correctly bumps the exponent.
  Bit arithmetic instead of frexp/ldexp keeps the compiled program small.
  """
  if w.dtype != jnp.float32:
    raise ValueError(f"mantissa LPR expects float32 parameters, got {w.dtype}")
  drop = jnp.clip(23 - jnp.asarray(bits, jnp.int32), 1, 23).astype(jnp.uint32)
  i = jax.lax.bitcast_convert_type(w, jnp.uint32)
  half = jnp.left_shift(jnp.uint32(1), drop - 1)
  mask = ~(jnp.left_shift(jnp.uint32(1), drop) - 1)
  q = jax.lax.bitcast_convert_type((i + half) & mask, jnp.float32)
  return jnp.where(jnp.asarray(bits) >= 23, w, q)


def quantize(w: jax.Array, bits, mode: str = "fixed", int_bits: int = 1) -> jax.Array:
  """The raw (non-differentiable) quantizer q(w); identity where `bits <= 0`."""
  if mode == "fixed":
    q = quantize_fixed(w, jnp.maximum(bits, int_bits + 1), int_bits)
  elif mode == "mantissa":
    q = quantize_mantissa(w, jnp.maximum(bits, 0))
  else:
    raise ValueError(f"unknown LPR mode {mode!r}; expected one of {MODES}")
  return jnp.where(jnp.asarray(bits) > 0, q, w)


def quantize_ste(w: jax.Array, bits, mode: str = "fixed", int_bits: int = 1) -> jax.Array:
  """q(w) forward, identity backward (straight-through estimator)."""
  return w + jax.lax.stop_gradient(quantize(w, bits, mode, int_bits) - w)


def path_name(path) -> str:
  """'encoder/Dense_0/kernel' for a pytree key path from Flax params."""
  parts = []
  for k in path:
    name = getattr(k, "key", None)
    if name is None:
      name = getattr(k, "name", None)
    if name is None:
      name = getattr(k, "idx", k)
    parts.append(str(name))
  parts = [p for p in parts if p != "params"]
  return "/".join(parts)


@dataclasses.dataclass(frozen=True)
class LPRSpec:
  """Which parameters LPR quantizes, and how.

  layers: regex searched in each parameter's path ('encoder/Dense_0/kernel'); a match
    means the parameter is quantized. The default ('kernel|bias') is every weight and bias
    of every Dense layer.
  mode: 'fixed' or 'mantissa' (see module docstring).
  int_bits: integer bits of the fixed-point format (range [-2^I, 2^I)).
  """
  layers: str = r"(kernel|bias)$"
  mode: str = "fixed"
  int_bits: int = 1
  # Per-layer precision: regexes of layer groups. When set, `bits` given to `apply_lpr`
  # is a vector with one width per group (0 = that group stays float32), and `layers`
  # is ignored. A parameter belongs to the first group whose regex it matches.
  groups: tuple = ()

  def __post_init__(self):
    if self.mode not in MODES:
      raise ValueError(f"unknown LPR mode {self.mode!r}; expected one of {MODES}")
    re.compile(self.layers)
    for g in self.groups:
      re.compile(g)

  def selected(self, params) -> list[str]:
    """Paths of the parameters this spec quantizes (for logging and tests)."""
    rx = re.compile(self.layers)
    leaves = jax.tree_util.tree_leaves_with_path(params)
    return [path_name(p) for p, _ in leaves if rx.search(path_name(p))]


def apply_lpr(params, bits, spec: LPRSpec):
  """The LPR parameter transform: quantizes (with STE) the leaves `spec.layers` selects.

  `bits` is a scalar (possibly traced); `bits <= 0` returns the parameters unchanged in
  value, so "with LPR" and "without LPR" can share one compiled, vmapped program.
  """
  if spec.groups:
    return _apply_groups(params, bits, spec)
  rx = re.compile(spec.layers)

  def one(path, w):
    if rx.search(path_name(path)) and jnp.issubdtype(w.dtype, jnp.floating):
      return quantize_ste(w, bits, spec.mode, spec.int_bits)
    return w

  return jax.tree_util.tree_map_with_path(one, params)


def _apply_groups(params, bits, spec: LPRSpec):
  """Per-layer LPR: group g's parameters get bits[g] (<= 0: unchanged)."""
  bits = jnp.asarray(bits)
  if bits.shape != (len(spec.groups),):
    raise ValueError(f"per-layer LPR needs one bit width per group ({len(spec.groups)}), "
                     f"got bits of shape {bits.shape}")
  rxs = [re.compile(g) for g in spec.groups]

  def one(path, w):
    name = path_name(path)
    for g, rx in enumerate(rxs):
      if rx.search(name) and jnp.issubdtype(w.dtype, jnp.floating):
        return quantize_ste(w, bits[g], spec.mode, spec.int_bits)
    return w

  return jax.tree_util.tree_map_with_path(one, params)


def layer_regex(layer: str, depth: int) -> str:
  """Regex of one named layer: 'encoder.i', 'decoder.i' (i may be negative) or 'memory'.

  `depth` = number of hidden widths; encoder and decoder each have depth + 1 Dense
  layers (encoder.-1 is the code layer, decoder.-1 the output layer). Detectors with a
  single network (Deep SVDD/SAD, MLP, DevNet) name their layers 'encoder.i' too.
  """
  if layer == "memory":
    return r"^memory$"
  part, _, idx = layer.partition(".")
  n = depth + 1
  try:
    i = int(idx)
  except ValueError:
    i = None
  if part not in ("encoder", "decoder") or i is None or not -n <= i < n:
    raise ValueError(f"unknown layer {layer!r}; expected encoder.i or decoder.i with "
                     f"-{n} <= i < {n}, or memory")
  i %= n
  if part == "encoder":
    return rf"^(encoder/)?Dense_{i}/(kernel|bias)$"
  return rf"^decoder/Dense_{i}/(kernel|bias)$"


def parse_layer_bits(items, depth: int):
  """('encoder.0:2', 'decoder.-1:4') -> (group regexes, bit widths)."""
  groups, widths = [], []
  for item in items:
    layer, sep, b = item.partition(":")
    try:
      width = int(b)
    except ValueError:
      width = -1
    if not sep or width < 1:
      raise ValueError(f"lpr_bits item {item!r}: expected <layer>:<bits>, e.g. encoder.0:2")
    groups.append(layer_regex(layer.strip(), depth))
    widths.append(width)
  return tuple(groups), tuple(widths)
