"""Success Visitation Matching: does SAC improve on the BC policy? (issue 48 sanity check)

Before SAC can compare rewards it must be able to improve on its starting point with a
reward that is known to be informative. This runs SAC from the BC actor on a task with
the hand-shaped distance reward (method `distance`), plain (the removed study leg's SAC)
and RLPD-style (sac.py: symmetric demonstration / online replay, LayerNorm critics,
update-to-data ratio `utd`), on the same seeds, and compares the deterministic policy's
evaluation success after each iteration with the BC policy's (iteration 0; same
evaluation start states).

  python -m jaxpapers.papers.visitation_reward.sac_check --task=push_block --iterations=20 --seeds=4 --out=/tmp/sac_check.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import jax.numpy as jnp
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.papers.visitation_reward import experiment, rewards


def run(task: str, iterations: int, seeds: int, lr: float, utd: float, factor: float,
        extra: str = "") -> dict:
  out = {}
  for name, args in (("sac", "rlpd=False"), ("sac_rlpd", f"rlpd=True,sac_utd={utd:g}")):
    spec = (f"configs/visitation_reward.py:algo=sac,iterations={iterations},{args}"
            + (f",{extra}" if extra else ""))
    config = config_lib.load(spec)
    rc = experiment.run_cfg(config)
    w = rewards.method_weights("distance", experiment.scales(config)) * factor
    t0 = time.perf_counter()
    init, m = experiment.population(task, rc, jnp.arange(seeds), jnp.full((seeds,), lr),
                                    jnp.broadcast_to(w, (seeds, w.shape[0])),
                                    config.train.lane_group)
    ev = np.concatenate([np.asarray(init["eval_success"])[:, None],
                         np.asarray(m["eval_success"])], 1)  # (seeds, I+1)
    tr = np.concatenate([np.asarray(init["success"])[:, None], np.asarray(m["success"])], 1)
    out[name] = {"eval_success": ev.tolist(), "train_success": tr.tolist(),
                 "seconds": time.perf_counter() - t0}
    print(f"[{task} {name}] eval success per iteration (mean over {seeds} seeds): "
          f"{np.round(ev.mean(0), 3).tolist()}", flush=True)
  return out


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--task", default="push_block")
  p.add_argument("--iterations", type=int, default=20)
  p.add_argument("--seeds", type=int, default=4)
  p.add_argument("--lr", type=float, default=3e-4)
  p.add_argument("--utd", type=float, default=1.0)
  p.add_argument("--factor", type=float, default=4.0, help="x the distance reward's scale")
  p.add_argument("--extra", default="", help="more config args")
  p.add_argument("--out", default="")
  a = p.parse_args(argv)
  res = run(a.task, a.iterations, a.seeds, a.lr, a.utd, a.factor, a.extra)
  res["args"] = vars(a)
  if a.out:
    with open(a.out, "w") as f:
      json.dump(res, f)


if __name__ == "__main__":
  main(sys.argv[1:])
  sys.exit(0)
