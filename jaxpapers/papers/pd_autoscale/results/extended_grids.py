"""Extended baseline grids (the study's edge choices), validation traces only."""
import itertools, jax.numpy as jnp
from jaxpapers.core import config as C
from jaxpapers.papers.pd_autoscale import experiment as ex, baselines as B, study as S
cfg = C.load('configs/pd_autoscale.py:families=conversation+diurnal')
spec, _, _ = ex.setup(cfg)
val = ex.make_traces(cfg, 'val', cfg.data.val_seeds)
fv = [t[0] for t in val]
ep = spec.epoch_s
grids = {
 'kpa': ([dict(target_p=a, target_d=b, delay=round(c/ep)) for a, b, c in itertools.product((1.0, 2.0, 3.0), (3.0, 5.0, 7.0, 10.0), (0.0, 60.0, 300.0))], dict(target_p=(1.0,2.0,3.0), target_d=(3.0,5.0,7.0,10.0))),
 'apa': ([dict(target_p=a, target_d=b, cooldown=round(c/ep)) for a, b, c in itertools.product((0.2, 0.3, 0.5), (0.2, 0.3, 0.4, 0.5), (300.0,))], dict(target_p=(0.2,0.3,0.5), target_d=(0.2,0.3,0.4,0.5))),
 'erlang': ([dict(headroom=h) for h in (2.5, 3.0, 4.0, 5.0, 6.0)], dict(headroom=(2.5,3.0,4.0,5.0,6.0))),
 'threshold': ([dict(hi_p=a, hi_d=b) for a, b in itertools.product((1.0, 2.0), (0.2, 0.3, 0.4, 0.5))], dict(hi_p=(1.0,2.0), hi_d=(0.2,0.3,0.4,0.5))),
}
for name, (pts, axes) in grids.items():
  summ, _ = ex.run_clusters(cfg, spec, B.BUILDERS[name](spec), S.stack_points(pts), val)
  for fam in cfg.data.families:
    b, feas, edges, cost = S.choose(spec, pts, summ, fv, fam, axes)
    idx = [t for t, f in enumerate(fv) if f == fam]
    worst = max(max(summ[b][t]['p99_ttft'] for t in idx) / spec.ttft_slo, max(summ[b][t]['p99_tpot'] for t in idx) / spec.tpot_slo)
    print(f"[ext] {name:9s} {fam:12s} {pts[b]} feasible={feas} val_gpus={cost:.2f} edge={edges or '-'} worst_p99/target={worst:.2f}", flush=True)
