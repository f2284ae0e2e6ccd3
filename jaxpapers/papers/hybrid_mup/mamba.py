"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): the Mamba block 'M'.

The Mamba-1 mixer (Gu & Dao 2023, arXiv 2312.00752, Fig. 3) as a pre-norm residual
block of the workbench's pattern-string stacks (`jaxpapers/nn/stack.py`):

  h = RMSNorm(x);  u = h W_x;  z = h W_z                  (d -> d_inner = expand * d)
  u = SiLU(causal depthwise conv_k(u) + b)                (k = d_conv = 4)
  Delta = softplus(u W_dt W_dtproj + dt_bias)             (low rank dt_rank = ceil(d/16))
  B = u W_B,  C = u W_C                                   (d_inner -> d_state)
  y = selective_scan(u, Delta, A = -exp(A_log), B, C, D)  (ssm.py)
  x + (y * SiLU(z)) W_out

Registered as the letter 'M' (`blocks()` returns the workbench defaults plus 'M'), so a
hybrid is a pattern string: 'MMA' (two Mamba blocks, one Transformer layer) or
Nemotron-H's notation 'M-M-M*-' (Mamba, MLP and attention sublayers).

Initialization is Mamba-1's reference (state-spaces/mamba, `modules/mamba_simple.py` and
`models/mixer_seq_simple.py:_init_weights`): every Linear (in_proj, x_proj, out_proj)
PyTorch's default kaiming-uniform U(+-1/sqrt(fan_in)), out_proj then divided by
sqrt(residual branches) (GPT-2's rescaling, as `_init_weights` does); no Linear biases;
dt_proj's weight U(+-dt_rank^-1/2 * dt_scale) (dt_scale 1, so the same law); dt_proj's bias
softplus^-1(dt) with dt = exp(U(log dt_min, log dt_max)) clamped at dt_init_floor, drawn
per seed; the depthwise conv1d PyTorch's default (weight and bias U(+-1/sqrt(d_conv)));
A_log = log(1..N) per channel (S4D-real), D = 1. Under SP these are the values at every
width; the muP variants scale them from the base width (`parametrizations.py`).
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from jaxpapers.nn import blocks as blocks_lib
from jaxpapers.nn import stack
from jaxpapers.papers.hybrid_mup import ssm
from jaxpapers.papers.hybrid_mup.parametrizations import RoleSpec


@dataclasses.dataclass(frozen=True)
class MambaConfig:
  d_state: int = 16              # N, the state size per channel
  expand: int = 2                # d_inner = expand * d
  d_conv: int = 4                # causal depthwise conv width
  dt_min: float = 1e-3
  dt_max: float = 1e-1
  dt_init_floor: float = 1e-4
  discretization: str = "simplified"   # 'simplified' (Mamba practice) | 'zoh' (exact)
  scan: str = "associative"      # 'associative' (parallel) | 'sequential' (lax.scan)
  scan_chunk: int = 0            # 0: the scan over the whole sequence; L: blocks of L steps

  def __post_init__(self):
    if self.discretization not in ssm.DISCRETIZATIONS:
      raise ValueError(f"unknown discretization {self.discretization!r}; expected one of "
                       f"{ssm.DISCRETIZATIONS}")
    if self.scan not in ssm.SCANS:
      raise ValueError(f"unknown scan {self.scan!r}; expected one of {sorted(ssm.SCANS)}")
    if self.d_state < 1 or self.expand < 1 or self.d_conv < 1:
      raise ValueError("MambaConfig d_state, expand and d_conv must be >= 1")
    if not isinstance(self.scan_chunk, int) or self.scan_chunk < 0:
      raise ValueError(f"model.scan_chunk={self.scan_chunk!r} must be an integer >= 0 "
                       "(0: no chunking)")


def dt_rank(dim: int) -> int:
  return math.ceil(dim / 16)


def a_log_init(u):
  """S4D-real: A_log[..., c, n] = log(n + 1) (the uniform draws u only give the shape)."""
  return jnp.broadcast_to(jnp.log(jnp.arange(1, u.shape[-1] + 1, dtype=jnp.float32)), u.shape)


def inv_softplus(y):
  return y + jnp.log(-jnp.expm1(-y))


@dataclasses.dataclass(frozen=True)
class DtBiasSampler:
  """u ~ U(0, 1) -> softplus^-1(max(exp(log dt_min + u (log dt_max - log dt_min)), floor)).

  A frozen dataclass (not a closure) so that two builds of the same block compare equal."""
  dt_min: float
  dt_max: float
  floor: float

  def __call__(self, u):
    lo, hi = math.log(self.dt_min), math.log(self.dt_max)
    return inv_softplus(jnp.maximum(jnp.exp(lo + u * (hi - lo)), self.floor))


def specs(mc: MambaConfig, cfg: stack.StackConfig, n_residual: int) -> dict:
  """The mixer's parameters; 'uniform' specs are kaiming-uniform (their std, 1/sqrt(3
  fan_in) under SP, comes from `model.numerics` per role and fan-in)."""
  d, di, n, r, k = cfg.dim, mc.expand * cfg.dim, mc.d_state, dt_rank(cfg.dim), mc.d_conv
  out_mult = 1.0 / math.sqrt(n_residual)
  kaiming = lambda shape, cls, fan_in, role, **kw: RoleSpec(shape, cls, fan_in, init="uniform",
                                                              role=role, **kw)
  return {
      "m_norm": RoleSpec((d,), "vector", init="ones", role="vector"),
      "in_x": kaiming((d, di), "hidden", d, "hidden"),
      "in_z": kaiming((d, di), "hidden", d, "hidden"),
      "conv_w": kaiming((k, di), "ssm", k, "conv"),
      "conv_b": kaiming((di,), "ssm", k, "conv_bias"),
      "x_dt": kaiming((di, r), "hidden", di, "hidden"),
      "dt_proj": kaiming((r, di), "hidden", r, "hidden"),
      "x_b": kaiming((di, n), "ssm", di, "ssm_b"),
      "x_c": kaiming((di, n), "ssm", di, "ssm_c"),
      "dt_bias": RoleSpec((di,), "ssm", init="sample", role="ssm_vec",
                          sampler=DtBiasSampler(mc.dt_min, mc.dt_max, mc.dt_init_floor)),
      "a_log": RoleSpec((di, n), "ssm", init="sample", role="ssm_vec", sampler=a_log_init),
      "d_skip": RoleSpec((di,), "ssm", init="ones", role="ssm_vec"),
      "out": kaiming((di, d), "hidden", di, "hidden", std_mult=out_mult),
  }


def causal_conv(u_BxTxC, w_KxC, b_C):
  """Depthwise causal convolution: out_t = sum_j w[j] u_{t-K+1+j} + b (zeros before t=0)."""
  k, t = w_KxC.shape[0], u_BxTxC.shape[1]
  padded = jnp.pad(u_BxTxC, ((0, 0), (k - 1, 0), (0, 0)))
  out = sum(padded[:, j:j + t] * w_KxC[j][None, None] for j in range(k))
  return out + b_C[None, None]


def forward(mc: MambaConfig, cfg: stack.StackConfig, p, x_BxTxD, collect: bool = False):
  """The block's output; with collect=True also its internals (for the coordinate check)."""
  h = blocks_lib.rms_norm(x_BxTxD, p["m_norm"], cfg.norm_eps)
  xin = h @ p["in_x"]
  z = h @ p["in_z"]
  u = jax.nn.silu(causal_conv(xin, p["conv_w"], p["conv_b"]))
  delta = jax.nn.softplus(u @ p["x_dt"] @ p["dt_proj"] + p["dt_bias"][None, None])
  b = u @ p["x_b"]
  c = u @ p["x_c"]
  a = -jnp.exp(p["a_log"])
  # The scan runs in float32 whatever the compute dtype (as Mamba's kernels keep the
  # state in fp32); its output returns to the compute dtype for the out-projection.
  f32 = lambda t: t.astype(jnp.float32)
  y = ssm.selective_scan(f32(u), f32(delta), a, f32(b), f32(c), f32(p["d_skip"]),
                         method=mc.discretization, scan=mc.scan,
                         chunk=mc.scan_chunk).astype(u.dtype)
  gated = y * jax.nn.silu(z)
  out = gated @ p["out"]
  if collect:
    return x_BxTxD + out, {"mamba_in_x": xin, "mamba_in_z": z, "mamba_conv": u,
                           "ssm_delta": delta, "ssm_B": b, "ssm_C": c, "ssm_y": y,
                           "mamba_gated": gated, "mamba_out": out}
  return x_BxTxD + out


@dataclasses.dataclass(frozen=True)
class MambaBlock(stack.BlockType):
  """The workbench BlockType, keeping its MambaConfig (the coordinate check reads it)."""
  mc: MambaConfig = MambaConfig()


def block(mc: MambaConfig) -> stack.BlockType:
  """The 'M' BlockType for this Mamba configuration."""
  return MambaBlock(lambda cfg, n: specs(mc, cfg, n),
                    lambda cfg, p, x, ctx: forward(mc, cfg, p, x), residuals=1, mc=mc)


def blocks(mc: MambaConfig) -> dict:
  """The workbench's letters ('A', '*', '-') plus 'M'."""
  return {**stack.DEFAULT_BLOCKS, "M": block(mc)}


def nemotron_pattern(n_mixers: int, attn_every: int = 4) -> str:
  """A Nemotron-H-shaped pattern (arXiv 2504.03624, Fig. 1): Mamba sublayers each followed
  by an MLP sublayer, with every `attn_every`-th mixer a self-attention sublayer instead
  (n_mixers=8, attn_every=4: 'M-M-M-*-M-M-M-*-')."""
  out = []
  for i in range(1, n_mixers + 1):
    out.append("*-" if i % attn_every == 0 else "M-")
  return "".join(out)


def ratio_pattern(n_attn: int, n_mamba: int, repeats: int = 1) -> str:
  """A period of `n_mamba` Mamba blocks then `n_attn` Transformer layers, repeated."""
  return ("M" * n_mamba + "A" * n_attn) * repeats
