"""llops study part 1: kernel approximation on real queries and keys.

A *problem* is one attention head of a trained LM: its post-RoPE queries, keys and values
on windows of text, (N, T, D) each, split into train / validation / test windows (the
test windows are the held-out end of the text). For each feature map and state size:

  random maps (PolySketch Gaussian / Hadamard, Performer) are drawn per seed;
  learned maps (LLoPS, LLoPS + linear term, PolySketchFormer's learned sketch, Hedgehog,
  BASED Taylor's projection) are fitted per problem by distillation: Adam on batches of
  train windows minimising the same objective for every learned map,
      (1 - cos^2(K^, K)) + CE(attention rows of K, attention rows of K^),
  the scale-free kernel-matrix error plus Hedgehog's attention-weight cross-entropy,
  with K the exact causal kernel (LN q . LN k)^p. Every (problem, seed, LR) member is one
  row of ONE vmapped program spread over the devices (core.sharding.spread); the LR is
  chosen per (map, state) on the validation windows.

Metrics on the test windows (causal pairs only):
  kernel_err  ||c K^ - K||_F / ||K||_F with the best scalar c (so maps of another
              kernel family are not charged for a global scale)
  out_err     ||O^ - O||_F / ||O||_F, O the exact degree-p attention output
              (normalizer 1 + sum), O^ the map's linear attention (its family's normalizer)
  soft_err    the same against softmax attention softmax(LN q . LN k / sqrt(d)) (the
              target Performer / Taylor / Hedgehog / elu were designed for: a control)
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import sharding
from jaxpapers.papers.llops import features


def _tril(T):
  return jnp.tril(jnp.ones((T, T), bool))[None]


def targets(q, k, v, degree: int):
  """Exact causal kernel K (N,T,T), poly output O and softmax output (N,T,D)."""
  T, d = q.shape[1], q.shape[-1]
  qn, kn = features.layer_norm(q), features.layer_norm(k)
  dots = jnp.einsum("ntd,nsd->nts", qn, kn)
  mask = _tril(T)
  K = jnp.where(mask, dots ** degree, 0.0)
  out = jnp.einsum("nts,nsd->ntd", K, v) / (1.0 + jnp.sum(K, -1, keepdims=True))
  logits = jnp.where(mask, dots / math.sqrt(d), -1e30)
  soft = jnp.einsum("nts,nsd->ntd", jax.nn.softmax(logits, -1), v)
  return K, out, soft


def approx(mp: features.Map, params, q, k, v):
  """The map's causal kernel matrix (N,T,T) and linear-attention output (N,T,D)."""
  fm = {n: (jax.lax.stop_gradient(x) if n in mp.frozen else x) for n, x in params.items()}
  fq = mp.phi(fm, features.layer_norm(q))
  fk = mp.phi(fm, features.layer_norm(k))
  Kh = jnp.where(_tril(q.shape[1]), jnp.einsum("ntf,nsf->nts", fq, fk), 0.0)
  bias = 1.0 if mp.family == "poly" else 1e-6
  out = jnp.einsum("nts,nsd->ntd", Kh, v) / (bias + jnp.sum(Kh, -1, keepdims=True))
  return Kh, out


def _unit(x):
  """x / ||x||_F, scaled by max|x| first: degree-4 kernels reach 1e7 per entry and their
  squared sums overflow float32 (which made the distillation loss NaN)."""
  x = x / (jnp.max(jnp.abs(x)) + 1e-30)
  return x / (jnp.sqrt(jnp.sum(x * x)) + 1e-30)


def kernel_cos(Kh, K):
  return jnp.sum(_unit(Kh) * _unit(K))


def metrics(mp, params, q, k, v, degree):
  K, out, soft = targets(q, k, v, degree)
  Kh, outh = approx(mp, params, q, k, v)
  # ||c K^ - K|| / ||K|| at the best scalar c is exactly sqrt(1 - cos^2(K^, K)).
  cos = kernel_cos(Kh, K)
  rel = lambda a, b: jnp.sqrt(jnp.sum(jnp.square(a - b)) / jnp.sum(jnp.square(b)))
  return {"kernel_err": jnp.sqrt(jnp.maximum(1.0 - cos * cos, 0.0)),
          "out_err": rel(outh, out), "soft_err": rel(outh, soft)}


def distill_loss(mp, params, q, k, v, degree):
  K, _, _ = targets(q, k, v, degree)
  Kh, _ = approx(mp, params, q, k, v)
  cos2 = jnp.square(kernel_cos(Kh, K))
  # Attention rows as distributions over the visible keys (CE of Hedgehog, Zhang 2024).
  mask = _tril(q.shape[1])
  p = K / (jnp.sum(K, -1, keepdims=True) + 1e-30)
  ph = jnp.maximum(Kh, 0.0) / (jnp.sum(jnp.maximum(Kh, 0.0), -1, keepdims=True) + 1e-30)
  ce = -jnp.sum(jnp.where(mask, p * jnp.log(ph + 1e-12), 0.0)) / (q.shape[0] * q.shape[1])
  return (1.0 - cos2) + ce


