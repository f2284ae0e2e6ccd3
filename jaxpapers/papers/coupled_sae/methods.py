"""Multisubject coupled SAE (abstract 1): every method on one (features, responses) seed.

`fit_all` trains the coupled model's (lr, beta) grid and the two-stage SAE's lr grid
(each one vmapped scan program), selects each on the VALIDATION stories (coupled: mean
validation voxel correlation; SAE: validation reconstruction error, its own objective),
fits the ridge baselines with per-voxel CV alpha over training stories only, and returns
everything `evaluate` needs. The last simulated subject is held out of all training and
only used for the low-data transfer comparison.
"""
from __future__ import annotations

import dataclasses
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.papers.coupled_sae import analysis
from jaxpapers.papers.coupled_sae import baselines
from jaxpapers.papers.coupled_sae import data as data_lib
from jaxpapers.papers.coupled_sae import model
from jaxpapers.papers.coupled_sae import signal


@dataclasses.dataclass
class Split:
  x: np.ndarray            # (T, D)
  prev: np.ndarray         # (n_delays, T)
  xdel: np.ndarray         # (T, n_delays * D)
  y: np.ndarray            # (S, T, V_max): subject s's voxels first, zero-padded after
  lengths: list
  n_vox: list = None       # per subject: its voxel count (default: V_max for all)

  def __post_init__(self):
    if self.n_vox is None:
      self.n_vox = [self.y.shape[-1]] * self.y.shape[0]

  def ys(self, s: int) -> np.ndarray:
    """(T, V_s) the responses of subject s, without padding."""
    return self.y[s, :, :self.n_vox[s]]

  def vmask(self) -> np.ndarray:
    """(S, V_max) 1 for a subject's real voxels, 0 for padding."""
    return (np.arange(self.y.shape[-1])[None] < np.asarray(self.n_vox)[:, None]).astype(
        np.float32)


def pad_subjects(ys, v_max: int | None = None) -> tuple[np.ndarray, list]:
  """Per-subject (T, V_s) -> ((S, T, V_max) zero-padded, [V_s]).

  Real subjects have their own voxel counts. Padding to the widest subject with a mask
  (rather than a list of per-subject maps) keeps one (S, F, V_max) map tensor, so the
  coupled grid stays one vmapped, device-spread program; the cost is memory for the
  padded columns (real LeBel subjects differ by ~15% in voxel count).
  """
  n_vox = [int(y.shape[1]) for y in ys]
  v_max = max(n_vox) if v_max is None else int(v_max)
  T = ys[0].shape[0]
  out = np.zeros((len(ys), T, v_max), np.float32)
  for s, y in enumerate(ys):
    out[s, :, :y.shape[1]] = y
  return out, n_vox


def make_split(feats, resp, name, delays, v_max: int | None = None) -> Split:
  idx = feats.split[name]
  lengths = [feats.x[i].shape[0] for i in idx]
  y, n_vox = pad_subjects([data_lib.stack(ys, idx) for ys in resp.y], v_max)
  return Split(data_lib.stack(feats.x, idx), model.prev_index(lengths, delays),
               data_lib.delayed(feats.x, idx, delays), y, lengths, n_vox)


def grids(config):
  t = config.train
  joint = list(itertools.product(t.lrs, t.betas))
  return (np.array([a for a, _ in joint], np.float32), np.array([b for _, b in joint],
                                                                np.float32),
          np.array(t.sae_lrs, np.float32))


