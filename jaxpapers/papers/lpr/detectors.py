"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- deep detectors.

Losses and anomaly scores of the seven deep detectors, each trainable with or without
LPR through the same code path: the loss and the score see `apply_lpr(params, bits,
spec)`, never the raw parameters, so precision is reduced both during training and at
inference. Scores follow each method's definition (higher = more anomalous):
  ae, dae, memae, vae: per-sample mean squared reconstruction error (VAE decodes z = mu);
  deepsvdd, deepsad:  squared distance ||phi(x) - c||^2 to the center c, fixed at init as
                      the mean initial embedding (Ruff et al. 2018, Sec. 3.3);
  mlp:                the classifier's logit.
Deep SAD (Ruff et al. 2020, eq. 4) adds eta / (||phi(x) - c||^2 + eps) for the few labeled
anomalies; the MLP uses all training labels with a class-balanced BCE.

Training: Adam(W) on i.i.d. minibatches, the whole run is one `lax.scan`; `fit` vmaps it
over (dataset, seed, bits) triples of zero-padded datasets, so "all datasets x 3 seeds x
{no LPR, LPR}" (or a bit-width sweep) is one compiled program per detector.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.papers.lpr import models
from jaxpapers.papers.lpr import quantize

KINDS = ("ae", "vae", "dae", "memae", "deepsvdd", "deepsad", "mlp")
AE_KINDS = ("ae", "vae", "dae", "memae")
SUPERVISION = {"ae": "unsup", "vae": "unsup", "dae": "unsup", "memae": "unsup",
               "deepsvdd": "unsup", "deepsad": "semi", "mlp": "sup"}


@dataclasses.dataclass(frozen=True)
class DetectorConfig:
  """Hyper-parameters of one deep detector (hashable: it keys the compile cache)."""
  kind: str = "ae"
  hidden: tuple = (64, 32)
  latent: int = 8
  mem_size: int = 50
  steps: int = 400
  batch: int = 128
  lr: float = 1e-3
  weight_decay: float = 1e-6
  noise_std: float = 0.2         # DAE input corruption, in standardized units
  kl_weight: float = 1.0         # VAE beta
  entropy_weight: float = 2e-4   # MemAE attention-entropy weight (Gong et al. 2019)
  eta: float = 1.0               # Deep SAD weight of labeled anomalies
  spec: quantize.LPRSpec = quantize.LPRSpec()

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"unknown detector kind {self.kind!r}; expected one of {KINDS}")


def auroc(scores: jax.Array, labels: jax.Array, mask: jax.Array | None = None) -> jax.Array:
  """Area under the ROC curve with ties counted 1/2 (Mann-Whitney U via average ranks).

  `mask` (1 = real row) lets padded rows ride along in a batched program; they are given
  +inf scores, which leaves every real row's count of smaller scores unchanged.
  """
  mask = jnp.ones_like(scores) if mask is None else mask.astype(scores.dtype)
  s = jnp.where(mask > 0, scores, jnp.inf)
  srt = jnp.sort(s)
  rank = 0.5 * (jnp.searchsorted(srt, s, side="left")
                + jnp.searchsorted(srt, s, side="right") + 1.0)  # 1-based average rank
  pos = labels.astype(scores.dtype) * mask
  n_pos = jnp.sum(pos)
  n_neg = jnp.sum(mask) - n_pos
  u = jnp.sum(pos * rank) - n_pos * (n_pos + 1.0) / 2.0
  return u / jnp.maximum(n_pos * n_neg, 1.0)


def _center(feats, row_mask):
  """Deep SVDD center: mean embedding of the real rows, entries pushed away from 0."""
  c = jnp.sum(feats * row_mask[:, None], axis=0) / jnp.maximum(jnp.sum(row_mask), 1.0)
  eps = 0.1
  return jnp.where(jnp.abs(c) < eps, jnp.where(c < 0, -eps, eps), c)


def _bce_balanced(logits, y):
  pos = jnp.sum(y)
  w_pos = (y.shape[0] - pos) / jnp.maximum(pos, 1.0)
  ll = w_pos * y * jax.nn.log_sigmoid(logits) + (1 - y) * jax.nn.log_sigmoid(-logits)
  return -jnp.mean(ll)


