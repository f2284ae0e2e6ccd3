"""LGS (issue 41) ablation: the latent models' rollouts scored in the latent space.

Where the PhyVAE's reconstruction error floors every latent model's pixel L2RE, the
pixel table cannot say whether the generative dynamics drift less than the deterministic
ones. This scores the study's trained latent models (restored from its checkpoints, the
lr chosen on validation, every seed) against the *encoded* true trajectory, with no
decoder: relative L2 over the latent grid per test trajectory and step, beside latent
persistence. Rollout noise is keyed as in the study (`experiment.rollout_keys`).

  python -m jaxpapers.papers.lgs.latent_eval --config=configs/lgs.py:setting=close \\
      --workdir=/tmp/lg41/close2 --out=/tmp/lg41/close2/latent_eval.json
"""
from __future__ import annotations

import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.lgs import experiment as E
from jaxpapers.papers.lgs import study
from jaxpapers.papers.lgs import train as T


def rel_err(pred, true):
  """[B, S]: ||pred - true|| / ||true|| over each latent frame."""
  ax = tuple(range(2, pred.ndim))
  return np.sqrt(((pred - true) ** 2).sum(ax)) / np.maximum(np.sqrt((true ** 2).sum(ax)), 1e-8)


def latent_rollout(sp, params, ctx, mask, key, res, steps):
  def body(c, k):
    nxt = T.dynamics_step(sp, params, c, mask, jax.random.fold_in(key, k), res)
    return jnp.concatenate([c[:, 1:], nxt[:, None]], axis=1), nxt
  return jnp.moveaxis(jax.lax.scan(body, ctx, jnp.arange(steps))[1], 0, 1)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--config", required=True)
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--out", required=True)
  a = ap.parse_args()
  config = config_lib.load(a.config)
  quiet = lambda *_: None
  data, fams = E.corpus(config, a.workdir, quiet)
  mean, std = E.stats(data["train"], len(fams))
  xs = {s: E.normalize(v, mean, std) for s, v in data.items()}
  masks = {s: v["mask"] for s, v in data.items()}
  seeds = list(range(config.train.seeds))
  K, S = config.model.context, config.eval.rollout_steps
  vae, _ = E.train_vae(config, a.workdir, xs["train"], masks["train"], seeds, log=quiet)
  pick = lambda tree, i: jax.tree.map(lambda v: v[i], tree)
  lat, _, res = E.latents(config, vae["params"], xs, splits=("train", "test"))
  keys = E.rollout_keys(seeds)
  fam = data["test"]["fam"]
  true = lat["test"][:, :, K:K + S]
  out = dict(families=fams, steps=S)
  pers = np.stack([rel_err(np.repeat(lat["test"][i][:, K - 1:K], S, 1), true[i]) for i in seeds])
  out["persistence"] = pers
  for kind in T.LATENT:
    path = os.path.join(a.workdir, "cells", f"dyn_{kind}.json")
    if not os.path.exists(path):
      continue
    with open(path) as f:
      sel = json.load(f)["selection"]
    grid = study.lr_grid(config, kind)
    b = grid.index(sel["chosen"])
    state, _, _ = E.train_dynamics(config, a.workdir, kind, lat["train"], masks["train"], res,
                                   seeds, grid, tag=kind, log=quiet)  # the finished checkpoint
    sp = E.spec(config, kind)
    run = jax.jit(lambda p, c, m, k, r: latent_rollout(sp, p, c, m, k, r, S))
    errs = []
    for i in seeds:
      p = pick(state["params"], b * len(seeds) + i)
      pred = np.asarray(run(p, jnp.asarray(lat["test"][i][:, :K]), jnp.asarray(masks["test"]),
                            keys[i], jnp.float32(res[i])))
      errs.append(rel_err(pred, true[i]))
    out[kind] = np.stack(errs)  # [seeds, B, S]
  table = {}
  for k, v in out.items():
    if not isinstance(v, np.ndarray):
      continue
    per = np.stack([v[:, fam == f].mean(1) for f in range(len(fams))], 1)  # [seeds, F, S]
    table[k] = {str(s): [float(per[:, :, s - 1].mean(1).mean()), float(per[:, :, s - 1].mean(1).std())]
                for s in (1, 5, 10, 20) if s <= S}
    table[k]["per_family@20"] = per[:, :, min(20, S) - 1].mean(0).round(4).tolist()
    print(k, {s: f"{m:.4f} ± {sd:.4f}" for s, (m, sd) in
              ((s, table[k][s]) for s in table[k] if s != "per_family@20")},
          "per family @20", table[k]["per_family@20"], flush=True)
  with open(a.out, "w") as f:
    json.dump(dict(table=table, families=fams, seeds=seeds), f, indent=1)


if __name__ == "__main__":
  main()
