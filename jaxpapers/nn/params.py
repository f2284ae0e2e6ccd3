"""Small-LM workbench: parameter classes, per-class init scales and learning-rate multipliers.

Every parameter is declared by a `ParamSpec` (shape, class, fan-in, init kind) before it
exists. A `Parametrization` maps a spec to an init standard deviation and a learning-rate
multiplier, so standard parametrization (SP) and the maximal-update parametrization
(muP, Yang et al. 2022, "Tensor Programs V", arXiv 2203.03466, Table 3 for Adam) differ
only in that map, never in the model. The classes are the ones muP distinguishes:

  embedding  input-like weights (token and position tables): O(1) init and LR
  hidden     matrices whose both dims grow with width: init var ~ 1/fan_in, Adam LR ~ 1/width
  output     the unembedding (readout): init ~ 1/width, Adam LR ~ 1/width
  vector     norms' gains and biases: O(1)
  ssm        state-space-specific parameters (A, dt, D of a Mamba block), kept separate so
             a hybrid's SSM can get its own rule

Init kinds: 'normal' (std from the parametrization), 'uniform' (symmetric, U(+-sqrt(3) std):
PyTorch's default kaiming-uniform Linear init is std = 1/sqrt(3 fan_in)), 'ones', 'zeros',
and 'sample' (values = spec.sampler(u) for u ~ U(0, 1) of the spec's shape, e.g. Mamba's
log-uniform dt bias).

The per-class LR multipliers reach the optimizer as a tree of floats through
`scale_by_tree`, an optax transform placed after the base optimizer (Adam's update is
linear in the LR, so scaling the update by m is the LR times m); `adamw` builds the
whole chain from optax pieces. Decoupled weight decay follows microsoft/mup's MuAdamW by
default: the decay step is lr * wd * p whatever the parameter's LR multiplier (MuAdam
divides a matrix's LR by its width multiplier and multiplies its weight decay by it);
`decay_rule='lr_mult'` scales the decay with the multiplier instead (lr * m * wd * p, as
optax.adamw at the multiplied LR does). Both are the same where every multiplier is 1 (SP).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import optax

CLASSES = ("embedding", "hidden", "output", "vector", "ssm")
INITS = ("normal", "uniform", "ones", "zeros", "sample")
DECAY_RULES = ("lr", "lr_mult")


@dataclasses.dataclass(frozen=True)
class ParamSpec:
  """One parameter before it exists.

  shape: full shape (including any leading layer axis a stack adds);
  cls: one of CLASSES;
  fan_in: the input width the muP rules scale with (None: not width-dependent);
  init: one of INITS ('normal', 'uniform', 'ones', 'zeros', 'sample');
  std_mult: a model-side factor on the init std (e.g. 1/sqrt(2L) for residual outputs);
  sampler: for init='sample', an elementwise map of U(0, 1) draws to the values.
  """
  shape: tuple
  cls: str
  fan_in: int | None = None
  init: str = "normal"
  std_mult: float = 1.0
  sampler: Callable | None = None

  def __post_init__(self):
    if self.cls not in CLASSES:
      raise ValueError(f"unknown parameter class {self.cls!r}; expected one of {CLASSES}")
    if self.init not in INITS:
      raise ValueError(f"unknown init {self.init!r}; expected one of {INITS}")
    if (self.init == "sample") != (self.sampler is not None):
      raise ValueError("ParamSpec: a sampler is given exactly when init='sample'")

  def stacked(self, n: int) -> "ParamSpec":
    """The same parameter for n layers, stacked along a new leading axis."""
    return dataclasses.replace(self, shape=(n,) + tuple(self.shape))


def is_spec(x) -> bool:
  return isinstance(x, ParamSpec)


@dataclasses.dataclass(frozen=True)
class Parametrization:
  """init_std(spec) -> std of a 'normal' init; lr_mult(spec) -> LR multiplier."""
  name: str
  init_std: Callable[[ParamSpec], float]
  lr_mult: Callable[[ParamSpec], float]


def standard(std: float = 0.02) -> Parametrization:
  """SP as GPT-2 / Llama train it: normal(std) everywhere (times the model's std_mult), LR x1."""
  return Parametrization("standard", lambda s: std * s.std_mult, lambda s: 1.0)


def mup(width: int, base_width: int, std: float = 0.02) -> Parametrization:
  """muP for Adam relative to a base model of `base_width` (where it equals SP).

  With r = base_width / width: hidden matrices init std * sqrt(r) (variance ~ 1/fan_in)
  and LR x r; the output matrix init std * r and LR x r; embeddings, vectors and SSM
  parameters keep SP's init and LR. At width == base_width every multiplier is 1.
  """
  r = base_width / width

  def init_std(s: ParamSpec) -> float:
    mult = {"hidden": math.sqrt(r), "output": r}.get(s.cls, 1.0)
    return std * s.std_mult * mult

  def lr_mult(s: ParamSpec) -> float:
    return r if s.cls in ("hidden", "output") else 1.0

  return Parametrization(f"mup(base={base_width})", init_std, lr_mult)


def per_class(init_std: dict, lr_mult: dict, default_std: float = 0.02) -> Parametrization:
  """Explicit per-class constants: {'hidden': 0.01, ...}; missing classes: default std, LR x1."""
  for d in (init_std, lr_mult):
    for k in d:
      if k not in CLASSES:
        raise ValueError(f"unknown parameter class {k!r}; expected one of {CLASSES}")
  return Parametrization(
      "per_class", lambda s: init_std.get(s.cls, default_std) * s.std_mult,
      lambda s: float(lr_mult.get(s.cls, 1.0)))


def init(rng, specs, parametrization: Parametrization):
  """Parameters for a tree of ParamSpecs.

  All random leaves ('normal', 'uniform', 'sample') are cut, in tree order, from ONE
  standard-normal draw of their total size (one random-bits kernel to compile instead of
  one per shape), then scaled; 'uniform' and 'sample' leaves map their normals z to
  U(0, 1) through the normal CDF, Phi(z) = (1 + erf(z / sqrt 2)) / 2, which is exactly
  uniform. A tree with only 'normal' random leaves draws exactly what it did before the
  other kinds existed.
  """
  leaves, treedef = jax.tree.flatten(specs, is_leaf=is_spec)
  sizes = [math.prod(s.shape) if s.init in _RANDOM else 0 for s in leaves]
  z = jax.random.normal(rng, (max(1, sum(sizes)),), jnp.float32)
  out, at = [], 0
  for s, n in zip(leaves, sizes):
    if s.init == "ones":
      out.append(jnp.ones(s.shape, jnp.float32))
    elif s.init == "zeros":
      out.append(jnp.zeros(s.shape, jnp.float32))
    else:
      zs = z[at:at + n].reshape(s.shape)
      at += n
      if s.init == "normal":
        out.append(parametrization.init_std(s) * zs)
      elif s.init == "uniform":   # U(-sqrt(3) std, sqrt(3) std): 2 Phi(z) - 1 = erf(z / sqrt 2)
        out.append((math.sqrt(3.0) * parametrization.init_std(s))
                   * jax.lax.erf(zs * (1 / math.sqrt(2.0))))
      else:
        u = 0.5 * (1.0 + jax.lax.erf(zs * (1 / math.sqrt(2.0))))
        out.append(jnp.asarray(s.sampler(u), jnp.float32))
  return jax.tree.unflatten(treedef, out)


_RANDOM = ("normal", "uniform", "sample")


def classes(specs):
  """The tree of class names, shaped like the parameters."""
  return jax.tree.map(lambda s: s.cls, specs, is_leaf=is_spec)


def lr_multipliers(specs, parametrization: Parametrization):
  """The tree of per-parameter LR multipliers (Python floats)."""
  return jax.tree.map(lambda s: float(parametrization.lr_mult(s)), specs, is_leaf=is_spec)


def decay_mask(specs, decayed=("hidden", "output")):
  """True for the classes weight decay applies to (default: matrices, not vectors)."""
  return jax.tree.map(lambda s: s.cls in decayed, specs, is_leaf=is_spec)


def scale_by_tree(multipliers) -> optax.GradientTransformation:
  """Multiplies each update leaf by its multiplier (a tree shaped like the params)."""
  def update(updates, params=None):
    del params
    return jax.tree.map(lambda u, m: u * jnp.asarray(m, u.dtype), updates, multipliers)
  return optax.stateless(update)


def adamw(schedule: Callable, *, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
          multipliers=None, mask=None, clip_norm: float | None = None,
          decay_rule: str = "lr"):
  """AdamW (decoupled decay) with per-parameter LR multipliers.

  decay_rule='lr' (default, microsoft/mup's MuAdamW):
    update = -schedule(n) * (m_p * adam_p + weight_decay * p * mask_p)
  decay_rule='lr_mult' (optax.adamw at the multiplied LR):
    update = -schedule(n) * m_p * (adam_p + weight_decay * p * mask_p)
  `schedule` may close over a traced per-member LR (population training). `clip_norm`
  clips the gradient's global norm first.
  """
  if decay_rule not in DECAY_RULES:
    raise ValueError(f"unknown decay_rule {decay_rule!r}; expected one of {DECAY_RULES}")
  parts = []
  if clip_norm:
    parts.append(optax.clip_by_global_norm(clip_norm))
  parts += [optax.scale_by_adam(b1=b1, b2=b2, eps=eps)]
  decay = [optax.add_decayed_weights(weight_decay, mask)] if weight_decay else []
  scale = [scale_by_tree(multipliers)] if multipliers is not None else []
  parts += scale + decay if decay_rule == "lr" else decay + scale
  parts.append(optax.scale_by_learning_rate(schedule))
  return optax.chain(*parts)
