"""LGS (issue 41) ablation: is the close setting's PhyVAE floor its training data's diversity?

In the close setting the PhyVAE's test reconstruction L2RE floors every latent model.
This trains (or restores, from the workdir's checkpoint) the PhyVAE of a config and scores
its reconstruction with the study's metric (`experiment.recon_errors`, the study's vae cell: physical-unit L2RE
per trajectory and frame over the frames K..K+S-1, `experiment.errors`) on the training
split as well as the test split, per family and seed. Run it once with the study's
trajectory count and once with more (`n_train=256`): a floor set by data diversity shows
as a train/test gap that shrinks, and a test error that falls, with more trajectories.
The first n of a larger training split are the n-trajectory split (`pdes._seed` keys a
trajectory by its index), so `train_first` scores the trajectories both VAEs saw.

  python -m jaxpapers.papers.lgs.vae_diversity \\
      --config=configs/lgs.py:setting=close,vae_steps=3500,n_train=256 \\
      --workdir=/tmp/lgs_n256 --out=/tmp/lgs_n256/vae_diversity.json
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.lgs import experiment as E


def per_family(err, fam, n_fam, first=None):
  """{mean, std (over seeds), seeds} per family of err [seeds, B, S]; `first`: only each
  family's first `first` trajectories."""
  out = []
  for f in range(n_fam):
    idx = np.flatnonzero(fam == f)[:first]
    by_seed = err[:, idx].mean(axis=(1, 2))
    out.append(dict(mean=float(by_seed.mean()), std=float(by_seed.std()),
                    seeds=[round(float(v), 4) for v in by_seed]))
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--config", required=True)
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--out", required=True)
  ap.add_argument("--first", type=int, default=64,
                  help="also score each family's first FIRST training trajectories")
  a = ap.parse_args()
  config = config_lib.load(a.config)
  t0 = time.perf_counter()
  data, fams = E.corpus(config, a.workdir, print)
  t_corpus = time.perf_counter() - t0
  mean, std = E.stats(data["train"], len(fams))
  xs = {s: E.normalize(v, mean, std) for s, v in data.items()}
  seeds = list(range(config.train.seeds))
  vae, curve = E.train_vae(config, a.workdir, xs["train"], data["train"]["mask"], seeds)
  t_vae = time.perf_counter() - t0 - t_corpus
  out = dict(config=a.config, families=fams, n_train=config.data.n_train,
             n_test=config.data.n_test, vae_steps=config.train.vae_steps, seeds=seeds,
             corpus_s=round(t_corpus, 1), vae_s=round(t_vae, 1))
  # the training loss (mean over seeds) at 50 / 75 / 100% of the steps: is it flat?
  out["train_loss"] = {str(curve[j][0]): float(np.mean(curve[j][1]))
                       for j in (len(curve) // 2 - 1, 3 * len(curve) // 4 - 1, len(curve) - 1)}
  for split in ("train", "test"):
    err = E.recon_errors(config, vae["params"], data[split], xs[split], mean, std)
    fam = data[split]["fam"]
    out[split] = dict(mean=float(err.mean(axis=(1, 2)).mean()),
                      per_family=per_family(err, fam, len(fams)))
    if split == "train" and a.first < config.data.n_train:
      out["train_first"] = dict(n=a.first, per_family=per_family(err, fam, len(fams), a.first))
  for key in ("train", "train_first", "test"):
    if key in out:
      print(f"{key:12s}", " ".join(f"{n} {r['mean']:.3f}±{r['std']:.3f}"
                                   for n, r in zip(fams, out[key]["per_family"])), flush=True)
  print(f"corpus {t_corpus:.0f}s, vae {t_vae:.0f}s, total {time.perf_counter() - t0:.0f}s")
  with open(a.out, "w") as f:
    json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()