def train_grid(config, tr: Split, n_fit: int, seed: int, kind: str, map_alpha: float = 0.0,
               ckpt_dir: str | None = None, writer=None):
  """Trains the coupled (`kind="joint"`) or reconstruction-only (`"sae"`) grid.

  Both grids start from the same initialization and see the same minibatches. With a
  `ckpt_dir`, training runs in chunks of `ckpt_every` steps with a checkpoint after each
  and resumes from the newest one.
  """
  m, t = config.model, config.train
  n_delays = len(config.data.delays)
  lrs, betas, sae_lrs = grids(config)
  coupled = kind == "joint"
  if not coupled:
    lrs, betas = sae_lrs, np.zeros_like(sae_lrs)
  D = tr.x.shape[1]
  V = tr.y.shape[-1]
  key = jax.random.PRNGKey(seed)
  init_key, data_key = jax.random.split(jax.random.fold_in(key, 101))
  rep = lambda s, n: jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + a.shape), s)
  states = jax.jit(lambda key: rep(
      model.init_state(key, D, m.n_atoms, n_delays, n_fit, V, coupled), len(lrs)))(init_key)
  ckpt = checkpoint_lib.Checkpointer(ckpt_dir) if ckpt_dir else None
  start = 0
  if ckpt is not None:
    states, start = ckpt.restore_or(states)
  if writer is not None:  # rows at training steps
    writer.truncate_after(start, splits=("train" if coupled else "train_sae",))
  spec = model.TrainSpec(m.k, t.steps, t.batch, coupled)
  x = jnp.asarray(tr.x)
  y = jnp.asarray(tr.y[:n_fit]) if coupled else jnp.zeros((n_fit, 1, 1))
  vmask = jnp.asarray(tr.vmask()[:n_fit]) if coupled else jnp.ones((n_fit, 1))
  data = (x, model.pad_rows(x), jnp.asarray(tr.prev), y, vmask)
  chunk = t.ckpt_every if ckpt is not None else t.steps
  while start < t.steps:
    n = min(chunk, t.steps - start)
    run = model.make_train(spec, n)  # at most two chunk lengths: compiled once each
    states, mets = run(states, jnp.asarray(lrs), jnp.asarray(betas), data, data_key,
                       jnp.float32(map_alpha), jnp.int32(start))
    start += n
    if writer is not None:
      from jaxpapers.core import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
      last = {k: np.asarray(v[:, -1]) for k, v in mets.items()}  # (G, n) -> (G,)
      metrics_lib.check_finite(start, last)
      writer.write(start, {k: v.tolist() for k, v in last.items()},
                   split="train" if coupled else "train_sae")
    if ckpt is not None:
      ckpt.save(start, states)
  if ckpt is not None:
    ckpt.close()
  return jax.device_get(states)


def _member(states, i):
  # NumPy indexing: slicing device arrays leaf by leaf would compile one gather per shape.
  return jax.tree.map(lambda a: np.asarray(a)[i], states)


def eval_joint(params, split: Split, k: int, n_fit: int):
  z, pred = model.predict_all(params, jnp.asarray(split.x), jnp.asarray(split.prev), k)
  pred = np.asarray(pred)
  # A list: subjects may have different voxel counts.
  r = [signal.correlation(pred[s][:, :split.n_vox[s]], split.ys(s)) for s in range(n_fit)]
  return np.asarray(z), r


def recon_fvu(sae, x, k):
  xh = np.asarray(model.reconstruct(sae, jnp.asarray(x), k))
  return float(np.mean((xh - x) ** 2) / np.mean(x ** 2))


