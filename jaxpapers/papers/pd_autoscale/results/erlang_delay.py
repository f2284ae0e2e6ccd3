"""Erlang-C planner with a scale-down delay (the guard), conversation + diurnal: val grid, test."""
import itertools, json, numpy as np, jax.numpy as jnp
from jaxpapers.core import config as C
from jaxpapers.papers.pd_autoscale import experiment as ex, baselines as B, study as S
cfg = C.load('configs/pd_autoscale.py:families=conversation+diurnal')
spec, _, _ = ex.setup(cfg)
val = ex.make_traces(cfg, 'val', cfg.data.val_seeds); test = ex.make_traces(cfg, 'test', cfg.data.test_seeds)
fv, ft = [t[0] for t in val], [t[0] for t in test]
pts = [dict(headroom=h, delay=round(d / spec.epoch_s)) for h, d in itertools.product((1.0, 1.25, 1.5, 2.0, 3.0), (0.0, 60.0, 180.0, 300.0))]
axes = dict(headroom=(1.0, 1.25, 1.5, 2.0, 3.0), delay=(0, 12, 36, 60))
summ, _ = ex.run_clusters(cfg, spec, B.erlang(spec), S.stack_points(pts), val)
chosen = []
for fam in cfg.data.families:
  b, feas, edges, cost = S.choose(spec, pts, summ, fv, fam, axes)
  print(f"[erlang+delay] {fam} {pts[b]} feasible={feas} val_gpus={cost:.2f} edge={edges or '-'}", flush=True)
  chosen.append(pts[b])
ts, _ = ex.run_clusters(cfg, spec, B.erlang(spec), S.stack_points(chosen), test, seed=5)
fams = list(cfg.data.families)
merged = [ts[fams.index(f)][t] for t, f in enumerate(ft)]
rows = ex.aggregate(spec, [merged], ft, ['erlang+delay'])
for r in rows: print(json.dumps({k: r[k] for k in ('method','family','meets','gpus','gpus_std','p99_ttft','p99_tpot','attainment','scaling_events')}), flush=True)
