"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- SmolLM2 leg.

The paper's protocol on a real pretrained LM within a CPU budget: the
SmolLM2-135M-Instruct weights from their GGUF (`jaxpapers.nn.gguf_loader`), its own BPE
tokenizer, the `math` task with MetaMath-style targets, every method with its own LR grid:
- three half-decade LRs centred on the method's anchor (`config.smol.anchors`: the
  pre-fix run's optima, lower for the high-eigenvalue inits), run with seed 0 and chosen on
  the validation split by `selection.best_lr_index` (the rule of the tiny-model leg);
  while the choice is the grid's lowest or highest LR the grid grows by one half-decade
  past that edge (at most `max_extend` times), so no choice is left at an edge unseen;
- seed 1 at the chosen LR; the test score is the mean over both seeds at that LR with a
  95% bootstrap interval over test problems, and a paired bootstrap against LoRA.
Exact match is scored teacher-forced (`finetune.teacher_forced`): one forward pass over
prompt + gold answer + end token decides whether greedy decoding would emit exactly the
gold answer and stop, which is what decoding token by token would decide (tested), at a
fraction of the cost. It is exact match of the whole target ("6 plus 8 is 14" + end), so
it is stricter than the tiny leg's final-number rule. Only seed 0's validation scores
choose; the test split is scored at the chosen LR only.
Each method is cached in `workdir/smol_cells/<method>_r<rank>.json`, so a killed run
resumes at the first missing method; the table is `workdir/lora_lr_smollm2.md`.
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

HALF_DECADE = 10 ** 0.5


def _scores(score, merged, tokens, pos, valid, n_tokens):
  loss_sum, exact = score(merged, tokens, pos, valid)
  loss_sum, exact = np.asarray(loss_sum, np.float64), np.asarray(exact, bool)
  loss = float(loss_sum.sum() / max(n_tokens, 1))
  return {"acc": float(exact.mean()), "loss": loss if np.isfinite(loss) else float("inf"),
          "correct": selection.bits(exact)}


def grow_grid(anchor, evaluate, max_extend):
  """Seed 0's LR grid: three half-decade LRs centred on `anchor`, then one more past the
  edge while the validation choice (`selection.best_lr_index`) is the lowest or highest
  LR, at most `max_extend` times. `evaluate(lr)` -> {"acc", "loss", ...} on validation.
  Returns (sorted LRs, index of the choice, number of extensions, {lr: evaluation})."""
  val = {}
  for k in (-1, 0, 1):
    lr = anchor * HALF_DECADE ** k
    val[lr] = evaluate(lr)
  extended = 0
  while True:
    lrs = sorted(val)
    best = selection.best_lr_index([[val[x]["acc"] for x in lrs]],
                                   [[val[x]["loss"] for x in lrs]])
    if best not in (0, len(lrs) - 1) or extended >= max_extend:
      return lrs, best, extended, val
    lr = lrs[0] / HALF_DECADE if best == 0 else lrs[-1] * HALF_DECADE
    val[lr] = evaluate(lr)
    extended += 1


