"""python jaxpapers/papers/stgib/results/coupled/gnnexp_grid.py "<study config arg>" <copy of the study workdir> 1+3+10+30

GNNExplainer's step on the coupled study's backbone: the grid extended past its edge (1),
selected on validation fid+ as the study does; the pick's test metrics.

gnnexp_grid_log.txt shows it ran as /tmp/st40e/gx_edge.py: the same code but for this
docstring, a sys.path line and the output path (/tmp/st40e/gx_edge.json, copied here as
gnnexp_grid.json)."""
import json, os, sys
import numpy as np
from jaxpapers.core import config as config_lib
from jaxpapers.papers.stgib import data as data_lib, experiment as ex, simulator as sim_lib, train as train_lib, study
A = sys.argv[1]; wd = sys.argv[2]; lrs = sys.argv[3]
cfg = config_lib.load(f"configs/stgib.py:{A},gnnexp_lrs={lrs}")
tr = data_lib.load(cfg.data); w = data_lib.windows(tr, 12, 12)
spec = ex.spec_of(cfg, tr, kind="stgnn")
out = train_lib.train_members(spec, cfg, w, [0, 1, 2], list(cfg.study.lrs), wd, "markov/stgnn", log=print)
assert not np.isnan(out["curve"]).any()
lr, idx, _ = ex.select_lr(out, 3); params = ex.take(out["best"], idx); r = out["r_final"]
glr, row = study._tune_gnnexp(cfg, spec, params, r, w, "markov", print)
print(row)
test = ex.even(w.split["test"], cfg.eval.test_windows); exw = ex.even(test, cfg.eval.explain_windows)
xe, ye = data_lib.gather(w, exw, 12, 12)
truth = sim_lib.window_truth(tr.sim, exw, 12)
lab = dict(pending=sim_lib.pending_mask(tr.sim, exw, 12), former=sim_lib.window_truth(tr.sim, exw, 12, pending=False))
sc = ex.posthoc_scores(spec, params, xe, r, "gnnexplainer", cfg, gnnexp_lr=glr)
ms = ex.explanation_metrics(spec, params, r, w, xe, ye, sc, truth, 0.2, **lab)
print("gnnexplainer at", glr, {k: (float(np.mean([m[k] for m in ms])), float(np.std([m[k] for m in ms]))) for k in ms[0]})
json.dump(dict(row=row, lr=glr, metrics=ms), open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gnnexp_grid.json"), "w"), indent=1, default=float)