def fit_member(mp, degree, steps, batch, seed, lr, q_tr, k_tr, v_tr):
  """One member: init the map from `seed`, Adam(lr) for `steps` on train windows."""
  d = q_tr.shape[-1]
  params = mp.init(jax.random.PRNGKey(seed), d)
  if not mp.learned or steps == 0:
    return params
  opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))
  state = opt.init(params)

  def step(carry, i):
    params, state = carry
    idx = jax.random.randint(jax.random.fold_in(jax.random.PRNGKey(seed + 1000), i),
                             (batch,), 0, q_tr.shape[0])
    loss, g = jax.value_and_grad(lambda p: distill_loss(mp, p, q_tr[idx], k_tr[idx],
                                                        v_tr[idx], degree))(params)
    up, state = opt.update(g, state, params)
    return (optax.apply_updates(params, up), state), loss

  (params, _), _ = jax.lax.scan(step, (params, state), jnp.arange(steps))
  return params


def member_fn(mp, degree, steps, batch):
  """(problem, seed, lr, 9 arrays of train/val/test q, k, v) -> {val, test} metrics."""
  def member(p, s, lr, qtr, ktr, vtr, qva, kva, vva, qte, kte, vte):
    del p
    params = fit_member(mp, degree, steps, batch, s, lr, qtr, ktr, vtr)
    return {"val": metrics(mp, params, qva, kva, vva, degree),
            "test": metrics(mp, params, qte, kte, vte, degree)}
  return member


def run_map(mp, degree, problems, seeds, lrs, steps, batch, mesh=None):
  """Rows of metrics for one map over problems x seeds x lrs (one spread program).

  `problems`: dict of stacked arrays {train, val, test}: each (P, N, T, D) triples."""
  P = problems["q_train"].shape[0]
  lrs = lrs if mp.learned else (0.0,)
  grid = [(p, s, lr) for p in range(P) for s in seeds for lr in lrs]
  pi = jnp.asarray([g[0] for g in grid])
  si = jnp.asarray([g[1] for g in grid])
  li = jnp.asarray([g[2] for g in grid], jnp.float32)

  member = member_fn(mp, degree, steps, batch)
  keys = ("q_train", "k_train", "v_train", "q_val", "k_val", "v_val",
          "q_test", "k_test", "v_test")
  data = [jnp.asarray(problems[k])[pi] for k in keys]
  out = sharding.spread(member, mesh)(pi, si, li, *data)
  out = jax.device_get(out)
  rows = []
  for i, (p, s, lr) in enumerate(grid):
    rows.append({"map": mp.name, "state": mp.state, "problem": p, "seed": s, "lr": lr,
                 **{f"val_{m}": float(out["val"][m][i]) for m in out["val"]},
                 **{f"test_{m}": float(out["test"][m][i]) for m in out["test"]}})
  return rows


def select(rows, lrs):
  """Per (map, state): the LR with the lowest mean validation out_err; the chosen rows."""
  chosen, log = [], []
  for key in sorted({(r["map"], r["state"]) for r in rows}):
    rs = [r for r in rows if (r["map"], r["state"]) == key]
    grid = sorted({r["lr"] for r in rs})
    score = {lr: np.mean([r["val_out_err"] for r in rs if r["lr"] == lr]) for lr in grid}
    best = min(grid, key=lambda lr: score[lr] if np.isfinite(score[lr]) else np.inf)
    edge = len(grid) > 1 and best in (grid[0], grid[-1])
    log.append({"map": key[0], "state": key[1], "grid": grid, "val_out_err":
                [round(float(score[lr]), 4) for lr in grid], "chosen_lr": best, "edge": edge})
    chosen += [r for r in rs if r["lr"] == best]
  return chosen, log


def summarize(chosen):
  """Mean and spread over seeds (of the per-seed mean over problems) per (map, state)."""
  table = []
  for key in sorted({(r["map"], r["state"]) for r in chosen}, key=lambda k: (k[1], k[0])):
    rs = [r for r in chosen if (r["map"], r["state"]) == key]
    row = {"map": key[0], "state": key[1], "lr": rs[0]["lr"]}
    for m in ("kernel_err", "out_err", "soft_err"):
      per_seed = [np.mean([r[f"test_{m}"] for r in rs if r["seed"] == s])
                  for s in sorted({r["seed"] for r in rs})]
      row[m] = float(np.mean(per_seed))
      row[f"{m}_std"] = float(np.std(per_seed))
    row["seeds"] = len({r["seed"] for r in rs})
    table.append(row)
  return table


def split_windows(qkv_layers, layers, heads_per_kv, n_train, n_val):
  """Problems from recorded (q, k, v) per layer: one problem per (layer, kv head), the
  first query head of its group. Returns the dict run_map takes, arrays (P, N, T, D)."""
  out = {k: [] for k in ("q_train", "k_train", "v_train", "q_val", "k_val", "v_val",
                         "q_test", "k_test", "v_test")}
  names = []
  for layer in layers:
    q, k, v = qkv_layers[layer]
    for kv in range(k.shape[2]):
      qh = q[:, :, kv * heads_per_kv]
      kh, vh = k[:, :, kv], v[:, :, kv]
      for part, sl in (("train", slice(0, n_train)), ("val", slice(n_train, n_train + n_val)),
                       ("test", slice(n_train + n_val, None))):
        out[f"q_{part}"].append(qh[sl])
        out[f"k_{part}"].append(kh[sl])
        out[f"v_{part}"].append(vh[sl])
      names.append(f"L{layer}.kv{kv}")
  return {k: np.stack(v).astype(np.float32) for k, v in out.items()}, names