def method_cell(params, cfg, ac, tc, data, ev, anchor, sm, seeds, log=print) -> dict:
  """One method: seed 0 over the LR grid (extended past an edge while chosen there),
  chosen on validation; every other seed at the choice; test scored at the choice only."""
  t0 = time.time()
  attached = finetune.attach_deterministic(params, cfg, ac, tc, data.train_tokens,
                                           data.train_mask)
  run = jax.jit(finetune.make_run(cfg, ac, tc))
  score = finetune.teacher_forced(cfg, sm.row_chunk)
  merged_by_lr, losses_final, run_seconds = {}, {}, {}

  def train(lr, seed):
    t = time.time()
    losses, merged = run(jnp.float32(lr), jnp.int32(seed), params, data.train_tokens,
                         data.train_mask, attached)
    losses = np.asarray(losses)
    losses_final[f"{lr:.6g}/{seed}"] = float(np.nan_to_num(losses[-1], nan=np.inf))
    run_seconds[f"{lr:.6g}/{seed}"] = time.time() - t
    return merged

  def seed0(lr):
    merged_by_lr[lr] = train(lr, seeds[0])
    out = _scores(score, merged_by_lr[lr], *ev["val"])
    log(f"smollm2 {ac.method} lr {lr:.3g} seed {seeds[0]}: val exact match "
        f"{out['acc']:.3f} loss {out['loss']:.3f} ({time.time() - t0:.0f} s)", flush=True)
    return out

  lrs, best, extended, val = grow_grid(anchor, seed0, sm.max_extend)
  chosen = lrs[best]
  test = [_scores(score, merged_by_lr[chosen], *ev["test"])]
  merged_by_lr.clear()
  for seed in seeds[1:]:
    test.append(_scores(score, train(chosen, seed), *ev["test"]))
  lam = finetune.lambda_max(params, cfg, ac, tc, data.train_tokens, data.train_mask, seeds,
                            attached)
  log(f"smollm2 {ac.method}: chosen lr {chosen:.3g}, test exact match "
      + " ".join(f"{t['acc']:.3f}" for t in test) + f", lambda_max {np.mean(lam):.3g} "
      f"({time.time() - t0:.0f} s)", flush=True)
  return {"method": ac.method, "rank": int(ac.rank), "anchor": float(anchor),
          "lrs": [float(x) for x in lrs], "seeds": [int(s) for s in seeds],
          "select_seed": int(seeds[0]), "extended": extended,
          "val_acc": [val[x]["acc"] for x in lrs], "val_loss": [val[x]["loss"] for x in lrs],
          "val_correct": [val[x]["correct"] for x in lrs],
          "chosen_lr": float(chosen), "test_acc": [t["acc"] for t in test],
          "test_loss": [t["loss"] for t in test],
          "test_correct": [t["correct"] for t in test],
          "n_val": data.n_val, "n_test": len(data.test.prompts),
          "train_loss_final": losses_final, "run_seconds": run_seconds,
          "lambda": [float(x) for x in lam], "seconds": time.time() - t0,
          "trainable_params": 0}


def summarize(cell: dict) -> dict:
  """One table row of a SmolLM2 cell (selection re-derived from its validation scores)."""
  lrs = cell["lrs"]
  best = selection.best_lr_index([cell["val_acc"]], [cell["val_loss"]])
  if lrs[best] != cell["chosen_lr"]:
    raise ValueError(f"{cell['method']}: stored choice {cell['chosen_lr']} is not the "
                     f"validation choice {lrs[best]}")
  correct = np.array([selection.unbits(c) for c in cell["test_correct"]])
  lo, hi = selection.bootstrap_ci(correct)
  return {"method": cell["method"], "rank": cell["rank"], "best_lr": float(lrs[best]),
          "val_acc": float(cell["val_acc"][best]), "peak_acc": float(np.mean(cell["test_acc"])),
          "ci_lo": lo, "ci_hi": hi, "peak_acc_std": float(np.std(cell["test_acc"])),
          "best_at_edge": bool(best in (0, len(lrs) - 1)), "extended": cell["extended"],
          "val_by_lr": " ".join(f"{x:.2g}:{a:.2f}" for x, a in zip(lrs, cell["val_acc"])),
          "lambda_max": float(np.mean(cell["lambda"])),
          "trainable_params": cell["trainable_params"], "seconds": cell["seconds"]}


def table_rows(cells: list[dict]) -> list[dict]:
  """Rows with ratios to LoRA and the paired bootstrap of test exact match minus LoRA's
  (paired by seed and test problem, each at its own chosen LR)."""
  rows = selection.relative_to_lora([summarize(c) for c in cells])
  by = {c["method"]: c for c in cells}
  ref = by.get("lora")
  for r in rows:
    own = by[r["method"]]
    if ref is not None and ref["seeds"] == own["seeds"]:
      a = np.array([selection.unbits(c) for c in own["test_correct"]])
      b = np.array([selection.unbits(c) for c in ref["test_correct"]])
      r["diff_vs_lora"], r["diff_lo"], r["diff_hi"] = selection.paired_bootstrap_diff(a, b)
  return rows


COLUMNS = ["method", "rank", "best_lr", "val_acc", "peak_acc", "ci_lo", "ci_hi",
           "diff_vs_lora", "diff_lo", "diff_hi", "peak_acc_std", "best_at_edge", "val_by_lr",
           "lambda_max", "lambda_vs_lora", "best_lr_vs_lora", "params_vs_lora", "seconds"]


