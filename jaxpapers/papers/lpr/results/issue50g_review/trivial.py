"""Trivial detector: squared distance to the training mean (z-scored), on the study's split; beside the committed AE."""
import json, sys
import numpy as np
from sklearn.metrics import roc_auc_score
from jaxpapers.papers.lpr import datasets as D
rows = {r["dataset"]: r for r in json.load(open("jaxpapers/papers/lpr/results/issue50f_auroc.json"))}
sets = ["wbc","wine","optdigits","breastw","pima","ionosphere","glass","satellite","satimage2","shuttle","local","global","dependency","clustered"]
out = {}
for name in sets:
  d = D.load(name, seed=0)
  s = ((d.x_test - d.x_train.mean(0)) ** 2).sum(1)
  out[name] = dict(norm=100 * roc_auc_score(d.y_test, s), ae=rows[name]["ae"], ae_lpr=rows[name]["ae+lpr"], pca_recon=rows[name]["pca_recon"], test_anom=int(d.y_test.sum()))
  print(name, {k: round(v, 1) for k, v in out[name].items()}, flush=True)
m = {k: float(np.mean([out[s][k] for s in sets])) for k in ("norm", "ae", "ae_lpr", "pca_recon")}
print("mean", {k: round(v, 2) for k, v in m.items()})
json.dump(out, open(sys.argv[1], "w"), indent=1)
