"""The positive control, diagnosed: do the simulator's causal edges matter to a forecast?

  python -m jaxpapers.papers.stgib.diagnose oracle
      the true gated VAR (simulator.oracle_forecast) from the true past: 15/30/60-min MAE
      (mph) in full, with the truth's top 20% of (step, edge) entries cut, with a random
      20% cut, with no graph, and the daily profile alone; old and new simulator settings
  python -m jaxpapers.papers.stgib.diagnose oracle_auroc
      the edge AUROC's positive control: the true model explained by occlusion (one
      (step, edge) entry cut at a time) and random scores, against the study's labels
      (pending arrivals) and the former labels (every open arrival), per generator
  python -m jaxpapers.papers.stgib.diagnose gnnexp "<config arg>" <study workdir> [lrs]
      GNNExplainer of a study's backbone members at each Adam step: the rank correlation
      of its final mask with its random start, and the study's metrics
  python -m jaxpapers.papers.stgib.diagnose backbone "<config arg>" [kind]
      trains `kind` (default the backbone) on the config's lr grid (3 seeds), picks the lr
      on validation, prints the validation curve, test MAE vs historical average and
      persistence, and fid+ / fid- of the ground truth, random scores, the truth with its
      after-the-window arrivals first, the last input steps, and saliency
  python -m jaxpapers.papers.stgib.diagnose gib "<config arg>"
      trains GIB (3 seeds, train.lr) and after every eval_every steps probes its
      discriminator T on 64 training windows in training mode: T's output
      pre-activation (joint / marginal pairs) and the share at or below 0 (a dead output
      ReLU), the hidden units dead on every input, E_joint[T], log E_marg[e^T], the DV
      estimate, the embeddings' spread, the subgraph's share (mean sqrt(m_e)), and the DV a fresh
      discriminator without the output ReLU reaches on these embeddings (300 Adam steps
      on half of the pairs, scored on the other half): whether there is MI left to find
"""
from __future__ import annotations

import sys
import tempfile
import time

import numpy as np

import jax
import jax.numpy as jnp
import optax

from jaxpapers.core import config as config_lib
from jaxpapers.core import population
from jaxpapers.papers.stgib import data as data_lib
from jaxpapers.papers.stgib import experiment as ex
from jaxpapers.papers.stgib import model as model_lib
from jaxpapers.papers.stgib import simulator as sim_lib
from jaxpapers.papers.stgib import train as train_lib

OLD = dict(delays=(1, 2), incident_len=(1, 3))


def _top(scores, frac=0.2):
  flat = scores.reshape(len(scores), -1)
  k = int(round(frac * flat.shape[1]))
  m = np.zeros_like(flat, bool)
  np.put_along_axis(m, np.argsort(-flat, 1)[:, :k], True, 1)
  return m.reshape(scores.shape)


def oracle():
  for gen in sim_lib.GENERATORS:
    for name, kw in (("old (delays 1-2, incidents 1-3)", OLD), ("new (delays 3-6, incidents 3-12)", {})):
      g = sim_lib.grid_graph(3, 4)
      T = 14 * sim_lib.STEPS_PER_DAY
      s = sim_lib.simulate(g, T, 0, gen, **kw)
      test = np.arange(int(0.8 * T) + 11, T - 12, 7)
      tru = sim_lib.window_truth(s, test, 12, pending=False)  # the labels of that diagnosis
      rng = np.random.default_rng(0)
      cut_t = _top(tru + 1e-3 * rng.random(tru.shape))
      cut_r = _top(rng.random(tru.shape))
      y = np.stack([s.r[t + 1:t + 13] for t in test])
      mae = lambda p: 4 * np.abs(p - y).mean((0, 2))[[2, 5, 11]]  # mph (speed = ... + 4 r)
      f = lambda **a: mae(sim_lib.oracle_forecast(s, test, 12, **a))
      res = dict(oracle=f(), cut_truth=f(cut=cut_t), cut_random=f(cut=cut_r),
                 no_graph=f(graph=False), profile_only=mae(np.zeros_like(y)))
      late = (np.arange(12)[:, None] + s.delay[None] > 11)[None] & cut_t & tru
      print(f"{gen} {name}: share of the truth's top 20% arriving after the window "
            f"{late.sum() / max(1, (cut_t & tru).sum()):.3f}")
      for k, v in res.items():
        print(f"  {k:12s} MAE 15/30/60 " + " / ".join(f"{x:.3f}" for x in v))


