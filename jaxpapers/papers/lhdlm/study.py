"""lhdlm's study: every model on each corpus as one seeds x LR population through core.loop.

Per corpus and model: held-out NELBO (AR: NLL) in bits per byte on the test half of the
held-out windows, at the LR chosen on the validation half (mean over seeds), with the
Monte-Carlo standard error of the ELBO estimate (config.study.samples draws per window);
the unigram/bigram trivial models on the same test windows. LHDLM's map: I(X; C) and the
mean column entropy over training (regularizer on and off), ARI of argmax Gamma against
the planted classes, column entropy of function vs content tokens. Generation: samples of
each diffusion model at several step counts (ancestral and tau-leaping), scored by the AR
model of the same seed (bits per token of the samples) with their unigram entropy.
"""
from __future__ import annotations

import json
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import loop
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import population
from jaxpapers.core import study as study_lib
from jaxpapers.data import text as text_lib
from jaxpapers.papers.lhdlm import data as data_lib
from jaxpapers.papers.lhdlm import diffusion as dif
from jaxpapers.papers.lhdlm import model as model_lib
from jaxpapers.papers.lhdlm import sampler as sampler_lib

PATHS = ("jaxpapers/papers/lhdlm", "jaxpapers/nn/lm.py", "jaxpapers/nn/stack.py",
         "jaxpapers/nn/attention.py", "jaxpapers/core/loop.py",
         "jaxpapers/core/population.py", "configs/lhdlm.py")


def _kind(name):
  return ("lhdlm", 0.0) if name == "lhdlm_noreg" else (name, None)


