"""The Monte-Carlo law of the held-out NELBO estimate of finished study cells.

The hierarchical ELBO's cluster-state weight w_c = -alpha'_t / c_t grows without bound at
both ends of [0, 1] while the cluster state grows rare (c_t -> 0), so one draw of the
estimate can carry a single huge term. This reads many draws of the whole held-out
estimate (the validation windows, the study's keys 1000 + k) and reports their mean,
standard error, median, upper quantiles and the share of the total carried by the top 1%
of draws, and the loop's own fixed-key estimate with its largest single term:

  python -m jaxpapers.papers.lhdlm.mc_tail --workdir=/tmp/lhdlm/study \
      --cells=synthetic/mdlm+synthetic/lhdlm --draws=256
"""
from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

from jaxpapers.core import config as config_lib
from jaxpapers.core import population
from jaxpapers.data import text as text_lib
from jaxpapers.papers.lhdlm import data as data_lib
from jaxpapers.papers.lhdlm import study

flags.DEFINE_string("workdir", None, "the study's workdir")
flags.DEFINE_string("cells", "synthetic/mdlm+synthetic/lhdlm", "'+'-joined corpus/model")
flags.DEFINE_integer("draws", 256, "Monte-Carlo draws of the whole held-out estimate")
flags.DEFINE_string("config", "configs/lhdlm.py", "the study's config")
flags.DEFINE_integer("loop_bases", 1, "the loop's estimator with keys PRNGKey(0..n-1)")
flags.DEFINE_bool("loop_shared_key", False, "the loop's estimator as it was before each "
                  "eval batch had its own key (one key for every batch)")
flags.DEFINE_string("out", "", "output file name in the workdir (default mc_tail.json, "
                    "or mc_tail_loop_keys.json with --loop_bases > 1)")


def tail_stats(draws: np.ndarray) -> dict:
  """Mean, s.e., median, quantiles and the top-1% share of per-draw estimates."""
  d = np.sort(np.asarray(draws, float))
  n = len(d)
  top = max(1, n // 100)
  excess = d - d.min()
  return {"draws": n, "mean": float(d.mean()), "se": float(d.std(ddof=1) / math.sqrt(n)),
          "median": float(np.median(d)), "q90": float(np.quantile(d, 0.9)),
          "q99": float(np.quantile(d, 0.99)), "max": float(d[-1]),
          "top1pct_share_of_excess": float(excess[-top:].sum() / max(excess.sum(), 1e-30))}


def loop_key_terms(mdl, params, windows, samples, batch, base=0, shared_key=False):
  """The loop's own held-out estimate (core.loop through nn.lm's eval_step: batch j of
  `batch` windows draws keys split(fold_in(PRNGKey(0), j), samples)) in bits per token, its
  largest single-position term (nats) and the estimate without that term. `base` > 0: the
  same estimator with PRNGKey(base) instead of PRNGKey(0) (is the loop's key typical?).
  shared_key: the loop's estimator before each eval batch had its own key (keys
  split(PRNGKey(base), samples) for every batch; the records mc_tail.json and
  mc_tail_loop_keys.json). `windows` must fill whole batches: the loop pads a short last
  batch, which moves the low-discrepancy times of its rows (the study's 64 windows are two
  batches of 32)."""
  root = jax.random.PRNGKey(base)
  def keys(j):
    return jax.random.split(root if shared_key else jax.random.fold_in(root, j), samples)
  f = jax.jit(lambda p, x, k: mdl.objective(mdl.lm_model.apply, p, x, k))
  terms = np.stack([np.concatenate([np.asarray(f(params, jnp.asarray(windows[i:i + batch]),
                                                  keys(i // batch)[k]))
                                    for i in range(0, len(windows), batch)])
                    for k in range(samples)])            # (samples, N, T) nats
  norm = samples * terms.shape[1] * terms.shape[2] * math.log(2)
  return {"loop_estimate": float(terms.sum() / norm), "max_term_nats": float(terms.max()),
          "loop_estimate_without_max": float((terms.sum() - terms.max()) / norm)}


def run(config, workdir, cells, draws, loop_bases=1, shared_key=False, out_name=None):
  out = []
  for cell in cells.split("+"):
    corpus, name = cell.split("/")
    cfg = study._corpus_config(config, corpus)
    data, labels = data_lib.load(cfg)
    windows = text_lib.eval_windows(data.val, cfg.data.seq_len, config.study.eval_windows)
    val_w = windows[:len(windows) // 2]
    with open(os.path.join(workdir, corpus, name, "cell.json")) as f:
      chosen = json.load(f)["chosen"]
    mdl = study._model(config, cfg, name, data, labels)
    pop = population.grid([config.seed + i for i in range(config.study.seeds)],
                          lr=config.study.lrs)
    state = study._train(cfg, data, mdl, pop, os.path.join(workdir, corpus, name))
    fn = study._nelbo_fn(mdl)
    for i in chosen:
      d = study.per_draw_bpb(fn, population.member(state, i)["params"], val_w,
                             data.token_bytes, draws)
      loop_terms = lambda b: loop_key_terms(
          mdl, population.member(state, i)["params"], val_w[:config.study.val_windows],
          config.study.val_samples, config.eval.batch_size, base=b, shared_key=shared_key)
      row = {"cell": cell, "seed": pop[i]["seed"], "lr": pop[i]["lr"], **tail_stats(d),
             **loop_terms(0), "loop_keys": "shared" if shared_key else "per_batch"}
      if loop_bases > 1:
        row["loop_estimate_by_key"] = [loop_terms(b)["loop_estimate"]
                                       for b in range(loop_bases)]
      print(json.dumps(row), flush=True)
      out.append(row)
  name = out_name or ("mc_tail.json" if loop_bases == 1 else "mc_tail_loop_keys.json")
  with open(os.path.join(workdir, name), "w") as f:
    json.dump(out, f, indent=1)
  return out


def main(_):
  fl = flags.FLAGS
  run(config_lib.load(fl.config), fl.workdir, fl.cells, fl.draws, fl.loop_bases,
      fl.loop_shared_key, fl.out or None)


if __name__ == "__main__":
  app.run(main)
