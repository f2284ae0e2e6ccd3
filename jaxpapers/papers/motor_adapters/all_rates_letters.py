"""Right-code letters for EVERY stage-1 lane (all grid rates, all seeds) of a round-4
workdir, from its checkpoints and with the study's own noise keys; the study itself scores
only the lane its validation picks (README, "Are the learning-rate choices interior?").
It also rescores the selected lanes, which must equal the study's `letters_oracle_cm`
(to float32 rounding: here all lanes are evaluated in one batch). Evaluation only, reads
the workdir, writes OUT.json:
usage: python jaxpapers/papers/motor_adapters/all_rates_letters.py WORKDIR OUT.json

Written by reviewer rev49 (issue 49); added to the paper by helper ma49e."""
import collections
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import config as config_lib
from jaxpapers.papers.motor_adapters import experiment
from jaxpapers.papers.motor_adapters import rollout
from jaxpapers.papers.motor_adapters import tasks
from jaxpapers.papers.motor_adapters import training


def score_lanes(workdir, big, config_arg="configs/motor_adapters.py:round4"):
  """Rows (kind, seed, lr, step, val / letters cm with the right code) of every stage-1
  lane in `workdir` (`big`: the parameter-matched network's folder under it)."""
  cfg = config_lib.load(config_arg)
  d = workdir
  if big:
    cfg = experiment.big_config(cfg)
    d = os.path.join(workdir, "multitask_big")
  env, hp = experiment.make_env(cfg), experiment.make_hp(cfg)
  lanes = experiment.stage1_lanes(cfg)
  prim = jnp.asarray(tasks.primitive_paths(env.radius, env.move_steps, env.hold_steps))
  st = training.init_lanes(lanes, env, hp, prim.shape[0])
  ckpt = checkpoint_lib.Checkpointer(os.path.join(d, "primitives"), keep=1)
  st, step = ckpt.restore_or(st)
  ckpt.close()
  st = jax.device_get(st)
  params, kids = st["params"], st["kid"]
  # the study's own keys, so the selected lanes reproduce its letters_oracle_cm
  q_test, _ = rollout.random_starts(env, training.lane_key(cfg.seed, "test"),
                                    cfg.train.eval_starts)
  _, test_opt, _ = jax.device_get(training.eval_primitives_lanes(
      params, kids, prim, q_test, training.lane_key(cfg.seed, "kt"), env=env, hp=hp))
  _, ev_ids, (_, ev_t, ev_m, ev_q) = experiment.evaluation_paths(cfg, env)
  nv = cfg.data.val_paths
  opts = jax.nn.one_hot(np.asarray(test_opt)[:, np.maximum(ev_ids, 0)], cfg.model.adapters)
  o = jax.device_get(training.eval_with_options_lanes(
      params, kids, opts, ev_t, ev_m, ev_q, training.lane_key(cfg.seed, "seq_eval"),
      env=env, hp=hp))
  return [dict(kind=("multitask_big" if big else k), seed=s, lr=lr, step=int(step),
               val_paths_cm=float(o["per_path"][i, :nv].mean()),
               letters_oracle_cm=float(o["per_path"][i, nv:].mean()))
          for i, (k, s, lr) in enumerate(lanes)]


def main(workdir, out_path):
  rows = score_lanes(workdir, False) + score_lanes(workdir, True)
  with open(out_path, "w") as f:
    json.dump(rows, f, indent=1)
  by_rate = collections.defaultdict(list)
  for r in rows:
    by_rate[(r["kind"], r["lr"])].append(r)
  for (kind, lr), rs in sorted(by_rate.items()):
    a = [r["letters_oracle_cm"] for r in rs]
    v = [r["val_paths_cm"] for r in rs]
    print(f"{kind:14s} lr={lr:g} letters(right code) {np.mean(a):.3f} +- {np.std(a):.3f}  "
          f"val paths(right code) {np.mean(v):.3f}  per seed {np.round(a, 3).tolist()}")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2])
