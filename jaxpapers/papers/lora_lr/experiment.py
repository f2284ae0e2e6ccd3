"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- entry points.

- `train_and_evaluate`: pretrain (or load) the tiny byte-level Llama, fine-tune one
  adapter method at one learning rate on a generated task, and log the loss curve and the
  exact-match accuracy before and after.
- `run_study`: the paper's protocol at tiny scale: a log-spaced learning-rate grid x all
  ten methods x ranks x seeds (each (method, rank) one vmapped program over LR x seed),
  the best LR and peak accuracy per method, and the top Hessian eigenvalue w.r.t. the
  adapter parameters at initialization per method, with the best-LR-vs-eigenvalue plot.
- `plan`: the paper's step (Llama-2-7B, rank 128, bf16, FSDP) for `launch/plan.py`.
- `benchmark`: tokens/s of a LoRA training step on SmolLM2-135M (from its GGUF) beside
  the machine's measured matmul peak.
"""
from __future__ import annotations

import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import bench
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.nn import llama
from jaxpapers.nn.tokenizer import ByteTokenizer
from jaxpapers.papers.lora_lr import adapters as adapters_lib
from jaxpapers.papers.lora_lr import finetune
from jaxpapers.papers.lora_lr import pretrain as pretrain_lib
from jaxpapers.papers.lora_lr import smol_study
from jaxpapers.papers.lora_lr import torch_bench

from jaxpapers.papers.lora_lr import selection
from jaxpapers.papers.lora_lr import PATHS


def model_config(config) -> llama.LlamaConfig:
  m = config.model
  if m.get("vocab_size", 0) not in (0, ByteTokenizer.vocab_size):
    raise ValueError(f"model.vocab_size={m.vocab_size} (the :paper Llama-2-7B shape) is for "
                     "launch/plan.py only; training here uses the byte tokenizer (vocab "
                     f"{ByteTokenizer.vocab_size}) and our own pretrained model")
  return llama.LlamaConfig(vocab_size=ByteTokenizer.vocab_size, dim=m.dim,
                           n_layers=m.n_layers, n_heads=m.n_heads, n_kv_heads=m.n_kv_heads,
                           hidden_dim=m.hidden_dim, rope_theta=m.rope_theta)


def adapter_config(config, method=None, rank=None) -> adapters_lib.AdapterConfig:
  a = config.adapter
  rank = rank or a.rank
  return adapters_lib.AdapterConfig(
      method=method or a.method, rank=rank, alpha=a.alpha_over_rank * rank,
      targets=a.targets, gralora_k=a.gralora_k, randlora_scale=a.randlora_scale,
      randlora_gamma=a.randlora_gamma, loraga_gamma=a.loraga_gamma,
      loraga_scale=a.loraga_scale)


def train_config(config, hessian_iters=0) -> finetune.TrainConfig:
  o = config.optim
  return finetune.TrainConfig(steps=o.steps, batch=o.batch, warmup_frac=o.warmup_frac,
                              b1=o.b1, b2=o.b2, eps=o.eps, loft_eps=o.loft_eps,
                              ga_examples=o.ga_examples,
                              hessian_examples=config.study.hessian_examples,
                              hessian_iters=hessian_iters)


def base_model(config, workdir):
  cfg = model_config(config)
  params, _ = pretrain_lib.pretrain(cfg, config.pretrain, workdir)
  return cfg, params


def task_data(config):
  d = config.data
  tok = ByteTokenizer()
  data = finetune.prepare(d.task, tok, d.n_train, d.n_val, d.n_test, d.seq_len, d.n_new)
  return tok, data


def zero_shot(task, n_new, cfg, params, tok, data, row_chunk=None):
  """Exact match of the base model on the test split (no fine-tuning)."""
  n = data.n_val
  gen = finetune.decoder(cfg, n_new, None, row_chunk)(
      jax.tree.map(lambda x: x[None], params), data.prompts[n:], data.prompt_lens[n:])[0]
  return finetune.score(task, tok, gen, data.prompt_lens[n:], data.test.answers, n_new)


def plan(config):
  """One adapter step at the configured (`:paper`: Llama-2-7B rank-128) size, for
  launch/plan.py; see scale.py."""
  from jaxpapers.papers.lora_lr import scale  # pylint: disable=g-import-not-at-top
  return scale.plan(config, adapter_config(config), train_config(config))


def train_and_evaluate(config, workdir):
  metrics_lib.write_config(workdir, config)
  cfg, params = base_model(config, workdir)
  tok, data = task_data(config)
  ac, tc, d = adapter_config(config), train_config(config), config.data
  writer = metrics_lib.MetricsWriter(workdir, tc.steps)
  acc0 = (zero_shot(d.task, d.n_new, cfg, params, tok, data) if config.eval_before
          else -1.0)
  seeds = [config.seed + i for i in range(config.n_seeds)]
  grid = finetune.run_grid(params, cfg, ac, tc, data, d.n_new, [config.optim.lr], seeds)
  scores = finetune.split_scores(grid, data, d.task, tok, d.n_new)
  curve = grid.losses[:, 0].mean(0)
  for i in range(0, tc.steps, max(1, tc.steps // 20)):
    metrics_lib.check_finite(i, {"loss": curve[i]})
    writer.write(i + 1, {"loss": float(curve[i])})
  accs = scores["test"]["acc"][:, 0]
  writer.write(tc.steps, {"accuracy": float(np.mean(accs)), "accuracy_std": float(np.std(accs)),
                          "val_accuracy": float(np.mean(scores["val"]["acc"])),
                          "test_loss": float(np.mean(scores["test"]["loss"])),
                          "accuracy_before": acc0,
                          "trainable_params": _trainable(params, cfg, ac)},
               split="eval")
  return {"accuracy": float(np.mean(accs)), "accuracy_before": acc0}


def _trainable(params, cfg, ac):
  grads = params["blocks"] if ac.method in adapters_lib.NEEDS_GRAD else None
  shapes = jax.eval_shape(
      lambda p, g: adapters_lib.attach(jax.random.PRNGKey(0), p, cfg, ac, g)[1], params, grads)
  return adapters_lib.num_trainable(shapes)


def lr_grid(config):
  s = config.study
  return np.logspace(np.log10(s.lr_min), np.log10(s.lr_max), s.n_lrs)


def _run_combo(config, workdir, cfg, params, tok, data, method, rank):
  """One (method, rank): the LR x seed grid; cached as workdir/runs/<method>_r<rank>.json."""
  path = os.path.join(workdir, "runs", f"{method}_r{rank}.json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  tc, d, s = train_config(config, config.study.hessian_iters), config.data, config.study
  lrs = lr_grid(config)
  seeds = [config.seed + i for i in range(s.n_seeds)]
  ac = adapter_config(config, method, rank)
  t = time.time()
  grid = finetune.run_grid(params, cfg, ac, tc, data, d.n_new, lrs, seeds)
  scores = finetune.split_scores(grid, data, d.task, tok, d.n_new)
  res = selection.cell_result(method, rank, lrs, seeds, scores, grid, time.time() - t,
                              _trainable(params, cfg, ac))
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "w") as f:
    json.dump(res, f)
  os.replace(path + ".tmp", path)
  return res


def run_study(config, workdir):
  """LR grid x methods x ranks x seeds, best LR / peak accuracy, Hessian eigenvalues.

  Each (method, rank) is cached in workdir/runs, so a killed study resumes, and two
  processes with different `ranks=` can share a workdir; the table is built from every
  (method, rank in study.table_ranks) found there.
  """
  metrics_lib.write_config(workdir, config)
  # Stamped before anything runs: the code that produced the table, not later edits.
  commit = study_lib.git_commit(PATHS)
  if config.study.name == "smollm2":
    return smol_study.run(config, workdir, adapter_config, train_config, _trainable,
                          commit=commit)
  t0 = time.time()
  cfg, params = base_model(config, workdir)
  tok, data = task_data(config)
  s = config.study
  writer = metrics_lib.MetricsWriter(workdir, None)
  acc0 = zero_shot(config.data.task, config.data.n_new, cfg, params, tok, data)
  for rank in s.ranks:
    for method in s.methods:
      res = _run_combo(config, workdir, cfg, params, tok, data, method, rank)
      row = selection.summarize(res)
      writer.write(0, {k: v for k, v in row.items() if k not in ("method", "acc_by_lr")},
                   split=f"study/{method}")
  results = {}
  for rank in s.table_ranks:
    for method in s.methods:
      path = os.path.join(workdir, "runs", f"{method}_r{rank}.json")
      if os.path.exists(path):
        with open(path) as f:
          results[(method, rank)] = json.load(f)
  rows = selection.table_rows(list(results.values()))
  recall = pretrain_lib.knowledge_recall(params, cfg)
  header = _header(config, acc0, recall, results, commit, time.time() - t0, rows)
  md = study_lib.write_table(workdir, "lora_lr_study", rows, selection.TABLE_COLUMNS, header,
                             digits=4)
  # The raw cells (per seed x LR validation/test accuracy and loss, per-problem test
  # correctness, lambda_max per seed), so the table can be rebuilt without rerunning.
  with open(os.path.join(workdir, "lora_lr_cells.json"), "w") as f:
    json.dump({"commit": commit, "cells": list(results.values())}, f)
  by_lr = selection.by_lr_rows(list(results.values()))
  study_lib.write_table(workdir, "lora_lr_by_lr", by_lr, None,
                        "Validation / test exact match (mean over seeds) per learning rate; "
                        f"commit `{commit}`.")
  _plots(workdir, results, rows, config)
  print(md)
  return rows


def _header(config, acc0, recall, results, commit, seconds, rows):
  spread = {}
  for rank in config.study.table_ranks:
    peaks = [r["peak_acc"] for r in rows if r["rank"] == rank]
    if peaks:
      spread[rank] = (max(peaks) - min(peaks)) * 100
  lam = np.log([r["lambda_max"] for r in rows])
  blr = np.log([r["best_lr"] for r in rows])
  corr = float(np.corrcoef(lam, blr)[0, 1]) if len(rows) > 2 else float("nan")
  # Each cell records its own LR grid and seeds (cells may come from separate calls).
  grids = {}
  for (method, _), res in results.items():
    key = (" ".join(f"{x:.2g}" for x in res["lrs"]), str(res["seeds"]))
    grids.setdefault(key, []).append(method)
  grid_text = "; ".join(f"LRs {g} (seeds {sd}): {'+'.join(dict.fromkeys(ms))}"
                        for (g, sd), ms in grids.items())
  lines = [
      f"Study `lora_lr` on the tiny byte-level Llama ({config.model.dim}d, "
      f"{config.model.n_layers} layers), task `{config.data.task}` "
      f"({config.data.n_train} train / {config.data.n_val} validation / "
      f"{config.data.n_test} test), {config.optim.steps} steps x batch "
      f"{config.optim.batch}. {grid_text}.",
      f"commit `{commit}`; this process' wall time {seconds:.0f} s (per (method, rank) "
      f"seconds in the table); zero-shot accuracy {acc0:.3f}; rows found: {len(rows)}.",
      f"Base model: {config.pretrain.steps} pretraining steps, {config.pretrain.knowledge:.0%} "
      f"stated facts; greedy fact-completion accuracy {recall:.2f}.",
      "Best LR chosen on validation (max exact match, ties by answer loss); peak_acc is "
      "test exact match there, [ci_lo, ci_hi] its 95% bootstrap interval over test problems; "
      "diff_vs_lora [diff_lo, diff_hi] is test exact match minus LoRA's (same rank, each at "
      "its own chosen LR) with a 95% paired bootstrap interval (paired by seed and problem).",
      "Peak spread across methods (points): "
      + ", ".join(f"rank {k}: {v:.1f}" for k, v in spread.items())
      + "  (paper: within ~1-2 points once LR is tuned).",
      f"Pearson corr(log lambda_max, log best_lr) over all rows: {corr:.2f} "
      "(paper: best LR falls as lambda_max rises, i.e. negative).",
  ]
  return "\n".join(lines)


def _plots(workdir, results, rows, config):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  ranks = list(config.study.table_ranks)
  fig, axes = plt.subplots(1, len(ranks) + 1, figsize=(5 * (len(ranks) + 1), 4))
  for ax, rank in zip(axes, ranks):
    # One colour per method in every panel (a rank may lack some methods).
    for i, method in enumerate(config.study.methods):
      if (method, rank) in results:
        res = results[(method, rank)]
        ax.plot(res["lrs"], np.array(res["test_acc"]).mean(0), marker="o", ms=3, label=method,
                color=f"C{i % 10}")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("test exact match")
    ax.set_title(f"rank {rank}")
  axes[0].legend(fontsize=7)
  ax = axes[-1]
  for r in rows:
    ax.scatter(r["lambda_max"], r["best_lr"], marker="o" if r["rank"] == ranks[0] else "s")
    ax.annotate(f'{r["method"]}', (r["lambda_max"], r["best_lr"]), fontsize=6)
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("top Hessian eigenvalue at init")
  ax.set_ylabel("best learning rate")
  ax.set_title("best LR vs lambda_max (o: rank %d, s: rank %d)" % (ranks[0], ranks[-1]))
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "lora_lr_study.png"), dpi=120)
  plt.close(fig)


def benchmark(config, workdir):
  """Tokens/s of a LoRA (rank b.rank, all projections) AdamW step on SmolLM2-135M."""
  from jaxpapers.nn import gguf_loader  # pylint: disable=g-import-not-at-top
  b = config.bench
  path = gguf_loader.smollm2_path()
  if path is not None and not b.tiny:
    cfg, params, _ = gguf_loader.load(path)
    params = jax.tree.map(jnp.asarray, params)
    model = "SmolLM2-135M"
  else:
    cfg = model_config(config)
    params = llama.init(jax.random.PRNGKey(0), cfg)
    model = "tiny (random init)"
  ac = adapter_config(config, "lora", b.rank)
  base, ad = adapters_lib.attach(jax.random.PRNGKey(0), params, cfg, ac)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (b.batch, b.seq_len), 0, cfg.vocab_size)
  mask = jnp.ones(tokens.shape, jnp.float32)
  opt = optax.adamw(1e-4, weight_decay=0.0)
  state = (ad["train"], opt.init(ad["train"]))

  def step(state, base, frozen, tokens, mask, unroll=False):
    train, opt_state = state
    def loss_fn(tr):
      logits = adapters_lib.forward(base, {"train": tr, "frozen": frozen}, tokens, cfg, ac,
                                    unroll=unroll)
      return finetune.masked_loss(logits, tokens, mask)
    loss, g = jax.value_and_grad(loss_fn)(train)
    upd, opt_state = opt.update(g, opt_state, train)
    return (optax.apply_updates(train, upd), opt_state), loss

  jstep = jax.jit(step, donate_argnums=0)
  # FLOPs from the layer loop unrolled (compiled, never run): XLA counts a loop body once.
  flops = bench.xla_flops(jax.jit(functools.partial(step, unroll=True)), state, base,
                          ad["frozen"], tokens, mask)
  holder = {"s": state}

  def call():
    holder["s"], loss = jstep(holder["s"], base, ad["frozen"], tokens, mask)
    return loss

  sec = bench.time_call(call, warmup=1, iters=b.iters, min_time=b.min_time)
  peak = bench.matmul_peak_gflops()
  out = {"model": model, "tokens_per_step": b.batch * b.seq_len, "sec_per_step": sec,
         "tokens_per_s": b.batch * b.seq_len / sec, "step_gflop": (flops or 0) / 1e9,
         "achieved_gflops": (flops or 0) / sec / 1e9, "matmul_peak_gflops": peak,
         "device": jax.devices()[0].device_kind, "rank": b.rank,
         "trainable_params": adapters_lib.num_trainable(ad),
         "torch_peft": torch_bench.torch_peft_step(path, b.batch, b.seq_len, b.rank, b.iters,
                                                   b.min_time)
                       if model == "SmolLM2-135M" else "not run: no GGUF (tiny model)"}
  out["fraction_of_peak"] = out["achieved_gflops"] / peak
  metrics_lib.write_config(workdir, config)
  with open(os.path.join(workdir, "benchmark.json"), "w") as f:
    json.dump(out, f, indent=1)
  print(json.dumps(out, indent=1))
  return out