def _corpus_config(config, corpus):
  s = config.study
  over = {"data.corpus": "synthetic" if corpus.startswith("synthetic") else corpus, "train.steps": s.steps, "model.dim": s.dim,
          "model.layers": s.layers, "model.n_heads": s.n_heads, "data.seq_len": s.seq_len,
          "train.batch_size": s.batch_size, "train.eval_every": s.steps,
          "train.checkpoint_every": max(1, s.steps // 2), "train.log_every": max(1, s.steps // 20),
          "eval.max_windows": 8, "eval.samples": 1}
  if corpus == "synthetic_overlap":
    over["data.synthetic.overlap"] = s.overlap
  if corpus.startswith("synthetic"):
    over["model.clusters"] = config.data.synthetic.classes + 1
  else:
    over["data.max_chars"] = s.shakespeare_chars
  return config_lib.override(config, over)


def _nelbo_fn(mdl):
  def f(params, tokens, key):
    return jnp.sum(mdl.objective(mdl.lm_model.apply, params, tokens, key))
  return jax.jit(f)


def _bpb(fn, params, windows, token_bytes, samples, batch=64):
  """(mean bpb over `samples` keys, Monte-Carlo s.e. of that mean)."""
  nbytes = float(token_bytes[windows[:, 1:]].sum())
  per_key = []
  for k in range(samples):
    key = jax.random.PRNGKey(1000 + k)
    tot = sum(float(fn(params, jnp.asarray(windows[i:i + batch]), jax.random.fold_in(key, i)))
              for i in range(0, len(windows), batch))
    per_key.append(tot / (math.log(2) * nbytes))
  per_key = np.asarray(per_key)
  se = float(per_key.std(ddof=1) / math.sqrt(samples)) if samples > 1 else 0.0
  return float(per_key.mean()), se


def _curves(workdir, n, keys=("loss", "mi", "col_entropy")):
  rows = metrics_lib.read_metrics(workdir, split="train")
  out = {k: [] for k in keys}
  out["step"] = []
  for r in rows:
    if "loss" not in r:
      continue
    out["step"].append(r["step"])
    for k in keys:
      v = r.get(k)
      out[k].append(list(np.asarray(v, float).reshape(-1)[:n]) if v is not None else None)
  return out


def _unigram_entropy(z, V):
  p = np.bincount(np.asarray(z).reshape(-1), minlength=V) / z.size
  p = p[p > 0]
  return float(-(p * np.log2(p)).sum())


def run(config, workdir: str):
  commit = study_lib.git_commit(paths=PATHS)
  s = config.study
  seeds = [config.seed + i for i in range(s.seeds)]
  t0 = time.time()
  summary, all_rows, gen_rows, map_rows, curves = [], [], [], [], {}
  for corpus in s.corpora.split("+"):
    cfg = _corpus_config(config, corpus)
    data, labels = data_lib.load(cfg)
    T = cfg.data.seq_len
    windows = text_lib.eval_windows(data.val, T, s.eval_windows)
    val_w, test_w = windows[:len(windows) // 2], windows[len(windows) // 2:]
    trivial = data_lib.unigram_bigram_bpb(data, test_w)
    print(f"[{corpus}] {data.name}: V={data.vocab_size} train {len(data.train):,} tokens; "
          f"{len(val_w)} val / {len(test_w)} test windows of {T}; trivial test bpb "
          f"unigram {trivial['unigram']:.4f} bigram {trivial['bigram']:.4f}", flush=True)
    trained = {}
    kinds = {"synthetic": s.kinds, "synthetic_overlap": s.kinds_overlap}.get(
        corpus, s.kinds_shakespeare)
    for name in kinds.split("+"):
      kind, reg = _kind(name)
      mdl = model_lib.build(cfg, data.vocab_size, data.train, kind=kind, reg=reg)
      pop = population.grid(seeds, lr=s.lrs)
      task = population.population_task(
          lambda seed, hp, mdl=mdl: model_lib.make_task(cfg, data, mdl, seed=seed, hparams=hp),
          pop)
      wd = os.path.join(workdir, corpus, name)
      state, _ = loop.train(cfg, wd, task)
      state = jax.device_get(state)
      curves[f"{corpus}/{name}"] = _curves(wd, len(pop))
      fn = _nelbo_fn(mdl)
      samples = 1 if kind == "ar" else s.samples
      rows = []
      for i, mem in enumerate(pop):
        p = population.member(state, i)["params"]
        div = bool(state["diverged"][i])
        vb, vse = (math.nan, 0.0) if div else _bpb(fn, p, val_w, data.token_bytes, samples)
        tb, tse = (math.nan, 0.0) if div else _bpb(fn, p, test_w, data.token_bytes, samples)
        rows.append({"corpus": corpus, "model": name, "lr": mem["lr"], "seed": mem["seed"],
                     "diverged": div, "val_bpb": vb, "test_bpb": tb, "test_mc_se": tse})
      all_rows += rows
      by_lr = {lr: [r for r in rows if r["lr"] == lr] for lr in s.lrs}
      val_mean = {lr: np.mean([r["val_bpb"] for r in rs]) for lr, rs in by_lr.items()}
      finite = {lr: v for lr, v in val_mean.items() if np.isfinite(v)}
      best = min(finite, key=finite.get)
      br = by_lr[best]
      tb = np.array([r["test_bpb"] for r in br])
      summary.append({"corpus": corpus, "model": name, "lr_grid": "/".join(f"{x:g}" for x in s.lrs),
                      "val_by_lr": "/".join(f"{val_mean[x]:.3f}" for x in s.lrs),
                      "best_lr": best, "edge": best in (s.lrs[0], s.lrs[-1]),
                      "test_bpb": float(tb.mean()), "test_std": float(tb.std()),
                      "mc_se": float(np.mean([r["test_mc_se"] for r in br])),
                      "unigram": trivial["unigram"], "bigram": trivial["bigram"]})
      print(f"  {name:12s} val by LR {summary[-1]['val_by_lr']} -> lr {best:g}: test "
            f"{tb.mean():.4f} +- {tb.std():.4f} (MC s.e. {summary[-1]['mc_se']:.4f}) "
            f"[{time.time() - t0:.0f}s]", flush=True)
      trained[name] = (mdl, [population.member(state, i)["params"]
                             for i, mem in enumerate(pop) if mem["lr"] == best])
      if kind == "lhdlm":
        for si, p in enumerate(trained[name][1]):
          lg = np.asarray(dif.log_gamma(p["gamma"]))
          ent = np.asarray(dif.column_entropy(jnp.asarray(lg)))
          row = {"corpus": corpus, "model": name, "seed": seeds[si],
                 "mi": float(dif.mutual_information(jnp.asarray(lg), jnp.asarray(mdl.p_V))),
                 "mean_col_entropy": float((ent * mdl.p_V).sum()), "log_C": math.log(mdl.C)}
          if labels is not None:
            from sklearn.metrics import adjusted_rand_score  # pylint: disable=g-import-not-at-top
            content = labels < labels.max()
            row["ari_content"] = float(adjusted_rand_score(labels[content],
                                                           lg.argmax(0)[content]))
            row["entropy_function"] = float(ent[~content].mean())
            row["entropy_content"] = float(ent[content].mean())
          map_rows.append(row)
          np.save(os.path.join(workdir, corpus, name, f"gamma_seed{seeds[si]}.npy"), np.exp(lg))
    if "ar" in trained and corpus == "synthetic":
      gen_rows += _generation(config, cfg, data, trained, test_w)
    md = _write(workdir, commit, s, seeds, t0, summary, all_rows, map_rows, gen_rows, curves)
  print(md, flush=True)
  return summary


def _write(workdir, commit, s, seeds, t0, summary, all_rows, map_rows, gen_rows, curves):
  """Tables, raw rows, curves and plots so far (rewritten after every corpus)."""
  header = (f"lhdlm study at commit {commit}: {s.steps} steps, batch "
            f"{s.batch_size} x {s.seq_len}, d={s.dim} x {s.layers} layers, {len(seeds)} seeds x LRs {list(s.lrs)}; LR chosen "
            f"on validation windows, test bpb mean +- std over seeds; ELBO with "
            f"{s.samples} Monte-Carlo draws (mc_se: its standard error). {time.time() - t0:.0f}s.")
  md = study_lib.write_table(workdir, "nelbo", summary, header=header, digits=4)
  study_lib.write_table(workdir, "nelbo_rows", all_rows, digits=4)
  if map_rows:
    md += "\n\n" + study_lib.write_table(workdir, "gamma_map", map_rows, digits=4)
  if gen_rows:
    md += "\n\n" + study_lib.write_table(workdir, "generation", gen_rows, digits=4)
  with open(os.path.join(workdir, "curves.json"), "w") as f:
    json.dump(curves, f)
  from jaxpapers.papers.lhdlm import plots  # pylint: disable=g-import-not-at-top
  plots.study_plots(workdir, summary, curves)
  return md


def _generation(config, cfg, data, trained, test_w):
  """AR bits per token of each diffusion model's samples, and their unigram entropy."""
  s = config.study
  ar_mdl, ar_params = trained["ar"]
  ar_fn = _nelbo_fn(ar_mdl)
  T, V = cfg.data.seq_len, data.vocab_size
  n = min(32, len(test_w))
  ref = np.asarray(test_w[:n])
  rows = [{"corpus": cfg.data.corpus, "model": "held-out data", "sampler": "-", "steps": 0,
           "ar_bits_per_token": float(np.mean([float(ar_fn(p, jnp.asarray(ref), None))
                                               for p in ar_params]) / (n * T * math.log(2))),
           "unigram_entropy": _unigram_entropy(ref[:, 1:], V)}]
  for name, (mdl, plist) in trained.items():
    if mdl.kind == "ar":
      continue
    for method, step_counts in (("ancestral", s.sample_steps), ("tau_leaping", s.tau_steps)):
      for steps in step_counts:
        bits, ents = [], []
        for si, p in enumerate(plist):
          z = sampler_lib.sample(jax.random.PRNGKey(si), mdl, p, n, T + 1, steps, method)
          bits.append(float(ar_fn(ar_params[si], z, None)) / (n * T * math.log(2)))
          ents.append(_unigram_entropy(np.asarray(z)[:, 1:], V))
        rows.append({"corpus": cfg.data.corpus, "model": name, "sampler": method,
                     "steps": steps, "ar_bits_per_token": float(np.mean(bits)),
                     "unigram_entropy": float(np.mean(ents))})
        print(f"  samples {name} {method} {steps} steps: AR {rows[-1]['ar_bits_per_token']:.3f}"
              f" bits/token, unigram entropy {rows[-1]['unigram_entropy']:.3f}", flush=True)
  return rows
