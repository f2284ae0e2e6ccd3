"""llops: feature maps for linear attention, compared at equal state size, and the references.

Every map here turns a head's (LayerNorm-ed) query or key x (..., d) into features
phi(x) (..., F); linear attention then uses phi(q).phi(k) as the score. State size is F,
the length of the per-head running state sum_s phi(k_s) v_s^T / d_v, counted after
tensoring (the issue's convention):

  polysketch    r^2      PolySketch (Kacham, Mirrokni, Zhong 2024, arXiv 2310.01655):
                         S(x) a random sketch of degree p/2 with r features (Gaussian, or
                         the randomized-Hadamard one), phi = S(x) (x) S(x) (self-tensor,
                         so phi(q).phi(k) = (S(q).S(k))^2 >= 0 approximates (q.k)^p)
  learned_ps    r^2      PolySketchFormer's learned sketch: two branches of 2 x (LN, Dense
                         8r, GELU, Dense r), S = sqrt(r) tanh(b1 * b2 / sqrt(r)), tensored
  performer     m        FAVOR+ (Choromanski et al. 2021): positive orthogonal random
                         features exp(w.x' - |x'|^2 / 2) / sqrt(m), x' = x / d^(1/4)
  taylor        1+d'+d'^2  BASED (Arora et al. 2024): second-order Taylor of exp(u/sqrt(d'))
                         on a learned projection x~ = P x to d' dims
  hedgehog      2m       Hedgehog (Zhang et al. 2024): [softmax(W x), softmax(-W x)]
  elu           d        elu(x) + 1 (Katharopoulos et al. 2020); its state is fixed at d
  llops         r^2 / (r+1)^2   LLoPS: a learned LOW-RANK degree-`power` sketch
                         S(x) = (A_1 x) * ... * (A_power x) / sqrt(r), A_j (r, d)
                         learned, self-tensored (degree 2*power, non-negative); with the
                         linear term phi = [b, S] (x) [b, S], i.e. (b^2 + S(q).S(k))^2 =
                         b^4 + 2 b^2 S.S + (S.S)^2 with b learned. Initialised at A_j = the
                         Gaussian sketch's G_j and b = 0 it IS the random PolySketch
                         (family inclusion, tested bit for bit).

Each map is a `Map`: init(rng, d) -> params (random matrices included; `frozen` names the
ones training must not move), phi(params, x) -> features, its `state` size and its
`family`: 'poly' maps approximate the exact degree-p kernel and use PolySketchFormer's
normalizer 1 + sum of scores; 'exp' maps approximate exp and use the plain sum.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np


def layer_norm(x, eps: float = 1e-5):
  """Parameter-free LayerNorm over the last axis (PolySketchFormer's LN on q and k)."""
  mu = jnp.mean(x, -1, keepdims=True)
  var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
  return (x - mu) * jax.lax.rsqrt(var + eps)


def self_tensor(s):
  """vec(s (x) s): (..., r) -> (..., r^2); <self_tensor(a), self_tensor(b)> = (a.b)^2."""
  return (s[..., :, None] * s[..., None, :]).reshape(s.shape[:-1] + (s.shape[-1] ** 2,))


@dataclasses.dataclass(frozen=True)
class Map:
  name: str
  state: int
  family: str                     # 'poly' (normalizer 1 + sum) | 'exp' (normalizer sum)
  init: Callable                  # (rng, d) -> params dict
  phi: Callable                   # (params, x_xD) -> features_xF
  learned: bool = False
  frozen: tuple = ()              # params held fixed (random matrices)


# --- PolySketch (random) ----------------------------------------------------------------

def _gaussian_sketch_params(rng, d, r, power):
  return {f"G{j}": jax.random.normal(k, (d, r)) for j, k in
          enumerate(jax.random.split(rng, power))}


def low_rank_sketch(params, x, power: int, r: int):
  """(x G_0) * ... * (x G_{power-1}) / sqrt(r) (Ahle et al. 2020's degree-`power` product
  sketch with one level; each of the r coordinates is an unbiased estimate of (x.y)^power
  up to the 1/r scale, so E[S(x).S(y)] = (x.y)^power)."""
  out = x @ params["G0"]
  for j in range(1, power):
    out = out * (x @ params[f"G{j}"])
  return out / math.sqrt(r)


def polysketch_gaussian(r: int, degree: int) -> Map:
  power = degree // 2
  return Map(f"polysketch_gauss", r * r, "poly",
             lambda rng, d: _gaussian_sketch_params(rng, d, r, power),
             lambda p, x: self_tensor(low_rank_sketch(p, x, power, r)),
             frozen=tuple(f"G{j}" for j in range(power)))


def hadamard(n: int) -> np.ndarray:
  """The n x n Sylvester-Hadamard matrix with +-1 entries (n a power of 2)."""
  h = np.ones((1, 1), np.float32)
  while h.shape[0] < n:
    h = np.block([[h, h], [h, -h]])
  return h


def _hadamard_params(rng, d, r, power):
  n = 1 << max(0, (d - 1).bit_length())
  h = jnp.asarray(hadamard(n))
  out = {}
  for j, k in enumerate(jax.random.split(rng, power)):
    ks, kr = jax.random.split(k)
    signs = jax.random.rademacher(ks, (n,), jnp.float32)
    rows = jax.random.randint(kr, (r,), 0, n)
    # Column i of G is the sampled row of H D (entries +-1): E[(x.g)(y.g)] = x.y exactly.
    out[f"G{j}"] = (h[rows] * signs[None, :]).T[:d]
  return out


def polysketch_hadamard(r: int, degree: int) -> Map:
  """PolySketch with randomized-Hadamard (SRHT) rows in place of Gaussian ones; as a dense
  (d, r) matrix here (the fast transform matters only for d >> r)."""
  power = degree // 2
  return Map("polysketch_hadamard", r * r, "poly",
             lambda rng, d: _hadamard_params(rng, d, r, power),
             lambda p, x: self_tensor(low_rank_sketch(p, x, power, r)),
             frozen=tuple(f"G{j}" for j in range(power)))


# --- PolySketchFormer's learned sketch ----------------------------------------------------

def _dense_init(rng, fan_in, fan_out):
  return jax.random.normal(rng, (fan_in, fan_out)) / math.sqrt(fan_in)


def learned_polysketch(r: int, expansion: int = 8, levels: int = 2) -> Map:
  def init(rng, d):
    p = {}
    keys = iter(jax.random.split(rng, 4 * levels))
    for b in (1, 2):
      din = d
      for lvl in range(levels):
        p[f"b{b}_{lvl}_up"] = _dense_init(next(keys), din, expansion * r)
        p[f"b{b}_{lvl}_down"] = _dense_init(next(keys), expansion * r, r)
        din = r
    return p

  def phi(p, x):
    outs = []
    for b in (1, 2):
      h = x
      for lvl in range(levels):
        h = layer_norm(h)
        h = jax.nn.gelu(h @ p[f"b{b}_{lvl}_up"], approximate=False) @ p[f"b{b}_{lvl}_down"]
      outs.append(h)
    s = jnp.tanh(outs[0] * outs[1] / math.sqrt(r)) * math.sqrt(r)
    return self_tensor(s)

  return Map("learned_ps", r * r, "poly", init, phi, learned=True)


# --- Performer FAVOR+ --------------------------------------------------------------------

def orthogonal_gaussian(rng, m: int, d: int):
  """(m, d) rows: blocks of d orthogonal directions, each row's norm chi_d distributed
  (the norms of Gaussian rows), so each row is marginally N(0, I) (Performer, Thm. 2)."""
  blocks = []
  keys = jax.random.split(rng, m // d + 2)
  for i in range(-(-m // d)):
    g = jax.random.normal(keys[i], (d, d))
    q, _ = jnp.linalg.qr(g)
    blocks.append(q.T)
  w = jnp.concatenate(blocks)[:m]
  norms = jnp.linalg.norm(jax.random.normal(keys[-1], (m, d)), axis=1)
  return w * norms[:, None]


def performer(m: int) -> Map:
  def phi(p, x):
    d = x.shape[-1]
    xs = x / d ** 0.25
    proj = xs @ p["W"].T
    # No max-subtraction: inputs are LayerNorm-ed (|x'|^2 = sqrt(d)), so exp stays finite,
    # and the kernel's absolute scale is kept for the kernel-matrix error.
    return jnp.exp(proj - 0.5 * jnp.sum(xs * xs, -1, keepdims=True)) / math.sqrt(m)
  return Map("performer", m, "exp", lambda rng, d: {"W": orthogonal_gaussian(rng, m, d)}, phi,
             frozen=("W",))


# --- BASED Taylor ------------------------------------------------------------------------

def taylor(d_feat: int) -> Map:
  def phi(p, x):
    xt = x @ p["P"]
    c = d_feat ** 0.25
    second = self_tensor(xt) / (math.sqrt(2.0) * c * c)
    return jnp.concatenate([jnp.ones(xt.shape[:-1] + (1,), xt.dtype), xt / c, second], -1)
  return Map("taylor", 1 + d_feat + d_feat ** 2, "exp",
             lambda rng, d: {"P": _dense_init(rng, d, d_feat)}, phi, learned=True)


def taylor_dim(state: int) -> int:
  """Largest d' with 1 + d' + d'^2 <= state."""
  return int((math.sqrt(4 * state - 3) - 1) // 2)


# --- Hedgehog, elu+1 ---------------------------------------------------------------------

def hedgehog(m: int) -> Map:
  def phi(p, x):
    z = x @ p["W"] + p["b"].reshape((1,) * (x.ndim - 1) + (-1,))
    return jnp.concatenate([jax.nn.softmax(z, -1), jax.nn.softmax(-z, -1)], -1)
  return Map("hedgehog", 2 * m, "exp",
             lambda rng, d: {"W": _dense_init(rng, d, m), "b": jnp.zeros((m,))}, phi,
             learned=True)


def elu(d: int) -> Map:
  return Map("elu", d, "exp", lambda rng, dd: {}, lambda p, x: jax.nn.elu(x) + 1.0)


# --- LLoPS -------------------------------------------------------------------------------

def llops(r: int, power: int, linear: bool = False) -> Map:
  """LLoPS at sketch rank r: degree 2*power; with `linear`, the state is (r+1)^2."""
  def init(rng, d):
    p = _gaussian_sketch_params(rng, d, r, power)
    if linear:
      p["b"] = jnp.zeros(())
    return p

  def phi(p, x):
    s = low_rank_sketch(p, x, power, r)
    if linear:
      s = jnp.concatenate([jnp.broadcast_to(p["b"], s.shape[:-1] + (1,)).astype(s.dtype), s], -1)
    return self_tensor(s)

  name = "llops_lin" if linear else "llops"
  return Map(name, (r + 1) ** 2 if linear else r * r, "poly", init, phi, learned=True)


# --- the table of maps at a state size ---------------------------------------------------

MAP_NAMES = ("polysketch_gauss", "polysketch_hadamard", "learned_ps", "performer", "taylor",
             "hedgehog", "elu", "llops", "llops_lin")


def make_map(name: str, state: int, degree: int, head_dim: int) -> Map:
  """`name` at the largest size <= `state` its structure allows (elu: always head_dim)."""
  r = int(math.isqrt(state))
  if name == "polysketch_gauss":
    return polysketch_gaussian(r, degree)
  if name == "polysketch_hadamard":
    return polysketch_hadamard(r, degree)
  if name == "learned_ps":
    return learned_polysketch(r)
  if name == "performer":
    return performer(state)
  if name == "taylor":
    return taylor(taylor_dim(state))
  if name == "hedgehog":
    return hedgehog(state // 2)
  if name == "elu":
    return elu(head_dim)
  if name == "llops":
    return llops(r, degree // 2)
  if name == "llops_lin":
    return llops(int(math.isqrt(state)) - 1, max(1, degree // 2), linear=True)
  raise ValueError(f"unknown feature map {name!r}; expected one of {list(MAP_NAMES)}")


# --- references (quadratic time) ---------------------------------------------------------

def poly_scores(q_TxD, k_SxD, degree: int):
  """(LN q . LN k)^p: the exact polynomial kernel of PolySketchFormer."""
  return (layer_norm(q_TxD) @ layer_norm(k_SxD).T) ** degree


def normalize(scores, family: str, mask=None, eps: float = 1e-6):
  """Row weights: scores / (1 + sum) for 'poly', scores / sum for 'exp' (masked keys 0)."""
  if mask is not None:
    scores = jnp.where(mask, scores, 0.0)
  den = jnp.sum(scores, -1, keepdims=True)
  return scores / ((1.0 + den) if family == "poly" else (den + eps))


def polynomial_attention(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, mask=None, scale=None,
                         degree: int = 4):
  """Exact degree-p polynomial attention, quadratic time, a `jaxpapers.nn` kernel (GQA):
  out_t = sum_s (LN q_t . LN k_s)^p v_s / (1 + sum_s (LN q_t . LN k_s)^p) over visible s."""
  del scale  # the LayerNorm sets the scale (PolySketchFormer)
  B, T, H, D = q_BxTxHxD.shape
  K = k_BxSxKxD.shape[2]
  f = jnp.promote_types(q_BxTxHxD.dtype, jnp.float32)  # float32, or float64 under x64
  q = layer_norm(q_BxTxHxD.astype(f)).reshape(B, T, K, H // K, D)
  k = layer_norm(k_BxSxKxD.astype(f))
  a = jnp.einsum("btkgd,bskd->bkgts", q, k) ** degree
  if mask is not None:
    a = jnp.where(mask[:, None, None], a, 0.0)
  num = jnp.einsum("bkgts,bskd->btkgd", a, v_BxSxKxD.astype(f))
  den = 1.0 + jnp.einsum("bkgts->btkg", a)[..., None]
  return (num / den).reshape(B, T, H, D).astype(v_BxSxKxD.dtype)
