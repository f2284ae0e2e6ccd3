"""Small-LM workbench: a language model built from a layer pattern string.

A model is embeddings -> a sequence of residual blocks -> final RMSNorm -> unembedding.
The blocks are named by one letter each, read from a pattern string in the notation of
hybrid papers (Nemotron-H, arXiv 2504.03624, writes its stacks as strings such as
"M-M-M*-"): every letter is looked up in a dict of `BlockType`s. The defaults are

  'A'  a pre-norm Transformer layer: attention sublayer, then MLP sublayer (Llama, GPT-2)
  '*'  an attention sublayer alone (Nemotron-H's '*')
  '-'  an MLP sublayer alone (Nemotron-H's '-')

Where new blocks register: a caller passes `blocks={**stack.DEFAULT_BLOCKS, "M": mamba}`
to `build`; no central table is edited, and an unknown letter is an error naming the
registered ones. A BlockType declares its parameters as `ParamSpec`s (class, fan-in:
see `params.py`) and applies them as a pure function `apply(cfg, p, x_BxTxD, ctx)`.

Compile time: the pattern's shortest period (e.g. "A" for "AAAA", "MM*" for "MM*MM*")
is unrolled once inside a `lax.scan` over its repeats, with each position's parameters
stacked along a leading repeat axis; a pattern without repetition runs unrolled.
`unroll=True` unrolls everything (XLA's cost analysis counts a loop body once, so FLOP
counts need it).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping, NamedTuple

import jax

from jaxpapers.nn import attention as attn_lib
from jaxpapers.nn import blocks
from jaxpapers.nn import params as params_lib
from jaxpapers.nn.params import ParamSpec


@dataclasses.dataclass(frozen=True)
class StackConfig:
  vocab_size: int
  dim: int
  pattern: str = "AAAA"
  n_heads: int = 4
  n_kv_heads: int | None = None     # None: n_heads (plain multi-head attention)
  head_dim: int | None = None       # None: dim // n_heads
  hidden_dim: int | None = None     # MLP width; None: 4*dim (gelu), 8/3*dim rounded to 8 (swiglu)
  mlp: str = "swiglu"               # 'swiglu' | 'gelu'
  positions: str = "rope"           # 'rope' | 'learned' | 'none'
  max_len: int = 1024               # rows of the learned position table
  mask: str = "causal"              # 'causal' (decoder) | 'bidirectional' (encoder, diffusion)
  kernel: str = "softmax"           # a key of attention.KERNELS, or pass kernel= to apply
  attn_scale: str = "sqrt"          # 'sqrt': 1/sqrt(head_dim); 'linear': muP's ~1/head_dim
  rope_theta: float = 10000.0
  norm_eps: float = 1e-5
  tie_embeddings: bool = False
  logit_mult: float = 1.0           # multiplies the logits (muP's output multiplier)
  # muP's base head_dim: 'linear' scales sqrt(base)/head_dim, which is SP's 1/sqrt(head_dim)
  # at the base width (microsoft/mup's attn_mult); None: 1/head_dim
  attn_base_head_dim: int | None = None

  def __post_init__(self):
    for field, allowed in (("mlp", ("swiglu", "gelu")),
                           ("positions", ("rope", "learned", "none")),
                           ("mask", ("causal", "bidirectional")),
                           ("attn_scale", ("sqrt", "linear"))):
      if getattr(self, field) not in allowed:
        raise ValueError(f"StackConfig.{field}={getattr(self, field)!r}; expected one of {allowed}")
    if not self.pattern:
      raise ValueError("StackConfig.pattern is empty; give at least one block letter")

  @property
  def kv_heads(self) -> int:
    return self.n_kv_heads or self.n_heads

  @property
  def hd(self) -> int:
    return self.head_dim or self.dim // self.n_heads

  @property
  def ffn(self) -> int:
    if self.hidden_dim:
      return self.hidden_dim
    return 4 * self.dim if self.mlp == "gelu" else 8 * (round(self.dim * 8 / 3) // 8)


class Context(NamedTuple):
  """What every block sees besides its parameters and the residual stream.

  `mask` is the dense (B, T, S) mask, or None when the kernel is structured (it then reads
  `mask_kind` and `lengths_B`, and no O(T^2) array is built). `cond` is an optional
  conditioning input (e.g. a diffusion time embedding, (B, C) or (B, T, C)); the default
  blocks ignore it and a paper's own blocks read it.
  """
  positions_BxT: jax.Array
  mask: jax.Array | None
  kernel: Callable
  n_residual: int   # residual branches in the whole stack (for output-projection scaling)
  mask_kind: str = "causal"
  lengths_B: jax.Array | None = None
  cond: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class BlockType:
  """specs(cfg, n_residual) -> {name: ParamSpec} of one layer; apply(cfg, p, x, ctx) -> x.

  `residuals` is how many residual branches the block adds (their output projections
  are initialized with std / sqrt(total branches), GPT-2 style).
  """
  specs: Callable[[StackConfig, int], dict]
  apply: Callable
  residuals: int = 1


# --- the default blocks ---------------------------------------------------------------

def _attention_specs(cfg: StackConfig, n_residual: int) -> dict:
  d, h, k, hd = cfg.dim, cfg.n_heads, cfg.kv_heads, cfg.hd
  out_mult = 1.0 / math.sqrt(n_residual)
  return {"attn_norm": ParamSpec((d,), "vector", init="ones"),
          "q": ParamSpec((d, h * hd), "hidden", d), "k": ParamSpec((d, k * hd), "hidden", d),
          "v": ParamSpec((d, k * hd), "hidden", d),
          "o": ParamSpec((h * hd, d), "hidden", h * hd, std_mult=out_mult)}


def _mlp_specs(cfg: StackConfig, n_residual: int) -> dict:
  d, f = cfg.dim, cfg.ffn
  out_mult = 1.0 / math.sqrt(n_residual)
  s = {"mlp_norm": ParamSpec((d,), "vector", init="ones"),
       "up": ParamSpec((d, f), "hidden", d),
       "down": ParamSpec((f, d), "hidden", f, std_mult=out_mult)}
  if cfg.mlp == "swiglu":
    s["gate"] = ParamSpec((d, f), "hidden", d)
  else:
    s["up_b"] = ParamSpec((f,), "vector", init="zeros")
    s["down_b"] = ParamSpec((d,), "vector", init="zeros")
  return s


def linear_attn_scale(cfg: StackConfig) -> float:
  """muP's attention scale: 1/head_dim, times sqrt(base head_dim) when a base is given."""
  if cfg.attn_base_head_dim is None:
    return 1.0 / cfg.hd
  return math.sqrt(cfg.attn_base_head_dim) / cfg.hd