def oracle_auroc(n_windows=48):
  """The positive control of the edge AUROC: the true model explained by occlusion
  (simulator.oracle_occlusion) and random scores, against the study's labels (pending
  arrivals, window_truth) and the former ones (every open arrival, pending=False), on the
  study's explanation windows (study defaults: 3 x 4 grid, 14 days, sim seed 0)."""
  for gen in sim_lib.GENERATORS:
    t0 = time.time()
    cfg = config_lib.load(f"configs/stgib.py:generator={gen}")
    tr = data_lib.load(cfg.data)
    w = data_lib.windows(tr, 12, 12)
    test = ex.even(ex.even(w.split["test"], cfg.eval.test_windows), n_windows)
    s = tr.sim
    occ = sim_lib.oracle_occlusion(s, test)
    rnd = np.random.default_rng(0).random(occ.shape)
    rec = np.broadcast_to(np.arange(12.0)[None, :, None], occ.shape)  # the last steps first
    new, old = sim_lib.window_truth(s, test, 12), sim_lib.window_truth(s, test, 12, pending=False)
    pend = sim_lib.pending_mask(s, test, 12)
    from jaxpapers.papers.stgib import explain  # pylint: disable=g-import-not-at-top
    among = lambda sc: np.nanmean([explain.auroc(a[p], b[p]) for a, b, p in zip(sc, new, pend)])
    print(f"{gen}: positives per window {new.sum((1, 2)).mean():.1f} (pending labels) vs "
          f"{old.sum((1, 2)).mean():.1f} (former labels; {1 - new.sum() / old.sum():.0%} of them "
          f"already arrived); AUROC pending labels / among pending entries / former labels: "
          f"oracle occlusion {explain.mean_auroc(occ, new):.3f} / {among(occ):.3f} / "
          f"{explain.mean_auroc(occ, old):.3f}; random {explain.mean_auroc(rnd, new):.3f} / "
          f"{among(rnd):.3f} / {explain.mean_auroc(rnd, old):.3f}; recency (last steps first) "
          f"{explain.mean_auroc(rec, new):.3f} / {among(rec):.3f} / "
          f"{explain.mean_auroc(rec, old):.3f}; "
          f"windows with a pending positive {int((new.sum((1, 2)) > 0).sum())}/{len(test)}; "
          f"the gates' adjacent-step Jaccard (former label sets) "
          f"{explain.truth_consistency(old):.3f} "
          f"({time.time() - t0:.0f}s)")


def gnnexp(arg, workdir, lrs="0.01+0.03+0.1+0.3+1"):
  """GNNExplainer of the study's backbone members (restored from `workdir`, tag
  <generator>/stgnn, the study's lr grid; the selected lr's seeds) at each Adam step in
  `lrs`: the Spearman correlation of the final mask with its initial logits (mean over
  windows and members; ~1 = the ranking is the random start), and the study's metrics
  on its explanation windows."""
  from scipy.stats import spearmanr  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.stgib import explain  # pylint: disable=g-import-not-at-top
  cfg = config_lib.load(f"configs/stgib.py:{arg}")
  tr = data_lib.load(cfg.data)
  w = data_lib.windows(tr, 12, 12)
  exw = ex.even(ex.even(w.split["test"], cfg.eval.test_windows), cfg.eval.explain_windows)
  xe, ye = data_lib.gather(w, exw, 12, 12)
  lab = dict(pending=sim_lib.pending_mask(tr.sim, exw, 12),
             former=sim_lib.window_truth(tr.sim, exw, 12, pending=False))
  truth = sim_lib.window_truth(tr.sim, exw, 12)
  seeds = list(range(cfg.study.seeds))
  spec = ex.spec_of(cfg, tr, kind="stgnn")
  out = train_lib.train_members(spec, cfg, w, seeds, list(cfg.study.lrs), workdir,
                                f"{cfg.data.generator}/stgnn", log=print)
  lr, idx, _ = ex.select_lr(out, len(seeds))
  params, r = ex.take(out["best"], idx), out["r_final"]
  keys = jax.random.split(jax.random.PRNGKey(3), len(xe))  # posthoc_scores' keys
  init = np.asarray(jax.vmap(lambda k: explain.gnnexplainer_init(spec, k))(keys))
  print(f"backbone lr {lr:g} restored; GNNExplainer on {len(xe)} test windows, {len(seeds)} seeds")
  for a in (float(v) for v in lrs.split("+")):
    sc = ex.posthoc_scores(spec, params, xe, r, "gnnexplainer", cfg, gnnexp_lr=a)
    rho = np.mean([[spearmanr(m.ravel(), i.ravel())[0] for m, i in zip(s_, init)] for s_ in sc])
    ms = ex.explanation_metrics(spec, params, r, w, xe, ye, sc, truth, cfg.eval.sparsity, **lab)
    print(f"lr {a:g}: Spearman(final mask, initial logits) {rho:.3f}; " + " ".join(
        f"{k} {np.mean([m[k] for m in ms]):.3f} ± {np.std([m[k] for m in ms]):.3f}"
        for k in ms[0]))


