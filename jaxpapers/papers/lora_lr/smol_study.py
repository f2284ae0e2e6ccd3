"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- SmolLM2 leg.

The paper's protocol on a real pretrained LM, as far as two CPU cores allow: the
SmolLM2-135M-Instruct weights from their GGUF (`jaxpapers.nn.gguf_loader`), its own BPE
tokenizer, the `math` task with MetaMath-style targets, and a reduced grid (a few methods
x a few log-spaced LRs x one seed, few steps; the budget is the `smol` config group).
Each method's grid is one vmapped program over the LRs (`finetune.run_grid`), decoded with
the KV cache; the top Hessian eigenvalue w.r.t. the adapter at initialization is computed
once per method (not once per LR, as the tiny study does inside its grid program) because
each Hessian-vector product here costs a few forward/backward passes of the full model.
Each method is cached in `workdir/smol_runs/<method>_r<rank>.json`, so a killed run
resumes; the table is `workdir/lora_lr_smollm2.md`.
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
from jaxpapers.nn import llama
from jaxpapers.nn import tokenizer as tokenizer_lib
from jaxpapers.papers.lora_lr import finetune
from jaxpapers.papers.lora_lr import tasks as tasks_lib


def run(config, workdir, adapter_config, train_config, commit=None):
  """The SmolLM2 grid; `adapter_config(config, method, rank)` and `train_config(config)`
  are the experiment's builders, so both legs read the config the same way."""
  sm, d = config.smol, config.data
  t0 = time.time()
  path = gguf_loader.require_smollm2()
  cfg, params, reader = gguf_loader.load(path)
  params = jax.tree.map(jnp.asarray, params)
  tok = tokenizer_lib.gguf_bpe(reader)
  data, test = finetune.prepare(d.task, tok, sm.n_train, sm.n_test, sm.seq_len, sm.n_new)
  gen = jax.jit(lambda p, t, l: llama.greedy_generate(p, cfg, t, l, sm.n_new))(
      params, data[2], data[3])
  acc0 = finetune.score(d.task, tok, gen, data[3], test.answers, sm.n_new)
  writer = metrics_lib.MetricsWriter(workdir, None)
  writer.write(0, {"zero_shot_accuracy": acc0}, split="smollm2")
  lrs = np.logspace(np.log10(sm.lr_min), np.log10(sm.lr_max), sm.n_lrs)
  tc = dataclasses.replace(train_config(config), steps=sm.steps, batch=sm.batch,
                           hessian_iters=0)
  rows = []
  for method in sm.methods:
    ac = adapter_config(config, method, sm.rank)
    out = os.path.join(workdir, "smol_runs", f"{method}_r{sm.rank}.json")
    if os.path.exists(out):
      with open(out) as f:
        res = json.load(f)
    else:
      t = time.time()
      losses, gens, _, test_loss = finetune.run_grid(params, cfg, ac, tc, data, sm.n_new,
                                                      lrs, [config.seed])
      acc = [finetune.score(d.task, tok, gens[0, j], data[3], test.answers, sm.n_new)
             for j in range(len(lrs))]
      lam = finetune.lambda_max_at_init(params, cfg, ac, tc, data[0], data[1],
                                        sm.hessian_examples, sm.hessian_iters)
      top = np.asarray(gens[0, int(np.argmax(acc))])
      sample = tasks_lib.decode_answers(tok, top[:1], np.asarray(data[3])[:1], sm.n_new)[0]
      res = {"method": method, "rank": sm.rank, "lrs": lrs.tolist(), "acc": acc,
             "test_loss": np.nan_to_num(test_loss[0], nan=np.inf).tolist(),
             "train_loss_final": np.nan_to_num(losses[0, :, -1], nan=np.inf).tolist(),
             "lambda": lam, "seconds": time.time() - t,
             "sample": {"prompt": test.prompts[0], "generated": sample}}
      os.makedirs(os.path.dirname(out), exist_ok=True)
      with open(out + ".tmp", "w") as f:
        json.dump(res, f)
      os.replace(out + ".tmp", out)
    acc = np.array(res["acc"])
    best = int(np.lexsort((np.array(res["test_loss"]), -acc))[0])
    rows.append({"method": method, "rank": sm.rank, "best_lr": lrs[best],
                 "peak_acc": float(acc[best]),
                 "acc_by_lr": " ".join(f"{a:.2f}" for a in acc),
                 "min_test_loss": float(np.min(res["test_loss"])),
                 "lambda_max": res["lambda"], "seconds": res["seconds"]})
    writer.write(0, {k: v for k, v in rows[-1].items() if k not in ("method", "acc_by_lr")},
                 split=f"smollm2/{method}")
  ref = next((r for r in rows if r["method"] == "lora"), None)
  for r in rows:
    if ref:
      r["lambda_vs_lora"] = r["lambda_max"] / ref["lambda_max"]
      r["best_lr_vs_lora"] = r["best_lr"] / ref["best_lr"]
  header = (
      f"SmolLM2-135M-Instruct (GGUF, dequantized to float32), task `{d.task}` "
      f"({sm.n_train} train / {sm.n_test} test), LRs "
      + ", ".join(f"{x:.2g}" for x in lrs)
      + f", seed {config.seed}, {sm.steps} steps x batch {sm.batch}, rank {sm.rank} on "
      f"`{config.adapter.targets}`.\ncommit `{commit or study_lib.git_commit(PATHS)}`; wall time "
      f"{time.time() - t0:.0f} s; zero-shot exact match {acc0:.3f}.")
  cols = ["method", "rank", "best_lr", "peak_acc", "acc_by_lr", "min_test_loss",
          "lambda_max", "lambda_vs_lora", "best_lr_vs_lora", "seconds"]
  md = study_lib.write_table(workdir, "lora_lr_smollm2", rows, cols, header, digits=4)
  print(md)
  return rows


PATHS = ["jaxpapers/papers/lora_lr", "configs/lora_lr.py", "jaxpapers/nn"]