def fit_all(config, feats, resp, seed: int, ckpt_dir=None, log=print, writer=None):
  d, m = config.data, config.model
  delays = tuple(d.delays)
  n_delays = len(delays)
  data_lib.check_responses(feats, resp)
  S = len(resp.y)
  n_fit = S - 1 if (config.eval.hold_out_subject and S > 1) else S
  tr, va, te = (make_split(feats, resp, n, delays) for n in ("train", "val", "test"))
  lrs, betas, sae_lrs = grids(config)
  out = {"n_fit": n_fit, "splits": (tr, va, te), "grid": []}
  sub = lambda name: os.path.join(ckpt_dir, name) if ckpt_dir else None

  # Two-stage: the SAE with the best validation reconstruction, then ridge per subject.
  sae_states = train_grid(config, tr, n_fit, seed, "sae", ckpt_dir=sub("sae"), writer=writer)
  fvus = [recon_fvu(_member(sae_states, i)["params"]["sae"], va.x, m.k)
          for i in range(len(sae_lrs))]
  j = int(np.argmin(fvus))
  sae = _member(sae_states, j)["params"]["sae"]
  log(f"two-stage SAE: selected lr={sae_lrs[j]:g} (val recon FVU={fvus[j]:.4f})")
  codes = {n: model.codes_all(sae, jnp.asarray(s.x), jnp.asarray(s.prev), m.k)
           for n, s in (("train", tr), ("test", te))}
  out["two_stage"] = _ridge_method(np.asarray(codes["train"][1]), np.asarray(codes["test"][1]),
                                   tr, te, S, config)
  out["two_stage"].update(sae=sae, test_codes=np.asarray(codes["test"][0]),
                          lr=float(sae_lrs[j]), recon_fvu=recon_fvu(sae, te.x, m.k))
  # Every SAE lr's two-stage test r (fitted subjects): near-tied validation FVUs flip the
  # choice under float-rounding changes (device layout), so the table bounds its effect.
  out["sae_grid"] = []
  for i in range(len(sae_lrs)):
    p = _member(sae_states, i)["params"]["sae"]
    if i == j:
      r = out["two_stage"]["test_r"][:n_fit]
    else:
      c = {n: np.asarray(model.codes_all(p, jnp.asarray(s.x), jnp.asarray(s.prev), m.k)[1])
           for n, s in (("train", tr), ("test", te))}
      r = _ridge_method(c["train"], c["test"], tr, te, n_fit, config)["test_r"]
    out["sae_grid"].append({"lr": float(sae_lrs[i]), "val_fvu": fvus[i], "test_r": r})
  # The coupled maps' ridge penalty: fixed, or the median per-voxel alpha that CV over
  # training stories chose for the two-stage maps (same kind of regressors: delayed codes).
  alpha = config.train.map_alpha
  if alpha < 0:
    alpha = float(np.median(np.concatenate(out["two_stage"]["alphas"][:n_fit])))
  out["map_alpha"] = alpha
  log(f"coupled: map ridge penalty alpha={alpha:g}")
  states = train_grid(config, tr, n_fit, seed, "joint", alpha, ckpt_dir=sub("joint"),
                      writer=writer)

  # Coupled model: select (lr, beta) on validation voxel correlation.
  best, best_val = None, -np.inf
  for i in range(len(lrs)):
    p = _member(states, i)["params"]
    _, r_val = eval_joint(p, va, m.k, n_fit)
    z_te, r_te = eval_joint(p, te, m.k, n_fit)
    row = {"lr": float(lrs[i]), "beta": float(betas[i]),
           "val_r": float(np.mean([r.mean() for r in r_val])),
           "test_r": r_te, "test_codes": z_te, "recon_fvu": recon_fvu(p["sae"], te.x, m.k),
           "params": p}
    out["grid"].append(row)
    if row["val_r"] > best_val:
      best, best_val = row, row["val_r"]
  out["joint"] = best
  log(f"coupled: selected lr={best['lr']:g} beta={best['beta']:g} (val r={best_val:.4f})")
  # Ablation: the coupled model's codes with maps refitted by per-voxel CV ridge, which
  # separates what the shared codes carry from how well Adam fitted the maps.
  jc = {n: np.asarray(model.codes_all(best["params"]["sae"], jnp.asarray(s.x),
                                      jnp.asarray(s.prev), m.k)[1])
        for n, s in (("train", tr), ("test", te))}
  out["joint_refit"] = _ridge_method(jc["train"], jc["test"], tr, te, n_fit, config)

  # Dense ridge and PCA -> ridge (matched atom count).
  out["dense"] = _ridge_method(tr.xdel, te.xdel, tr, te, S, config)
  mu, comps = baselines.pca_fit(tr.x, m.n_atoms)
  pc = {n: signal.make_delayed_stories(baselines.pca_scores(s.x, mu, comps), s.lengths,
                                       delays) for n, s in (("train", tr), ("test", te))}
  out["pca"] = _ridge_method(pc["train"], pc["test"], tr, te, S, config)
  out["pca"].update(comps=comps, test_codes=baselines.pca_scores(te.x, mu, comps))
  out["pca_tuned"] = _pca_tuned(tr, va, te, n_fit, config)
  if resp.sim is not None:
    # Oracle: ridge on the delayed planted activations themselves.
    true = [resp.sim.codes[i] for i in range(len(resp.sim.codes))]
    oc = {n: data_lib.delayed(true, feats.split[n], delays) for n in ("train", "test")}
    out["oracle"] = _ridge_method(oc["train"], oc["test"], tr, te, S, config)
  out["n_delays"] = n_delays
  return out


