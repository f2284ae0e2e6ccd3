"""Builds colabs/lora_lr.ipynb (run: python jaxpapers/papers/lora_lr/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998)

A tiny Llama (RMSNorm, RoPE, GQA, SwiGLU) pretrained by our code on Shakespeare mixed with plainly
stated arithmetic facts ("3 plus 4 is 7."), fine-tuned with vanilla LoRA on generated arithmetic word
problems whose targets give the reasoning step, then the number ("6 plus 8 is 14"; scored on the
final number): greedy generations before and after, then a small learning-rate sweep of LoRA vs
PiSSA, with the best LR of each chosen on the validation problems and its test score shown.
The default setting pretrains for 1000 steps first (a few minutes on a CPU; cached). With
`JAXPAPERS_SMOKE=1` everything is shrunk to seconds (random-init model, a few steps), so the
numbers are meaningless there."""

SETUP = '''import os, sys
import jax, jax.numpy as jnp, numpy as np
import matplotlib.pyplot as plt

from jaxpapers.core import config as config_lib
SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"
# 100 validation / 100 test problems, 300 fine-tuning and 1000 pretraining steps keep the
# notebook to a few minutes (the study: 500 / 500 problems, 500 and 1500 steps).
config = config_lib.load("configs/lora_lr.py:" + ("smoke=true" if SMOKE
                                                  else "n_val=100,n_test=100,steps=300,"
                                                       "pretrain_steps=1000"))

from jaxpapers.papers.lora_lr import experiment, finetune, selection, tasks
workdir = os.path.abspath("lora_lr_colab")       # the pretrained tiny model is cached here
cfg, params = experiment.base_model(config, workdir)
tok, data = experiment.task_data(config)
print(cfg)'''

BEFORE_AFTER = '''# Generations of the pretrained model (before), then vanilla LoRA fine-tuning at one LR.
n_new, task, n = config.data.n_new, config.data.task, data.n_val
test_prompts, test_lens = data.prompts[n:], np.asarray(data.prompt_lens)[n:]
show = min(6, len(data.test.prompts))
before = finetune.decoder(cfg, n_new)(jax.tree.map(lambda x: x[None], params), test_prompts,
                                      test_lens)[0]
ac = experiment.adapter_config(config, "lora", config.adapter.rank)
tc = experiment.train_config(config)
grid = finetune.run_grid(params, cfg, ac, tc, data, n_new, [config.optim.lr], [0])
after = grid.gens[0, 0, n:]
b = tasks.decode_answers(tok, before, test_lens, n_new)
a = tasks.decode_answers(tok, after, test_lens, n_new)
for i in range(show):
  print(repr(data.test.prompts[i]), "gold", data.test.answers[i], "| before", repr(b[i]),
        "| after", repr(a[i]))
print("test exact match before", finetune.score(task, tok, before, test_lens, data.test.answers, n_new),
      "after", finetune.score(task, tok, after, test_lens, data.test.answers, n_new))'''

SWEEP = '''# A small LR sweep: LoRA vs PiSSA (the paper: methods prefer different LR ranges).
# The best LR is chosen on the validation split; the test score there is reported.
# (smoke: only the config's LR, so the LoRA row reuses the programs compiled above)
lrs = np.asarray([config.optim.lr]) if SMOKE else np.logspace(-4, -1, 5)
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot(grid.losses[0, 0]); ax[0].set_xlabel("step"); ax[0].set_ylabel("answer loss")
ax[0].set_title("LoRA fine-tuning")
for method in ("lora", "pissa"):
  ac = experiment.adapter_config(config, method, config.adapter.rank)
  g = finetune.run_grid(params, cfg, ac, tc, data, n_new, lrs, [0])
  sc = finetune.split_scores(g, data, task, tok, n_new)
  best = selection.best_lr_index(sc["val"]["acc"], sc["val"]["loss"])
  lo, hi = selection.bootstrap_ci(sc["test"]["correct"][:, best])
  print(f"{method}: best LR on validation {lrs[best]:.2g}; test exact match there "
        f"{sc['test']['acc'][0, best]:.2f} (95% CI {lo:.2f}-{hi:.2f})")
  ax[1].plot(lrs, sc["val"]["acc"][0], marker="o", label=f"{method} (validation)")
  ax[1].plot(lrs, sc["test"]["acc"][0], marker="x", ls="--", label=f"{method} (test)")
ax[1].set_xscale("log"); ax[1].set_xlabel("learning rate"); ax[1].set_ylabel("exact match")
ax[1].legend(fontsize=7)
plt.tight_layout(); plt.show()'''


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL)]
  nb.cells += [nbformat.v4.new_code_cell(c) for c in (SETUP, BEFORE_AFTER, SWEEP)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "lora_lr.ipynb"))


if __name__ == "__main__":
  main()
