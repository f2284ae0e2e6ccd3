"""Builds colabs/lhdlm.ipynb (run: python jaxpapers/papers/lhdlm/make_notebook.py, then
`python -m jaxpapers.core.notebook colabs/lhdlm.ipynb` to execute it)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# lhdlm: a learnable hierarchical discrete diffusion LM

The forward process is a CTMC token -> cluster -> mask; LHDLM learns the column-stochastic
token-to-cluster map Gamma (C x V) jointly with a time-conditioned bidirectional denoiser,
with an I(X; C) retention term that keeps Gamma from collapsing to identical columns.
This notebook trains LHDLM on the synthetic planted word-class language (4 classes of
content words + shared function words), shows samples and the learned map Gamma.

`JAXPAPERS_SMOKE=1` runs a seconds-long version (the tests do). The study:
`python launch/study.py --config=configs/lhdlm.py` (see the paper's README)."""

SETUP = """import os, tempfile
import numpy as np
import jax
import matplotlib.pyplot as plt

from jaxpapers.core import config as config_lib
from jaxpapers.papers.lhdlm import data as data_lib, diffusion as dif, experiment, sampler

SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"
arg = "smoke=true" if SMOKE else "dim=32,layers=2,n_heads=2,seq_len=32,batch_size=16,steps=400,clusters=5,lr=1e-2"
config = config_lib.load("configs/lhdlm.py:" + arg)
workdir = tempfile.mkdtemp()
state, final = experiment.train_and_evaluate(config, workdir)"""

SAMPLES = """data, labels = data_lib.load(config)
from jaxpapers.papers.lhdlm import model as model_lib
mdl = model_lib.build(config, data.vocab_size, data.train)
for method in ("ancestral", "tau_leaping"):
  z = sampler.sample(jax.random.PRNGKey(0), mdl, state["params"], 3, config.data.seq_len, 32, method)
  for row in np.asarray(z):
    print(method, data.tokenizer.decode(row))"""

PLOT = """G = np.exp(np.asarray(dif.log_gamma(state["params"]["gamma"])))
order = np.argsort(labels, kind="stable")
fig, ax = plt.subplots(figsize=(9, 2.6))
im = ax.imshow(G[:, order], aspect="auto", cmap="viridis", vmin=0, vmax=1)
ax.set_xticks(range(len(order)), [("F" if labels[i] == labels.max() else str(labels[i])) for i in order], fontsize=6)
ax.set_xlabel("token (planted class; F = function word)"); ax.set_ylabel("cluster c")
ax.set_title("learned Gamma[c, x]"); plt.colorbar(im); plt.tight_layout(); plt.show()
ent = np.asarray(dif.column_entropy(dif.log_gamma(state["params"]["gamma"])))
fn = labels == labels.max()
print(f"column entropy: function tokens {ent[fn].mean():.3f}, content tokens {ent[~fn].mean():.3f} nats")"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL)]
  nb.cells += [nbformat.v4.new_code_cell(c) for c in (SETUP, SAMPLES, PLOT)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "lhdlm.ipynb"))


if __name__ == "__main__":
  main()
