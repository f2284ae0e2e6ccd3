"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): model and LM task.

`build(config, vocab_size)` turns config.model into a workbench stack with the 'M' block
registered and the parametrization of `parametrizations.py` (init stds, per-role LR
multipliers, muP's attention sqrt(base head_dim)/head_dim and logit multiplier).
`make_task` is the workbench's next-token LM task (`jaxpapers.nn.lm.make_task`) with one
change: the optimizer is chosen by config.optim.name (AdamW, Adam with a global second
moment, or momentum SGD), which the decomposition study needs and the workbench's task
does not expose (proposed as a shared `optimizer=` hook; until then this is the smallest
copy).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import loop
from jaxpapers.data import text as text_lib
from jaxpapers.nn import attention as attn_lib
from jaxpapers.nn import blocks as blocks_lib
from jaxpapers.nn import lm
from jaxpapers.nn import params as params_lib
from jaxpapers.nn import stack
from jaxpapers.papers.hybrid_mup import mamba
from jaxpapers.papers.hybrid_mup import parametrizations as par_lib


@dataclasses.dataclass(frozen=True)
class Hybrid:
  """A built hybrid: the stack (shapes only) and one member's numerics.

  `numerics` (see `numerics()`) holds everything SP and the muP variants change: per-role
  init std and LR multipliers, the attention scale and the logit multiplier. They enter
  as values, never as shapes, so the study trains SP and muP members of the same shape
  in one compiled, vmapped program with traced numerics.
  """
  model: stack.Model
  num: dict
  remat: bool = False    # recompute each pattern period in the backward pass (large runs)

  @property
  def specs(self):
    return self.model.specs

  def init(self, rng, num=None):
    return params_lib.init(rng, self.specs, parametrization_of(num or self.num))

  def apply(self, params, tokens_BxT, num=None):
    num = num or self.num

    def kernel(q, k, v, mask, scale=None):
      del scale  # the stack's static choice; this member's (possibly traced) one instead
      return attn_lib.softmax_attention(q, k, v, mask, num["attn_scale"])

    h = self.model.hidden(params, tokens_BxT, kernel=kernel, remat=self.remat)
    return (h @ params["unembed"]) * jnp.asarray(num["logit_mult"], h.dtype)

  def forward(self, params, tokens_BxT, num=None, *, measures=("rms",)):
    """(logits, stats): the same logits as `apply` (checked in the tests), computed block
    by block so that the coordinate check can read every activation's scale:
    stats[name] = root-mean-square over all coordinates (measures 'rms'; with 'l1' also
    stats[name + '/l1'] = mean |x|, microsoft/mup's coordinate-check statistic), averaged
    over the blocks of that kind (per repeat of the pattern's period, as `stack` scans
    them). A Transformer layer 'A' reports its attention and MLP sublayers apart."""
    num = num or self.num
    model, cfg = self.model, self.model.cfg
    B, T = tokens_BxT.shape

    def kernel(q, k, v, mask, scale=None):
      del scale
      return attn_lib.softmax_attention(q, k, v, mask, num["attn_scale"])

    ctx = stack.Context(blocks_lib.default_positions(B, T),
                        attn_lib.make_mask(cfg.mask, T, None), kernel, model.n_residual)
    x = params["embed"][tokens_BxT]
    f32 = lambda a: a.astype(jnp.float32)
    fns = {"rms": lambda a: jnp.sqrt(jnp.mean(jnp.square(f32(a)))),
           "l1": lambda a: jnp.mean(jnp.abs(f32(a)))}

    def measure(out, name, a):
      for m in measures:
        out.setdefault(name if m == "rms" else f"{name}/{m}", []).append(fns[m](a))

    stats = {}
    measure(stats, "embed", x)
    stats = {k: v[0] for k, v in stats.items()}

    def body(x, layer_params):
      s = {}
      for c, p in zip(model.unit, layer_params):
        if c == "M":
          new, internals = mamba.forward(model.blocks["M"].mc, cfg, p, x, collect=True)
          for k, v in internals.items():
            measure(s, k, v)
        elif c == "A":
          mid = stack.attention_sublayer(cfg, p, x, ctx)
          new = stack.mlp_sublayer(cfg, p, mid, ctx)
          measure(s, "attn_out", mid - x)
          measure(s, "mlp_out", new - mid)
        else:
          new = model.blocks[c].apply(cfg, p, x, ctx)
          measure(s, _KIND[c], new - x)
        x = new
      return x, {k: jnp.mean(jnp.stack(v)) for k, v in s.items()}

    if model.repeats == 1:
      x, s = body(x, jax.tree.map(lambda a: a[0], params["layers"]))
    else:
      x, s = jax.lax.scan(body, x, params["layers"])
      s = jax.tree.map(jnp.mean, s)
    stats.update(s)
    h = blocks_lib.rms_norm(x, params["final_norm"], cfg.norm_eps)
    logits = (h @ params["unembed"]) * jnp.asarray(num["logit_mult"], h.dtype)
    last = {}
    measure(last, "logits", logits)
    stats.update({k: v[0] for k, v in last.items()})
    return logits, stats

  def lr_mults(self, num=None):
    num = num or self.num
    return jax.tree.map(lambda s: num["lr"][par_lib.role(s)], self.specs,
                        is_leaf=params_lib.is_spec)

  @property
  def decay_mask(self):
    return par_lib.decay_mask(self.specs)


_KIND = {"*": "attn_out", "-": "mlp_out"}


def parametrization_of(num) -> params_lib.Parametrization:
  """A workbench Parametrization reading (possibly traced) per-role values from `num`:
  a 'normal' spec's std is num['std'][role]; a 'uniform' (kaiming) spec's is
  num['kstd'][role] / sqrt(3 fan_in), i.e. PyTorch's default Linear init times kstd."""
  def init_std(s):
    r = par_lib.role(s)
    if s.init == "uniform":
      return s.std_mult * num["kstd"][r] / math.sqrt(3.0 * s.fan_in)
    return s.std_mult * num["std"][r]
  return params_lib.Parametrization("numerics", init_std, lambda s: num["lr"][par_lib.role(s)])


def d_state(config) -> int:
  m = config.model
  if m.state_scaling == "fixed":
    return m.d_state
  if m.state_scaling == "proportional":
    return max(1, round(m.d_state * m.dim / m.base_width))
  raise ValueError(f"unknown model.state_scaling {m.state_scaling!r}; expected 'fixed' or "
                   "'proportional'")


def numerics(variant: str, optimizer: str, width: int, base_width: int, n_heads: int, *,
             d_state: int, base_state: int, std: float = 0.02, d_conv: int = 4) -> dict:
  """Per-role init std / LR multipliers and the scalar multipliers of one member."""
  del d_conv  # the conv's kaiming std reads its fan-in from the spec
  table, logit_mult = par_lib.rules(variant, width, base_width, d_state=d_state,
                                    base_state=base_state, optimizer=optimizer)
  r = base_width / width
  head_dim, base_head_dim = width / n_heads, base_width / n_heads

  def kaiming_mult(k, m):
    # SP: kaiming at the actual width. muP: m x SP's std at the base width, where a
    # growing fan-in was fan_in * r, i.e. m / sqrt(r) x kaiming at the actual width.
    if variant == "sp":
      return 1.0
    return m / math.sqrt(r) if k in par_lib.GROWING_FAN_IN else m

  return {"std": {k: std * v[0] for k, v in table.items()},
          "kstd": {k: kaiming_mult(k, v[0]) for k, v in table.items()},
          "lr": {k: v[1] for k, v in table.items()},
          "logit_mult": logit_mult,
          # SP: 1/sqrt(head_dim); muP: sqrt(base head_dim)/head_dim (1/head_dim scaling,
          # equal to SP at the base width, microsoft/mup's attn_mult)
          "attn_scale": (1.0 / math.sqrt(head_dim) if variant == "sp"
                         else math.sqrt(base_head_dim) / head_dim),
          "opt_kind": par_lib.OPTIMIZERS.index(optimizer)}


def build(config, vocab_size: int) -> Hybrid:
  m = config.model
  n = d_state(config)
  if m.dim % m.n_heads:
    raise ValueError(f"model.dim={m.dim} is not divisible by model.n_heads={m.n_heads}")
  rule = config.optim.get("decay_rule", "lr")
  if rule not in params_lib.DECAY_RULES:
    raise ValueError(f"unknown optim.decay_rule {rule!r}; expected one of "
                     f"{params_lib.DECAY_RULES}")
  if m.parametrization not in par_lib.VARIANTS:
    raise ValueError(f"unknown model.parametrization {m.parametrization!r}; expected one of "
                     f"{par_lib.VARIANTS}")
  cfg = stack.StackConfig(
      vocab_size=vocab_size, dim=m.dim, pattern=m.pattern, n_heads=m.n_heads,
      mlp="swiglu", positions=m.positions, max_len=max(1024, config.data.seq_len))
  mc = mamba.MambaConfig(d_state=n, expand=m.expand, d_conv=m.d_conv,
                         discretization=m.discretization, scan=m.scan,
                         scan_chunk=m.get("scan_chunk", 0))
  model = stack.build(cfg, mamba.blocks(mc))
  num = numerics(m.parametrization, config.optim.name, m.dim, m.base_width, m.n_heads,
                 d_state=n, base_state=m.d_state, std=m.init_std, d_conv=m.d_conv)
  return Hybrid(model, num, remat=m.get("remat", False))


def n_params(hybrid: Hybrid) -> int:
  return sum(int(np.prod(s.shape)) for s in jax.tree.leaves(
      hybrid.model.specs, is_leaf=params_lib.is_spec))


def optimizer(config, hybrid: Hybrid, lr):
  o = config.optim
  return par_lib.optimizer(
      o.name, lm.schedule(config, lr, config.train.steps), multipliers=hybrid.lr_mults(),
      mask=hybrid.decay_mask, b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay,
      momentum=o.momentum, clip_norm=o.clip_norm or None,
      decay_rule=o.get("decay_rule", "lr"))


def make_task(config, data: text_lib.TokenData, hybrid: Hybrid, *, seed: int | None = None,
              hparams: dict | None = None,
              objective: Callable = lm.next_token_nats) -> loop.Task:
  """The workbench's next-token LM Task with this paper's optimizer (config.optim.name)."""
  return lm.make_task(config, data, hybrid, seed=seed, hparams=hparams, objective=objective,
                      make_optimizer=optimizer)
