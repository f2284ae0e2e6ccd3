"""Multisubject coupled SAE (abstract 1): where the two-stage number moves run to run.

Issue 45 saw the two-stage SAE at 85.3% and 87.1% of dense ridge in two runs, with
another SAE learning rate picked. Two probes (numbers in the README):

  # same seed, same device layout: bitwise equal across processes and checkpoint chunks
  python -m jaxpapers.papers.coupled_sae.determinism hashes [--chunk=500]
  # every SAE lr's validation FVU and two-stage % of dense ridge, seeds 0-2; run it with
  # and without XLA_FLAGS=--xla_force_host_platform_device_count=8 and compare
  python -m jaxpapers.papers.coupled_sae.determinism per_lr

`hashes` trains the SAE grid (4 fitted subjects, fixed first 12 plays) for seeds 0 and 1 and
prints each member's validation FVU and a hash of its decoder; `per_lr` runs `fit_all`
(coupled grid cut to one member: only the SAE grid matters here) on the drawn stories.
Features come from `--cache` (the study's `<workdir>/cache`).
"""
from __future__ import annotations

import argparse
import hashlib
import json

import jax
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.coupled_sae import data as data_lib
from jaxpapers.papers.coupled_sae import experiment
from jaxpapers.papers.coupled_sae import methods


def hashes(cache: str, chunk: int = 0, ckpt_root: str = "/tmp/csae_determinism"):
  cfg = config_lib.load("configs/coupled_sae.py:draw_stories=false,sae_lrs=1e-3+3e-3")
  feats = data_lib.for_seed(data_lib.features_for(cfg, cache, log=lambda *_: None), cfg, 0)
  out = {"devices": jax.device_count(), "chunk": chunk}
  for seed in (0, 1):
    resp = data_lib.responses_for(feats, cfg, seed)
    tr, va = (methods.make_split(feats, resp, n, tuple(cfg.data.delays))
              for n in ("train", "val"))
    if chunk:
      c = config_lib.override(cfg, {"train.ckpt_every": chunk})
      st = methods.train_grid(c, tr, 4, seed, "sae", ckpt_dir=f"{ckpt_root}/seed{seed}")
    else:
      st = methods.train_grid(cfg, tr, 4, seed, "sae")
    members = range(len(cfg.train.sae_lrs))
    member = methods._member  # pylint: disable=protected-access
    fv = [methods.recon_fvu(member(st, i)["params"]["sae"], va.x, cfg.model.k) for i in members]
    h = hashlib.sha1(np.asarray(st["params"]["sae"]["w_dec"]).tobytes()).hexdigest()[:10]
    out[f"seed{seed}"] = {"val_fvu": fv, "decoder_hash": h}
  print(json.dumps(out))


def per_lr(cache: str):
  cfg = config_lib.load(
      "configs/coupled_sae.py:lrs=1e-3,betas=0.5,sae_lrs=3e-4+1e-3+3e-3+1e-2")
  feats = data_lib.features_for(cfg, cache, log=lambda *_: None)
  for seed in (0, 1, 2):
    f = data_lib.for_seed(feats, cfg, seed)
    resp = data_lib.responses_for(f, cfg, seed)
    fit = methods.fit_all(cfg, f, resp, seed, log=lambda *_: None)
    out, _ = experiment.summarize(cfg, f, resp, fit, seed)
    print(json.dumps({"devices": jax.device_count(), "seed": seed,
                      "two_stage_lr": out["two_stage_lr"],
                      "pct_two_stage": out["pct_dense_two_stage"],
                      "sae_grid": out["sae_grid"], "r_dense": out["r_dense"]}), flush=True)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("probe", choices=("hashes", "per_lr"))
  ap.add_argument("--cache", default="/tmp/csae_study/cache")
  ap.add_argument("--chunk", type=int, default=0)
  a = ap.parse_args(argv)
  if a.probe == "hashes":
    hashes(a.cache, a.chunk)
  else:
    per_lr(a.cache)


if __name__ == "__main__":
  main()
