"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): THE table of rules.

Every parameter of a hybrid carries a *role* (a finer label than the workbench's class):

  embedding  token table                         (TP-V "input weights")
  hidden     every matrix whose fan-in grows with width: attention q/k/v/o, MLP, Mamba
             in/out projections, x_proj's Delta part and dt_proj (dt_rank = d/16 grows)
  output     the unembedding (TP-V "output weights")
  vector     RMSNorm gains
  ssm_b      x_proj's B part (d_inner -> d_state)
  ssm_c      x_proj's C part (d_inner -> d_state)
  conv       the depthwise causal conv's weight of a Mamba block (fan-in d_conv = 4, fixed)
  conv_bias  its bias (PyTorch's default init U(+-1/sqrt(d_conv)), as Mamba keeps it)
  ssm_vec    per-channel SSM vectors: A_log, D, dt bias

A parametrization maps (role, width ratio, state ratio) -> (init std multiplier, Adam LR
multiplier), all relative to a base model of width `base_width` where every variant
equals SP (r = base_width / width, q = base_state / d_state). The multiplier applies to
SP's std at the base width, s0: 0.02 for the Transformer layers' matrices (GPT-2), the
kaiming-uniform 1/sqrt(3 fan_in_base) for Mamba's Linears (its reference init):

  variant    hidden          output (x logit mult r)  ssm_b           ssm_c                 others
  sp         SP, x1          0.02, x1, mult 1         SP, x1          SP, x1                O(1)
  mup        s0 r^.5, xr     0.02, x1, mult r         as hidden       as hidden             O(1)
  mup_shape  as mup          as mup                   s0 r, xr        s0 r, xr              O(1)
  mup_ssm    as mup          as mup                   as hidden       s0 (rq)^.5, x rq      O(1)

(SP keeps 0.02 at every width for the Transformer's matrices and kaiming, 1/sqrt(3 fan_in)
at the actual width, for Mamba's; for a kaiming-initialized hidden matrix muP's s0 r^.5
is the same 1/sqrt(3 fan_in), so muP changes only its LR.)

- `mup` is the original muP prescription as practitioners apply it to Mamba (Tensor
  Programs V, arXiv 2203.03466, Table 3 for Adam; every linear layer inside a block is a
  hidden weight, non-linear-layer parameters are vector-like), with muP's attention
  sqrt(base head_dim)/head_dim (microsoft/mup's attn_mult: SP's 1/sqrt(head_dim) at the
  base width, 1/head_dim scaling) and the output multiplier 1/width_mult on the logits
  (microsoft/mup's MuReadout form; equivalent under Adam to readout init std 0.02 r and
  LR x r).
- `mup_shape` applies Table 3 strictly by tensor shape: at a fixed state size the
  B/C projections have a growing fan-in and a fixed fan-out, i.e. they are
  "output weights" (init var ~ 1/fan_in^2, Adam LR ~ 1/fan_in).
- `mup_ssm` is the SSM-specific variant for ZOH at proportional state size (the theory
  regime of Vankadara et al. 2024, "On Feature Learning in Structured State Space
  Models"): d_state grows with width (model.state_scaling='proportional'), B is a hidden
  weight, and y = sum_n C_n h_n is treated as a readout over the growing state, so C
  gets an extra 1/d_state in its Adam LR and 1/d_state in its init variance. The exact
  exponents are our derivation of that argument (the paper's table was not available
  offline); at fixed state size (q = 1) it reduces to `mup`.

The `sgd` optimizer uses Table 3's SGD column instead (hidden x1, vector-like and input
weights x width_mult, readout with the logit multiplier x width_mult), so the
decomposition study compares each optimizer under its own muP.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax

from jaxpapers.nn import params as params_lib
from jaxpapers.nn.params import ParamSpec

ROLES = ("embedding", "hidden", "output", "vector", "ssm_b", "ssm_c", "conv", "conv_bias",
         "ssm_vec")
# roles whose fan-in grows with width (a kaiming init's std scales as width^-1/2 there)
GROWING_FAN_IN = ("hidden", "output", "ssm_b", "ssm_c")
VARIANTS = ("sp", "mup", "mup_shape", "mup_ssm")
OPTIMIZERS = ("adamw", "adam_global", "sgd")


@dataclasses.dataclass(frozen=True)
class RoleSpec(ParamSpec):
  """A workbench ParamSpec with the finer role this paper's table keys on."""
  role: str = ""

  def __post_init__(self):
    super().__post_init__()
    if self.role and self.role not in ROLES:
      raise ValueError(f"unknown parameter role {self.role!r}; expected one of {ROLES}")


def role(spec: ParamSpec) -> str:
  """The spec's role; the workbench's plain specs map class -> role ('ssm' -> ssm_vec)."""
  r = getattr(spec, "role", "") or spec.cls
  return "ssm_vec" if r == "ssm" else r


def rules(variant: str, width: int, base_width: int, *, d_state: int = 16,
          base_state: int = 16, optimizer: str = "adamw"):
  """{role: (init std multiplier, LR multiplier)} and the logit multiplier.

  The single place where every parametrization x optimizer is defined. The std
  multipliers apply to SP's std AT THE BASE WIDTH: 0.02 for normal-initialized
  parameters (embedding, unembedding, the Transformer layers), PyTorch's kaiming-uniform
  1/sqrt(3 fan_in_base) for Mamba's Linears and conv (`model.numerics` turns that into
  the std at the actual width).
  """
  if variant not in VARIANTS:
    raise ValueError(f"unknown parametrization {variant!r}; expected one of {VARIANTS}")
  if optimizer not in OPTIMIZERS:
    raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {OPTIMIZERS}")
  r = base_width / width
  q = base_state / d_state
  table = {k: (1.0, 1.0) for k in ROLES}
  logit_mult = 1.0
  if variant != "sp":
    logit_mult = r
    table["hidden"] = (math.sqrt(r), r)
    table["ssm_b"] = table["hidden"]
    table["ssm_c"] = table["hidden"]
    if variant == "mup_shape":
      table["ssm_b"] = (r, r)
      table["ssm_c"] = (r, r)
    elif variant == "mup_ssm":
      table["ssm_c"] = (math.sqrt(r * q), r * q)
    if optimizer == "sgd":
      # TP-V Table 3, SGD column: hidden LR O(1); input weights, vectors and (in the
      # logit-multiplier form) the readout LR ~ width.
      table = {k: (s, 1.0 if k in ("hidden", "ssm_b", "ssm_c") else 1.0 / r)
               for k, (s, _) in table.items()}
      if variant == "mup_ssm":
        table["ssm_c"] = (table["ssm_c"][0], q)
  return table, logit_mult


DECAYED = ("hidden", "output", "ssm_b", "ssm_c", "conv")


def decay_mask(specs):
  """Decoupled weight decay on matrices (as Mamba and Llama training do), not on vectors."""
  return jax.tree.map(lambda s: role(s) in DECAYED,
                      specs, is_leaf=params_lib.is_spec)


# --- optimizers -------------------------------------------------------------------------

def scale_by_global_adam(b1=0.9, b2=0.999, eps=1e-8) -> optax.GradientTransformation:
  """Adam whose second moment is ONE scalar for the whole model: the running mean over
  steps of the mean squared gradient coordinate. Keeps Adam's momentum, bias correction
  and global step-size normalization but removes the per-parameter g/sqrt(v) balance
  (the 'local' condition of the paper's decomposition)."""
  def init(params):
    return {"count": jnp.zeros([], jnp.int32),
            "mu": jax.tree.map(jnp.zeros_like, params),
            "nu": jnp.zeros([], jnp.float32)}

  def update(updates, state, params=None):
    del params
    leaves = jax.tree.leaves(updates)
    n = sum(x.size for x in leaves)
    g2 = sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves) / n
    count = state["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], updates)
    nu = b2 * state["nu"] + (1 - b2) * g2
    c1 = 1 - b1 ** count.astype(jnp.float32)
    c2 = 1 - b2 ** count.astype(jnp.float32)
    denom = jnp.sqrt(nu / c2) + eps
    out = jax.tree.map(lambda m: (m / c1) / denom, mu)
    return out, {"count": count, "mu": mu, "nu": nu}

  return optax.GradientTransformation(init, update)


def optimizer(name: str, schedule, *, multipliers, mask, b1=0.9, b2=0.999, eps=1e-8,
              weight_decay=0.0, momentum=0.9, clip_norm=None,
              decay_rule: str = "lr") -> optax.GradientTransformation:
  """AdamW (per-parameter second moment), Adam with a global second moment, or SGD with
  heavy-ball momentum; per-parameter LR multipliers and decoupled decay for all three.

  decay_rule 'lr' (default; microsoft/mup's MuAdamW and MuSGD keep lr * wd fixed per
  parameter): p -= lr (m_p u_p + wd p); 'lr_mult' (this paper's first study):
  p -= lr m_p (u_p + wd p), i.e. the decay scaled by the width LR multiplier too."""
  if name == "adamw":
    return params_lib.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                            multipliers=multipliers, mask=mask, clip_norm=clip_norm,
                            decay_rule=decay_rule)
  if decay_rule not in params_lib.DECAY_RULES:
    raise ValueError(f"unknown decay_rule {decay_rule!r}; expected one of "
                     f"{params_lib.DECAY_RULES}")
  parts = [optax.clip_by_global_norm(clip_norm)] if clip_norm else []
  if name == "adam_global":
    parts.append(scale_by_global_adam(b1, b2, eps))
  elif name == "sgd":
    parts.append(optax.trace(decay=momentum))
  else:
    raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZERS}")
  decay = [optax.add_decayed_weights(weight_decay, mask)] if weight_decay else []
  scale = [params_lib.scale_by_tree(multipliers)]
  parts += scale + decay if decay_rule == "lr" else decay + scale
  parts.append(optax.scale_by_learning_rate(schedule))
  return optax.chain(*parts)
