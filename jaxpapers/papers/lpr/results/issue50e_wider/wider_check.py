"""Issue 50, fifth pass: the 256-128 ('wider') capacity step of the selection rule on the
sets whose fourth-pass pick was the then-top 'wide' (128-64) AE, without rerunning the
other capacities (their validation AUROCs are deterministic and committed in
results/issue50d_code_selection.json). Same rule, config, seeds and validation rows as
the study; the AE's validation runs do not depend on which sets share the program
(padding invariance, tests), so these numbers are the ones the full selection gives.

  PYTHONPATH=. python jaxpapers/papers/lpr/results/issue50e_wider/wider_check.py wbc+pima+local+dependency out.json
"""
import json
import sys

import numpy as np

from configs import lpr as lpr_config
from jaxpapers.papers.lpr import experiment
from jaxpapers.papers.lpr import selection

sets = sys.argv[1].split("+")
cfg = lpr_config.get_config(
    f"parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64,datasets={sys.argv[1]}")
data = experiment.load_datasets(cfg)
keeps = experiment.column_masks(data)
seeds = [cfg.seed + i for i in range(cfg.train.seeds)]
rows = selection.select(experiment.detector_config(cfg, "ae"), data, seeds, keeps, cfg.seed,
                        cfg.train.xla_opt_level, ("wider",))
old = {r["dataset"]: r for r in json.load(open(
    "jaxpapers/papers/lpr/results/issue50d_code_selection.json"))}
out = {}
for r in rows:
  o = old[r["dataset"]]
  assert o["code_grid"] == r["code_grid"], r["dataset"]
  vals = {**o["ae_val"], "wider": r["ae_val"]["wider"]}
  searched = [a for a in selection.ARCHS if a in vals]
  cands = [(a, c) for a in searched for c in o["code_grid"]]
  arch, code = selection._pick(cands, [v for a in searched for v in vals[a]])
  out[r["dataset"]] = {"code_grid": o["code_grid"], "ae_val": vals,
                       "fourth_pass_pick": [o["arch"], o["code"]], "pick": [arch, code],
                       "best_wide": max(o["ae_val"]["wide"]),
                       "best_wider": max(r["ae_val"]["wider"]),
                       "pca_val_gap_vs_fourth_pass": float(np.max(np.abs(
                           np.subtract(o["pca_val"], r["pca_val"]))))}
  print(r["dataset"], "wider:", np.round(r["ae_val"]["wider"], 1).tolist(), "best wide",
        round(max(o["ae_val"]["wide"]), 2), "-> pick", arch, code, flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
