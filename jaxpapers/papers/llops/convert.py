"""llops part 3: converting a trained LM to another linear-attention map.

The paper's public cards say both LLoPS models were *continued* from BASED checkpoints:
BASED's global linear attention (Taylor map + sliding-window softmax layers) replaced by
LLoPS, then trained further. Our small version: train a source LM (default BASED's
Taylor map, 'WL' pairs) for `convert.source_steps`, swap the global layer's feature map
for each target map (every shared parameter copied bit for bit: embeddings, the window
layers, the global layer's q/k/v/o projections, MLPs and norms; the new map's own
parameters freshly initialised, the source map's dropped), and continue for
`convert.steps`. Continuation reads the source's data stream from step `source_steps` on,
so source + continuation see exactly the batches that a from-scratch run of
`source_steps + steps` steps sees (part 2a's LMs: the comparison at equal total steps and
data). The continuation restarts AdamW (fresh moments, warmup + cosine over `steps`): the
source's optimizer state belongs to another parametrisation of the global layer.
"""
from __future__ import annotations

import dataclasses
import os
import time

import jax
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import loop
from jaxpapers.core import population
from jaxpapers.nn import lm
from jaxpapers.nn import lm_experiment
from jaxpapers.papers.llops import model as model_lib


def _leaves(tree):
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path): x for path, x in flat}


def transfer(src, dst):
  """(params, copied, fresh, dropped): `dst` with every leaf that `src` holds at the same
  path replaced by src's (same dtype and values); `fresh` are dst's own leaves (the new
  map's parameters), `dropped` src's leaves dst lacks (the old map's). A shared path with
  another shape is a one-line error: the two models are not the same stack."""
  s = _leaves(src)
  flat, treedef = jax.tree_util.tree_flatten_with_path(dst)
  out, copied, fresh = [], [], []
  for path, x in flat:
    key = jax.tree_util.keystr(path)
    if key in s:
      if np.shape(s[key]) != np.shape(x):
        raise ValueError(f"cannot transfer {key}: source shape {np.shape(s[key])} vs "
                         f"target {np.shape(x)} (different model sizes)")
      out.append(s[key])
      copied.append(key)
    else:
      out.append(x)
      fresh.append(key)
  if not copied:
    raise ValueError("no parameter is shared between the source and the target model")
  dropped = sorted(set(s) - set(copied))
  return jax.tree_util.tree_unflatten(treedef, out), copied, fresh, dropped


def converted_model(lm_model: lm.LMModel, src_params) -> lm.LMModel:
  """The target LMModel whose init is its own init with the source's shared leaves."""
  return dataclasses.replace(lm_model, init=lambda rng: transfer(src_params, lm_model.init(rng))[0])


def continued_task(task: loop.Task, offset: int) -> loop.Task:
  """The task reading its data stream from step `offset` on (the source's next batches)."""
  return dataclasses.replace(task, train_batch=lambda step, rows: task.train_batch(step + offset, rows))