def backbone(arg, kind="stgnn"):
  cfg = config_lib.load(f"configs/stgib.py:{arg}")
  tr = data_lib.load(cfg.data)
  w = data_lib.windows(tr, 12, 12)
  test = ex.even(w.split["test"], cfg.eval.test_windows)
  x, y = data_lib.gather(w, test, 12, 12)
  exw = ex.even(test, cfg.eval.explain_windows)
  xe, ye = data_lib.gather(w, exw, 12, 12)
  truth = sim_lib.window_truth(tr.sim, exw, 12, pending=False)  # the labels of that diagnosis
  seeds, lrs = list(range(cfg.study.seeds)), list(cfg.study.lrs)
  spec = ex.spec_of(cfg, tr, kind=kind)
  t0 = time.time()
  out = train_lib.train_members(spec, cfg, w, seeds, lrs, tempfile.mkdtemp(), kind,
                                log=lambda s: None)
  lr, idx, grid = ex.select_lr(out, len(seeds))
  print(f"== {arg} kind={kind}: train {time.time() - t0:.0f}s; val MAE per lr",
        " ".join(f"{a:g}:{v:.3f}" for a, v in zip(lrs, grid)), f"-> lr {lr:g}")
  c = out["curve"][:, idx].mean(1)
  print(f"   val curve (every {cfg.train.eval_every}):", " ".join(f"{v:.3f}" for v in c))
  params = ex.take(out["best"], idx)
  r = out["r_final"]
  yhat, _ = ex.predict_members(spec, params, x, r, w)
  fm = [ex.forecast_metrics(yhat[i], y) for i in range(len(seeds))]
  for name, m in (("model", {k: np.mean([f[k] for f in fm]) for k in fm[0]}),
                  ("HA", ex.forecast_metrics(ex.historical_average(w, test, 12), y)),
                  ("persist", ex.forecast_metrics(ex.persistence(w, test, 12), y))):
    print(f"   {name:8s} MAE 15/30/60 {m['mae_15min']:.3f} / {m['mae_30min']:.3f} / "
          f"{m['mae_60min']:.3f}")
  rng = np.random.default_rng(0)
  S = len(seeds)
  late = (np.arange(12)[:, None] + tr.sim.delay[None] > 11)[None]
  jit = lambda: 1e-3 * rng.random(truth.shape)
  named = {"random": rng.random((S,) + truth.shape),
           "ground_truth": np.broadcast_to(truth + jit(), (S,) + truth.shape),
           "truth_late_first": np.broadcast_to(truth * (1.0 + late) + jit(), (S,) + truth.shape),
           "last_steps": np.broadcast_to(np.arange(12)[None, :, None] + jit(), (S,) + truth.shape)}
  if kind == "stgnn":
    named["saliency"] = ex.posthoc_scores(spec, params, xe, r, "saliency", cfg)
  else:
    named[kind] = ex.predict_members(spec, params, xe, r, w)[1]
  for en, sc in named.items():
    ms = ex.explanation_metrics(spec, params, r, w, xe, ye, np.asarray(sc), truth, 0.2)
    print(f"   [{en:16s}] " + " ".join(
        f"{k} {np.mean([m[k] for m in ms]):.3f}+-{np.std([m[k] for m in ms]):.3f}"
        for k in ms[0]))


def _fresh_dv(spec, g, sub, key, steps=300, lr=1e-2):
  """DV of a freshly initialised discriminator (no output ReLU) trained on half of the
  (g, sub) pairs, scored on the other half: the MI the embeddings still carry."""
  g = g.reshape(-1, g.shape[-1])
  sub = sub.reshape(-1, sub.shape[-1])
  half = g.shape[0] // 2
  disc = model_lib.init(spec, key)["disc"]
  opt = optax.adam(lr)

  def body(c, k):
    d, o = c
    gr = jax.grad(lambda d_: -model_lib.dv_bound(d_, g[:half], sub[:half], k, False))(d)
    u, o = opt.update(gr, o, d)
    return (optax.apply_updates(d, u), o), None

  (disc, _), _ = jax.lax.scan(body, (disc, opt.init(disc)), jax.random.split(key, steps))
  return model_lib.dv_bound(disc, g[half:], sub[half:], jax.random.fold_in(key, 3), False)


