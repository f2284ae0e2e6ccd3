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

Initialization follows Mamba's reference: A_log = log(1..N) per channel (S4D-real),
D = 1, dt_bias = softplus^-1(dt) with dt log-spaced in [1e-3, 1e-1]. A_log and dt_bias
are stored as offsets from those fixed values (zero at init, no weight decay), which
leaves Adam's and SGD's trajectories unchanged (both are shift-invariant) and lets the
workbench's spec-driven init build every parameter. dt is log-*spaced* across channels
(a stratified version of the reference's log-uniform draw), so the init is the same
function of the width for every seed.
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


def a_log_init(d_inner: int, n: int):
  return jnp.log(jnp.broadcast_to(jnp.arange(1, n + 1, dtype=jnp.float32)[None], (d_inner, n)))


def dt_bias_init(d_inner: int, dt_min: float, dt_max: float):
  """softplus^-1 of dt log-spaced in [dt_min, dt_max] over the channels."""
  frac = (jnp.arange(d_inner, dtype=jnp.float32) + 0.5) / d_inner
  dt = jnp.exp(math.log(dt_min) + frac * (math.log(dt_max) - math.log(dt_min)))
  return dt + jnp.log(-jnp.expm1(-dt))


def specs(mc: MambaConfig, cfg: stack.StackConfig, n_residual: int) -> dict:
  d, di, n, r, k = cfg.dim, mc.expand * cfg.dim, mc.d_state, dt_rank(cfg.dim), mc.d_conv
  out_mult = 1.0 / math.sqrt(n_residual)
  return {
      "m_norm": RoleSpec((d,), "vector", init="ones", role="vector"),
      "in_x": RoleSpec((d, di), "hidden", d, role="hidden"),
      "in_z": RoleSpec((d, di), "hidden", d, role="hidden"),
      "conv_w": RoleSpec((k, di), "ssm", k, role="conv"),
      "conv_b": RoleSpec((di,), "ssm", init="zeros", role="ssm_vec"),
      "x_dt": RoleSpec((di, r), "hidden", di, role="hidden"),
      "dt_proj": RoleSpec((r, di), "hidden", r, role="hidden"),
      "x_b": RoleSpec((di, n), "ssm", di, role="ssm_b"),
      "x_c": RoleSpec((di, n), "ssm", di, role="ssm_c"),
      "dt_bias": RoleSpec((di,), "ssm", init="zeros", role="ssm_vec"),
      "a_log": RoleSpec((di, n), "ssm", init="zeros", role="ssm_vec"),
      "d_skip": RoleSpec((di,), "ssm", init="ones", role="ssm_vec"),
      "out": RoleSpec((di, d), "hidden", di, std_mult=out_mult, role="hidden"),
  }


def causal_conv(u_BxTxC, w_KxC, b_C):
  """Depthwise causal convolution: out_t = sum_j w[j] u_{t-K+1+j} + b (zeros before t=0)."""
  k, t = w_KxC.shape[0], u_BxTxC.shape[1]
  padded = jnp.pad(u_BxTxC, ((0, 0), (k - 1, 0), (0, 0)))
  out = sum(padded[:, j:j + t] * w_KxC[j][None, None] for j in range(k))
  return out + b_C[None, None]


def forward(mc: MambaConfig, cfg: stack.StackConfig, p, x_BxTxD, collect: bool = False):
  """The block's output; with collect=True also its internals (for the coordinate check)."""
  di = mc.expand * cfg.dim
  h = blocks_lib.rms_norm(x_BxTxD, p["m_norm"], cfg.norm_eps)
  u = h @ p["in_x"]
  z = h @ p["in_z"]
  u = jax.nn.silu(causal_conv(u, p["conv_w"], p["conv_b"]))
  delta = jax.nn.softplus(u @ p["x_dt"] @ p["dt_proj"]
                          + (dt_bias_init(di, mc.dt_min, mc.dt_max) + p["dt_bias"])[None, None])
  b = u @ p["x_b"]
  c = u @ p["x_c"]
  a = -jnp.exp(a_log_init(di, mc.d_state) + p["a_log"])
  # The scan runs in float32 whatever the compute dtype (as Mamba's kernels keep the
  # state in fp32); its output returns to the compute dtype for the out-projection.
  f32 = lambda t: t.astype(jnp.float32)
  y = ssm.selective_scan(f32(u), f32(delta), a, f32(b), f32(c), f32(p["d_skip"]),
                         method=mc.discretization, scan=mc.scan,
                         chunk=mc.scan_chunk).astype(u.dtype)
  out = (y * jax.nn.silu(z)) @ p["out"]
  if collect:
    return x_BxTxD + out, {"ssm_delta": delta, "ssm_B": b, "ssm_C": c, "ssm_y": y,
                           "mamba_out": out}
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
