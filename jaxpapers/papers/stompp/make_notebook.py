"""Builds colabs/stompp.ipynb (run: python jaxpapers/papers/stompp/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INSTALL = notebook.INSTALL_CELL

CELLS = ["# StoMPP: Stochastic Masked Partial Progressive Binarization\n\nA small comparison on scikit-learn's bundled digits (no download): a binary MLP trained with\nvanilla STE, with StoMPP (STE-free) in forward order, and with StoMPP in reverse order.\nEach variant trains several seeds at once (`vmap` over seeds, `lax.scan` over steps) with\nthe same functions the launcher and the study use. The right panel shows the\nper-layer weight-gradient norms over training: the *gradient blockade* that forms as\nbinary activations are committed.\n\nSet `JAXPAPERS_SMOKE=1` for a seconds-long run (the tests do).", 'import os\nimport jax.numpy as jnp\nimport matplotlib.pyplot as plt\n\nfrom jaxpapers.core import config as config_lib\nfrom jaxpapers.data import sources\nfrom jaxpapers.papers.stompp import study\n\nSMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"\n\nif SMOKE:  # the smoke config\'s MLP cell as the tests train it (their compiled programs)\n  steps, depth, width, seeds = 6, 2, 16, [0, 1, 2]\n  base = config_lib.load("configs/stompp.py:smoke")\nelse:\n  steps, depth, width, seeds = 600, 6, 128, [0, 1, 2]\n  base = config_lib.load(f"configs/stompp.py:steps={steps},batch_size=64")\nds = sources.digits()\nimages, labels = jnp.asarray(ds.train.images), jnp.asarray(ds.train.labels)', 'variants = {"STE (vanilla)": ("ste", "forward"),\n            "StoMPP forward": ("stompp", "forward"),\n            "StoMPP reverse": ("stompp", "reverse")}\nresults = {}\nfor name, (rule, order) in variants.items():\n  cfg = config_lib.override(base, {"model.name": "mlp", "model.depth": depth,\n                                   "model.width": width, "binarize.rule": rule,\n                                   "binarize.order": order})\n  acc, loss, gnorm = study.train_cell(cfg, ds, images, labels, seeds)\n  results[name] = (acc, gnorm.mean(0))\n  print(f"{name:16s} committed-network test accuracy {acc.mean():.3f} (seeds {seeds})")', 'fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4))\nnames = list(results)\nax0.bar(range(len(names)), [results[n][0].mean() for n in names])\nax0.set_xticks(range(len(names)), names, rotation=15)\nax0.set_ylabel("test accuracy (hard signs)")\nfor ax, n in ((ax1, "StoMPP forward"), (ax2, "StoMPP reverse")):\n  g = results[n][1]\n  for l in range(g.shape[1]):\n    ax.plot(g[:, l], label=f"layer {l}")\n  ax.set_yscale("symlog", linthresh=1e-4)\n  ax.set(title=f"gradient blockade: {n}", xlabel="step", ylabel="weight-gradient norm")\n  ax.legend(fontsize=7)\nplt.tight_layout()\nplt.show()', "## The architecture study's committed rows (no training)\n\nThe ResNet study (`study=resnet`, see the paper README) trained binary ResNet-18 / ResNet-34 (and ResNet-50) layouts on Fashion-MNIST at a CPU size; its raw rows (every rule, learning rate and seed) are committed as `resnet_study_rows.json`. This cell only reads them: per rule, the learning rate with the best validation accuracy is selected (`study_resnet.summarize`, the study's own table builder) and the bars show the test accuracy of the fully committed network at that rate, mean +- std over seeds, with every seed as a dot.", 'import json\nimport numpy as np\nfrom jaxpapers.papers.stompp import study_resnet\n\nrows_path = os.path.join(os.path.dirname(study.__file__), "resnet_study_rows.json")\nraw = [r for r in json.load(open(rows_path))["rows"] if r["arch"].startswith("resnet")]\ntable = study_resnet.summarize(raw)\narchs = [a for a in ("resnet18", "resnet34", "resnet50") if any(t["arch"] == a for t in table)]\nrules = list(dict.fromkeys(t["variant"] for t in table if not t["variant"].startswith("ablation")))\nfig, ax = plt.subplots(figsize=(12, 4))\nw = 0.8 / len(archs)\nfor j, arch in enumerate(archs):\n  for i, rule in enumerate(rules):\n    t = next((t for t in table if t["arch"] == arch and t["variant"] == rule), None)\n    if t is None:  # rule not run on this layout\n      continue\n    x = i + j * w\n    ax.bar(x, t["test acc"], w, yerr=t["std"], color=f"C{j}", label=arch if i == 0 else None)\n    seeds = [r["test acc"] for r in raw if r["arch"] == arch and r["variant"] == rule\n             and r["lr"] == t["lr (val-selected)"]]\n    ax.plot([x] * len(seeds), seeds, "k.", ms=3)\n    print(f"{arch:9s} {rule:30s} lr {t[\'lr (val-selected)\']:g}  test {t[\'test acc\']:.3f} "\n          f"+- {t[\'std\']:.3f} ({t[\'seeds\']} seeds)")\nax.set_xticks(np.arange(len(rules)) + w * (len(archs) - 1) / 2, rules, rotation=15, fontsize=8)\nax.set(ylabel="test accuracy (committed network)", ylim=(0, 1),\n       title="binary ResNets on Fashion-MNIST: each rule at its validation-selected lr")\nax.axhline(0.1, color="grey", lw=0.5, ls=":")\nax.legend()\nplt.tight_layout()\nplt.show()']


def main():
  nb = nbformat.v4.new_notebook()
  intro, setup, *rest = CELLS
  nb.cells = ([nbformat.v4.new_markdown_cell(intro), nbformat.v4.new_code_cell(INSTALL),
               nbformat.v4.new_code_cell(setup)]
              # a cell starting with '## ' is a markdown heading, the rest are code
              + [nbformat.v4.new_markdown_cell(c) if c.startswith("## ")
                 else nbformat.v4.new_code_cell(c) for c in rest])
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "stompp.ipynb"))


if __name__ == "__main__":
  main()
