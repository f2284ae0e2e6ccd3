"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection -- deep detectors.

Losses and anomaly scores of the seven deep detectors, each trainable with or without
LPR through the same code path: the loss and the score see `apply_lpr(params, bits,
spec)`, never the raw parameters, so precision is reduced both during training and at
inference. Scores follow each method's definition (higher = more anomalous):
  ae, dae, memae, vae: per-sample mean squared reconstruction error (VAE decodes z = mu);
  deepsvdd, deepsad:  squared distance ||phi(x) - c||^2 to the center c, fixed at init as
                      the mean initial embedding (Ruff et al. 2018, Sec. 3.3);
  devnet, mlp:        the network's scalar output (DevNet's anomaly score, the logit).
Deep SAD (Ruff et al. 2020, eq. 4) adds eta / (||phi(x) - c||^2 + eps) for the few labeled
anomalies; DevNet (Pang et al. 2019) learns a scalar score with the deviation loss from
the same few labeled anomalies (unlabeled rows act as normal); the MLP uses all training
labels with a class-balanced BCE.

Training: Adam(W) on i.i.d. minibatches, the whole run is one `lax.scan`; `fit` vmaps it
over one dataset's (seed, bits) runs at that dataset's own shapes and splits them over
the devices (`core.sharding.spread`), so "5 seeds x {no LPR, LPR}" (or a bit-width
sweep) of a set is one compiled program, and a set's numbers do not depend on which
other sets the call holds (issue 50, tenth pass).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import sharding
from jaxpapers.papers.lpr import models
from jaxpapers.papers.lpr import quantize

KINDS = ("ae", "vae", "dae", "memae", "deepsvdd", "deepsad", "devnet", "mlp")
AE_KINDS = ("ae", "vae", "dae", "memae")
SUPERVISION = {"ae": "unsup", "vae": "unsup", "dae": "unsup", "memae": "unsup",
               "deepsvdd": "unsup", "deepsad": "semi", "devnet": "semi", "mlp": "sup"}
# DevNet (Pang et al. 2019): Gaussian prior of reference scores and the deviation margin.
DEVNET_REF, DEVNET_MARGIN = 5000, 5.0


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
  code_relu: bool = True         # AE/DAE: ReLU on the code (False: linear code)
  # AE family: code size relative to the input width, clip(round(code_frac * d), 1,
  # latent) units of the `latent`-wide code per dataset (0: all `latent` units).
  code_frac: float = 0.0
  spec: quantize.LPRSpec = quantize.LPRSpec()
  # Steps after which the model also scores the test rows (`fit`'s `auroc_at`), e.g.
  # (100, 200, 400): one run of `steps` gives the AUROC of every shorter training (the
  # per-set steps choice of `selection.py`); () = only the final model.
  eval_steps: tuple = ()

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"unknown detector kind {self.kind!r}; expected one of {KINDS}")
    if list(self.eval_steps) != sorted(set(self.eval_steps)) or any(
        not 0 < s <= self.steps for s in self.eval_steps):
      raise ValueError(f"eval_steps {self.eval_steps} must increase within 1..steps={self.steps}")


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


def code_size(frac, d, latent: int):
  """Code units of a dataset with d real features: clip(round(frac * d), 1, latent)."""
  return jnp.clip(jnp.floor(frac * d + 0.5), 1, latent)


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


def name_id(name: str) -> int:
  """A stable 31-bit id of a string (dataset or detector name) to fold into keys.

  zlib.crc32, not Python's salted hash(), so ids agree across processes and runs.
  """
  return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _elementwise(key, shape, draw):
  """`draw(key_ij)` for every index (i, j) of a matrix, each from its own folded key.

  Element (i, j) depends only on (key, i, j), never on the matrix's shape, so a layer
  zero-padded to more inputs or outputs holds the same values on its real part.
  """
  rows, cols = shape
  def one(i, j):
    return draw(jax.random.fold_in(jax.random.fold_in(key, i), j))
  return jax.vmap(lambda i: jax.vmap(lambda j: one(i, j))(jnp.arange(cols)))(
      jnp.arange(rows))