def _configs(config):
  c = config.convert
  src = config_lib.override(config, {
      "train.steps": c.source_steps, "train.eval_every": c.source_steps,
      "train.checkpoint_every": max(1, c.source_steps // 4)})
  conv = config_lib.override(config, {
      "train.steps": c.steps, "train.eval_every": c.steps,
      "train.checkpoint_every": max(1, c.steps // 2)})
  return src, conv


def source_params(config, workdir, data, seeds):
  """{seed: params} of the source LM (one population of the seeds at the source LR),
  trained in workdir/convert/source_<method>; a finished run is restored from its
  checkpoint (core.checkpoint through loop.train), not retrained."""
  c = config.convert
  src_cfg, _ = _configs(config)
  _, lm_model, _ = model_lib.build(src_cfg, data.vocab_size, c.source)
  pop = population.grid(seeds, lr=[c.source_lr])
  task = population.population_task(
      lambda seed, hp: lm.make_task(src_cfg, data, lm_model, seed=seed, hparams=hp), pop)
  st, _ = loop.train(src_cfg, os.path.join(workdir, "convert", f"source_{c.source}"), task)
  st = jax.device_get(st)
  if np.any(st["diverged"]):
    raise FloatingPointError(f"the source LM ({c.source}) diverged for a seed; lower "
                             "convert.source_lr")
  return {m["seed"]: population.member(st, i)["params"] for i, m in enumerate(pop)}


def convert_part(config, workdir, data, val_w, test_w):
  """Rows, table, LR log and curves of part 3 (see the module docstring)."""
  from jaxpapers.papers.llops import study  # pylint: disable=g-import-not-at-top
  c, s = config.convert, config.study
  seeds = [config.seed + i for i in range(s.seeds)]
  t0 = time.time()
  src = source_params(config, workdir, data, seeds)
  src_cfg, conv_cfg = _configs(config)
  src_model, _, src_mp = model_lib.build(src_cfg, data.vocab_size, c.source)
  fn = lm_experiment.nats_fn(src_model)
  source_rows = [{"seed": k, "val_bpb": lm_experiment.bpb(fn, p, val_w, data.token_bytes),
                  "test_bpb": lm_experiment.bpb(fn, p, test_w, data.token_bytes)}
                 for k, p in src.items()]
  print(f"[llops] convert: source {c.source} ({c.source_steps} steps, lr {c.source_lr}) "
        f"test bpb {[round(r['test_bpb'], 4) for r in source_rows]}: {time.time() - t0:.0f}s",
        flush=True)
  rows = []
  for name in c.maps:
    t0 = time.time()
    model, lm_model, mp = model_lib.build(conv_cfg, data.vocab_size, name)
    fn = lm_experiment.nats_fn(model)
    # bpb right after the swap (before any continued training), per seed: what the new
    # map costs before it has learned anything; equals the source's for the same map.
    swap = {}
    for seed in seeds:
      p0, copied, fresh, dropped = transfer(
          src[seed], lm_model.init(jax.random.split(jax.random.PRNGKey(seed))[0]))
      swap[seed] = (lm_experiment.bpb(fn, p0, val_w, data.token_bytes),
                    lm_experiment.bpb(fn, p0, test_w, data.token_bytes))
    print(f"[llops] convert {c.source} -> {name}: {len(copied)} leaves copied, new {fresh}, "
          f"dropped {dropped}", flush=True)

    def row(m, div, p, curve, name=name, model=model, mp=mp, fn=fn, swap=swap):
      nan = float("nan")
      return {"map": name, "state": mp.state if mp else 0, "seed": m["seed"], "lr": m["lr"],
              "diverged": div, "swap_val_bpb": swap[m["seed"]][0],
              "swap_test_bpb": swap[m["seed"]][1],
              "val_bpb": nan if div else lm_experiment.bpb(fn, p, val_w, data.token_bytes),
              "test_bpb": nan if div else lm_experiment.bpb(fn, p, test_w, data.token_bytes),
              "params": model_lib.n_params(model, mp), "curve": curve}

    def make_task(seed, hp, lm_model=lm_model):
      task = lm.make_task(conv_cfg, data, converted_model(lm_model, src[seed]), seed=seed,
                          hparams=hp)
      return continued_task(task, c.source_steps)

    def run(pop, name=name, row=row, make_task=make_task):
      # One population per seed: each seed continues its own source LM.
      out = []
      for seed in sorted({m["seed"] for m in pop}):
        sub = [m for m in pop if m["seed"] == seed]
        wd = study._member_dir(os.path.join(workdir, "convert", f"{c.source}_to_{name}"), sub)  # pylint: disable=protected-access
        out += study._population_rows(conv_cfg, wd, make_task, sub, row)  # pylint: disable=protected-access
      return out

    rows += study.staged(run, c.lrs, seeds, lambda rs: np.mean([r["val_bpb"] for r in rs]),
                         stage1=s.lm_stage1, max_ext=s.lm_max_ext)
    print(f"[llops] convert {c.source} -> {name}: {time.time() - t0:.0f}s", flush=True)
  chosen, log = study._select(rows, "map", "val_bpb", seed=seeds[0] if s.lm_stage1 else None)  # pylint: disable=protected-access
  curves = {n: study._mean_curve([r for r in chosen if r["map"] == n]) for n in c.maps}  # pylint: disable=protected-access
  src_row = {"map": f"source {c.source} ({c.source_steps} steps)",
             "state": src_mp.state if src_mp else 0, "lr": c.source_lr,
             "swap_test_bpb": float("nan"),
             "test_bpb": float(np.mean([r["test_bpb"] for r in source_rows])),
             "std": float(np.std([r["test_bpb"] for r in source_rows])),
             "val_bpb": float(np.mean([r["val_bpb"] for r in source_rows])),
             "seeds": len(source_rows)}
  table = [src_row]
  for name in c.maps:
    rs = [r for r in chosen if r["map"] == name]
    v = np.array([r["test_bpb"] for r in rs])
    table.append({"map": f"{c.source} -> {name}", "state": rs[0]["state"], "lr": rs[0]["lr"],
                  "swap_test_bpb": float(np.mean([r["swap_test_bpb"] for r in rs])),
                  "test_bpb": float(np.mean(v)), "std": float(np.std(v)),
                  "val_bpb": float(np.mean([r["val_bpb"] for r in rs])), "seeds": len(rs)})
  rows = [{k: v for k, v in r.items() if k != "curve"} for r in rows]
  rows += [{"map": f"source {c.source}", **r} for r in source_rows]
  return table, rows, log, curves
