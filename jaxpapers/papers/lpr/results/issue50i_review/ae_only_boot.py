"""Fallback: paired bootstrap (package per_set) of the kinds whose scores a (partial) study saved.
  python ae_only_boot.py <workdir> <config arg> <out.json> [kinds, default ae]"""
import json, sys
import numpy as np
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, paired_bootstrap as PB, classical, datasets as DL
wd, arg, outp = sys.argv[1:4]
config = C.get_config(arg)
sel = {r["dataset"]: r for r in json.load(open(f"{wd}/code_selection.json"))}
kinds = (sys.argv[4] if len(sys.argv) > 4 else "ae").split("+")
z = {k: np.load(f"{wd}/scores/{k}.npz") for k in kinds}
rng = np.random.default_rng(0)
out = {}
for d in E.load_datasets(config):
  keep = DL.independent_columns(d.x_train)
  pca = classical.score("pca_recon", d.x_train, d.x_test, 0, keep, sel[d.name]["pca_k"], 0.0)
  r = PB.per_set({k: z[k][d.name] for k in kinds}, np.asarray(pca), np.asarray(d.y_test).astype(int), kinds, 1000, rng)
  out[d.name] = r
  for k in kinds:
    g = r[k]["lpr_gain"]
    print(d.name, k, "steps", sel[d.name].get("steps"), "lr", sel[d.name].get("lr"), "%.2f -> %.2f" % (r[k]["auroc_off"], r[k]["auroc_on"]),
          "gain %+.2f +- %.2f (seed sd %.2f)" % (g["diff"], g["se"], g["seed_sd"]), flush=True)
json.dump(out, open(outp, "w"), indent=1)
