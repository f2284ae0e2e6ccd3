"""LHDLM's learned map read per byte, beside HDLM's k-means clusters (trains nothing).

For a finished LHDLM study cell on a byte corpus (its `gamma_seed*.npy`, the chosen LR's
map per seed, and its `config.json`), prints and writes per seed: I(X;C) under the
training unigram, each used byte's column entropy H(Gamma[:, x]) averaged by byte group
(whitespace, punctuation, lower, upper, digit; plain and frequency-weighted), the sharpest
and most diffuse bytes, the bytes of each argmax cluster, the Spearman correlation of
entropy with log frequency, and the ARI of the argmax map against HDLM's fixed k-means
clusters (recomputed from the same config with the code HDLM trains with).

  python -m jaxpapers.papers.lhdlm.map_bytes --cell=/tmp/w/shakespeare/lhdlm --out=/tmp/map.json
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re

import jax.numpy as jnp
import ml_collections
import numpy as np
from scipy import stats
from sklearn.metrics import adjusted_rand_score

from jaxpapers.papers.lhdlm import data as data_lib
from jaxpapers.papers.lhdlm import diffusion as dif

GROUPS = ("whitespace", "punct", "lower", "upper", "digit")


def byte_name(b: int) -> str:
  return {32: "[space]", 10: "[\\n]", 9: "[\\t]", 13: "[\\r]"}.get(
      b, chr(b) if 32 < b < 127 else f"[0x{b:02x}]")


def byte_group(b: int) -> str:
  ch = chr(b)
  if ch in " \n\t\r":
    return "whitespace"
  if ch.isascii() and ch.isalpha():
    return "lower" if ch.islower() else "upper"
  if ch.isascii() and ch.isdigit():
    return "digit"
  return "punct"


def read_map(gamma_CxV: np.ndarray, counts_V: np.ndarray, assign_V: np.ndarray | None = None,
             top: int = 10) -> dict:
  """The per-byte reading of one column-stochastic map over the bytes with counts > 0."""
  used = np.flatnonzero(counts_V)
  p_V = (counts_V + 1.0) / (counts_V + 1.0).sum()          # the models' smoothed unigram
  lg = jnp.log(jnp.maximum(jnp.asarray(gamma_CxV, jnp.float32), 1e-30))
  ent = np.asarray(dif.column_entropy(lg), np.float64)
  arg = gamma_CxV.argmax(0)
  by_group = {}
  for g in GROUPS:
    idx = [b for b in used if byte_group(b) == g]
    if idx:
      w = counts_V[idx] / counts_V[idx].sum()
      by_group[g] = {"n": len(idx), "mass": float(counts_V[idx].sum() / counts_V.sum()),
                     "mean": float(ent[idx].mean()), "freq_weighted": float(ent[idx] @ w)}
  order = sorted(used, key=lambda b: ent[b])
  out = {"mi": float(dif.mutual_information(lg, jnp.asarray(p_V, jnp.float32))),
         "log_C": math.log(gamma_CxV.shape[0]),
         "mean_col_entropy_pV": float(ent @ p_V),
         "mean_col_entropy_used_freq": float(ent[used] @ counts_V[used] / counts_V[used].sum()),
         "cluster_mass": (gamma_CxV @ p_V).tolist(), "by_group": by_group,
         "sharpest": [(byte_name(b), float(ent[b]), int(counts_V[b])) for b in order[:top]],
         "most_diffuse": [(byte_name(b), float(ent[b]), int(counts_V[b]))
                          for b in order[::-1][:top]],
         "argmax_clusters": {c: "".join(byte_name(b) for b in used if arg[b] == c)
                             for c in range(gamma_CxV.shape[0])},
         "n_used_clusters": len(set(arg[used].tolist())),
         "spearman_entropy_vs_log_count": float(
             stats.spearmanr(ent[used], np.log(counts_V[used])).correlation),
         "per_byte": {byte_name(b): round(float(ent[b]), 4) for b in used}}
  if assign_V is not None:
    out["ari_to_kmeans"] = float(adjusted_rand_score(assign_V[used], arg[used]))
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--cell", required=True, help="an LHDLM study cell directory")
  ap.add_argument("--out", default="", help="write the reading here (JSON)")
  a = ap.parse_args(argv)
  paths = sorted(glob.glob(os.path.join(a.cell, "gamma_seed*.npy")))
  if not paths:
    raise SystemExit(f"{a.cell}: no gamma_seed*.npy (not a finished LHDLM study cell)")
  with open(os.path.join(a.cell, "config.json")) as f:
    cfg = ml_collections.ConfigDict(json.load(f))
  data, _ = data_lib.load(cfg)
  V = data.vocab_size
  counts = np.bincount(np.asarray(data.train), minlength=V)[:V].astype(np.float64)
  assign = dif.hdlm_assign(np.asarray(data.train), V, cfg.model.clusters,
                           cfg.model.kmeans_tokens, cfg.seed)
  used = np.flatnonzero(counts)
  out = {"cell": a.cell, "used_bytes": len(used),
         "hdlm_kmeans": {c: "".join(byte_name(b) for b in used if assign[b] == c)
                         for c in range(cfg.model.clusters)},
         "seeds": {}}
  print(f"{len(used)} bytes used in training; HDLM's k-means clusters: {out['hdlm_kmeans']}")
  for p in paths:
    seed = int(re.search(r"gamma_seed(\d+)\.npy$", p).group(1))
    r = out["seeds"][seed] = read_map(np.load(p), counts, assign)
    print(f"seed {seed}: I(X;C) {r['mi']:.3f} of log C {r['log_C']:.3f}; mean column entropy "
          f"{r['mean_col_entropy_pV']:.3f}; {r['n_used_clusters']} clusters used; ARI to "
          f"k-means {r['ari_to_kmeans']:.3f}; Spearman(entropy, log count) "
          f"{r['spearman_entropy_vs_log_count']:.3f}")
    for g, v in r["by_group"].items():
      print(f"  {g:10s} n={v['n']:2d} mass {v['mass']:.3f} mean H {v['mean']:.3f} "
            f"frequency-weighted {v['freq_weighted']:.3f}")
    print("  sharpest:", [(n, round(e, 3)) for n, e, _ in r["sharpest"]])
    print("  most diffuse:", [(n, round(e, 3)) for n, e, _ in r["most_diffuse"]])
    print("  argmax clusters:", r["argmax_clusters"])
  if a.out:
    with open(a.out, "w") as f:
      json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()
