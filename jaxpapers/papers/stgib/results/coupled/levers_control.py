"""Positive control per lever (README, "A setting where the edges matter"): the backbone and
the no-graph model, 1 seed, lr 1e-2; test MAE (384 windows), occlusion AUROC of the backbone
against the labels and among the pending entries (48 windows), random scores, fid+ at 20%.

  PYTHONPATH=. python jaxpapers/papers/stgib/results/coupled/levers_control.py STEPS OUT.jsonl NAME:CONFIG_ARGS ...
"""
import json, sys, time, tempfile
import numpy as np
from jaxpapers.core import config as config_lib
from jaxpapers.papers.stgib import data as data_lib, experiment as ex, simulator as sim_lib, train as train_lib

def run(name, arg, steps, out):
  cfg = config_lib.load("configs/stgib.py:" + f"seeds=1,steps={steps},eval_every={min(100, steps)},ckpt_every={steps},lr=1e-2,kind=stgnn" + ("," + arg if arg else ""))
  ex.validate(cfg)
  t0 = time.time()
  tr = data_lib.load(cfg.data); w = data_lib.windows(tr, 12, 12)
  test = ex.even(w.split["test"], 384); x, y = data_lib.gather(w, test, 12, 12)
  exw = ex.even(test, 48); xe, ye = data_lib.gather(w, exw, 12, 12)
  truth = sim_lib.window_truth(tr.sim, exw, 12); pend = sim_lib.pending_mask(tr.sim, exw, 12)
  res = dict(name=name, arg=arg, steps=steps)
  for tag, over in (("backbone", {}), ("nograph", dict(graph=False))):
    spec = ex.spec_of(cfg, tr, **over)
    o = train_lib.train_members(spec, cfg, w, [0], [cfg.train.lr], tempfile.mkdtemp(), tag, log=lambda *a: None)
    yh, _ = ex.predict_members(spec, o["best"], x, o["r_final"], w)
    res[f"mae_{tag}"] = ex.masked_mae(yh[0], y)
    res[f"mae60_{tag}"] = ex.forecast_metrics(yh[0], y)["mae_60min"]
    res[f"curve_{tag}"] = [round(float(v), 3) for v in np.asarray(o["curve"])[:, 0]]
    if tag == "backbone":
      sc = ex.posthoc_scores(spec, o["best"], xe, o["r_final"], "occlusion", cfg)
      m = ex.explanation_metrics(spec, o["best"], o["r_final"], w, xe, ye, sc, truth, 0.2, pending=pend)[0]
      rnd = np.random.default_rng(0).random((1,) + truth.shape)
      mr = ex.explanation_metrics(spec, o["best"], o["r_final"], w, xe, ye, rnd, truth, 0.2, pending=pend)[0]
      tr_ = (truth.astype(np.float32) + 1e-3 * np.random.default_rng(1).random(truth.shape))[None]
      mt = ex.explanation_metrics(spec, o["best"], o["r_final"], w, xe, ye, tr_, truth, 0.2, pending=pend)[0]
      res.update(occ_auroc=m["auroc"], occ_pending=m["auroc_pending"], rnd_pending=mr["auroc_pending"],
                 fidp_truth=mt["fid_plus"], fidp_random=mr["fid_plus"], fidp_occ=m["fid_plus"])
  ha = ex.historical_average(w, test, 12); res["mae_ha"] = ex.masked_mae(ha, y)
  res["graph_worth"] = res["mae_nograph"] / res["mae_backbone"] - 1
  res["sec"] = time.time() - t0
  print(json.dumps(res), flush=True)
  with open(out, "a") as f: f.write(json.dumps(res) + "\n")

if __name__ == "__main__":
  steps = int(sys.argv[1]); out = sys.argv[2]
  for item in sys.argv[3:]:
    name, _, arg = item.partition(":")
    run(name, arg, steps, out)
