"""Builds colabs/stompp.ipynb (run: python jaxpapers/papers/stompp/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INSTALL = notebook.INSTALL_CELL

CELLS = ["# StoMPP: Stochastic Masked Partial Progressive Binarization\n\nA small comparison on scikit-learn's bundled digits (no download): a binary MLP trained with\nvanilla STE, with StoMPP (STE-free) in forward order, and with StoMPP in reverse order.\nEach variant trains several seeds at once (`vmap` over seeds, `lax.scan` over steps) with\nthe same functions the launcher and the study use. The right panel shows the\nper-layer weight-gradient norms over training: the *gradient blockade* that forms as\nbinary activations are committed.\n\nSet `JAXPAPERS_SMOKE=1` for a seconds-long run (the tests do).", 'import os\nimport jax.numpy as jnp\nimport matplotlib.pyplot as plt\n\nfrom jaxpapers.core import config as config_lib\nfrom jaxpapers.data import sources\nfrom jaxpapers.papers.stompp import study\n\nSMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"\n\nsteps, depth, width, seeds = (30, 2, 32, [0]) if SMOKE else (600, 6, 128, [0, 1, 2])\nbase = config_lib.load("configs/stompp.py:" + (f"steps={steps},batch_size=64"))\nds = sources.digits()\nimages, labels = jnp.asarray(ds.train.images), jnp.asarray(ds.train.labels)', 'variants = {"STE (vanilla)": ("ste", "forward"),\n            "StoMPP forward": ("stompp", "forward"),\n            "StoMPP reverse": ("stompp", "reverse")}\nresults = {}\nfor name, (rule, order) in variants.items():\n  cfg = config_lib.override(base, {"model.name": "mlp", "model.depth": depth,\n                                   "model.width": width, "binarize.rule": rule,\n                                   "binarize.order": order})\n  acc, loss, gnorm = study.train_cell(cfg, ds, images, labels, seeds)\n  results[name] = (acc, gnorm.mean(0))\n  print(f"{name:16s} committed-network test accuracy {acc.mean():.3f} (seeds {seeds})")', 'fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4))\nnames = list(results)\nax0.bar(range(len(names)), [results[n][0].mean() for n in names])\nax0.set_xticks(range(len(names)), names, rotation=15)\nax0.set_ylabel("test accuracy (hard signs)")\nfor ax, n in ((ax1, "StoMPP forward"), (ax2, "StoMPP reverse")):\n  g = results[n][1]\n  for l in range(g.shape[1]):\n    ax.plot(g[:, l], label=f"layer {l}")\n  ax.set_yscale("symlog", linthresh=1e-4)\n  ax.set(title=f"gradient blockade: {n}", xlabel="step", ylabel="weight-gradient norm")\n  ax.legend(fontsize=7)\nplt.tight_layout()\nplt.show()']


def main():
  nb = nbformat.v4.new_notebook()
  intro, setup, *rest = CELLS
  nb.cells = ([nbformat.v4.new_markdown_cell(intro), nbformat.v4.new_code_cell(INSTALL),
               nbformat.v4.new_code_cell(setup)]
              + [nbformat.v4.new_code_cell(c) for c in rest])
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "stompp.ipynb"))


if __name__ == "__main__":
  main()
