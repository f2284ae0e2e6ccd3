"""Post-hoc explainers of the backbone and the explanation metrics.

Every explanation is a score per (input step, edge) of a window, [t_in, E]: the mask
probabilities of the trained-in methods (STGIB, GSAT, decoupled), attention weights, or
one of these post-hoc explainers of the unmasked backbone:

  gnnexplainer  Ying et al. 2019, as in PyG's GNNExplainer: a sigmoid edge mask (here one
                per step) from PyG's start (logits N(0, relu gain * sqrt(2 / 2N))),
                optimised by Adam (100 steps) to keep the masked prediction close to the
                full one (MSE for regression) + 0.005 * sum(mask) + 1.0 * mean mask
                entropy; its Adam step is tuned on validation fid+ (study.py; the fifth
                run picked PyG's 0.01). At small steps the uniform size / entropy terms
                move every logit alike and the mask keeps the order of its random start
                (diagnose gnnexp measures it)
  occlusion     |change of the forecast| (mean over horizons and nodes) when one (step,
                edge) message is removed, for every entry: faithful to the model by
                construction (the positive control on a trained model)
  saliency      |d sum(y_hat) / d m| at m = 1 (Simonyan et al. on the edge mask)
  ig            integrated gradients (Sundararajan et al. 2017) of sum(y_hat) along
                m = a * 1, a in (0, 1], baseline m = 0, Riemann midpoints; |attribution|

Metrics (per window, then averaged):
  auroc         of the scores against the simulator's labels (windows whose truth is all
                0 or all 1 are skipped): an entry is causal iff its value arrives through
                an open gate after the window's end (simulator.window_truth);
                auroc_pending: the same among the pending entries only (which open gate,
                without the entries' position); auroc_within_edge: among the pending
                entries, per edge over all windows and steps, then the mean over edges
                (without the edge's identity: an input-free per-edge ranking gets 0.5);
                auroc_former: against the former labels (every open arrival, also those
                already seen by the destination)
  fid_plus      MAE(keep all but the top-k entries) - MAE(full): higher = the explanation
                is necessary
  fid_minus     MAE(keep only the top-k entries) - MAE(full): lower = it is sufficient
  consistency   mean Jaccard overlap of the top-k edges of adjacent input steps
  consistency_flicker  the same for the flicker control of the explanation: each edge's
                scores permuted at random over the input steps (independently per window
                and edge), so every edge keeps its sparsity but its mask flips at random
                between steps; consistency above it is temporal structure, not sparsity
                or a static edge choice
  feature AUROC the feature masks [t_in, N, C] (STGIB's; saliency / IG of the input and
                GNNExplainer's feature mask for the backbone) against the simulator's feature truth: the distractor
                channel is non-causal (0), speed and time of day are causal (1)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.papers.stgib import model as model_lib


def _pred(spec, params, x, r, override):
  return model_lib.forward(spec, params, x, jax.random.PRNGKey(0), r, False,
                           override=override)[0]


def gnnexplainer_init(spec, key):
  """PyG's edge-mask start: randn(E) * calculate_gain('relu') * sqrt(2 / (2 N)), mean 0
  (RexYing's original code starts at mean 1; until the fifth run so did ours)."""
  std = jnp.sqrt(2.0) * jnp.sqrt(2.0 / (2 * spec.n))
  return std * jax.random.normal(key, (spec.t_in, spec.e))


def gnnexplainer(spec, params, x, r, steps=100, lr=0.01, size=0.005, ent=1.0, key=None):
  """[t_in, E] mask of one window (PyG's defaults; the study tunes lr on validation fid+)."""
  key = jax.random.PRNGKey(0) if key is None else key
  full = jax.lax.stop_gradient(_pred(spec, params, x, r, None))
  logits = gnnexplainer_init(spec, key)
  opt = optax.adam(lr)

  def loss(lg):
    m = jax.nn.sigmoid(lg)
    y = _pred(spec, params, x, r, m)
    h = -m * jnp.log(m + 1e-15) - (1 - m) * jnp.log(1 - m + 1e-15)
    return jnp.mean((y - full) ** 2) + size * m.sum() + ent * h.mean()

  def body(carry, _):
    lg, o = carry
    g = jax.grad(loss)(lg)
    u, o = opt.update(g, o, lg)
    return (optax.apply_updates(lg, u), o), None

  (lg, _), _ = jax.lax.scan(body, (logits, opt.init(logits)), None, length=steps)
  return jax.nn.sigmoid(lg)


def gnnexplainer_features(spec, params, x, r, steps=100, lr=0.01, size=1.0, ent=0.1,
                          key=None):
  """[t_in, N, C] feature mask of one window: PyG's GNNExplainer with
  node_mask_type="attributes" and no edge mask (one entry per step, node and channel,
  multiplying the input; init N(0, 0.1) logits; MSE + 1.0 * mean(mask) + 0.1 * mean
  entropy, PyG's node_feat_size / node_feat_reduction / node_feat_ent)."""
  key = jax.random.PRNGKey(0) if key is None else key
  pred = lambda fm: model_lib.forward(spec, params, x, jax.random.PRNGKey(0), r, False,
                                      foverride=fm)[0]
  full = jax.lax.stop_gradient(pred(None))
  logits = 0.1 * jax.random.normal(key, x.shape)
  opt = optax.adam(lr)

  def loss(lg):
    m = jax.nn.sigmoid(lg)
    h = -m * jnp.log(m + 1e-15) - (1 - m) * jnp.log(1 - m + 1e-15)
    return jnp.mean((pred(m) - full) ** 2) + size * m.mean() + ent * h.mean()

  def body(carry, _):
    lg, o = carry
    u, o = opt.update(jax.grad(loss)(lg), o, lg)
    return (optax.apply_updates(lg, u), o), None

  (lg, _), _ = jax.lax.scan(body, (logits, opt.init(logits)), None, length=steps)
  return jax.nn.sigmoid(lg)


def occlusion(spec, params, x, r):
  """[t_in, E]: mean |y_hat(full) - y_hat(entry removed)| for every (step, edge) entry."""
  full = _pred(spec, params, x, r, None)
  eye = jnp.eye(spec.t_in * spec.e).reshape(-1, spec.t_in, spec.e)
  cut = lambda o: jnp.abs(_pred(spec, params, x, r, 1.0 - o) - full).mean()
  return jax.lax.map(cut, eye, batch_size=spec.e).reshape(spec.t_in, spec.e)


def saliency(spec, params, x, r):
  f = lambda m: _pred(spec, params, x, r, m).sum()
  return jnp.abs(jax.grad(f)(jnp.ones((spec.t_in, spec.e))))


def integrated_gradients(spec, params, x, r, steps=16, signed=False):
  f = lambda m: _pred(spec, params, x, r, m).sum()
  ones = jnp.ones((spec.t_in, spec.e))
  alphas = (jnp.arange(steps) + 0.5) / steps
  grads = jax.vmap(lambda a: jax.grad(f)(a * ones))(alphas)
  attr = grads.mean(0) * ones  # (m - baseline) * average gradient along the path
  return attr if signed else jnp.abs(attr)


def feature_saliency(spec, params, x, r):
  """|d sum(y_hat) / d x|, [t_in, N, C]."""
  f = lambda xx: model_lib.forward(spec, params, xx, jax.random.PRNGKey(0), r, False)[0].sum()
  return jnp.abs(jax.grad(f)(x))


def feature_ig(spec, params, x, r, steps=16):
  """|integrated gradients| of sum(y_hat) w.r.t. the input, baseline x = 0 (z units)."""
  f = lambda xx: model_lib.forward(spec, params, xx, jax.random.PRNGKey(0), r, False)[0].sum()
  alphas = (jnp.arange(steps) + 0.5) / steps
  grads = jax.vmap(lambda a: jax.grad(f)(a * x))(alphas)
  return jnp.abs(grads.mean(0) * x)


def feature_truth(shape, channels, noncausal=("distractor",)):
  """[..., C] bool: True for the channels that drive the target."""
  t = np.array([c not in noncausal for c in channels])
  return np.broadcast_to(t, tuple(shape[:-1]) + (len(channels),))


def flicker_control(scores, rng):
  """[..., t_in, E] scores with each (window, edge) series permuted over the steps."""
  s = np.asarray(scores)
  order = np.argsort(rng.random(s.shape), axis=-2)
  return np.take_along_axis(s, order, axis=-2)


def topk_mask(scores, frac):
  """[W, t_in, E] scores -> 0/1 mask of the top frac of each window's entries."""
  w = scores.reshape(scores.shape[0], -1)
  k = max(1, int(round(frac * w.shape[1])))
  # Rank with a tiny deterministic tie-break so equal scores (attention of a node with one
  # in-edge, constant masks) do not all enter or all leave the top-k together.
  tie = np.arange(w.shape[1])[None] * 1e-9
  order = np.argsort(-(np.asarray(w, np.float64) + tie), axis=1)
  out = np.zeros_like(w, dtype=np.float32)
  np.put_along_axis(out, order[:, :k], 1.0, axis=1)
  return out.reshape(scores.shape)


def auroc(scores, truth):
  """Mann-Whitney AUROC (ties count one half); nan if truth is constant."""
  s = np.asarray(scores, np.float64).ravel()
  y = np.asarray(truth, bool).ravel()
  n1, n0 = y.sum(), (~y).sum()
  if n1 == 0 or n0 == 0:
    return np.nan
  order = np.argsort(s, kind="mergesort")
  ranks = np.empty(len(s))
  sorted_s = s[order]
  # average ranks for ties
  i = 0
  while i < len(s):
    j = i
    while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
      j += 1
    ranks[order[i:j + 1]] = 0.5 * (i + j) + 1
    i = j + 1
  return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def mean_auroc(scores, truth):
  vals = [auroc(s, t) for s, t in zip(scores, truth)]
  vals = [v for v in vals if np.isfinite(v)]
  return float(np.mean(vals)) if vals else float("nan")


def within_edge_auroc(scores, truth, pending):
  """AUROC within each edge, averaged over edges: per edge, the AUROC of its pending
  entries pooled over every window and input step ([W, t_in, E] each), then the mean over
  the edges whose pending entries hold both classes (nan if none). It removes the edge's
  identity: a fixed per-edge ranking (edge_rate: which edges a regime opens) is constant
  within an edge and scores exactly 0.5, so what is left is *when* an edge is causal."""
  s, t, p = (np.asarray(a) for a in (scores, truth, pending))
  vals = [auroc(s[..., e][p[..., e]], t[..., e][p[..., e]]) for e in range(s.shape[-1])]
  vals = [v for v in vals if np.isfinite(v)]
  return float(np.mean(vals)) if vals else float("nan")


def consistency(scores, frac):
  """Mean Jaccard of the top-k edge sets at adjacent input steps, [W, t_in, E]."""
  W, T, E = scores.shape
  k = max(1, int(round(frac * E)))
  tie = np.arange(E)[None, None] * 1e-9
  top = np.argsort(-(np.asarray(scores, np.float64) + tie), axis=2)[..., :k]
  sets = np.zeros((W, T, E), bool)
  np.put_along_axis(sets, top, True, axis=2)
  inter = (sets[:, 1:] & sets[:, :-1]).sum(-1)
  union = (sets[:, 1:] | sets[:, :-1]).sum(-1)
  return float(np.mean(inter / np.maximum(union, 1)))


def truth_consistency(truth):
  """The same Jaccard for the ground-truth sets themselves (the reference)."""
  a, b = truth[:, 1:], truth[:, :-1]
  inter = (a & b).sum(-1)
  union = (a | b).sum(-1)
  return float(np.mean(np.where(union > 0, inter / np.maximum(union, 1), 1.0)))