def _first_kernel(path) -> bool:
  name = quantize.path_name(path)
  return name in ("encoder/Dense_0/kernel", "Dense_0/kernel")


class Detector:
  """Init/loss/score of one detector kind on inputs zero-padded to `dim` features.

  Datasets of different widths share one compiled program: a feature mask `fmask` (1 =
  real feature) zeroes padded inputs, drops padded outputs from errors, and the first
  layer's init is rescaled to the real fan-in, so each run equals the unpadded model.
  """

  def __init__(self, cfg: DetectorConfig, dim: int):
    self.cfg = cfg
    self.dim = dim
    self.net = models.build(cfg.kind, dim, cfg.hidden, cfg.latent, cfg.mem_size)

  def init(self, rng, x_train, row_mask, fmask, bits):
    """Parameters and the auxiliary state (the Deep SVDD/SAD center; else a dummy)."""
    params = self.net.init(rng, x_train[:2])
    gain = jnp.sqrt(self.dim / jnp.sum(fmask))
    params = jax.tree_util.tree_map_with_path(
        lambda p, w: w * gain * fmask[:, None] if _first_kernel(p) else w, params)
    if self.cfg.kind in ("deepsvdd", "deepsad"):
      feats = self.net.apply(quantize.apply_lpr(params, bits, self.cfg.spec), x_train)
      aux = _center(feats, row_mask)
    else:
      aux = jnp.zeros((self.cfg.latent,), x_train.dtype)
    return params, aux

  def _err(self, recon, x, fmask):
    """Per-sample mean squared error over the real features."""
    return jnp.sum(jnp.square(recon - x) * fmask[None, :], axis=-1) / jnp.sum(fmask)

  def loss(self, params, aux, x, y, fmask, rng, bits):
    cfg = self.cfg
    p = quantize.apply_lpr(params, bits, cfg.spec)
    if cfg.kind == "ae":
      return jnp.mean(self._err(self.net.apply(p, x), x, fmask))
    if cfg.kind == "dae":
      noisy = x + cfg.noise_std * jax.random.normal(rng, x.shape) * fmask[None, :]
      return jnp.mean(self._err(self.net.apply(p, noisy), x, fmask))
    if cfg.kind == "vae":
      recon, mu, logvar = self.net.apply(p, x, rng)
      nll = 0.5 * jnp.sum(jnp.square(recon - x) * fmask[None, :], axis=-1)
      kl = 0.5 * jnp.sum(jnp.exp(logvar) + jnp.square(mu) - 1.0 - logvar, axis=-1)
      return jnp.mean(nll + cfg.kl_weight * kl)
    if cfg.kind == "memae":
      recon, att = self.net.apply(p, x)
      ent = -jnp.sum(att * jnp.log(att + 1e-12), axis=-1)
      return jnp.mean(self._err(recon, x, fmask)) + cfg.entropy_weight * jnp.mean(ent)
    if cfg.kind in ("deepsvdd", "deepsad"):
      d2 = jnp.sum(jnp.square(self.net.apply(p, x) - aux[None, :]), axis=-1)
      if cfg.kind == "deepsvdd":
        return jnp.mean(d2)
      return jnp.mean(jnp.where(y > 0, cfg.eta / (d2 + 1e-6), d2))
    return _bce_balanced(self.net.apply(p, x)[:, 0], y)  # mlp

  def score(self, params, aux, x, fmask, bits):
    cfg = self.cfg
    p = quantize.apply_lpr(params, bits, cfg.spec)
    if cfg.kind in ("ae", "dae"):
      return self._err(self.net.apply(p, x), x, fmask)
    if cfg.kind in ("vae", "memae"):
      return self._err(self.net.apply(p, x)[0], x, fmask)
    if cfg.kind in ("deepsvdd", "deepsad"):
      return jnp.sum(jnp.square(self.net.apply(p, x) - aux[None, :]), axis=-1)
    return self.net.apply(p, x)[:, 0]