# Flax's lecun_normal: truncated normal on [-2, 2] rescaled to unit variance.
_TRUNC_STD = 0.87962566103423978


def init_padding_invariant(params, key, fmask, output: str | None = None, code_n=None):
  """Re-draws every parameter so its real part is independent of the padded width.

  Same distributions as Flax's defaults (lecun_normal kernels with the REAL fan-in, zero
  biases, the MemAE memory N(0, 1/latent)), but each kernel entry comes from
  fold_in(key, path, i, j), so padding a dataset beside a wider one changes no draw.
  Padded input rows and the padded columns of the `output` layer (a path such as
  'decoder/Dense_2/kernel', the one that maps back to the input width) are zeroed.
  `code_n` (a relative code size, `DetectorConfig.code_frac`) is the real fan-in of the
  layer after the code and the real width of the MemAE memory items, so a masked code
  of n units starts as an AE built with n units.
  """
  d_real = jnp.sum(fmask)

  def one(path, w):
    name = quantize.path_name(path)
    k = jax.random.fold_in(key, name_id(name))
    if name.endswith("bias"):
      return jnp.zeros_like(w)
    if name.endswith("memory"):  # [mem_size, latent]: no padded axis
      unit = _elementwise(k, w.shape, lambda kk: jax.random.normal(kk, (), w.dtype))
      return unit / jnp.sqrt(jnp.asarray(w.shape[1] if code_n is None else code_n, w.dtype))
    unit = _elementwise(k, w.shape, lambda kk: jax.random.truncated_normal(
        kk, -2.0, 2.0, (), w.dtype)) / _TRUNC_STD
    if _first_kernel(path):  # [dim, h]: fan-in is the real width
      return unit / jnp.sqrt(d_real) * fmask[:, None]
    fan_in = code_n if code_n is not None and name == "decoder/Dense_0/kernel" else w.shape[0]
    unit = unit / jnp.sqrt(jnp.asarray(fan_in, w.dtype))
    if name == output:  # [h, dim]
      unit = unit * fmask[None, :]
    return unit

  return jax.tree_util.tree_map_with_path(one, params)