def attention_sublayer(cfg: StackConfig, p, x_BxTxD, ctx: Context):
  h = blocks.rms_norm(x_BxTxD, p["attn_norm"], cfg.norm_eps)
  scale = None if cfg.attn_scale == "sqrt" else linear_attn_scale(cfg)
  return x_BxTxD + attn_lib.multi_head(
      p, h, n_heads=cfg.n_heads, n_kv_heads=cfg.kv_heads, head_dim=cfg.hd,
      positions_BxT=ctx.positions_BxT, mask=ctx.mask, kernel=ctx.kernel,
      rope_theta=cfg.rope_theta if cfg.positions == "rope" else None, scale=scale,
      mask_kind=ctx.mask_kind, lengths_B=ctx.lengths_B)


def mlp_sublayer(cfg: StackConfig, p, x_BxTxD, ctx: Context):
  del ctx
  h = blocks.rms_norm(x_BxTxD, p["mlp_norm"], cfg.norm_eps)
  if cfg.mlp == "swiglu":
    return x_BxTxD + blocks.swiglu(h, p["gate"], p["up"], p["down"])
  return x_BxTxD + blocks.gelu_mlp(h, p["up"], p["up_b"], p["down"], p["down_b"])


def _transformer_apply(cfg, p, x, ctx):
  return mlp_sublayer(cfg, p, attention_sublayer(cfg, p, x, ctx), ctx)


TRANSFORMER = BlockType(lambda c, n: {**_attention_specs(c, n), **_mlp_specs(c, n)},
                        _transformer_apply, residuals=2)
ATTENTION = BlockType(_attention_specs, attention_sublayer, residuals=1)
MLP = BlockType(_mlp_specs, mlp_sublayer, residuals=1)

DEFAULT_BLOCKS: Mapping[str, BlockType] = {"A": TRANSFORMER, "*": ATTENTION, "-": MLP}


# Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): the first matrix of each pair
# split by output column over the mesh's 'model' axis, the second by input row, so the
# pair needs one all-reduce; attention splits whole heads (q/k/v columns are head-major).
# Specs name the trailing dims; a stacked layer axis or an optimizer copy matches too.
TENSOR_PARALLEL_RULES = (
    (r"(^|/)(q|k|v|gate|up)$", (None, "model")),
    (r"(^|/)up_b$", ("model",)),
    (r"(^|/)(o|down)$", ("model", None)),
)


# --- the stack ------------------------------------------------------------------------