def train_one(det: Detector, rng, bits, data):
  """One full training run (a lax.scan over steps); returns test scores, AUROC, losses.

  `data` holds one (padded) dataset: x_train [N, D], y_train [N] (the labels this
  detector may see), n_train (real rows), fmask [D], x_test [M, D], y_test [M], tmask [M].
  """
  cfg = det.cfg
  opt = optax.adamw(cfg.lr, weight_decay=cfg.weight_decay)
  init_rng, run_rng = jax.random.split(rng)
  x_train, fmask = data["x_train"], data["fmask"]
  row_mask = (jnp.arange(x_train.shape[0]) < data["n_train"]).astype(x_train.dtype)
  params, aux = det.init(init_rng, x_train, row_mask, fmask, bits)

  def step(carry, t):
    params, opt_state = carry
    rng_t = jax.random.fold_in(run_rng, t)
    idx = jax.random.randint(rng_t, (cfg.batch,), 0, data["n_train"])
    loss, grads = jax.value_and_grad(det.loss)(
        params, aux, x_train[idx], data["y_train"][idx], fmask,
        jax.random.fold_in(rng_t, 1), bits)
    updates, opt_state = opt.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  (params, _), losses = jax.lax.scan(step, (params, opt.init(params)),
                                     jnp.arange(cfg.steps))
  scores = det.score(params, aux, data["x_test"], fmask, bits)
  return {"scores": scores, "auroc": auroc(scores, data["y_test"], data["tmask"]),
          "losses": losses}


def pad_stack(datasets, y_visible=None):
  """Zero-pads a list of ADData to common shapes and stacks them (numpy, host side)."""
  dim = max(d.x_train.shape[1] for d in datasets)
  n = max(d.x_train.shape[0] for d in datasets)
  m = max(d.x_test.shape[0] for d in datasets)
  y_visible = y_visible or [np.zeros_like(d.y_train) for d in datasets]

  def pad(a, rows, cols=None):
    out = np.zeros((rows,) + ((cols,) if cols else ()), np.float32)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out

  return {
      "x_train": np.stack([pad(d.x_train, n, dim) for d in datasets]),
      "y_train": np.stack([pad(y, n) for y in y_visible]),
      "n_train": np.array([d.x_train.shape[0] for d in datasets], np.int32),
      "fmask": np.stack([pad(np.ones(d.x_train.shape[1]), dim) for d in datasets]),
      "x_test": np.stack([pad(d.x_test, m, dim) for d in datasets]),
      "y_test": np.stack([pad(d.y_test, m) for d in datasets]),
      "tmask": np.stack([pad(np.ones(d.x_test.shape[0]), m) for d in datasets]),
  }


@functools.lru_cache(maxsize=None)
def _compiled(cfg: DetectorConfig, dim: int, opt_level: int):
  det = Detector(cfg, dim)

  def run(rngs, bits, ds_idx, stacked):
    one = lambda r, b, i: train_one(det, r, b, jax.tree.map(lambda a: a[i], stacked))
    return jax.vmap(one)(rngs, bits, ds_idx)

  # XLA's backend optimization level trades compile time for run time: 0 compiles ~2x
  # faster and runs ~2x slower, the right choice for smoke runs and tests.
  opts = {} if opt_level < 0 else {"xla_backend_optimization_level": opt_level}
  return jax.jit(run, compiler_options=opts)


def fit(cfg: DetectorConfig, stacked, ds_idx, seeds, bits, opt_level: int = -1):
  """Trains one run per (ds_idx[i], seeds[i], bits[i]) in a single vmapped program.

  `stacked` comes from `pad_stack`; `bits[i] <= 0` means no LPR. Returns per-run test
  scores [R, M] (padded rows are meaningless), AUROC [R] and training losses [R, steps].
  `opt_level` >= 0 sets XLA's backend optimization level (-1: XLA's default).
  """
  seeds = np.asarray(seeds)
  rngs = jax.vmap(jax.random.key)(jnp.asarray(seeds))
  fn = _compiled(cfg, int(stacked["x_train"].shape[-1]), opt_level)
  return fn(rngs, jnp.asarray(bits, jnp.float32), jnp.asarray(ds_idx, jnp.int32),
            jax.tree.map(jnp.asarray, stacked))
