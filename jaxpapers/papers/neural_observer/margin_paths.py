"""Two-stage training of LMI-certified neural network observers: is the reported margin a
property of the weights or of the solver's path?

Trains one study cell (plant, method, seed, learning rate, gain decay as the study chose
them in `workdir/units/systems__<plant>.json`) and prints one JSON line with the capped
SDP's margin (the previous study's number, any of many t = 1 solutions) and the uncapped
optimum (the reported one). Run it under different thread settings (README "Margin");
float reordering changes the trained weights slightly, and only a margin that is an
optimum of the weights moves just as slightly.

  python -m jaxpapers.papers.neural_observer.margin_paths /tmp/no_study46 pendulum 0
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.neural_observer import experiment as ex
from jaxpapers.papers.neural_observer import train


def main(workdir: str, plant: str, seed: int, method: str = "two_stage"):
  path = os.path.join(workdir, "units", f"systems__{plant}.json")
  if not os.path.exists(path):
    raise SystemExit(f"{path} missing: run the study's systems/{plant} unit first")
  with open(path) as f:
    chosen = json.load(f)["chosen_lr"]
  config = config_lib.load("configs/neural_observer.py")
  cfg = ex.flat(config)
  prob = train.build_problem(cfg, plant, seed, gain_alpha=chosen["gain_alpha"])
  trainer = train.Trainer(prob, config.model.width, cfg)
  params, _, s = trainer.run(method, seed, chosen[method], prob, cfg.sdp_solver)
  out = dict(plant=plant, seed=seed, method=method, lr=chosen[method],
             gain_alpha=chosen["gain_alpha"], certified=s["certified"],
             margin_capped=s.get("margin_capped", np.nan), margin=s.get("margin", np.nan),
             sdp_t_opt=s.get("sdp_t_opt", np.nan),
             xla_flags=os.environ.get("XLA_FLAGS", ""),
             omp=os.environ.get("OMP_NUM_THREADS", ""))
  if params is not None:
    out["W2_sum"] = float(np.sum(np.asarray(params["W2"], np.float64)))
  print(json.dumps(out), flush=True)


if __name__ == "__main__":
  if len(sys.argv) < 4:
    raise SystemExit("usage: margin_paths.py WORKDIR PLANT SEED [METHOD]")
  main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
