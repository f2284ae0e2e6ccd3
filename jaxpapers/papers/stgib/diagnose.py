"""The positive control, diagnosed: do the simulator's causal edges matter to a forecast?

  python -m jaxpapers.papers.stgib.diagnose oracle
      the true gated VAR (simulator.oracle_forecast) from the true past: 15/30/60-min MAE
      (mph) in full, with the truth's top 20% of (step, edge) entries cut, with a random
      20% cut, with no graph, and the daily profile alone; old and new simulator settings
  python -m jaxpapers.papers.stgib.diagnose backbone "<config arg>" [kind]
      trains `kind` (default the backbone) on the config's lr grid (3 seeds), picks the lr
      on validation, prints the validation curve, test MAE vs historical average and
      persistence, and fid+ / fid- of the ground truth, random scores, the truth with its
      after-the-window arrivals first, the last input steps, and saliency
"""
from __future__ import annotations

import sys
import tempfile
import time

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.stgib import data as data_lib
from jaxpapers.papers.stgib import experiment as ex
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
      tru = sim_lib.window_truth(s, test, 12)
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


def backbone(arg, kind="stgnn"):
  cfg = config_lib.load(f"configs/stgib.py:{arg}")
  tr = data_lib.load(cfg.data)
  w = data_lib.windows(tr, 12, 12)
  test = ex.even(w.split["test"], cfg.eval.test_windows)
  x, y = data_lib.gather(w, test, 12, 12)
  exw = ex.even(test, cfg.eval.explain_windows)
  xe, ye = data_lib.gather(w, exw, 12, 12)
  truth = sim_lib.window_truth(tr.sim, exw, 12)
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


if __name__ == "__main__":
  if sys.argv[1] == "oracle":
    oracle()
  else:
    backbone(*sys.argv[2:])
