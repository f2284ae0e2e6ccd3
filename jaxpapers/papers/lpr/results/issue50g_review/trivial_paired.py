"""Issue 50, seventh pass: the main table's AE family and PCA reconstruction against the
trivial detector, paired over test rows.

Trivial detector: the squared distance of a test row to the mean of the training rows,
sum_j (x_j - mean_j)^2 on the z-scored columns (the same split, scaling and rows as the
study; trivial.py prints the same AUROCs). The AE-family scores are the sixth pass's saved
test scores (`<study workdir>/scores/<kind>.npz` of the run behind results/issue50f_*;
checked below against the committed per-seed AUROCs), PCA reconstruction is recomputed
with each set's committed k. Differences with paired_bootstrap.per_set (its "minus_pca"
field here means "minus trivial"): mean over 5 seeds, one stratified test-row bootstrap
(1000 resamples, the same for every column), combined s.e. sqrt(boot_se^2 + seed_sd^2/5).

  PYTHONPATH=. python jaxpapers/papers/lpr/results/issue50g_review/trivial_paired.py /tmp/h50f/main out.json
"""
import json
import sys

import numpy as np

from configs import lpr as lpr_config
from jaxpapers.papers.lpr import classical
from jaxpapers.papers.lpr import experiment
from jaxpapers.papers.lpr import paired_bootstrap as pb

R = "jaxpapers/papers/lpr/results/"
kinds = ["ae", "vae", "dae", "memae"]
cfg = lpr_config.get_config("parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64")
data = experiment.load_datasets(cfg)
keeps = experiment.column_masks(data)
sel = {r["dataset"]: r for r in json.load(open(R + "issue50f_code_selection.json"))}
committed = json.load(open(R + "issue50f_auroc_per_seed.json"))["auroc"]
npz = {k: np.load(f"{sys.argv[1]}/scores/{k}.npz") for k in kinds}
rng = np.random.default_rng(0)
rows, worst = {}, 0.0
for d, keep in zip(data, keeps):
  y = d.y_test.astype(int)
  triv = ((d.x_test - d.x_train.mean(0)) ** 2).sum(1)
  pca = classical.score("pca_recon", d.x_train, d.x_test, 0, keep, sel[d.name]["pca_k"])
  scores = {k: np.asarray(npz[k][d.name], np.float64) for k in kinds}
  for k in kinds:  # the saved scores are the committed table's runs
    for b, col in enumerate((k, k + "+lpr")):
      got = 100 * pb.auroc_rows(scores[k][:, b], y)
      worst = max(worst, float(np.max(np.abs(got - np.asarray(committed[col][d.name])))))
  scores["pca_rec"] = np.broadcast_to(pca, scores["ae"].shape)  # seed-free column
  r = pb.per_set(scores, triv, y, kinds + ["pca_rec"], 1000, rng)
  rows[d.name] = {"trivial": 100 * float(pb.auroc_rows(triv[None], y)[0]),
                  "n_anomalies": int(y.sum()),
                  **{k: {"auroc": r[k]["auroc_off"], "minus_trivial": r[k]["minus_pca"]}
                     for k in kinds + ["pca_rec"]}}
  print(d.name, f"trivial {rows[d.name]['trivial']:.1f}", " ".join(
      f"{k} {r[k]['minus_pca']['diff']:+.2f}+-{r[k]['minus_pca']['se']:.2f}"
      for k in kinds + ["pca_rec"]), flush=True)
over = {}
for k in kinds + ["pca_rec"]:
  dd = np.array([v[k]["minus_trivial"]["diff"] for v in rows.values()])
  se = np.array([v[k]["minus_trivial"]["se"] for v in rows.values()])
  over[k] = {"mean": float(dd.mean()), "se": float(np.sqrt((se ** 2).sum()) / len(dd)),
             "sets_above_2se": int((dd > 2 * se).sum()),
             "sets_below_2se": int((dd < -2 * se).sum()),
             "sets_not_above": [n for n, v in rows.items() if v[k]["minus_trivial"]["diff"] <= 0]}
  print(k, over[k], flush=True)
print(f"saved scores vs committed per-seed AUROCs: max |diff| {worst:.5f} points", flush=True)
json.dump({"max_diff_vs_committed": worst, "trivial_mean": float(np.mean(
    [v["trivial"] for v in rows.values()])), "per_set": rows, "over_sets": over},
          open(sys.argv[2], "w"), indent=1)
