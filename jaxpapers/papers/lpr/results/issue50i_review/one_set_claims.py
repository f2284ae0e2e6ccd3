"""Finding 8: report.claims (the study's mechanical check) on one set's committed rows
(eighth pass, results/issue50h_auroc*.json) and on the four synthetic sets only: what the
check prints when the s.e. over sets is 0 (one set) or the real-set baseline is missing."""
import json, sys
import numpy as np
from jaxpapers.papers.lpr import report, experiment
R = "jaxpapers/papers/lpr/results/"
rows_all = json.load(open(R + "issue50h_auroc.json"))
ps = json.load(open(R + "issue50h_auroc_per_seed.json"))["auroc"]
kinds = ("ae", "vae", "dae", "memae")
classical = ("iforest", "lof", "ocsvm", "knn", "ecod", "copod", "hbos", "pca", "cblof", "loda", "pca_recon", "mean_dist")
synth = ("local", "global", "dependency", "clustered")
out = {}
for sets in (["wine"], ["satimage2"], list(synth)):
  rows = [r for r in rows_all if r["dataset"] in sets]
  avg = {"dataset": "average", **{c: float(np.mean([r[c] for r in rows])) for c in rows[0] if c != "dataset"}}
  res = {k: {n: [v / 100 for v in ps[k][n]] for n in sets} for k in ps}  # the study passes fractions
  cl = report.claims(rows + [avg], kinds, classical, synth, res)
  out["+".join(sets)] = cl
  for c in cl:
    print("+".join(sets), "|", c["claim"], "|", c["measured"], "|", c["holds"])
json.dump(out, open(sys.argv[1], "w"), indent=1)