def _pca_tuned(tr: Split, va: Split, te: Split, n_fit: int, config):
  """The textbook PCA baseline: k PCs -> per-voxel CV ridge, k chosen on validation.

  PCA-50 matches the atom count; a validation-tuned k is what a practitioner would fit,
  and beats PCA-50 where the signal is dense (more PCs carry the dense read-out). Every
  subject's voxels share the regressors and himalaya's per-voxel alphas are independent
  per target, so the fitted subjects' voxels are concatenated into one ridge per k (the
  same fits, one SVD per fold instead of one per subject).
  """
  delays = tuple(config.data.delays)
  ks = [int(k) for k in config.eval.pca_ks if k <= min(tr.x.shape)]
  if not ks:
    raise ValueError(f"eval.pca_ks={tuple(config.eval.pca_ks)}: no k <= "
                     f"min(training TRs, features) = {min(tr.x.shape)}")
  mu, comps = baselines.pca_fit(tr.x, max(ks))
  folds = baselines.story_folds(tr.lengths, config.eval.cv_folds)
  y_tr = np.concatenate([tr.ys(s) for s in range(n_fit)], axis=1)
  cuts = np.cumsum([0] + [tr.n_vox[s] for s in range(n_fit)])
  grid = []
  for k in ks:
    f = {n: signal.make_delayed_stories(baselines.pca_scores(s.x, mu, comps[:k]),
                                        s.lengths, delays)
         for n, s in (("train", tr), ("val", va), ("test", te))}
    w, _ = baselines.ridge_cv(f["train"], y_tr, folds, config.eval.alphas)
    r = {}
    for n, sp in (("val", va), ("test", te)):
      pred = baselines.predict(w, f["train"], y_tr, f[n])
      r[n] = [signal.correlation(pred[:, cuts[s]:cuts[s + 1]], sp.ys(s)) for s in range(n_fit)]
    grid.append({"k": k, "val_r": float(np.mean([x.mean() for x in r["val"]])),
                 "test_r": r["test"]})
  best = max(grid, key=lambda g: g["val_r"])
  return {"test_r": best["test_r"], "k": best["k"], "grid": grid}


def _ridge_method(f_tr, f_te, tr: Split, te: Split, S: int, config):
  folds = baselines.story_folds(tr.lengths, config.eval.cv_folds)
  weights, r, alphas = [], [], []
  for s in range(S):
    w, a = baselines.ridge_cv(f_tr, tr.ys(s), folds, config.eval.alphas)
    pred = baselines.predict(w, f_tr, tr.ys(s), f_te)
    weights.append(w.astype(np.float32))
    alphas.append(a)
    r.append(signal.correlation(pred, te.ys(s)))
  return {"weights": weights, "test_r": r, "alphas": alphas}  # per subject: (V_s,)


def transfer(config, fit, held: int):
  """Low-data fits for the held-out subject: ridge on the coupled codes vs dense ridge."""
  tr, _, te = fit["splits"]
  k = config.model.k
  sae = fit["joint"]["params"]["sae"]
  z_tr = np.asarray(model.codes_all(sae, jnp.asarray(tr.x), jnp.asarray(tr.prev), k)[1])
  z_te = np.asarray(model.codes_all(sae, jnp.asarray(te.x), jnp.asarray(te.prev), k)[1])
  rows = []
  for n in list(config.eval.transfer_trs) + [tr.x.shape[0]]:
    n = min(int(n), tr.x.shape[0])
    folds = baselines.block_folds(n, config.eval.cv_folds)
    res = {"n_trs": n}
    for name, a, b in (("coupled", z_tr, z_te), ("dense", tr.xdel, te.xdel)):
      w, _ = baselines.ridge_cv(a[:n], tr.ys(held)[:n], folds, config.eval.alphas)
      res[name] = signal.correlation(baselines.predict(w, a[:n], tr.ys(held)[:n], b),
                                     te.ys(held))
    rows.append(res)
  return rows


def delay_sum_maps(weights, n_delays):
  return np.stack([analysis.delay_sum(np.asarray(w), n_delays) for w in weights])
