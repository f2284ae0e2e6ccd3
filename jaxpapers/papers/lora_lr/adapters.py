"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- the ten adapters.

One interface for vanilla LoRA and the nine variants the paper re-evaluates. Kernels are
stored (in, out) and y = x @ K, so a LoRA update is dK = s * A @ B with A (in, r),
B (r, out) and s = alpha / r (PyTorch/PEFT write the same as dW = s * B_t @ A_t with
A_t = A.T, B_t = B.T). Each method gives
  init(key, K, grad_K) -> (K_frozen_base, train, frozen)   one (in, out) kernel
  apply(x, K, train, frozen) -> y                          forward without merging
  merged(K, train, frozen) -> K'                           the equivalent dense kernel
Definitions (each from its own paper, checked against the authors' or PEFT's code):
- lora (Hu et al. 2021): A ~ U(+-1/sqrt(in)) (kaiming-uniform, a=sqrt(5)), B = 0.
- olora (Buyukakyuz 2024): QR of W_t = Q R; B_t = Q[:, :r], A_t = R[:r]; base W - s B_t A_t.
- pissa (Meng et al. 2024): SVD W_t = U S V^T; B_t = U_r sqrt(S_r/s), A_t = sqrt(S_r/s) V_r^T
  on the r largest singular values; base W - s B_t A_t (the residual).
