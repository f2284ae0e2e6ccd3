"""Textbook PCA reconstruction with k by explained variance (sklearn PCA(n_components=0.8/0.9/0.95),
all columns, training rows only, no labels) against the eighth pass's saved AE test scores
(/tmp/lpr50h/main/scores/ae.npz; the study's own data loader and split). Paired over test rows
(stratified bootstrap, 1000 resamples, paired_bootstrap.per_set) + seed spread, as the package's
paired_bootstrap does for its own pca_recon.
  python variance_pca.py <out.json> [scores.npz]"""
import json, sys
import numpy as np
from sklearn.decomposition import PCA
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, paired_bootstrap as PB
out_path = sys.argv[1]
sc = np.load(sys.argv[2] if len(sys.argv) > 2 else "/tmp/lpr50h/main/scores/ae.npz")
config = C.get_config("parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64,select_steps=1600")
rng = np.random.default_rng(0)
out = {}
for d in E.load_datasets(config):
  y = np.asarray(d.y_test).astype(int)
  xtr, xte = np.asarray(d.x_train, np.float64), np.asarray(d.x_test, np.float64)
  r = {"test_anomalies": int(y.sum()), "test_rows": int(len(y))}
  for var in (0.8, 0.9, 0.95):
    p = PCA(n_components=var, svd_solver="full").fit(xtr)
    s = ((xte - p.inverse_transform(p.transform(xte))) ** 2).sum(1)
    res = PB.per_set({"ae": sc[d.name]}, s, y, ["ae"], 1000, rng)
    r[f"pca{int(var * 100)}"] = {"k": int(p.n_components_), "auroc": res["pca_recon"],
                                 "ae_minus": res["ae"]["minus_pca"]}
    r["ae"] = res["ae"]["auroc_off"]
  out[d.name] = r
  print(d.name, r["test_anomalies"], "AE %.2f" % r["ae"], " ".join(
      f"pca{v}(k={r['pca' + v]['k']}) {r['pca' + v]['auroc']:.2f} AE-it "
      f"{r['pca' + v]['ae_minus']['diff']:+.2f}+-{r['pca' + v]['ae_minus']['se']:.2f}"
      for v in ("80", "90", "95")), flush=True)
json.dump(out, open(out_path, "w"), indent=1)
