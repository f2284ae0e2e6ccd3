"""The trivial model of the coupled-SAE study (issue 45, review rev45 finding 6).

Word rate (words heard per TR), FIR-delayed with the study's 4 delays and fitted by the
study's own ridge (`methods._ridge_method`: himalaya per-voxel alpha, CV over whole
training stories), scored as the study scores every method (`experiment.summarize`: mean
test r over the predictable voxels of the fitted subjects, as % of dense ridge). Two
versions of the regressor:
  count   : number of words whose onset falls in the TR (`analysis.words_per_tr`)
  lanczos : the HuthLab word-rate feature, ones at the word times Lanczos-resampled to
            the TR grid (as the LM features, `data.tr_features`, z-scored per story)
Dense ridge is refitted here on the same split, and must equal the committed study row's
r_dense (a check that this is the study's data and scoring). Not package code.

  python jaxpapers/papers/coupled_sae/results/trivial_r8c_wordrate.py \
      --workdir=/tmp/csae45c/wr --seeds=0,1,2 \
      --out=jaxpapers/papers/coupled_sae/results/trivial_r8c_rows.json
"""
import argparse
import json
import os
import subprocess
import time

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.coupled_sae import analysis
from jaxpapers.papers.coupled_sae import data as data_lib
from jaxpapers.papers.coupled_sae import methods
from jaxpapers.papers.coupled_sae import signal
from jaxpapers.papers.coupled_sae import simulate as sim_lib


def word_rate(feats, kind):
  """Per story (T, 1) word-rate regressor."""
  d_tr = 2.0
  out = []
  for story, x, words in zip(feats.stories, feats.x, feats.words_tr):
    T = x.shape[0]
    if kind == "count":
      out.append(np.array([[len(w)] for w in analysis.words_per_tr(story, T, d_tr)],
                          np.float64))
    else:
      mid = 0.5 * (story.onsets + story.offsets)
      ones = np.ones((len(mid), 1))
      out.append(signal.zscore(signal.lanczos_resample(ones, mid, signal.tr_times(T, d_tr))))
  return out


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--workdir", required=True)
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument("--config", default="")
  p.add_argument("--study_rows", default="jaxpapers/papers/coupled_sae/results/coupled_sae_rows.json")
  p.add_argument("--out", required=True)
  a = p.parse_args()
  cfg = config_lib.load("configs/coupled_sae.py" + (":" + a.config if a.config else ""))
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
  dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True).stdout.strip()
  study = {r["seed"]: r for r in json.load(open(a.study_rows))["rows"]}
  t0 = time.time()
  feats = data_lib.features_for(cfg, os.path.join(a.workdir, "cache"))
  delays = tuple(cfg.data.delays)
  rows = []
  for seed in [int(s) for s in a.seeds.split(",")]:
    ts = time.time()
    sf = data_lib.for_seed(feats, cfg, seed)
    resp = data_lib.responses_for(sf, cfg, seed)
    S = len(resp.y)
    n_fit = S - 1 if (cfg.eval.hold_out_subject and S > 1) else S
    tr, te = (methods.make_split(sf, resp, n, delays) for n in ("train", "test"))
    # predictable voxels: as experiment.summarize
    test_sig = [data_lib.stack(s, sf.split["test"]) for s in resp.sim.signals]
    ceil = [sim_lib.noise_ceiling(test_sig[s], te.ys(s)) for s in range(S)]
    mask = [c >= cfg.eval.ceiling_min for c in ceil]
    score = lambda r: float(np.mean([r[s][mask[s]].mean() for s in range(n_fit)]))  # noqa: E731
    r_dense = score(methods._ridge_method(tr.xdel, te.xdel, tr, te, n_fit, cfg)["test_r"])  # pylint: disable=protected-access
    row = {"seed": seed, "r_dense": r_dense,
           "r_dense_study_row": study.get(seed, {}).get("r_dense"),
           "stories": [s.name for s in sf.stories]}
    for kind in ("count", "lanczos"):
      wr = word_rate(sf, kind)
      f = {n: data_lib.delayed(wr, sf.split[n], delays) for n in ("train", "test")}
      res = methods._ridge_method(f["train"], f["test"], tr, te, n_fit, cfg)  # pylint: disable=protected-access
      row[f"r_wordrate_{kind}"] = score(res["test_r"])
      row[f"pct_dense_wordrate_{kind}"] = 100.0 * row[f"r_wordrate_{kind}"] / r_dense
      row[f"alpha_median_wordrate_{kind}"] = float(np.median(np.concatenate(res["alphas"])))
    for k in ("pct_dense_coupled", "pct_dense_pca_tuned", "pct_dense_oracle"):
      row[f"study_{k}"] = study.get(seed, {}).get(k)
    row["seconds"] = time.time() - ts
    print(json.dumps({k: v for k, v in row.items() if k != "stories"}), flush=True)
    rows.append(row)
  summ = {}
  for k in ("pct_dense_wordrate_count", "pct_dense_wordrate_lanczos", "r_dense"):
    v = np.array([r[k] for r in rows])
    summ[k] = [float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0]  # mean, std (ddof 1, as sweep.table)
  out = {"commit": commit + ("-dirty" if dirty else ""), "cpus": len(os.sched_getaffinity(0)),
         "seconds": time.time() - t0, "config": a.config, "summary": summ, "rows": rows}
  print(json.dumps(summ))
  with open(a.out, "w") as fh:
    json.dump(out, fh, indent=1)


if __name__ == "__main__":
  main()