def period(pattern: str) -> str:
  """The shortest unit u with pattern == u * k ("AAAA" -> "A", "AAMAMM" -> itself)."""
  n = len(pattern)
  for p in range(1, n + 1):
    if n % p == 0 and pattern[:p] * (n // p) == pattern:
      return pattern[:p]
  return pattern


@dataclasses.dataclass(frozen=True)
class Model:
  """A built stack: `specs` (ParamSpec tree), `init(rng, parametrization)`, `apply(...)`."""
  cfg: StackConfig
  blocks: Mapping[str, BlockType]

  @property
  def unit(self) -> str:
    return period(self.cfg.pattern)

  @property
  def repeats(self) -> int:
    return len(self.cfg.pattern) // len(self.unit)

  @property
  def n_residual(self) -> int:
    return sum(self.blocks[c].residuals for c in self.cfg.pattern)

  @property
  def specs(self) -> dict:
    cfg, r = self.cfg, self.repeats
    s = {"embed": ParamSpec((cfg.vocab_size, cfg.dim), "embedding")}
    if cfg.positions == "learned":
      s["pos_embed"] = ParamSpec((cfg.max_len, cfg.dim), "embedding")
    s["layers"] = tuple(
        {k: v.stacked(r) for k, v in self.blocks[c].specs(cfg, self.n_residual).items()}
        for c in self.unit)
    s["final_norm"] = ParamSpec((cfg.dim,), "vector", init="ones")
    if not cfg.tie_embeddings:
      s["unembed"] = ParamSpec((cfg.dim, cfg.vocab_size), "output", cfg.dim)
    return s

  def init(self, rng, parametrization: params_lib.Parametrization | None = None):
    return params_lib.init(rng, self.specs, parametrization or params_lib.standard())

  def hidden(self, params, tokens_BxT, *, positions_BxT=None, lengths_B=None,
             kernel: Callable | None = None, unroll: bool = False, remat: bool = False,
             cond=None):
    """Final-normed hidden states (B, T, D); `cond` reaches every block as ctx.cond."""
    cfg = self.cfg
    B, T = tokens_BxT.shape
    if positions_BxT is None:
      positions_BxT = blocks.default_positions(B, T)
    x = params["embed"][tokens_BxT]
    if cfg.positions == "learned":
      if T > cfg.max_len:
        raise ValueError(f"sequence length {T} exceeds the learned position table ({cfg.max_len})")
      x = x + blocks.learned_positions(params["pos_embed"], positions_BxT)
    kernel = kernel or attn_lib.get_kernel(cfg.kernel)
    dense = (None if getattr(kernel, "structured_mask", False)
             else attn_lib.make_mask(cfg.mask, T, lengths_B))
    ctx = Context(positions_BxT, dense, kernel, self.n_residual, cfg.mask, lengths_B, cond)
    unit = self.unit

    def body(x, layer_params):
      for c, p in zip(unit, layer_params):
        x = self.blocks[c].apply(cfg, p, x, ctx)
      return x, None

    if remat:
      body = jax.checkpoint(body)
    if self.repeats == 1 or unroll:
      for i in range(self.repeats):
        x, _ = body(x, jax.tree.map(lambda a, i=i: a[i], params["layers"]))
    else:
      x, _ = jax.lax.scan(body, x, params["layers"])
    return blocks.rms_norm(x, params["final_norm"], cfg.norm_eps)

  def logits(self, params, x_xD):
    w = params["embed"].T if self.cfg.tie_embeddings else params["unembed"]
    out = x_xD @ w
    return out * self.cfg.logit_mult if self.cfg.logit_mult != 1.0 else out

  def apply(self, params, tokens_BxT, **kw):
    """Logits (B, T, vocab). Keywords: positions_BxT, lengths_B, kernel, unroll, remat, cond."""
    return self.logits(params, self.hidden(params, tokens_BxT, **kw))


def build(cfg: StackConfig, blocks: Mapping[str, BlockType] | None = None) -> Model:
  """The model for `cfg.pattern`; `blocks` extends or replaces DEFAULT_BLOCKS."""
  table = dict(DEFAULT_BLOCKS if blocks is None else blocks)
  unknown = sorted(set(cfg.pattern) - set(table))
  if unknown:
    raise ValueError(
        f"pattern {cfg.pattern!r} uses unregistered block letter(s) {unknown}; registered: "
        f"{sorted(table)} (pass blocks={{**stack.DEFAULT_BLOCKS, 'M': ...}} to add one)")
  return Model(cfg, table)


def from_llama(params: dict, llama_cfg) -> tuple[Model, dict]:
  """The stack equivalent of a `jaxpapers.nn.llama` decoder and its parameters.

  Same names inside an 'A' block, so the conversion only regroups the tree; used to check
  that the block zoo computes exactly the Llama decoder (tests) and by papers that want
  the zoo's options on a Llama checkpoint.
  """
  cfg = StackConfig(vocab_size=llama_cfg.vocab_size, dim=llama_cfg.dim,
                    pattern="A" * llama_cfg.n_layers, n_heads=llama_cfg.n_heads,
                    n_kv_heads=llama_cfg.n_kv_heads, head_dim=llama_cfg.head_dim,
                    hidden_dim=llama_cfg.hidden_dim, rope_theta=llama_cfg.rope_theta,
                    norm_eps=llama_cfg.norm_eps, tie_embeddings=llama_cfg.tie_embeddings)
  out = {"embed": params["embed"], "layers": (dict(params["blocks"]),),
         "final_norm": params["final_norm"]}
  if not llama_cfg.tie_embeddings:
    out["unembed"] = params["unembed"]
  return build(cfg), out
