"""Generation rows of a finished synthetic cell trained on another LR grid than its AR cell.

The study scores a diffusion cell's samples with the AR cell of the same workdir, which
must share its LR grid (`study._ar_params` restores the AR population from its
checkpoint). A cell run on an extended grid (`study_lrs=...`, its own workdir, trained
with `study_gen_corpora=none`) gets its generation rows here instead: its chosen members
restored from their checkpoint, sampled as in the study, scored by the AR cell of the
default-grid workdir, and written into its `cell.json` (a later `study_only=none` run
of that workdir puts them in its tables).

  python -m jaxpapers.papers.lhdlm.gen_cell --ar_workdir=/tmp/lh38/study \
      --workdir=/tmp/lh38/study_udlm_hi --model=udlm --lrs=0.004+0.01+0.025

A cell trained for longer than its AR cell (`study_steps=16000`) names its own settings in
`--cell_extra` (they apply to the cell only: the AR cell is restored with the default
study settings, so its finished checkpoint is read back, never trained further); the
sampler step counts may be given there too (`study_sample_steps=16+128+512`).
"""
from __future__ import annotations

import argparse
import json
import os

from jaxpapers.core import config as config_lib
from jaxpapers.core import population
from jaxpapers.data import text as text_lib
from jaxpapers.papers.lhdlm import data as data_lib
from jaxpapers.papers.lhdlm import study as study_lib


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--ar_workdir", required=True, help="study workdir holding synthetic/ar")
  ap.add_argument("--workdir", required=True, help="study workdir of the extended-grid cell")
  ap.add_argument("--model", required=True, help="the cell's study model name (e.g. udlm)")
  ap.add_argument("--lrs", required=True, help="the cell's LR grid, '+'-joined")
  ap.add_argument("--extra", default="", help="config args before study_lrs ('smoke,')")
  ap.add_argument("--cell_extra", default="",
                  help="config args of the cell only ('study_steps=16000,'), after --extra")
  a = ap.parse_args(argv)
  base = config_lib.load(f"configs/lhdlm.py:{a.extra}")
  grid = config_lib.load(f"configs/lhdlm.py:{a.extra}{a.cell_extra}study_lrs={a.lrs}")
  corpus = "synthetic"
  cfg_b, cfg_g = study_lib._corpus_config(base, corpus), study_lib._corpus_config(grid, corpus)
  data, labels = data_lib.load(cfg_b)
  windows = text_lib.eval_windows(data.val, cfg_b.data.seq_len, base.study.eval_windows)
  test_w = windows[len(windows) // 2:]
  seeds = [base.seed + i for i in range(base.study.seeds)]
  ar = study_lib._ar_params(cfg_b, corpus, data, seeds, a.ar_workdir, {})
  wd = os.path.join(a.workdir, corpus, a.model)
  with open(os.path.join(wd, "cell.json")) as f:
    cell = json.load(f)
  mdl = study_lib._model(grid, cfg_g, a.model, data, labels)
  pop = population.grid(seeds, lr=grid.study.lrs)
  state = study_lib._train(cfg_g, data, mdl, pop, wd)   # restores the finished checkpoint
  params = [population.member(state, i)["params"] for i in cell["chosen"]]
  print("chosen members:", [pop[i] for i in cell["chosen"]], flush=True)
  cell["generation"] = study_lib._generation(grid.study, cfg_g, data, corpus, a.model, mdl,
                                             params, ar, test_w)
  with open(os.path.join(wd, "cell.json"), "w") as f:
    json.dump(cell, f)


if __name__ == "__main__":
  main()
