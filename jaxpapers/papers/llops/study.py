"""llops study: (2) downstream LMs on Shakespeare, then (1) kernel approximation on the
q/k of SmolLM2-135M and of our own softmax LM. Tables, rows and plots into the workdir.

Part 2 runs first because its trained softmax LM supplies the "own LM" q/k of part 1.
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
from jaxpapers.core import population
from jaxpapers.core import study as study_lib
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm
from jaxpapers.nn import lm_experiment
from jaxpapers.papers.llops import approx
from jaxpapers.papers.llops import features
from jaxpapers.papers.llops import model as model_lib

# Only this paper's paths: other helpers' work in progress under jaxpapers/nn must not
# mark this table dirty (the study uses nn/attention, stack, lm at the stamped commit).
PATHS = ("jaxpapers/papers/llops", "configs/llops.py")


def bigram_bpb(train: np.ndarray, val_w: np.ndarray, test_w: np.ndarray, vocab: int,
               token_bytes: np.ndarray, alphas=(0.01, 0.03, 0.1, 0.3, 1.0)):
  """The trivial model: add-alpha bigram counts from the train split, alpha on validation."""
  counts = np.zeros((vocab, vocab))
  np.add.at(counts, (train[:-1], train[1:]), 1.0)

  def score(w, a):
    p = (counts + a) / (counts + a).sum(1, keepdims=True)
    nll = -np.log(p[w[:, :-1], w[:, 1:]]).sum()
    return nll / (math.log(2) * token_bytes[w[:, 1:]].sum())

  best = min(alphas, key=lambda a: score(val_w, a))
  return {"alpha": best, "alphas": list(alphas), "val_bpb": score(val_w, best),
          "test_bpb": score(test_w, best)}


def lm_part(config, workdir: str):
  s = config.study
  data = lm_experiment.load_data(config)
  windows = text_lib.eval_windows(data.val, config.data.seq_len, config.eval.max_windows or None)
  n_val = max(1, len(windows) // 2)
  val_w, test_w = windows[:n_val], windows[n_val:]
  rows, curves, trained = [], {}, {}
  seeds = [config.seed + i for i in range(s.seeds)]
  for method in s.lm_methods:
    t0 = time.time()
    model, lm_model, mp = model_lib.build(config, data.vocab_size, method)
    pop = population.grid(seeds, lr=s.lm_lrs)
    task = population.population_task(
        lambda seed, hp: lm.make_task(config, data, lm_model, seed=seed, hparams=hp), pop)
    wd = os.path.join(workdir, "lm", method)
    state, _ = loop.train(config, wd, task)
    state = jax.device_get(state)
    fn = lm_experiment.nats_fn(model)
    for i, m in enumerate(pop):
      div = bool(state["diverged"][i])
      p = population.member(state, i)["params"]
      rows.append({"method": method, "state": mp.state if mp else 0, "seed": m["seed"],
                   "lr": m["lr"], "diverged": div,
                   "val_bpb": float("nan") if div else lm_experiment.bpb(fn, p, val_w, data.token_bytes),
                   "test_bpb": float("nan") if div else lm_experiment.bpb(fn, p, test_w, data.token_bytes),
                   "params": model_lib.n_params(model, mp)})
      if method == "softmax":
        trained.setdefault(m["lr"], {})[m["seed"]] = (model, p)
    curves[method] = _curve(wd)
    print(f"[llops] LM {method}: {time.time() - t0:.0f}s", flush=True)
  chosen, log = _select(rows, "method", "val_bpb")
  table = []
  for method in s.lm_methods:
    rs = [r for r in chosen if r["method"] == method]
    v = np.array([r["test_bpb"] for r in rs])
    table.append({"method": method, "state": rs[0]["state"], "params": rs[0]["params"],
                  "lr": rs[0]["lr"], "test_bpb": float(np.mean(v)), "std": float(np.std(v)),
                  "val_bpb": float(np.mean([r["val_bpb"] for r in rs])), "seeds": len(rs)})
  bigram = bigram_bpb(np.asarray(data.train), val_w, test_w, data.vocab_size, data.token_bytes)
  table.append({"method": "bigram (add-alpha)", "state": 0, "params": data.vocab_size ** 2,
                "lr": bigram["alpha"], "test_bpb": bigram["test_bpb"], "std": 0.0,
                "val_bpb": bigram["val_bpb"], "seeds": 1})
  best_lr = next(r["lr"] for r in table if r["method"] == "softmax")
  return table, rows, log, curves, trained.get(best_lr, {})


def _curve(wd):
  path = os.path.join(wd, "metrics.jsonl")
  out = []
  if os.path.exists(path):
    for line in open(path):
      r = json.loads(line)
      if "loss" in r and "step" in r:
        loss = r["loss"]
        out.append((r["step"], float(np.mean(loss)) if isinstance(loss, list) else float(loss)))
  return out


def _select(rows, key, metric):
  chosen, log = [], []
  for name in dict.fromkeys(r[key] for r in rows):
    rs = [r for r in rows if r[key] == name]
    grid = sorted({r["lr"] for r in rs})
    score = {lr: np.mean([r[metric] for r in rs if r["lr"] == lr]) for lr in grid}
    best = min(grid, key=lambda lr: score[lr] if np.isfinite(score[lr]) else np.inf)
    log.append({key: name, "grid": grid, metric: [round(float(score[lr]), 4) for lr in grid],
                "chosen_lr": best, "edge": len(grid) > 1 and best in (grid[0], grid[-1])})
    chosen += [r for r in rs if r["lr"] == best]
  return chosen, log


def smollm2_qkv(config):
  """Post-RoPE q/k/v of SmolLM2-135M (GGUF, llama.cpp's interleaved Q/K rows undone by
  gguf_loader.unpermute_qk) on Shakespeare windows: {layer: (q, k, v)}, heads per kv."""
  from jaxpapers.nn import gguf_loader, stack, tokenizer  # pylint: disable=g-import-not-at-top
  s = config.study
  path = config.study.gguf_path or gguf_loader.require_smollm2()
  lcfg, params, reader = gguf_loader.load(path)
  model, sp = stack.from_llama(jax.tree.map(jnp.asarray, params), lcfg)
  tok = tokenizer.gguf_bpe(reader)
  n = s.qk_windows
  text = text_lib.shakespeare(max_chars=400 * n * s.qk_seq)
  ids = np.asarray(tok.encode(text), np.int32)
  # Windows spread over the whole text (train at the start, test at the end: held out).
  starts = np.linspace(0, len(ids) - s.qk_seq - 1, n).astype(int)
  windows = np.stack([ids[a:a + s.qk_seq] for a in starts])
  got = {}
  for i in range(0, n, 8):
    rec = model_lib.collect_qkv(model, sp, windows[i:i + 8], keep=set(s.qk_layers))
    for layer, qkv in rec.items():
      got.setdefault(layer, []).append(qkv)
  out = {l: tuple(np.concatenate([x[j] for x in v]) for j in range(3)) for l, v in got.items()}
  return out, lcfg.n_heads // lcfg.n_kv_heads, f"SmolLM2-135M ({os.path.basename(path)})"


def own_qkv(config, trained, data_windows):
  """q/k/v of the global softmax layers of our trained LM (the study's best-LR softmax)."""
  seed = sorted(trained)[0]
  model, p = trained[seed]
  rec = model_lib.collect_qkv(model, p, data_windows)
  return rec, 1, f"own softmax LM (seed {seed})"


def approx_part(config, qkv, heads_per_kv, label, layers=None):
  s = config.study
  layers = sorted(qkv) if layers is None else layers
  N = next(iter(qkv.values()))[0].shape[0]
  n_train, n_val = int(N * 0.6), int(N * 0.2)
  problems, names = approx.split_windows(qkv, layers, heads_per_kv, n_train, n_val)
  d = problems["q_train"].shape[-1]
  seeds = [config.seed + i for i in range(s.seeds)]
  rows = []
  for state in s.states:
    for name in s.maps:
      mp = features.make_map(name, state, s.degree, d)
      if name == "elu" and state != s.states[0]:
        continue  # elu's state is fixed at d: one row
      t0 = time.time()
      rows += approx.run_map(mp, s.degree, problems, seeds, s.approx_lrs, s.approx_steps,
                             s.approx_batch)
      print(f"[llops] approx {label[:12]} {name} state={mp.state}: {time.time() - t0:.0f}s",
            flush=True)
  chosen, log = approx.select(rows, s.approx_lrs)
  return approx.summarize(chosen), rows, log, names


def run(config, workdir: str):
  os.makedirs(workdir, exist_ok=True)
  commit = study_lib.git_commit(paths=PATHS)
  s = config.study
  t0 = time.time()
  out = {"commit": commit}
  parts = set(s.parts.split("+"))
  out["approx"] = {}

  def do_approx(qkv, hpk, label):
    table, rows, log, names = approx_part(config, qkv, hpk, label)
    for r in log:
      print(f"[llops] approx selection {label[:12]} {r}", flush=True)
    key = "smollm2" if label.startswith("SmolLM2") else "own"
    hdr = (f"Part 1, kernel approximation on {label}: problems {names}; degree "
           f"{s.degree}; {qkv[sorted(qkv)[0]][0].shape[0]} windows of {s.qk_seq} tokens "
           f"(60% train / 20% val / 20% test, test = end of the text); learned maps "
           f"{s.approx_steps} Adam steps, LR on validation from {list(s.approx_lrs)}; "
           f"{s.seeds} seeds. Relative errors on test. Commit {commit}.")
    print(study_lib.write_table(workdir, f"approx_{key}", table, header=hdr, digits=4), flush=True)
    study_lib.write_table(workdir, f"approx_{key}_rows", rows, digits=5)
    out["approx"][key] = {"table": table, "selection": log, "problems": names}

  if "approx" in parts and s.smollm2:
    do_approx(*smollm2_qkv(config))
  out["lm"] = {"table": [], "selection": [], "curves": {}}
  if "lm" in parts:
    lm_table, lm_rows, lm_log, curves, trained = lm_part(config, workdir)
    for r in lm_log:
      print(f"[llops] LM selection {r}", flush=True)
    hdr = (f"Part 2, Shakespeare byte-level LM: pattern 'W'+global x "
           f"{config.model.n_layers // 2}, d={config.model.dim}, {config.model.n_heads} heads,"
           f" window {config.model.window}, state {config.model.state}, degree "
           f"{config.model.degree}; {config.train.steps} steps of {config.train.batch_size} x "
           f"{config.data.seq_len}; {s.seeds} seeds; LR per method on validation from "
           f"{list(s.lm_lrs)}. Test bpb. Commit {commit}.")
    out["lm"] = {"table": lm_table, "selection": lm_log, "curves": curves}
    print(study_lib.write_table(workdir, "lm", lm_table, header=hdr, digits=4), flush=True)
    study_lib.write_table(workdir, "lm_rows", lm_rows, digits=5)
    if "approx" in parts and s.own_lm and trained:
      data = lm_experiment.load_data(config)
      own_w = text_lib.eval_windows(data.train, s.qk_seq, s.qk_windows)[:, :-1]
      do_approx(*own_qkv(config, trained, own_w))
  out["seconds"] = time.time() - t0
  with open(os.path.join(workdir, "study.json"), "w") as f:
    json.dump(out, f, indent=1, default=float)
  _plots(workdir, out)
  print(f"[llops] study done in {out['seconds']:.0f}s, commit {commit}", flush=True)
  return out


def _plots(workdir, out):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  srcs = list(out["approx"])
  fig, axes = plt.subplots(1, len(srcs) + 1, figsize=(4.5 * (len(srcs) + 1), 3.5), squeeze=False)
  axes = list(axes[0])
  for ax, key in zip(axes, srcs):
    tab = out["approx"][key]["table"]
    for name in dict.fromkeys(r["map"] for r in tab):
      rs = sorted([r for r in tab if r["map"] == name], key=lambda r: r["state"])
      ax.errorbar([r["state"] for r in rs], [r["out_err"] for r in rs],
                  yerr=[r["out_err_std"] for r in rs], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("state size")
    ax.set_ylabel("rel. error of attention output")
    ax.set_title(key)
  axes[0].legend(fontsize=6)
  ax = axes[-1]
  for method, c in out["lm"]["curves"].items():
    if c:
      ax.plot([x[0] for x in c], [x[1] for x in c], label=method)
  ax.set_xlabel("step")
  ax.set_ylabel("train loss (nats, member mean)")
  ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "llops_study.png"), dpi=110)
  plt.close(fig)