class Detector:
  """Init/loss/score of one detector kind on inputs zero-padded to `dim` features.

  Datasets of different widths share one compiled program: a feature mask `fmask` (1 =
  real feature) zeroes padded inputs, drops padded outputs from errors, and every
  initial weight is drawn per entry (`init_padding_invariant`, first layer scaled to the
  real fan-in), so each run equals the unpadded model.
  """

  def __init__(self, cfg: DetectorConfig, dim: int):
    self.cfg = cfg
    self.dim = dim
    self.net = models.build(cfg.kind, dim, cfg.hidden, cfg.latent, cfg.mem_size,
                            cfg.code_relu)

  def init(self, rng, x_train, row_mask, fmask, bits, code_n=None):
    """Parameters and the auxiliary state (the Deep SVDD/SAD center; else a dummy)."""
    # Flax's init only fixes the structure; the values are re-drawn padding-invariantly.
    out = (f"decoder/Dense_{len(self.cfg.hidden)}/kernel"
           if self.cfg.kind in AE_KINDS else None)
    cm = self.code_mask(fmask, code_n)
    params = init_padding_invariant(self.net.init(rng, x_train[:2]), rng, fmask, out,
                                    None if cm is None else jnp.sum(cm))
    if self.cfg.kind in ("deepsvdd", "deepsad"):
      feats = self.net.apply(quantize.apply_lpr(params, bits, self.cfg.spec), x_train)
      aux = _center(feats, row_mask)
    else:
      aux = jnp.zeros((self.cfg.latent,), x_train.dtype)
    return params, aux

  def code_mask(self, fmask, code_n=None):
    """[latent] mask of the code units a dataset uses (None: every unit).

    `code_n` (a dataset's own code size, `pad_stack(..., code_n=)`: the per-set
    validation rule of `selection.py`) wins over `code_frac`; both are clipped to
    1..latent."""
    if self.cfg.kind not in AE_KINDS:
      return None
    if code_n is not None:
      n = jnp.clip(code_n, 1, self.cfg.latent)
    elif self.cfg.code_frac > 0:
      n = code_size(self.cfg.code_frac, jnp.sum(fmask), self.cfg.latent)
    else:
      return None
    return (jnp.arange(self.cfg.latent) < n).astype(fmask.dtype)

  def _err(self, recon, x, fmask):
    """Per-sample mean squared error over the real features."""
    return jnp.sum(jnp.square(recon - x) * fmask[None, :], axis=-1) / jnp.sum(fmask)

  def loss(self, params, aux, x, y, fmask, rng, bits, code_n=None):
    cfg = self.cfg
    p = quantize.apply_lpr(params, bits, cfg.spec)
    cm = self.code_mask(fmask, code_n)
    if cfg.kind == "ae":
      return jnp.mean(self._err(self.net.apply(p, x, cm), x, fmask))
    if cfg.kind == "dae":
      # Noise of feature j from fold_in(rng, j): the same draws whatever the padding.
      noise = jax.vmap(lambda j: jax.random.normal(jax.random.fold_in(rng, j),
                                                   x.shape[:1]))(jnp.arange(x.shape[1]))
      noisy = x + cfg.noise_std * noise.T * fmask[None, :]
      return jnp.mean(self._err(self.net.apply(p, noisy, cm), x, fmask))
    if cfg.kind == "vae":
      recon, mu, logvar = self.net.apply(p, x, rng, cm)
      nll = 0.5 * jnp.sum(jnp.square(recon - x) * fmask[None, :], axis=-1)
      kl = 0.5 * jnp.sum(jnp.exp(logvar) + jnp.square(mu) - 1.0 - logvar, axis=-1)
      return jnp.mean(nll + cfg.kl_weight * kl)
    if cfg.kind == "memae":
      recon, att = self.net.apply(p, x, cm)
      ent = -jnp.sum(att * jnp.log(att + 1e-12), axis=-1)
      return jnp.mean(self._err(recon, x, fmask)) + cfg.entropy_weight * jnp.mean(ent)
    if cfg.kind in ("deepsvdd", "deepsad"):
      d2 = jnp.sum(jnp.square(self.net.apply(p, x) - aux[None, :]), axis=-1)
      if cfg.kind == "deepsvdd":
        return jnp.mean(d2)
      return jnp.mean(jnp.where(y > 0, cfg.eta / (d2 + 1e-6), d2))
    if cfg.kind == "devnet":
      # Deviation loss: unlabeled rows pulled to the prior's mean score, labeled anomalies
      # pushed DEVNET_MARGIN prior standard deviations above it (Pang et al. 2019, eq. 3).
      ref = jax.random.normal(rng, (DEVNET_REF,))
      dev = (self.net.apply(p, x)[:, 0] - jnp.mean(ref)) / jnp.std(ref)
      return jnp.mean(jnp.where(y > 0, jax.nn.relu(DEVNET_MARGIN - dev), jnp.abs(dev)))
    return _bce_balanced(self.net.apply(p, x)[:, 0], y)  # mlp

  def score(self, params, aux, x, fmask, bits, code_n=None):
    cfg = self.cfg
    p = quantize.apply_lpr(params, bits, cfg.spec)
    cm = self.code_mask(fmask, code_n)
    if cfg.kind in ("ae", "dae"):
      return self._err(self.net.apply(p, x, cm), x, fmask)
    if cfg.kind == "vae":
      return self._err(self.net.apply(p, x, None, cm)[0], x, fmask)
    if cfg.kind == "memae":
      return self._err(self.net.apply(p, x, cm)[0], x, fmask)
    if cfg.kind in ("deepsvdd", "deepsad"):
      return jnp.sum(jnp.square(self.net.apply(p, x) - aux[None, :]), axis=-1)
    return self.net.apply(p, x)[:, 0]


