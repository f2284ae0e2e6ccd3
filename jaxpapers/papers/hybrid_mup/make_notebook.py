"""Builds colabs/hybrid_mup.ipynb (run: python jaxpapers/papers/hybrid_mup/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# hybrid_mup: learning-rate transfer in Transformer + Mamba hybrids under muP

A byte-level hybrid LM ('M' = Mamba block with the simplified-ZOH selective scan, 'A' =
Transformer layer) on Shakespeare. For two widths we sweep the peak LR under standard
parametrization (SP) and muP; every (width) is ONE compiled population: all LRs and
both parametrizations train in one vmapped program. Under muP the best LR should stay
put as the width grows; under SP it should drift. The second figure is the coordinate
check in microsoft/mup's protocol (one fixed batch, constant LR, t = 1..steps, several
seeds): the mean |coordinate| of every activation (attention/MLP outputs, the Mamba
block's projections and the SSM internals Delta, B, C, y) against width.

Set `JAXPAPERS_SMOKE=1` for a seconds-long run (the tests do). The full study is
`python launch/study.py --config=configs/hybrid_mup.py` (README of the paper)."""

SETUP = """import os
import numpy as np
import jax.numpy as jnp
import matplotlib.pyplot as plt

from jaxpapers.core import config as config_lib
from jaxpapers.papers.hybrid_mup import ssm, study

SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"
if SMOKE:
  arg = "smoke,study_sweeps=width,study_lrs=3e-3+1e-2,study_steps=3"
else:
  arg = ("study_sweeps=width,study_widths=16+64,study_lrs=8e-3+3.2e-2+1.28e-1,study_steps=80,"
         "study_seeds=1,max_chars=1000000,coord_widths=32+128+512,coord_seeds=2")
config = config_lib.load("configs/hybrid_mup.py:" + arg)
print(config.study)"""

SCAN = """# The parallel (associative) scan and the step-by-step recurrence give the same outputs.
rng = np.random.default_rng(0)
x, b, c = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in [(2, 32, 8), (2, 32, 16), (2, 32, 16)])
delta = jnp.asarray(np.log1p(np.exp(rng.normal(size=(2, 32, 8)))), jnp.float32)
a = -jnp.exp(jnp.asarray(rng.normal(size=(8, 16)), jnp.float32))
for method in ("simplified", "zoh"):
  ys = [ssm.selective_scan(x, delta, a, b, c, jnp.ones(8), method=method, scan=s)
        for s in ("associative", "sequential")]
  print(method, "max |associative - sequential| =", float(jnp.max(jnp.abs(ys[0] - ys[1]))))"""

RUN = """from jaxpapers.papers.hybrid_mup import experiment
data = experiment.load_data(config)
rows = []
for cell in study.cells(config):
  cell = dict(cell, methods=("sp", "mup"))
  rows += study.run_cell(config, data, cell)
transfer, coord = study.analyse(config, rows)
for t in transfer:
  print(f"{t['method']:4s} {t['cell']:8s} best LR {t['best_lr']:.3g} (transferred {t['transferred_lr']:.3g}) gap {t['gap']:+.4f} bpb")"""

PLOT = """fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for ax, method in zip(axes, ("sp", "mup")):
  for w in config.study.widths:
    rs = [r for r in rows if r["dim"] == w and r["method"] == method]
    lrs = sorted({r["lr"] for r in rs})
    ax.plot(lrs, [np.mean([r["test_bpb"] for r in rs if r["lr"] == lr]) for lr in lrs], "o-", label=f"d={w}")
  ax.set(xscale="log", title=method, xlabel="peak LR", ylabel="test bits per byte")
  ax.legend()
plt.tight_layout(); plt.show()

# The coordinate check (microsoft/mup's protocol; the README's table is its full run)
from jaxpapers.papers.hybrid_mup import coord as coord_lib
k = config.coord
coord_rows = [r for w in k.widths for r in study.coord_cell(config, data, w)]
for r in coord_lib.summary(coord_lib.slopes(coord_rows, k.tol), k.tol):
  if r["activation"] in ("ssm_B", "ssm_C", "ssm_y", "mamba_out", "attn_out", "logits"):
    print(f"{r['method']:9s} {r['activation']:10s} largest |slope| {r['max |slope|']:.2f}: {r['verdict']}")
names = ["ssm_delta", "ssm_B", "ssm_C", "ssm_y", "mamba_out", "attn_out", "mlp_out", "logits"]
methods = list(k.methods)
widths = list(k.widths)
fig, axes = plt.subplots(len(methods), len(names), figsize=(2.0 * len(names), 2.1 * len(methods)),
                         squeeze=False)
for i, method in enumerate(methods):
  for j, n in enumerate(names):
    for t in range(k.steps):
      v = [np.mean([r["stats"][n + "/l1"][t] for r in coord_rows
                    if r["method"] == method and r["dim"] == w]) for w in widths]
      axes[i][j].plot(widths, v, "o-", ms=3, label=f"t={t + 1}")
    axes[i][j].set(xscale="log", yscale="log"); axes[i][j].set_title(f"{method}: {n}", fontsize=8)
axes[0][0].legend(fontsize=6)
plt.tight_layout(); plt.show()"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL)]
  nb.cells += [nbformat.v4.new_code_cell(c) for c in (SETUP, SCAN, RUN, PLOT)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "hybrid_mup.ipynb"))


if __name__ == "__main__":
  main()
