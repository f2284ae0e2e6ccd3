"""Issue 50, seventh pass: training-loss curves of the AE family at each set's chosen
capacity and code (the sixth pass's committed picks, results/issue50f_code_selection.json),
trained for more steps than the study's 400, with the package's public functions only
(the same per-capacity programs as experiment.compare with code_select; nothing here is
imported by the package).

  PYTHONPATH=. python jaxpapers/papers/lpr/results/issue50g_review/curves.py \
      optdigits+wbc+satellite+ionosphere ae+dae 1600 out.json

Steps t are run as in the study: an i.i.d. minibatch of 128 training rows drawn from
fold_in(run key, t), constant-LR AdamW, so the first 400 steps of a 1600-step run are the
study's 400-step run. The loss is the minibatch training loss (each kind's own
objective: reconstruction MSE; + KL for the VAE; + attention entropy for MemAE), mean
over the 5 seeds, averaged over windows of 50 steps (steps t-49 .. t) to damp minibatch
noise. Test AUROC at the last step, per seed, with and without LPR.
"""
import json
import sys
import time

import numpy as np

from configs import lpr as lpr_config
from jaxpapers.papers.lpr import detectors
from jaxpapers.papers.lpr import experiment
from jaxpapers.papers.lpr import selection

sets, kinds, steps, out_path = sys.argv[1], sys.argv[2].split("+"), int(sys.argv[3]), sys.argv[4]
cfg = lpr_config.get_config(
    f"parts=main,kinds={sys.argv[2]},code_select=true,latent=64,datasets={sets},steps={steps}")
data = experiment.load_datasets(cfg)
seeds = [cfg.seed + i for i in range(cfg.train.seeds)]
groups, bits_grid = experiment.lpr_grid(cfg)
sel = {r["dataset"]: r for r in json.load(open(
    "jaxpapers/papers/lpr/results/issue50f_code_selection.json"))}
W = 50
ends = [t for t in (W, 100, 200, 300, 400, 800, 1200, 1600) if t <= steps]
out = {"steps": steps, "window": W, "seeds": seeds, "bits": [float(b) for b in bits_grid],
       "picks": {d.name: [sel[d.name]["arch"], sel[d.name]["code"]] for d in data},
       "rows": {}}
for kind in kinds:
  t0 = time.perf_counter()
  kcfg = experiment.detector_config(cfg, kind, groups=groups)
  for arch in selection.ARCHS:
    idx = [j for j, d in enumerate(data) if sel[d.name]["arch"] == arch]
    if not idx:
      continue
    sub = [data[j] for j in idx]
    stacked = detectors.pad_stack(sub, experiment.visible_labels(kind, sub, cfg),
                                  [sel[d.name]["code"] for d in sub])
    auc, losses, _ = experiment.run_grid(selection.arch_config(kcfg, arch), stacked,
                                         len(sub), seeds, bits_grid, cfg.train.xla_opt_level)
    for i, d in enumerate(sub):
      row = {}
      for b, tag in enumerate(("off", "lpr")):
        curve = losses[i, :, b, :].mean(0)                      # mean over seeds, per step
        win = curve.reshape(-1, W).mean(1)                      # every 50-step window
        row[tag] = {
            "auroc_per_seed": [round(100 * float(v), 4) for v in auc[i, :, b]],
            "auroc": round(100 * float(auc[i, :, b].mean()), 4),
            "loss_step": {str(t): round(float(curve[t]), 5) for t in (0, 399, steps - 1)
                          if t < steps},
            "loss_window": {str(t): round(float(win[t // W - 1]), 5) for t in ends},
            "loss_every_window": [round(float(v), 5) for v in win]}
      row["lpr_gain_per_seed"] = [round(100 * float(a - c), 4)
                                  for a, c in zip(auc[i, :, 1], auc[i, :, 0])]
      out["rows"].setdefault(d.name, {})[kind] = row
      lw = row["off"]["loss_window"]
      print(f"{d.name} {kind} ({arch} {sel[d.name]['code']}): loss window-mean "
            + " ".join(f"{t}:{v:.4f}" for t, v in lw.items())
            + f" | AUROC@{steps} {row['off']['auroc']:.2f} +lpr {row['lpr']['auroc']:.2f}",
            flush=True)
  print(f"{kind}: {time.perf_counter() - t0:.0f} s", flush=True)
  json.dump(out, open(out_path, "w"), indent=1)