def optimizer(cfg: DetectorConfig):
  return optax.adamw(cfg.lr, weight_decay=cfg.weight_decay)


def train_step(det: Detector, run_rng, aux, bits, data, carry, t):
  """Step t of one run: an i.i.d. minibatch from fold_in(run_rng, t), one AdamW update.

  A dataset's own learning rate (`pad_stack(..., lr=)`, the per-set choice of
  `selection.py`) replaces `cfg.lr`: AdamW at rate 1 times the rate, the same update
  -lr * (adam + weight_decay * w) as optax.adamw(lr)."""
  cfg = det.cfg
  params, opt_state = carry
  rng_t = jax.random.fold_in(run_rng, t)
  idx = jax.random.randint(rng_t, (cfg.batch,), 0, data["n_train"])
  loss, grads = jax.value_and_grad(det.loss)(
      params, aux, data["x_train"][idx], data["y_train"][idx], data["fmask"],
      jax.random.fold_in(rng_t, 1), bits, data.get("code_n"))
  if "lr" not in data:
    updates, opt_state = optimizer(cfg).update(grads, opt_state, params)
  else:
    updates, opt_state = optax.adamw(1.0, weight_decay=cfg.weight_decay).update(
        grads, opt_state, params)
    updates = jax.tree.map(lambda u: u * data["lr"], updates)
  return (optax.apply_updates(params, updates), opt_state), loss


def init_run(det: Detector, rng, bits, data):
  """(run key, aux, (params, optimizer state)) of one run before its first step."""
  init_rng, run_rng = jax.random.split(rng)
  x_train = data["x_train"]
  row_mask = (jnp.arange(x_train.shape[0]) < data["n_train"]).astype(x_train.dtype)
  params, aux = det.init(init_rng, x_train, row_mask, data["fmask"], bits, data.get("code_n"))
  return run_rng, aux, (params, optimizer(det.cfg).init(params))


def train_one(det: Detector, rng, bits, data):
  """One full training run (a lax.scan over steps); returns test scores, AUROC, losses.

  `data` holds one (padded) dataset: x_train [N, D], y_train [N] (the labels this
  detector may see), n_train (real rows), fmask [D], x_test [M, D], y_test [M], tmask [M].
  """
  run_rng, aux, carry = init_run(det, rng, bits, data)
  step = lambda c, t: train_step(det, run_rng, aux, bits, data, c, t)
  score = lambda params: det.score(params, aux, data["x_test"], data["fmask"], bits,
                                   data.get("code_n"))
  if not det.cfg.eval_steps:
    (params, _), losses = jax.lax.scan(step, carry, jnp.arange(det.cfg.steps))
    scores = score(params)
    return {"scores": scores, "auroc": auroc(scores, data["y_test"], data["tmask"]),
            "losses": losses}
  # The same steps cut into segments at `eval_steps`, the model scored after each.
  segments, at, start = [], [], 0
  for stop in tuple(det.cfg.eval_steps) + (det.cfg.steps,):
    if stop > start:
      carry, seg = jax.lax.scan(step, carry, jnp.arange(start, stop))
      segments.append(seg)
      start = stop
    scores = score(carry[0])
    at.append(auroc(scores, data["y_test"], data["tmask"]))
  return {"scores": scores, "auroc": at[-1], "losses": jnp.concatenate(segments),
          "auroc_at": jnp.stack(at[:-1])}


