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
  """(kind, reg override, planted partition?) of a study model name: lhdlm_noreg is LHDLM
  with the regularizer off, lhdlm_reg<w> LHDLM with weight w, hdlm_planted HDLM on the
  planted partition (the best hard partition of the synthetic language)."""
  if name.startswith("lhdlm_reg"):
    return "lhdlm", float(name[len("lhdlm_reg"):]), False
  return {"lhdlm_noreg": ("lhdlm", 0.0, False),
          "hdlm_planted": ("hdlm", None, True)}.get(name, (name, None, False))


def _corpus_config(config, corpus):
  s = config.study
  every = max(1, s.steps // s.val_points)
  over = {"data.corpus": "synthetic" if corpus.startswith("synthetic") else corpus,
          "train.steps": s.steps, "model.dim": s.dim,
          "model.layers": s.layers, "model.n_heads": s.n_heads, "data.seq_len": s.seq_len,
          "train.batch_size": s.batch_size, "train.eval_every": every,
          "train.checkpoint_every": every, "train.log_every": max(1, s.steps // 30),
          # the loop's periodic evaluation: the first val_windows held-out windows (a
          # prefix of the study's validation half), the validation curve over training
          "eval.max_windows": s.val_windows, "eval.samples": s.val_samples}
  if corpus == "synthetic_overlap":
    over["data.synthetic.overlap"] = s.overlap
  if corpus.startswith("synthetic"):
    over["model.clusters"] = s.syn_clusters or config.data.synthetic.classes + 1
  else:
    over["data.max_chars"] = s.shakespeare_chars
  return config_lib.override(config, over)


def _trivial(data, val_w, test_w, ks):
  """Unigram and add-k bigram test bits per byte, k chosen on the validation windows."""
  val = {k: data_lib.unigram_bigram_bpb(data, val_w, k)["bigram"] for k in ks}
  k = min(val, key=val.get)
  out = data_lib.unigram_bigram_bpb(data, test_w, k)
  return {"unigram": out["unigram"], "bigram": out["bigram"], "bigram_k": k,
          "bigram_k_edge": k in (min(ks), max(ks)) and len(ks) > 1}


def _nelbo_fn(mdl):
  def f(params, tokens, key):
    return jnp.sum(mdl.objective(mdl.lm_model.apply, params, tokens, key))
  return jax.jit(f)


def per_draw_bpb(fn, params, windows, token_bytes, draws, batch=64, key0=1000):
  """(draws,) held-out bits per byte of each Monte-Carlo draw (key key0 + k) of the ELBO."""
  nbytes = float(token_bytes[windows[:, 1:]].sum())
  per_key = []
  for k in range(draws):
    key = jax.random.PRNGKey(key0 + k)
    tot = sum(float(fn(params, jnp.asarray(windows[i:i + batch]), jax.random.fold_in(key, i)))
              for i in range(0, len(windows), batch))
    per_key.append(tot / (math.log(2) * nbytes))
  return np.asarray(per_key)


def _bpb(fn, params, windows, token_bytes, samples, batch=64):
  """(mean bpb over `samples` keys, Monte-Carlo s.e. of that mean)."""
  per_key = per_draw_bpb(fn, params, windows, token_bytes, samples, batch)
  se = float(per_key.std(ddof=1) / math.sqrt(samples)) if samples > 1 else 0.0
  return float(per_key.mean()), se


def _curves(workdir, n, keys=("loss", "mi", "col_entropy", "mask_term", "cluster_term")):
  """Training curves (per member) and the validation curve (the loop's periodic eval)."""
  rows = metrics_lib.read_metrics(workdir)
  out = {k: [] for k in keys}
  out["step"], out["val_step"], out["val_bpb"] = [], [], []
  for r in rows:
    if r.get("split") == "test" and "bpb/0" in r:   # a population's eval: bpb/<member>
      out["val_step"].append(r["step"])
      out["val_bpb"].append([float(r[f"bpb/{i}"]) for i in range(n)])
    elif r.get("split") == "train" and "loss" in r:
      out["step"].append(r["step"])
      for k in keys:
        v = r.get(k)
        out[k].append(list(np.asarray(v, float).reshape(-1)[:n]) if v is not None else None)
  return {k: v for k, v in out.items() if not (v and v[0] is None)}


def _unigram_entropy(z, V):
  p = np.bincount(np.asarray(z).reshape(-1), minlength=V) / z.size
  p = p[p > 0]
  return float(-(p * np.log2(p)).sum())


def _kinds(s, corpus):
  return {"synthetic": s.kinds, "synthetic_overlap": s.kinds_overlap}.get(
      corpus, s.kinds_shakespeare).split("+")


def run(config, workdir: str):
  """The whole study; each (corpus, model) population is a cell cached in its workdir
  (`cell.json`), so the study runs in chunks: `study_only=ar+mdlm` (or
  `synthetic/ar+...`) trains just those cells, and a later run with every cell present only assembles the tables."""
  commit = study_lib.git_commit(paths=PATHS)
  s = config.study
  seeds = [config.seed + i for i in range(s.seeds)]
  only = set(s.only.split("+")) if s.only else None
  t0 = time.time()
  cells, trivials, missing = [], {}, []
  for corpus in s.corpora.split("+"):
    cfg = _corpus_config(config, corpus)
    data, labels = data_lib.load(cfg)
    T = cfg.data.seq_len
    windows = text_lib.eval_windows(data.val, T, s.eval_windows)
    val_w, test_w = windows[:len(windows) // 2], windows[len(windows) // 2:]
    assert s.val_windows <= len(val_w), "the validation curve must read validation windows"
    trivial = _trivial(data, val_w, test_w, s.bigram_ks)
    if labels is not None:
      y = cfg.data.synthetic
      trivial["source"] = data_lib.source_bits(test_w, y.classes, y.per_class, y.functions,
                                               y.p_function, y.overlap, y.seed, y.order)
    trivials[corpus] = trivial
    print(f"[{corpus}] {data.name}: V={data.vocab_size} train {len(data.train):,} tokens; "
          f"{len(val_w)} val / {len(test_w)} test windows of {T}; trivial test bpb "
          f"unigram {trivial['unigram']:.4f} bigram {trivial['bigram']:.4f} "
          f"(add-k, k={trivial['bigram_k']:g} on validation)"
          + (f" source {trivial['source']:.4f}" if "source" in trivial else ""), flush=True)
    ar = {}
    for name in _kinds(s, corpus):
      path = os.path.join(workdir, corpus, name, "cell.json")
      if os.path.exists(path):
        with open(path) as f:
          cell = json.load(f)
        print(f"  {name:12s} cached: {path}", flush=True)
        if cell["generation"] is None and _ar_done(workdir, corpus):
          # trained before its corpus's AR model was: score its samples now
          cell["generation"] = _generation_of(config, cfg, corpus, name, data, labels,
                                              test_w, seeds, workdir, ar, cell["chosen"])
          with open(path, "w") as f:
            json.dump(cell, f)
        cells.append(cell)
        continue
      if only is not None and not {name, f"{corpus}/{name}"} & only:
        missing.append(f"{corpus}/{name}")
        continue
      cell = _cell(config, cfg, corpus, name, data, labels, val_w, test_w, trivial, seeds,
                   workdir, ar)
      with open(path, "w") as f:
        json.dump(cell, f)
      cells.append(cell)
      print(f"  [{time.time() - t0:.0f}s]", flush=True)
  md = _write(workdir, commit, s, seeds, t0, cells, trivials, missing)
  print(md, flush=True)
  return [c["summary"] for c in cells]


def _model(config, cfg, name, data, labels):
  kind, reg, planted = _kind(name)
  return model_lib.build(cfg, data.vocab_size, data.train, kind=kind, reg=reg,
                         assign=labels if planted else None,
                         probe=config.study.probe_windows if kind == "lhdlm" else 0)


def _train(cfg, data, mdl, pop, wd):
  task = population.population_task(
      lambda seed, hp: model_lib.make_task(cfg, data, mdl, seed=seed, hparams=hp), pop)
  state, _ = loop.train(cfg, wd, task)
  return jax.device_get(state)


def _ar_params(cfg, corpus, data, seeds, workdir, ar):
  """The AR model of this corpus at its selected LR (restored from its finished cell)."""
  if "params" not in ar:
    with open(os.path.join(workdir, corpus, "ar", "cell.json")) as f:
      best = json.load(f)["summary"]["best_lr"]
    mdl = model_lib.build(cfg, data.vocab_size, data.train, kind="ar")
    pop = population.grid(seeds, lr=cfg.study.lrs)
    state = _train(cfg, data, mdl, pop, os.path.join(workdir, corpus, "ar"))
    ar.update(mdl=mdl, params=[population.member(state, i)["params"]
                               for i, m in enumerate(pop) if m["lr"] == best])
  return ar["mdl"], ar["params"]


def _cell(config, cfg, corpus, name, data, labels, val_w, test_w, trivial, seeds, workdir,
          ar):
  """Trains one model (seeds x LRs population), evaluates it, selects its LR on validation."""
  s = config.study
  mdl = _model(config, cfg, name, data, labels)
  kind = mdl.kind
  pop = population.grid(seeds, lr=s.lrs)
  wd = os.path.join(workdir, corpus, name)
  t0 = time.time()
  state = _train(cfg, data, mdl, pop, wd)
  t_train = time.time() - t0
  curves = _curves(wd, len(pop))
  fn = _nelbo_fn(mdl)
  samples = 1 if kind == "ar" else s.samples
  rows = []
  for i, mem in enumerate(pop):
    p = population.member(state, i)["params"]
    div = bool(state["diverged"][i])
    vb, _ = (math.nan, 0.0) if div else _bpb(fn, p, val_w, data.token_bytes, samples)
    tb, tse = (math.nan, 0.0) if div else _bpb(fn, p, test_w, data.token_bytes, samples)
    rows.append({"corpus": corpus, "model": name, "lr": mem["lr"], "seed": mem["seed"],
                 "diverged": div, "val_bpb": vb, "test_bpb": tb, "test_mc_se": tse})
  val_mean = {lr: float(np.mean([r["val_bpb"] for r in rows if r["lr"] == lr]))
              for lr in s.lrs}
  finite = {lr: v for lr, v in val_mean.items() if np.isfinite(v)}
  best = min(finite, key=finite.get)
  chosen = [i for i, mem in enumerate(pop) if mem["lr"] == best]
  tb = np.array([rows[i]["test_bpb"] for i in chosen])
  # the validation curve of the chosen LR (mean over seeds): its change over the last chunk
  vc = np.asarray(curves["val_bpb"], float)[:, chosen].mean(1)
  summary = {"corpus": corpus, "model": name, "lr_grid": "/".join(f"{x:g}" for x in s.lrs),
             "val_by_lr": "/".join(f"{val_mean[x]:.3f}" for x in s.lrs),
             "best_lr": best, "edge": best in (s.lrs[0], s.lrs[-1]),
             "test_bpb": float(tb.mean()), "test_std": float(tb.std()),
             "mc_se": float(np.mean([rows[i]["test_mc_se"] for i in chosen])),
             "val_curve_last_chunk": float(vc[-2] - vc[-1]) if len(vc) > 1 else math.nan,
             "train_s": round(t_train, 1)}
  print(f"  {name:12s} val by LR {summary['val_by_lr']} -> lr {best:g}"
        f"{' (EDGE)' if summary['edge'] else ''}: test {tb.mean():.4f} +- {tb.std():.4f} "
        f"(MC s.e. {summary['mc_se']:.4f}); val curve {' '.join(f'{v:.3f}' for v in vc)} "
        f"[{t_train:.0f}s training]", flush=True)
  params = [population.member(state, i)["params"] for i in chosen]
  maps = _map_rows(corpus, name, mdl, params, labels, seeds, wd) if kind == "lhdlm" else []
  gen = []
  if kind == "ar":
    ar.update(mdl=mdl, params=params)
    if corpus in s.gen_corpora.split("+"):
      gen = [_heldout_row(s, cfg, data, corpus, mdl, params, test_w)]
  elif corpus in s.gen_corpora.split("+"):
    gen = (_generation(s, cfg, data, corpus, name, mdl, params,
                       _ar_params(cfg, corpus, data, seeds, workdir, ar), test_w)
           if _ar_done(workdir, corpus) else None)   # None: scored by a later run
  return {"summary": summary, "rows": rows, "map": maps, "generation": gen,
          "curves": curves, "chosen": chosen}


def _ar_done(workdir, corpus):
  return os.path.exists(os.path.join(workdir, corpus, "ar", "cell.json"))


def _generation_of(config, cfg, corpus, name, data, labels, test_w, seeds, workdir, ar,
                   chosen):
  """Generation rows of a finished cell, its state restored from its checkpoint."""
  mdl = _model(config, cfg, name, data, labels)
  pop = population.grid(seeds, lr=config.study.lrs)
  state = _train(cfg, data, mdl, pop, os.path.join(workdir, corpus, name))
  params = [population.member(state, i)["params"] for i in chosen]
  return _generation(config.study, cfg, data, corpus, name, mdl, params,
                     _ar_params(cfg, corpus, data, seeds, workdir, ar), test_w)


def _map_rows(corpus, name, mdl, params, labels, seeds, wd):
  """LHDLM's learned map per seed: I(X;C), column entropies, ARI against planted classes."""
  out = []
  for si, p in enumerate(params):
    lg = np.asarray(dif.log_gamma(p["gamma"]))
    ent = np.asarray(dif.column_entropy(jnp.asarray(lg)))
    row = {"corpus": corpus, "model": name, "seed": seeds[si],
           "mi": float(dif.mutual_information(jnp.asarray(lg), jnp.asarray(mdl.p_V))),
           "mean_col_entropy": float((ent * mdl.p_V).sum()), "log_C": math.log(mdl.C)}
    if labels is not None:
      from sklearn.metrics import adjusted_rand_score  # pylint: disable=g-import-not-at-top
      content = labels < labels.max()
      row["ari_content"] = float(adjusted_rand_score(labels[content], lg.argmax(0)[content]))
      row["entropy_function"] = float(ent[~content].mean())
      row["entropy_content"] = float(ent[content].mean())
      row["max_gamma_function"] = float(np.exp(lg[:, ~content]).max(0).mean())
      row["max_gamma_content"] = float(np.exp(lg[:, content]).max(0).mean())
    out.append(row)
    np.save(os.path.join(wd, f"gamma_seed{seeds[si]}.npy"), np.exp(lg))
  return out


def _heldout_row(s, cfg, data, corpus, ar_mdl, ar_params, test_w):
  """The AR model's bits per token and the unigram entropy of held-out windows: the
  reference row of the generation table."""
  ar_fn = _nelbo_fn(ar_mdl)
  T, n = cfg.data.seq_len, min(s.gen_n, len(test_w))
  ref = np.asarray(test_w[:n])
  bits = [float(ar_fn(p, jnp.asarray(ref), None)) / (n * T * math.log(2)) for p in ar_params]
  return {"corpus": corpus, "model": "held-out data", "sampler": "-", "steps": 0,
          "ar_bits_per_token": float(np.mean(bits)), "ar_bits_std": float(np.std(bits)),
          "unigram_entropy": _unigram_entropy(ref[:, 1:], data.vocab_size)}


def _generation(s, cfg, data, corpus, name, mdl, params, ar, test_w):
  """AR bits per token of one diffusion model's samples, and their unigram entropy."""
  ar_mdl, ar_params = ar
  ar_fn = _nelbo_fn(ar_mdl)
  T, V = cfg.data.seq_len, data.vocab_size
  n = min(s.gen_n, len(test_w))
  rows = []
  for method, step_counts in (("ancestral", s.sample_steps), ("tau_leaping", s.tau_steps)):
    for steps in step_counts:
      bits, ents = [], []
      for si, p in enumerate(params):
        z = sampler_lib.sample(jax.random.PRNGKey(si), mdl, p, n, T + 1, steps, method)
        bits.append(float(ar_fn(ar_params[si], z, None)) / (n * T * math.log(2)))
        ents.append(_unigram_entropy(np.asarray(z)[:, 1:], V))
      rows.append({"corpus": corpus, "model": name, "sampler": method, "steps": steps,
                   "ar_bits_per_token": float(np.mean(bits)),
                   "ar_bits_std": float(np.std(bits)),
                   "unigram_entropy": float(np.mean(ents))})
      print(f"  samples {name} {method} {steps} steps: AR {rows[-1]['ar_bits_per_token']:.3f}"
            f" bits/token, unigram entropy {rows[-1]['unigram_entropy']:.3f}", flush=True)
  return rows


def _ablation(cells, every=1):
  """LHDLM's map over training (chosen LR, mean over seeds), regularizer on and off."""
  out = []
  for c in cells:
    if c["summary"]["model"] not in ("lhdlm", "lhdlm_noreg"):
      continue
    cv, ch = c["curves"], c["chosen"]
    for j in range(0, len(cv["step"]), every):
      row = {"corpus": c["summary"]["corpus"], "model": c["summary"]["model"],
             "step": cv["step"][j]}
      for k in ("loss", "mask_term", "cluster_term", "mi", "col_entropy"):
        if k in cv:
          row[k] = float(np.mean(np.asarray(cv[k][j], float)[ch]))
      out.append(row)
  return out


def _write(workdir, commit, s, seeds, t0, cells, trivials, missing):
  """Tables, raw rows, curves and plots of the cells present (rewritten by every run)."""
  header = (f"lhdlm study at commit {commit}: {s.steps} steps, batch "
            f"{s.batch_size} x {s.seq_len}, d={s.dim} x {s.layers} layers, {len(seeds)} seeds "
            f"x LRs {list(s.lrs)}; LR chosen on {s.eval_windows // 2} validation windows, "
            f"test bpb (bits per token on the synthetic language) mean +- std over seeds on "
            f"{s.eval_windows - s.eval_windows // 2} test windows; ELBO with {s.samples} "
            f"Monte-Carlo draws (mc_se: its standard error); val_curve_last_chunk: the drop "
            f"of the chosen LR's validation curve over the last 1/{s.val_points} of training."
            + (f" Cells not run: {', '.join(missing)}." if missing else ""))
  summary = [{**c["summary"], **{k: v for k, v in trivials[c["summary"]["corpus"]].items()
                                 if k != "bigram_k_edge"}} for c in cells]
  md = study_lib.write_table(workdir, "nelbo", summary, header=header, digits=4)
  rows = [r for c in cells for r in c["rows"]]
  maps = [r for c in cells for r in c["map"]]
  gen = [r for c in cells for r in (c["generation"] or [])]
  abl = _ablation(cells)
  study_lib.write_table(workdir, "nelbo_rows", rows, digits=4)
  if maps:
    md += "\n\n" + study_lib.write_table(workdir, "gamma_map", maps, digits=4)
  if gen:
    md += "\n\n" + study_lib.write_table(workdir, "generation", gen, digits=4)
  if abl:
    study_lib.write_table(workdir, "ablation", abl, digits=4)
  val_curves = {f"{c['summary']['corpus']}/{c['summary']['model']}": {
      "step": c["curves"]["val_step"],
      "val_bpb": [float(np.mean(np.asarray(v, float)[c["chosen"]]))
                  for v in c["curves"]["val_bpb"]]} for c in cells}
  with open(os.path.join(workdir, "study_rows.json"), "w") as f:  # the README's raw rows
    json.dump({"commit": commit, "header": header, "trivial": trivials, "summary": summary,
               "rows": rows, "gamma_map": maps, "generation": gen,
               "val_curves": val_curves, "ablation": _ablation(cells, every=3)}, f, indent=0)
  curves = {f"{c['summary']['corpus']}/{c['summary']['model']}": c["curves"] for c in cells}
  with open(os.path.join(workdir, "curves.json"), "w") as f:
    json.dump(curves, f)
  from jaxpapers.papers.lhdlm import plots  # pylint: disable=g-import-not-at-top
  plots.study_plots(workdir, summary, curves, val_curves)
  print(f"study: {len(cells)} cells in {time.time() - t0:.0f}s", flush=True)
  return md