- milora (Wang et al. 2024): as PiSSA on the r smallest singular values.
- init_ab (Init[AB], the paper's variant following Hayou et al. 2024): A and B both
  U(+-1/sqrt(in)); base W - s B_t A_t so the model starts unchanged.
- dora (Liu et al. 2024): K' = m * (K + s A B) / ||K + s A B||_c, m init ||K||_c, the
  column norm over the input axis detached from the graph (paper Sec. 4.3, as PEFT).
- loft (Tastan et al. 2026): LoRA's parametrization and init; the method is its
  optimizer (`loft.py`).
- lora_ga (Wang et al. 2024): SVD of the full-weight gradient G_t = U S V^T (on a few
  training batches); A_t = V[:, :r]^T, B_t = U[:, r:2r] ("ArB2r"), both times
  m^(1/4)/sqrt(gamma) with m = out ("stable" scale, gamma=16, the authors' code);
  `loraga_scale="peft"`: PEFT 0.21.2's variant, B_t = U[:, r:2r] diag(S[r:2r]), A_t as
  above, no stable factor; base W - s B_t A_t either way.
- gralora (Jung et al. 2025): the kernel is a k x k grid of blocks, block (i, j) has its
  own rank-r/k adapter; A per input block (k, in/k, r) kaiming-uniform, B per output
  block (k, r, out/k) zero; the same parameter count as LoRA of rank r.
- randlora (Albert et al. 2025): full-rank dK = s sum_b B_b diag(lambda_b) A diag(gamma_b)
  with frozen random bases (std-normalised uniform, shared by all modules and sliced),
  trainable lambda (n_b, r_b) = 0 and gamma (n_b, min_dim) = 1/max(n_b, min_dim) (the
  authors' and PEFT's reset; `randlora_gamma="max_dim"`: 1/max(in, out), the value their
  constructors write before the reset overwrites it), n_b = ceil(min_dim / r_b) bases; the
  basis rank r_b is chosen per kernel shape so the trainable count matches LoRA's.
`attach` applies a method by regex to the named projections of every block of a
`jaxpapers.nn.llama` model; `linear_hook` is the model's projection hook.
"""
from __future__ import annotations

import dataclasses
import math
import re

import jax
import jax.numpy as jnp

from jaxpapers.nn import llama

METHODS = ("lora", "olora", "pissa", "milora", "init_ab", "dora", "loft", "lora_ga",
           "gralora", "randlora")
NEEDS_GRAD = ("lora_ga",)
# Inits that do not depend on the random key (only on the weights or their gradient).
DETERMINISTIC = ("olora", "pissa", "milora", "lora_ga")


@dataclasses.dataclass(frozen=True)
class AdapterConfig:
  method: str = "lora"
  rank: int = 8
  alpha: float = 8.0                 # the paper uses alpha = rank (s = 1)
  targets: str = r"^(q|k|v|o|gate|up|down)$"
  gralora_k: int = 2
  randlora_rank: int = 0             # 0: per kernel shape, to match LoRA's trainable count
  randlora_scale: float = 20.0       # PEFT default randlora_alpha / r = 640 / 32
  randlora_gamma: str = "reference"  # 'reference': 1/max(n_b, min_dim); 'max_dim': 1/max(in, out)
  loraga_gamma: float = 16.0
  loraga_scale: str = "stable"       # 'stable' (authors' code) or 'peft' (PEFT 0.21.2)

  def __post_init__(self):
    if self.method not in METHODS:
      raise ValueError(f"unknown adapter method {self.method!r}; expected one of {METHODS}")
    if self.randlora_gamma not in ("reference", "max_dim"):
      raise ValueError(f"unknown randlora_gamma {self.randlora_gamma!r}; expected "
                       "'reference' or 'max_dim'")
    if self.loraga_scale not in ("stable", "peft"):
      raise ValueError(f"unknown loraga_scale {self.loraga_scale!r}; expected 'stable' or 'peft'")

  @property
  def scale(self) -> float:
    return self.alpha / self.rank


def _uniform(key, shape, fan_in):
  bound = 1.0 / math.sqrt(fan_in)
  return jax.random.uniform(key, shape, minval=-bound, maxval=bound)


# ---------------------------------------------------------------- low-rank A @ B family
def _lowrank_apply(x, K, train, frozen, ac):
  del frozen
  return x @ K + ac.scale * ((x @ train["A"]) @ train["B"])


def _lowrank_merged(K, train, frozen, ac):
  del frozen
  return K + ac.scale * train["A"] @ train["B"]


def _init_lora(key, K, grad, ac):
  del grad
  din, dout = K.shape
  return K, {"A": _uniform(key, (din, ac.rank), din), "B": jnp.zeros((ac.rank, dout))}, {}


def _init_ab(key, K, grad, ac):
  del grad
  din, dout = K.shape
  ka, kb = jax.random.split(key)
  # Both bounds use fan_in = in_features, as in the paper's reference code.
  A, B = _uniform(ka, (din, ac.rank), din), _uniform(kb, (ac.rank, dout), din)
  return K - ac.scale * A @ B, {"A": A, "B": B}, {}


def _leading_qr(W, r):
  """First r columns of Q and rows of R of W = Q R (Gram-Schmidt, applied twice).

  Equal to LAPACK's Householder QR up to the sign of each (column of Q, row of R) pair.
  Written out because the LAPACK QR custom call deadlocked inside our vmapped, scanned
  fine-tuning program on XLA:CPU (jaxlib 0.10.2), and only r columns are needed.
  """
  qs = []
  for j in range(r):
    v = W[:, j]
    for _ in range(2):
      for q in qs:
        v = v - jnp.dot(q, v) * q
    qs.append(v / jnp.linalg.norm(v))
  Q = jnp.stack(qs, axis=1)
  return Q, Q.T @ W


def _init_olora(key, K, grad, ac):
  del key, grad
  B_t, A_t = _leading_qr(K.T, ac.rank)   # W_t = K.T (out, in) = Q R
  A, B = A_t.T, B_t.T
  return K - ac.scale * A @ B, {"A": A, "B": B}, {}


def _svd_init(K, ac, minor: bool):
  # K = P diag(S) Qh, i.e. W_t = K.T = Qh.T diag(S) P.T: P are W_t's right vectors.
  P, S, Qh = jnp.linalg.svd(K, full_matrices=False)
  sl = slice(S.shape[0] - ac.rank, None) if minor else slice(0, ac.rank)
  root = jnp.sqrt(S[sl] / ac.scale)
  A = P[:, sl] * root[None, :]
  B = root[:, None] * Qh[sl]
  return K - ac.scale * A @ B, {"A": A, "B": B}, {}


def _init_pissa(key, K, grad, ac):
  del key, grad
  return _svd_init(K, ac, minor=False)


def _init_milora(key, K, grad, ac):
  del key, grad
  return _svd_init(K, ac, minor=True)


def _init_lora_ga(key, K, grad, ac):
  del key
  if grad is None:
    raise ValueError("lora_ga needs the gradient of the loss w.r.t. each target kernel")
  r = ac.rank
  if 2 * r > min(K.shape):
    raise ValueError(f"lora_ga needs 2*rank={2 * r} <= min kernel dim {min(K.shape)}")
  # grad is dL/dK (in, out) = G_t.T; G_t = U S V^T  <=>  grad = V S U^T.
  V, S, Uh = jnp.linalg.svd(grad, full_matrices=False)
  if ac.loraga_scale == "stable":
    c = K.shape[1] ** 0.25 / math.sqrt(ac.loraga_gamma)     # m = out features
    A = c * V[:, :r]                # A_t = V[:, :r]^T
    B = c * Uh[r:2 * r]             # B_t = U[:, r:2r]
  else:                             # PEFT 0.21.2: B_t = U[:, r:2r] diag(S[r:2r])
    A = V[:, :r]
    B = S[r:2 * r, None] * Uh[r:2 * r]
  return K - ac.scale * A @ B, {"A": A, "B": B}, {}


# ---------------------------------------------------------------------------- DoRA
def _init_dora(key, K, grad, ac):
  K, train, frozen = _init_lora(key, K, grad, ac)
  train["m"] = jnp.linalg.norm(K, axis=0)
  return K, train, frozen


def _dora_factor(K, train, ac):
  V = K + ac.scale * train["A"] @ train["B"]
  return train["m"] / jax.lax.stop_gradient(jnp.linalg.norm(V, axis=0))


def _dora_apply(x, K, train, frozen, ac):
  del frozen
  y = x @ K + ac.scale * ((x @ train["A"]) @ train["B"])
  f = _dora_factor(K, train, ac)
  return y * f.reshape((1,) * (y.ndim - 1) + (-1,))


def _dora_merged(K, train, frozen, ac):
  del frozen
  return (K + ac.scale * train["A"] @ train["B"]) * _dora_factor(K, train, ac)[None, :]


# ------------------------------------------------------------------------- GraLoRA
def _init_gralora(key, K, grad, ac):
  del grad
  din, dout = K.shape
  k, r = ac.gralora_k, ac.rank
  if din % k or dout % k or r % k:
    raise ValueError(f"gralora_k={k} must divide in={din}, out={dout} and rank={r}")
  A = _uniform(key, (k, din // k, r), din // k)
  return K, {"A": A, "B": jnp.zeros((k, r, dout // k))}, {}


def _gralora_delta_x(x, train, ac):
  k, r = ac.gralora_k, ac.rank
  lead = x.shape[:-1]
  xs = x.reshape(*lead, k, x.shape[-1] // k)
  t = jnp.einsum("...ni,nir->...nr", xs, train["A"])
  # Sub-rank group j of input block n is routed to output block j (block (j, n) of dK).
  t = t.reshape(*lead, k, k, r // k)
  t = jnp.swapaxes(t, -3, -2).reshape(*lead, k, r)
  out = jnp.einsum("...nr,nro->...no", t, train["B"])
  return out.reshape(*lead, -1)


def _gralora_apply(x, K, train, frozen, ac):
  del frozen
  return x @ K + ac.scale * _gralora_delta_x(x, train, ac)


def _gralora_merged(K, train, frozen, ac):
  del frozen
  return K + ac.scale * _gralora_delta_x(jnp.eye(K.shape[0], dtype=K.dtype), train, ac)


# ------------------------------------------------------------------------ RandLoRA
def randlora_count(shape, rb: int) -> int:
  """Trainable parameters of RandLoRA on one (in, out) kernel with basis rank rb:
  lambda (n_b, rb) + gamma (n_b, min_dim), n_b = ceil(min_dim / rb)."""
  mn = min(shape)
  return math.ceil(mn / rb) * (rb + mn)


def randlora_ranks(rank: int, shapes: dict, fixed: int = 0) -> dict:
  """Basis rank per target (name -> rb) so RandLoRA's trainable count matches LoRA's.

  Each kernel shape first gets the rb whose count is closest to LoRA's rank * (in + out)
  on that kernel. A narrow kernel may not reach it at any rb (its maximum, rb = 1, is
  min * (1 + min)), so a few coordinate-descent passes then move each shape's rb to bring
  the *total* closest to LoRA's total (ties: the per-shape deviation). `fixed` > 0 uses that
  rb everywhere.
  """
  names = list(shapes)
  if fixed:
    return {n: fixed for n in names}
  target = {n: rank * sum(shapes[n]) for n in names}
  cands = {n: range(1, min(shapes[n]) + 1) for n in names}
  rb = {n: min(cands[n], key=lambda b, n=n: (abs(randlora_count(shapes[n], b) - target[n]),
                                             -b)) for n in names}
  total_target = sum(target.values())
  for _ in range(3):
    for n in names:
      others = sum(randlora_count(shapes[m], rb[m]) for m in names if m != n)
      rb[n] = min(cands[n], key=lambda b, n=n: (
          abs(others + randlora_count(shapes[n], b) - total_target),
          abs(randlora_count(shapes[n], b) - target[n]), -b))
  return rb


def randlora_bases(key, max_dim: int, min_dim: int, rb: int, nb: int):
  """Shared frozen bases A (r_b, min_dim) and B (max_dim, n_b, r_b), unit std."""
  ka, kb = jax.random.split(key)
  A = jax.random.uniform(ka, (rb, min_dim), minval=-1.0, maxval=1.0)
  B = jax.random.uniform(kb, (max_dim, nb, rb), minval=-1.0, maxval=1.0)
  return {"A": A / jnp.std(A), "B": B / jnp.std(B)}


def _randlora_factors(K, train, frozen):
  din, dout = K.shape
  mn, mx = min(din, dout), max(din, dout)
  lam, gam = train["lambda"], train["gamma"]          # (n_b, r_b), (n_b, min)
  nb, rb = lam.shape
  A = frozen["A"][:rb, :mn]                           # (r_b, min)
  B = frozen["B"][:mx, :nb, :rb].reshape(mx, nb * rb)  # (max, n_b r_b)
  A_full = (lam[:, :, None] * A[None] * gam[:, None, :]).reshape(nb * rb, mn)
  return B, A_full


def randlora_gamma0(shape, rb: int, rule: str) -> float:
  """Initial gamma: 'reference' = 1/max(n_b, min_dim), what the authors' and PEFT's
  reset_randlora_parameters write (1/max over gamma's own (n_b, min_dim) shape, so
  1/min_dim in practice); 'max_dim' = 1/max(in, out), what their constructors write
  before that reset."""
  mn, mx = min(shape), max(shape)
  if rule == "max_dim":
    return 1.0 / mx
  return 1.0 / max(math.ceil(mn / rb), mn)


def _init_randlora(key, K, grad, ac, frozen, rb):
  del key, grad
  mn = min(K.shape)
  nb = math.ceil(mn / rb)
  g0 = randlora_gamma0(K.shape, rb, ac.randlora_gamma)
  train = {"lambda": jnp.zeros((nb, rb)), "gamma": jnp.full((nb, mn), g0)}
  return K, train, frozen


def _randlora_apply(x, K, train, frozen, ac):
  B, A_full = _randlora_factors(K, train, frozen)
  s = ac.randlora_scale
  if K.shape[0] <= K.shape[1]:     # input is the small side: dK = (B A_full)^T
    return x @ K + s * ((x @ A_full.T) @ B.T)
  return x @ K + s * ((x @ B) @ A_full)


def _randlora_merged(K, train, frozen, ac):
  B, A_full = _randlora_factors(K, train, frozen)
  d = B @ A_full
  return K + ac.randlora_scale * (d.T if K.shape[0] <= K.shape[1] else d)


_INIT = {"lora": _init_lora, "loft": _init_lora, "olora": _init_olora,
         "pissa": _init_pissa, "milora": _init_milora, "init_ab": _init_ab,
         "lora_ga": _init_lora_ga, "dora": _init_dora, "gralora": _init_gralora}
_APPLY = {"dora": _dora_apply, "gralora": _gralora_apply, "randlora": _randlora_apply}
_MERGED = {"dora": _dora_merged, "gralora": _gralora_merged, "randlora": _randlora_merged}


def target_names(ac: AdapterConfig) -> list[str]:
  names = [n for n in llama.PROJECTIONS if re.search(ac.targets, n)]
  if not names:
    raise ValueError(f"target regex {ac.targets!r} matches none of {llama.PROJECTIONS}")
  return names


def attach(key, params, cfg: llama.LlamaConfig, ac: AdapterConfig, grads=None):
  """Returns (base params with residual kernels, adapters {"train", "frozen"}).

  `grads` (same tree as params["blocks"]) is needed by LoRA-GA only. Every tensor in
  `adapters` carries the leading layer axis so it is scanned with the blocks.
  """
  if ac.method in NEEDS_GRAD and grads is None:
    raise ValueError(f"{ac.method} needs gradients of the target kernels (grads=...)")
  names = target_names(ac)
  blocks = dict(params["blocks"])
  train, frozen = {}, {}
  L = cfg.n_layers
  shared = None
  if ac.method == "randlora":
    shapes = {n: tuple(cfg.shapes()[n]) for n in names}
    rbs = randlora_ranks(ac.rank, shapes, ac.randlora_rank)
    mx = max(max(s) for s in shapes.values())
    mn = max(min(s) for s in shapes.values())
    # One shared pair sized for the largest rb and number of bases; each kernel slices.
    nb = max(math.ceil(min(shapes[n]) / rbs[n]) for n in names)
    shared = randlora_bases(jax.random.fold_in(key, 10_000), mx, mn, max(rbs.values()), nb)
  for i, name in enumerate(names):
    keys = jax.random.split(jax.random.fold_in(key, i), L)
    K_L = blocks[name]
    g_L = grads[name] if grads is not None and ac.method in NEEDS_GRAD else None
    if ac.method == "randlora":
      # The bases are shared by every module (as in PEFT); tiled over the layer axis so
      # they scan with the blocks.
      init = lambda k, K, g, _ac=ac, _rb=rbs[name]: _init_randlora(k, K, g, _ac, shared, _rb)
    else:
      init = lambda k, K, g, _f=_INIT[ac.method], _ac=ac: _f(k, K, g, _ac)
    if g_L is None:
      base, tr, fr = jax.vmap(lambda k, K: init(k, K, None))(keys, K_L)
    else:
      base, tr, fr = jax.vmap(init)(keys, K_L, g_L)
    blocks[name], train[name], frozen[name] = base, tr, fr
  return {**params, "blocks": blocks}, {"train": train, "frozen": frozen}


def linear_hook(ac: AdapterConfig):
  """The `linear(name, x, w, extra)` hook of `llama.forward` for this method."""
  apply = _APPLY.get(ac.method, _lowrank_apply)

  def linear(name, x, w, extra):
    if extra is None or name not in extra["train"]:
      return x @ w
    return apply(x, w, extra["train"][name], extra["frozen"][name], ac)

  return linear


def merge(params, adapters, ac: AdapterConfig):
  """Dense parameters whose plain forward equals the adapted forward."""
  merged = _MERGED.get(ac.method, _lowrank_merged)
  blocks = dict(params["blocks"])
  for name, tr in adapters["train"].items():
    fn = lambda K, t, f: merged(K, t, f, ac)
    blocks[name] = jax.vmap(fn)(blocks[name], tr, adapters["frozen"][name])
  return {**params, "blocks": blocks}


def forward(params, adapters, tokens, cfg, ac, **kw):
  return llama.forward(params, tokens, cfg, extra=adapters, linear=linear_hook(ac), **kw)


def num_trainable(adapters) -> int:
  return sum(int(x.size) for x in jax.tree.leaves(adapters["train"]))
