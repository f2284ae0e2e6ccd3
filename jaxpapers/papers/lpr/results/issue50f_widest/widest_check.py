"""Issue 50, sixth pass: the 512-256 ('x8') capacity step of the selection rule on the
sets whose fifth-pass pick was the then-top 'wider' (256-128) AE, without rerunning the
other capacities (their validation AUROCs are deterministic and committed in
results/issue50d_code_selection.json and results/issue50e_wider_check.json). Same rule,
config, seeds and validation rows as the study; the AE's validation runs do not depend on which sets share the program
(padding invariance, tests), so these numbers are the ones the full selection gives.

  PYTHONPATH=. python jaxpapers/papers/lpr/results/issue50f_widest/widest_check.py pima+dependency out.json
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
                        cfg.train.xla_opt_level, ("x8",))
old = {r["dataset"]: r for r in json.load(open(
    "jaxpapers/papers/lpr/results/issue50d_code_selection.json"))}
wider = json.load(open("jaxpapers/papers/lpr/results/issue50e_wider_check.json"))
out = {}
for r in rows:
  o = old[r["dataset"]]
  assert o["code_grid"] == r["code_grid"], r["dataset"]
  vals = {**o["ae_val"], "wider": wider[r["dataset"]]["ae_val"]["wider"],
          "x8": r["ae_val"]["x8"]}
  searched = [a for a in selection.ARCHS if a in vals]
  cands = [(a, c) for a in searched for c in o["code_grid"]]
  arch, code = selection._pick(cands, [v for a in searched for v in vals[a]])
  out[r["dataset"]] = {"code_grid": o["code_grid"], "ae_val": vals,
                       "fifth_pass_pick": wider[r["dataset"]]["pick"], "pick": [arch, code],
                       "best_wider": max(vals["wider"]),
                       "best_x8": max(r["ae_val"]["x8"]),
                       "pca_val_gap_vs_fourth_pass": float(np.max(np.abs(
                           np.subtract(o["pca_val"], r["pca_val"]))))}
  print(r["dataset"], "x8:", np.round(r["ae_val"]["x8"], 2).tolist(), "best wider",
        round(max(vals["wider"]), 2), "-> pick", arch, code, flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