def pad_stack(datasets, y_visible=None, code_n=None, lr=None):
  """Zero-pads a list of ADData to common shapes and stacks them (numpy, host side).

  `code_n` (one int per dataset) gives each dataset its own code size in the AE family
  (a mask on a `latent`-wide code); None keeps `DetectorConfig.code_frac`/`latent`.
  `lr` (one float per dataset) gives each its own learning rate; None: `cfg.lr`."""
  dim = max(d.x_train.shape[1] for d in datasets)
  n = max(d.x_train.shape[0] for d in datasets)
  m = max(d.x_test.shape[0] for d in datasets)
  y_visible = y_visible or [np.zeros_like(d.y_train) for d in datasets]

  def pad(a, rows, cols=None):
    out = np.zeros((rows,) + ((cols,) if cols else ()), np.float32)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out

  extra = {} if code_n is None else {"code_n": np.asarray(code_n, np.float32)}
  if lr is not None:
    extra["lr"] = np.asarray(lr, np.float32)
  return {
      **extra,
      "x_train": np.stack([pad(d.x_train, n, dim) for d in datasets]),
      "y_train": np.stack([pad(y, n) for y in y_visible]),
      "n_train": np.array([d.x_train.shape[0] for d in datasets], np.int32),
      "fmask": np.stack([pad(np.ones(d.x_train.shape[1]), dim) for d in datasets]),
      "x_test": np.stack([pad(d.x_test, m, dim) for d in datasets]),
      "y_test": np.stack([pad(d.y_test, m) for d in datasets]),
      "tmask": np.stack([pad(np.ones(d.x_test.shape[0]), m) for d in datasets]),
  }


# Runs (rng, bits, dataset index) are mapped; the stacked datasets are shared.
RUN_AXES = (0, 0, 0, None)


def run_key(rng, kind: str):
  # Every random draw of a run descends from (study seed, detector kind) only: not from
  # the dataset's name (issue 50: renaming cardio.mat to 6_cardio.npz changed its
  # numbers), its position in the batch or the padded shapes.
  return jax.random.fold_in(rng, name_id(kind))


def member(cfg: DetectorConfig, dim: int):
  """`one(rng, bits, ds_idx, stacked)`: one whole run on dataset `ds_idx` of the stack."""
  det = Detector(cfg, dim)

  def one(r, b, i, stacked):
    return train_one(det, run_key(r, cfg.kind), b, jax.tree.map(lambda a: a[i], stacked))
  return one


@functools.lru_cache(maxsize=None)
def _compiled(cfg: DetectorConfig, dim: int, opt_level: int):
  """The vmapped program over runs, split over every device (`core.sharding.spread`)."""
  one = member(cfg, dim)
  if opt_level < 0:
    return sharding.spread(one, in_axes=RUN_AXES)
  # XLA's backend optimization level trades compile time for run time: 0 compiles ~2x
  # faster and runs ~2x slower, the right choice for smoke runs and tests.
  return sharding.spread(one, in_axes=RUN_AXES,
                         compiler_options={"xla_backend_optimization_level": opt_level})


# Kinds whose runs go one per program call. MemAE (issue 50): XLA compiles its backward
# differently for 70 vmapped runs than for 10 or 20, so the gradients differ in the last
# bits and 400 steps through the attention's hard threshold grow that into different
# trainings (optdigits' MemAE AUROC moved by up to 11 points between the study's 7-set
# program and the set alone). So each MemAE run is its own program: its numbers do not
# depend on how many runs of its set a call asks for.
OWN_PROGRAM_KINDS = ("memae",)
# Fields of a `pad_stack` that are per-dataset settings, not data: a set's entries with
# other codes or rates share one program (they have the same shapes).
SETTINGS = ("code_n", "lr")


def _own_shapes(stacked, j: int):
  """Dataset j of a `pad_stack` without its padding (rows, test rows, features), as a
  stack of one. pad_stack puts every real value first along each axis."""
  n, d = int(stacked["n_train"][j]), int(np.sum(stacked["fmask"][j]))
  m = int(np.sum(stacked["tmask"][j]))
  sl = {"x_train": (slice(j, j + 1), slice(0, n), slice(0, d)),
        "y_train": (slice(j, j + 1), slice(0, n)), "n_train": (slice(j, j + 1),),
        "fmask": (slice(j, j + 1), slice(0, d)),
        "x_test": (slice(j, j + 1), slice(0, m), slice(0, d)),
        "y_test": (slice(j, j + 1), slice(0, m)), "tmask": (slice(j, j + 1), slice(0, m)),
        "code_n": (slice(j, j + 1),), "lr": (slice(j, j + 1),)}
  return {k: np.asarray(v)[sl[k]] for k, v in stacked.items()}


