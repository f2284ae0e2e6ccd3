"""Builds colabs/coupled_sae.ipynb (run: python jaxpapers/papers/coupled_sae/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Multisubject coupled sparse autoencoder for language encoding models

One shared TopK sparse autoencoder over language-model features of stories, trained jointly
to reconstruct the features and to predict every subject's voxels through subject-specific
atom-to-voxel maps. Here on simulated multi-subject fMRI with planted sparse semantic atoms
(known ground truth), against dense ridge (per-voxel CV alpha), two-stage SAE -> ridge and
PCA -> ridge. The notebook uses a small random llama for the features so that it runs in
seconds; the study (`launch/study.py --config=configs/coupled_sae.py`) uses SmolLM2-135M.

Set `JAXPAPERS_SMOKE=1` for the tiny setting (the tests do)."""

SETUP = """import os
import numpy as np
import matplotlib.pyplot as plt

from jaxpapers.core import config as config_lib
from jaxpapers.papers.coupled_sae import analysis, data, experiment, methods

SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"
arg = "smoke" if SMOKE else ("smoke,steps=400,rows=8,cols=10,n_subjects=4,n_planted=6,"
                             "n_atoms=16,k=3,words_per_story=300,n_plays=10,n_train=6,n_val=2,n_test=2,"
                             "transfer_trs=30+60,n_top_units=5")
config = config_lib.load(f"configs/coupled_sae.py:{arg}")
feats = data.for_seed(data.features_for(config, cache_dir=None), config, seed=0)
resp = data.responses_for(feats, config, seed=0)
print(len(feats.stories), "stories,", sum(x.shape[0] for x in feats.x), "TRs,",
      feats.x[0].shape[1], "features;", len(resp.y), "subjects x", resp.y[0][0].shape[1], "voxels")"""

RUN = """fit = methods.fit_all(config, feats, resp, seed=0)
out, arts = experiment.summarize(config, feats, resp, fit, seed=0)
for k in ("pct_dense_coupled", "pct_dense_two_stage", "pct_dense_pca", "pct_dense_oracle",
          "recovery_coupled", "recovery_two_stage", "recovery_pca",
          "repro_coupled", "repro_two_stage", "repro_posthoc_pca", "repro_truth"):
  print(f"{k:22s} {out[k]:.3f}")
for a, segs in list(out["top_segments"].items())[:3]:
  print("atom", a, "|", " | ".join(segs))"""

PLOT = """surf = arts["surface"]
maps = arts["maps"]
cc = analysis.cross_corr(data.stack(resp.sim.codes, feats.split["test"]), fit["joint"]["test_codes"])
_, match = analysis.matched_score(cc)
fig, ax = plt.subplots(1, 4, figsize=(16, 3))
def show(a, m, title):
  g = surf.grid(m)
  a.imshow(np.concatenate([g[0], np.full((surf.rows, 1), np.nan), g[1]], 1),
           cmap="tab10" if title == "networks" else "RdBu_r")
  a.set_title(title, fontsize=9); a.axis("off")
show(ax[0], surf.labels, "networks")
show(ax[1], maps["truth"][0, 0], "planted atom 0, subject 0")
show(ax[2], maps["coupled"][0, match[0]], f"coupled atom {match[0]}, subject 0")
show(ax[3], maps["coupled"][1, match[0]], f"coupled atom {match[0]}, subject 1")
plt.tight_layout(); plt.show()"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL),
              nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(RUN),
              nbformat.v4.new_code_cell(PLOT)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "coupled_sae.ipynb"))


if __name__ == "__main__":
  main()