def eval_arrays(data):
  """Per split: (tokens, answer positions, validity, supervised token count)."""
  out = {}
  n = data.n_val
  for name, sl in (("val", slice(0, n)), ("test", slice(n, None))):
    t, m = np.asarray(data.eval_tokens)[sl], np.asarray(data.eval_mask)[sl]
    pos, valid = finetune.answer_positions(m)
    out[name] = (jnp.asarray(t), jnp.asarray(pos), jnp.asarray(valid), int(valid.sum()))
  return out


def run(config, workdir, adapter_config, train_config, trainable, commit=None):
  """The SmolLM2 leg; `adapter_config(config, method, rank)`, `train_config(config, iters)`
  and `trainable(params, cfg, ac)` are the experiment's, so both legs read the config and
  count parameters the same way."""
  sm, d = config.smol, config.data
  t0 = time.time()
  commit = commit or study_lib.git_commit(PATHS)
  path = gguf_loader.require_smollm2()
  cfg, params, reader = gguf_loader.load(path)
  params = jax.tree.map(jnp.asarray, params)
  tok = tokenizer_lib.gguf_bpe(reader)
  data = finetune.prepare(d.task, tok, sm.n_train, sm.n_val, sm.n_test, sm.seq_len, 0)
  ev = eval_arrays(data)
  # Zero-shot exact match of the base model on test, computed once per workdir (each
  # resumed part would otherwise spend a full test pass on it again).
  zs = os.path.join(workdir, "smol_cells", "zero_shot.json")
  if os.path.exists(zs):
    with open(zs) as f:
      acc0 = json.load(f)["test_exact_match"]
  else:
    acc0 = _scores(finetune.teacher_forced(cfg, sm.row_chunk), params, *ev["test"])["acc"]
    os.makedirs(os.path.dirname(zs), exist_ok=True)
    with open(zs, "w") as f:
      json.dump({"test_exact_match": acc0, "commit": commit}, f)
  writer = metrics_lib.MetricsWriter(workdir, None)
  writer.write(0, {"zero_shot_exact_match": acc0}, split="smollm2")
  seeds = [config.seed + i for i in range(sm.n_seeds)]
  tc = dataclasses.replace(train_config(config, sm.hessian_iters), steps=sm.steps,
                           batch=sm.batch, hessian_examples=sm.hessian_examples)
  cells = []
  for method in sm.methods:
    ac = adapter_config(config, method, sm.rank)
    out = os.path.join(workdir, "smol_cells", f"{method}_r{sm.rank}.json")
    if os.path.exists(out):
      with open(out) as f:
        cell = json.load(f)
    else:
      cell = method_cell(params, cfg, ac, tc, data, ev, sm.anchors[method], sm, seeds)
      cell["trainable_params"] = int(trainable(params, cfg, ac))
      cell["commit"] = commit
      os.makedirs(os.path.dirname(out), exist_ok=True)
      with open(out + ".tmp", "w") as f:
        json.dump(cell, f)
      os.replace(out + ".tmp", out)
    cells.append(cell)
  rows = table_rows(cells)
  for r in rows:
    writer.write(0, {k: v for k, v in r.items() if isinstance(v, (int, float))},
                 split=f"smollm2/{r['method']}")
  header = (
      f"SmolLM2-135M-Instruct (GGUF, dequantized to float32), task `{d.task}` "
      f"({sm.n_train} train / {sm.n_val} validation / {sm.n_test} test), {sm.steps} steps x "
      f"batch {sm.batch}, rank {sm.rank} on `{config.adapter.targets}`; per method 3 "
      f"half-decade LRs around its anchor with seed {seeds[0]} (extended past an edge while "
      f"chosen there), chosen on validation, then seeds {seeds[1:]} at the choice.\n"
      f"commit `{commit}`; this process' wall time {time.time() - t0:.0f} s; zero-shot exact "
      f"match {acc0:.3f}. Exact match of the whole target, teacher-forced; peak_acc = test "
      "exact match at the chosen LR (mean over seeds) with its 95% bootstrap interval.")
  md = study_lib.write_table(workdir, "lora_lr_smollm2", rows, COLUMNS, header, digits=4)
  with open(os.path.join(workdir, "lora_lr_smollm2_cells.json"), "w") as f:
    json.dump({"commit": commit, "cells": cells}, f)
  print(md)
  return rows
