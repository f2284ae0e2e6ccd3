"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- SmolLM2 leg.

The paper's protocol on a real pretrained LM, as far as two CPU cores allow: the
SmolLM2-135M-Instruct weights from their GGUF (`jaxpapers.nn.gguf_loader`), its own BPE
tokenizer, the `math` task with MetaMath-style targets, and a reduced grid (a few methods
x a few log-spaced LRs x seeds; the budget is the `smol` config group). The same code as the tiny-model leg:
each method's grid is one program over LR x seed (`finetune.run_grid`, here one model at a
time and prompts in chunks to bound memory), decoded with the KV cache, lambda_max once per
(method, seed), the best LR chosen on the validation split by `selection.best_lr_index`
and the test score reported with a bootstrap interval (`selection.summarize`).
Each method is cached in `workdir/smol_cells/<method>_r<rank>.json`, so a killed run
resumes where it stopped; the table is `workdir/lora_lr_smollm2.md`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.nn import gguf_loader
from jaxpapers.nn import tokenizer as tokenizer_lib
from jaxpapers.papers.lora_lr import PATHS
from jaxpapers.papers.lora_lr import finetune
from jaxpapers.papers.lora_lr import selection
from jaxpapers.papers.lora_lr import tasks as tasks_lib


def run(config, workdir, adapter_config, train_config, trainable, zero_shot, commit=None):
  """The SmolLM2 grid; `adapter_config(config, method, rank)`, `train_config(config, iters)`,
  `trainable(params, cfg, ac)` and `zero_shot(...)` are the experiment's, so both legs
  read the config, count parameters and score the same way."""
  sm, d = config.smol, config.data
  t0 = time.time()
  commit = commit or study_lib.git_commit(PATHS)
  path = gguf_loader.require_smollm2()
  cfg, params, reader = gguf_loader.load(path)
  params = jax.tree.map(jnp.asarray, params)
  tok = tokenizer_lib.gguf_bpe(reader)
  data = finetune.prepare(d.task, tok, sm.n_train, sm.n_val, sm.n_test, sm.seq_len, sm.n_new)
  acc0 = zero_shot(d.task, sm.n_new, cfg, params, tok, data, row_chunk=sm.row_chunk)
  writer = metrics_lib.MetricsWriter(workdir, None)
  writer.write(0, {"zero_shot_accuracy": acc0}, split="smollm2")
  lrs = np.logspace(np.log10(sm.lr_min), np.log10(sm.lr_max), sm.n_lrs)
  seeds = [config.seed + i for i in range(sm.n_seeds)]
  tc = dataclasses.replace(train_config(config, sm.hessian_iters), steps=sm.steps,
                           batch=sm.batch, hessian_examples=sm.hessian_examples)
  rows = []
  for method in sm.methods:
    ac = adapter_config(config, method, sm.rank)
    out = os.path.join(workdir, "smol_cells", f"{method}_r{sm.rank}.json")
    if os.path.exists(out):
      with open(out) as f:
        res = json.load(f)
    else:
      t = time.time()
      grid = finetune.run_grid(params, cfg, ac, tc, data, sm.n_new, lrs, seeds,
                               model_batch=1, row_chunk=sm.row_chunk)
      scores = finetune.split_scores(grid, data, d.task, tok, sm.n_new)
      res = selection.cell_result(method, sm.rank, lrs, seeds, scores, grid,
                                  time.time() - t, trainable(params, cfg, ac))
      best = selection.best_lr_index(res["val_acc"], res["val_loss"])
      n = data.n_val
      sample = tasks_lib.decode_answers(tok, grid.gens[0, best, n:n + 1],
                                        np.asarray(data.prompt_lens)[n:n + 1], sm.n_new)[0]
      res["sample"] = {"prompt": data.test.prompts[0], "generated": sample}
      os.makedirs(os.path.dirname(out), exist_ok=True)
      with open(out + ".tmp", "w") as f:
        json.dump(res, f)
      os.replace(out + ".tmp", out)
    rows.append(selection.summarize(res))
    writer.write(0, {k: v for k, v in rows[-1].items() if k not in ("method", "acc_by_lr")},
                 split=f"smollm2/{method}")
  selection.relative_to_lora(rows)
  header = (
      f"SmolLM2-135M-Instruct (GGUF, dequantized to float32), task `{d.task}` "
      f"({sm.n_train} train / {sm.n_val} validation / {sm.n_test} test), LRs "
      + ", ".join(f"{x:.2g}" for x in lrs)
      + f", seeds {seeds}, {sm.steps} steps x batch {sm.batch}, rank {sm.rank} on "
      f"`{config.adapter.targets}`.\ncommit `{commit}`; wall time "
      f"{time.time() - t0:.0f} s; zero-shot exact match {acc0:.3f}. Best LR chosen on "
      "validation; peak_acc = test exact match there with its 95% bootstrap interval.")
  cols = ["method", "rank", "best_lr", "val_acc", "peak_acc", "ci_lo", "ci_hi", "acc_by_lr",
          "lambda_max", "lambda_vs_lora", "best_lr_vs_lora", "params_vs_lora", "seconds"]
  md = study_lib.write_table(workdir, "lora_lr_smollm2", rows, cols, header, digits=4)
  print(md)
  return rows
