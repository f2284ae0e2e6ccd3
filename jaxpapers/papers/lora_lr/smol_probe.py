"""Learning Rate Matters (arXiv 2602.04998) -- SmolLM2 step-count probe (not a study result).

How many steps make LoRA clearly move SmolLM2-135M's exact match on the `math` task, and
what one training run and one scoring pass cost on this machine: LoRA (rank 8, all seven
projections, seed 0) at LR 1e-3 and 3.2e-3 for each given step count, scored teacher-forced
on the 300 validation problems only (the test split is not touched).

  python jaxpapers/papers/lora_lr/smol_probe.py 20 40
"""
import dataclasses
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxpapers.core import config as config_lib  # noqa: E402
from jaxpapers.nn import gguf_loader, tokenizer as tokenizer_lib  # noqa: E402
from jaxpapers.papers.lora_lr import experiment, finetune, smol_study  # noqa: E402


def main(step_counts):
  t0 = time.time()
  config = config_lib.load("configs/lora_lr.py:study=smollm2")
  sm = config.smol
  cfg, params, reader = gguf_loader.load(gguf_loader.require_smollm2())
  params = jax.tree.map(jnp.asarray, params)
  tok = tokenizer_lib.gguf_bpe(reader)
  data = finetune.prepare("math", tok, sm.n_train, sm.n_val, sm.n_test, sm.seq_len, 0)
  ev = smol_study.eval_arrays(data)
  print("load", time.time() - t0, flush=True)
  score = finetune.teacher_forced(cfg, sm.row_chunk)
  t = time.time()
  r = smol_study._scores(score, params, *ev["val"])
  print("zero-shot val", r["acc"], r["loss"], "first score incl compile", time.time() - t,
        flush=True)
  t = time.time()
  smol_study._scores(score, params, *ev["val"])
  print("score 300", time.time() - t, flush=True)
  ac = experiment.adapter_config(config, "lora", sm.rank)
  for steps in step_counts:
    tc = dataclasses.replace(experiment.train_config(config, 0), steps=steps, batch=sm.batch)
    run = jax.jit(finetune.make_run(cfg, ac, tc))
    for lr in (1e-3, 3.16e-3):
      t = time.time()
      losses, merged = run(jnp.float32(lr), jnp.int32(0), params, data.train_tokens,
                           data.train_mask, None)
      losses = np.asarray(losses)
      t1 = time.time() - t
      r = smol_study._scores(score, merged, *ev["val"])
      print(f"steps {steps} lr {lr}: train {t1:.1f}s (incl compile first), loss "
            f"{losses[0]:.3f}->{losses[-1]:.3f}, val {r['acc']:.3f} {r['loss']:.3f}", flush=True)
  print("total", time.time() - t0)


if __name__ == "__main__":
  main([int(x) for x in sys.argv[1:]] or [20])