def gib(arg):
  cfg = config_lib.load(f"configs/stgib.py:{arg}")
  tr = data_lib.load(cfg.data)
  w = data_lib.windows(tr, 12, 12)
  spec = ex.spec_of(cfg, tr, kind="gib")
  t = cfg.train
  seeds = list(range(cfg.train.seeds))
  members = population.stack([train_lib.member_init(spec, 1000 * s + 17, t.steps)
                              for s in seeds])
  lr = jnp.full((len(seeds),), t.lr, jnp.float32)
  chunk = train_lib.make_chunk(spec, t.batch, t.eval_every, t.steps, w.mean, w.std)
  feats, target = jnp.asarray(w.feats), jnp.asarray(w.target)
  train_last = jnp.asarray(w.split["train"], jnp.int32)
  probe = ex.even(w.split["train"], 64)
  xp, _ = data_lib.gather(w, probe, 12, 12)
  xp = jnp.asarray(xp)
  print(f"== gib {arg}: out_relu {spec.gib_out_relu} mi {spec.gib_mi} pp {spec.gib_pp} "
        f"inner {spec.gib_inner}, lr {t.lr:g}, seeds {seeds}; per seed: out_pre joint / "
        "marg mean, dead_out (share of pairs with T's output pre-activation <= 0), "
        "dead_hid (hidden units <= 0 on every pair), E_joint[T], log E_marg[e^T], DV, "
        "std(g), std(sub), subgraph share (mean sqrt of m_e = S_src S_dst), fresh-critic DV")

  @jax.jit
  def stats(params, key):
    def one(p, k):
      ks = jax.random.split(k, xp.shape[0])
      _, aux = jax.vmap(lambda xi, ki: model_lib.forward(spec, p, xi, ki, 0.7, True))(xp, ks)
      g = aux["gib_g"].reshape(-1, aux["gib_g"].shape[-1])
      sub = aux["gib_sub"].reshape(-1, aux["gib_sub"].shape[-1])
      perm = jax.random.permutation(jax.random.fold_in(k, 1), g.shape[0])
      hj, oj = model_lib.gib_disc_pre(p["disc"], g, sub)
      hm, om = model_lib.gib_disc_pre(p["disc"], g[perm], sub)
      act = (lambda v: jax.nn.relu(v)) if spec.gib_out_relu else (lambda v: v)
      tj, tm = act(oj), act(om)
      lme = jax.nn.logsumexp(tm) - jnp.log(tm.shape[0])
      dead_hid = jnp.mean(jnp.all(jnp.concatenate([hj, hm]) <= 0, 0))
      fresh = _fresh_dv(spec, g, sub, jax.random.fold_in(k, 2))
      return jnp.stack([oj.mean(), om.mean(), jnp.mean(jnp.concatenate([oj, om]) <= 0),
                        dead_hid, tj.mean(), lme, tj.mean() - lme, g.std(0).mean(),
                        sub.std(0).mean(), jnp.sqrt(aux["edge"]).mean(), fresh])  # sqrt(S_src S_dst): ~ S[:, 0]
    return jax.vmap(one)(params, jax.random.split(key, len(seeds)))

  names = ("oj", "om", "dead_out", "dead_hid", "Ej", "logEm", "DV", "sd_g", "sd_sub",
           "sub", "fresh")
  t0 = time.time()
  for step0 in range(0, t.steps, t.eval_every):
    members, tl, dv = chunk(members, lr, jnp.int32(step0), feats, target, train_last)
    st = np.asarray(stats(members["params"], jax.random.PRNGKey(step0)))
    print(f"[{step0 + t.eval_every:5d}] train_mae {float(jnp.mean(tl)):.4f} "
          f"train DV {float(jnp.mean(dv)):.4f} ({time.time() - t0:.0f}s)")
    for i, s in enumerate(seeds):
      print(f"     seed {s}: " + " ".join(f"{n} {v:.3f}" for n, v in zip(names, st[i])))


if __name__ == "__main__":
  if sys.argv[1] == "oracle":
    oracle()
  elif sys.argv[1] == "oracle_auroc":
    oracle_auroc()
  elif sys.argv[1] == "gnnexp":
    gnnexp(*sys.argv[2:])
  elif sys.argv[1] == "gib":
    gib(*sys.argv[2:])
  else:
    backbone(*sys.argv[2:])