def _digest(own) -> str:
  """Identity of a dataset's data (not its code or rate): shapes and bytes of its arrays."""
  h = hashlib.sha1()
  for k in sorted(own):
    if k not in SETTINGS:
      a = np.ascontiguousarray(own[k])
      h.update(f"{k}{a.shape}{a.dtype}".encode())
      h.update(a.tobytes())
  return h.hexdigest()


def program_groups(stacked, ds_idx) -> list:
  """The program calls `fit` makes: [(dataset indices, run indices)], one per distinct
  dataset (entries of one set with other `code_n`/`lr` are the same dataset), in order
  of first appearance."""
  ds_idx = np.asarray(ds_idx)
  groups = {}
  for j in dict.fromkeys(int(j) for j in ds_idx):
    groups.setdefault(_digest(_own_shapes(stacked, j)), []).append(j)
  return [(js, np.flatnonzero(np.isin(ds_idx, js))) for js in groups.values()]


def fit(cfg: DetectorConfig, stacked, ds_idx, seeds, bits, opt_level: int = -1):
  """Trains one run per (ds_idx[i], seeds[i], bits[i]); a vmapped program per dataset.

  `stacked` comes from `pad_stack`; `bits[i] <= 0` means no LPR. Returns per-run test
  scores [R, M] (padded rows are meaningless), AUROC [R], training losses [R, steps] and,
  with `cfg.eval_steps`, `auroc_at` [R, len(eval_steps)] (the AUROC after those steps).

  Padding invariance (issue 50, tenth pass): each dataset's runs are one program at the
  dataset's OWN shapes (rows, test rows, features; no padding), vmapped over that
  dataset's runs only (its seeds x bits, and in `selection.py` its codes or rates), so a
  set's numbers are a function of (set, seeds, bits, config) alone, bit for bit, whatever
  else the stack holds. (Before, every set was zero-padded to the widest in the stack:
  the same model, but float round-off in the padded reductions differs, and training at
  lr 1e-2 grew it to 1.9 AUROC points per seed on ionosphere beside 64-wide optdigits.)
  Within a call the runs are split over every device (one device: the plain `jax.vmap`);
  kinds in `OWN_PROGRAM_KINDS` go one run per call. `opt_level` >= 0 sets XLA's backend
  optimization level (-1: XLA's default).
  """
  seeds = np.asarray(seeds)
  ds_idx = np.asarray(ds_idx)
  rngs = jax.vmap(jax.random.key)(jnp.asarray(seeds))
  bits = jnp.asarray(bits, jnp.float32)
  m_all, outs = stacked["x_test"].shape[1], {}
  for js, runs in program_groups(stacked, ds_idx):
    parts = [_own_shapes(stacked, j) for j in js]
    sub = jax.tree.map(lambda *a: jnp.asarray(np.concatenate(a)), *parts)
    local = np.asarray([js.index(int(j)) for j in ds_idx[runs]], np.int32)
    fn = _compiled(cfg, int(parts[0]["x_train"].shape[-1]), opt_level)
    calls = [[r] for r in range(len(runs))] if cfg.kind in OWN_PROGRAM_KINDS else [
        list(range(len(runs)))]
    for c in calls:
      if cfg.kind in OWN_PROGRAM_KINDS:  # a stack of its one dataset, as before
        data, at = jax.tree.map(lambda a: a[local[c[0]]:local[c[0]] + 1], sub), [0]
      else:
        data, at = sub, local[c]
      out = fn(rngs[runs[c]], bits[runs[c]], jnp.asarray(at, jnp.int32), data)
      for k, v in out.items():
        v = np.asarray(v)
        if k == "scores":  # test rows back to the stack's padded count
          v = np.pad(v, ((0, 0), (0, m_all - v.shape[1])))
        if k not in outs:
          outs[k] = np.zeros((len(ds_idx),) + v.shape[1:], v.dtype)
        outs[k][runs[c]] = v
  return outs
