"""Side check (issue 39, leftover): does the threshold heuristic's selection hold on test
when it is picked on 6 validation traces per family instead of the study's 2? Its
study grid (the cached points, extensions included) on conversation and diurnal, 6
validation traces each (the first 2 are the study's), cheapest point meeting both P99s
on every one; then the pick on the study's 3 test traces (evaluation seed 5, as the
study). From the repository root:

  PYTHONPATH=. python jaxpapers/papers/pd_autoscale/results/threshold_val6.py /tmp/pd39c/study/grids/threshold.json
"""
import json, sys
import numpy as np
sys.path.insert(0, "configs")
import pd_autoscale as cfgmod
from jaxpapers.papers.pd_autoscale import baselines, episode, experiment as ex, study

config = cfgmod.get_config()
config.data.families = ("conversation", "diurnal")
spec, _, _ = ex.setup(config)
g = json.load(open(sys.argv[1]))
points = g["points"]
ctrl = baselines.make("threshold", spec, config.study.start_hold_s)
val = ex.make_traces(config, "val", 6)
fv = [t[0] for t in val]
summ, _ = ex.run_clusters(config, spec, ctrl, study.stack_points(points), val)
test = ex.make_traces(config, "test", config.data.test_seeds)
ft = [t[0] for t in test]
for fam in config.data.families:
  idx = [t for t, f in enumerate(fv) if f == fam]
  for n in (2, 6):
    use = idx[:n]
    feas = [p for p in range(len(points)) if all(episode.meets(spec, summ[p][t]) for t in use)]
    if not feas:
      print(f"{fam} val {n}: no feasible point", flush=True)
      continue
    b = min(feas, key=lambda p: np.mean([summ[p][t]["gpus"] for t in use]))
    ts, _ = ex.run_clusters(config, spec, ctrl, study.stack_points([points[b]]), test, seed=5)
    ss = [ts[0][t] for t, f in enumerate(ft) if f == fam]
    print(f"{fam} val {n} traces: {len(feas)}/{len(points)} points feasible, pick {points[b]} "
          f"val GPUs {np.mean([summ[b][t]['gpus'] for t in use]):.2f}; test meets "
          f"{sum(episode.meets(spec, s) for s in ss)}/{len(ss)} GPUs "
          f"{np.mean([s['gpus'] for s in ss]):.2f}", flush=True)
