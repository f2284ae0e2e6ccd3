"""BFMNet: truthful budget-feasible procurement menus -- train, study and benchmark entries.

`train_and_evaluate` trains BFMNet (and the RegretNet-style baseline) on one market
configuration with jitted lax.scan chunks over steps and vmapped instance batches, with
orbax checkpoints for exact resume, then evaluates every mechanism (metrics in
evaluate.py). `run_study` runs the n x valuation x cost-distribution grid and writes the
comparison table and the time-vs-n table; `benchmark` times training and inference.
"""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import bench
from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.bfmnet import classical
from jaxpapers.papers.bfmnet import evaluate
from jaxpapers.papers.bfmnet import markets as markets_lib
from jaxpapers.papers.bfmnet import train_lib

PAPER_PATHS = ["jaxpapers/papers/bfmnet", "configs/bfmnet.py"]


def _check(cfg):
  markets_lib.cell_ids(cfg.market.valuation, cfg.market.cost_dist)  # names both if bad
  if cfg.market.n < 2:
    raise ValueError(f"n={cfg.market.n}: a procurement market needs at least 2 sellers")


def train(cfg, kind: str, ids_Cx2, workdir: str | None = None, writer=None, names=None,
          stop_at: int | None = None, init_params=None, lrs=None, seeds=None,
          penalties=None):
  """Trains 'bfmnet' or 'regretnet' for every cell at once (vmapped).

  Returns (model, params with a leading cell axis, info). Orbax checkpoints of the
  stacked states make a killed run resume to the same parameters; `stop_at` ends the
  run after that step as a kill would (tests of exact resume). `init_params` (stacked
  per cell) replaces the random initialisation (the Singer-distillation ablation);
  `lrs` (one per cell) replaces cfg.optim.lr (learning-rate sweeps); `seeds` and
  `penalties` (one per cell) the training seed and the BFMNet hinge weight.
  """
  cells = ids_Cx2.shape[0]
  model, opt, states = train_lib.init_states(cfg, kind, jax.random.PRNGKey(cfg.seed), cells,
                                             lrs, seeds, penalties)
  if init_params is not None:
    states = dict(states, params=init_params, opt=jax.vmap(opt.init)(init_params))
  length = min(cfg.optim.log_every, cfg.optim.steps)
  if cfg.optim.steps % length:
    raise ValueError(f"optim.steps={cfg.optim.steps} must be a multiple of "
                     f"optim.log_every={length}")
  chunk = _chunk(cfg, kind, model, opt, length)
  ckpt = checkpoint_lib.Checkpointer(os.path.join(workdir, kind), keep=1) if workdir else None
  start = 0
  if ckpt:
    states, start = ckpt.restore_or(states)
  if writer:  # rows at training steps; the other kind's rows at the same steps stay
    writer.truncate_after(start, splits=("train",), tag=kind)
  timed_steps, timed_s = 0, 0.0
  for s in range(start, cfg.optim.steps, length):
    if stop_at is not None and s >= stop_at:
      break
    t0 = time.perf_counter()
    states, m = chunk(states, jnp.asarray(s), ids_Cx2)
    m = jax.device_get(m)
    dt = time.perf_counter() - t0
    if s > start:  # the first chunk includes compilation
      timed_steps, timed_s = timed_steps + length, timed_s + dt
    metrics_lib.check_finite(s + length, m)
    if writer:
      row = {}
      for c in range(cells):
        prefix = f"{names[c]}/" if names and cells > 1 else ""
        row.update({f"{prefix}{kind}/{k}": v[c] for k, v in m.items()})
      writer.write(s + length, row)
    if ckpt:
      ckpt.save(s + length, states)
  if ckpt:
    ckpt.close()
  # All cells advance together: one program step = `cells` training steps.
  info = {"steps_per_s": cells * timed_steps / timed_s if timed_s else float("nan")}
  # The chunks leave the runs split over every device; the audits are 1-device programs
  # that also take arrays built on one device, so hand back host copies.
  return model, jax.device_get(states["params"]), info


_CHUNKS = {}


def _chunk(cfg, kind, model, opt, length):
  """The jitted training chunk, built once per (config, kind, length) in a process: a
  resumed or repeated run with the same config reuses the compiled program."""
  key = (cfg.to_json(), kind, length)
  if key not in _CHUNKS:
    _CHUNKS[key] = train_lib.make_chunk(train_lib.make_step(cfg, kind, model, opt), length,
                                         cfg.optim.get("map_runs", False))
  return _CHUNKS[key]


def eval_sets(cfg, ids_Cx2):
  """Held-out instances per cell (a key disjoint from training) and their optima."""
  rng = jax.random.PRNGKey(cfg.seed + 10_007)
  mk = jax.vmap(lambda ids: markets_lib.sample_markets(
      rng, cfg.eval.instances, cfg.market.n, ids, cfg.market.budget_per_seller))(ids_Cx2)
  opts, timeouts = [], 0
  for c in range(ids_Cx2.shape[0]):
    o, t = markets_lib.optimum_batch(jax.tree.map(lambda x: x[c], mk),
                                     cfg.eval.milp_time_limit)
    opts.append(o)
    timeouts += t
  return mk, np.stack(opts), timeouts


SPP_ALPHAS = tuple(float(a) for a in np.geomspace(0.25, 16.0, 13))


def tune_spp(cfg, ids_Cx2):
  """Per cell, the SPP price scale alpha with the highest mean value on validation markets
  (a key disjoint from training and test), from the grid SPP_ALPHAS."""
  rng = jax.random.PRNGKey(cfg.seed + 20_011)
  alphas = jnp.asarray(SPP_ALPHAS)

  @jax.jit
  def values(ids):
    mk = markets_lib.sample_markets(rng, cfg.eval.spp_val_instances, cfg.market.n, ids,
                                    cfg.market.budget_per_seller)
    def at(a):
      x = jax.vmap(lambda m: classical.spp(m, m["costs"], a)[0])(mk)
      return jnp.mean(jax.vmap(markets_lib.value)(mk, x))
    return jax.vmap(at)(alphas)
  v_CxA = jax.vmap(values)(ids_Cx2)
  return alphas[jnp.argmax(v_CxA, axis=1)]


def mechanism_builders(cfg, trained, ids_Cx2=None) -> dict:
  """name -> (builder(params) -> Mechanism, stacked params or None)."""
  out = {}
  if "bfmnet" in trained:
    model, params = trained["bfmnet"]
    out["bfmnet"] = (lambda p: evaluate.bfmnet_mechanism(model, p), params)
    out["raw_menus"] = (lambda p: evaluate.raw_menu_mechanism(model, p), params)
  if "regretnet" in trained:
    model_r, params_r = trained["regretnet"]
    out["regretnet"] = (lambda p: evaluate.regretnet_mechanism(model_r, p), params_r)
  if cfg.eval.classical:
    out["singer"] = (lambda p: evaluate.singer_mechanism(), None)
    out["cgl"] = (lambda p: evaluate.cgl_mechanism(), None)
    out["greedy_half"] = (lambda p: evaluate.greedy_half_mechanism(), None)
    if ids_Cx2 is not None:
      out["spp"] = (evaluate.spp_mechanism, tune_spp(cfg, ids_Cx2))
  return out


def _cell_fn(builder, params, fn):
  """vmaps fn(mechanism, *cell_args) over cells, with or without per-cell params."""
  if params is None:
    return jax.jit(jax.vmap(lambda *a: fn(builder(None), *a))), ()
  return jax.jit(jax.vmap(lambda p, *a: fn(builder(p), *a))), (params,)


def run_cells(cfg, cells, workdir: str, writer=None, kinds=None, trained=None) -> list[dict]:
  """Trains and audits every mechanism on the given (valuation, dist) cells of one n.

  `kinds` (default: bfmnet, plus regretnet if configured) are trained; `trained` may bring
  already trained (model, stacked params) by name instead.
  """
  ids = jnp.stack([markets_lib.cell_ids(v, d) for v, d in cells])
  names = [f"{v}_{d}" for v, d in cells]
  trained, info = dict(trained or {}), {}
  if kinds is None:
    kinds = ["bfmnet"] + (["regretnet"] if cfg.baseline.train else [])
  for kind in kinds:
    model, params, info[kind] = train(cfg, kind, ids, workdir, writer, names)
    trained[kind] = (model, params)
  mk, opt, timeouts = eval_sets(cfg, ids)
  reg = jax.tree.map(lambda x: x[:, :cfg.eval.regret_instances], mk)
  grid = jnp.linspace(0.0, markets_lib.COST_MAX, cfg.eval.regret_grid)
  results = [{"train": info, "milp_timeouts": timeouts, "inference_per_s": {}}
             for _ in cells]
  for name, (builder, params) in mechanism_builders(cfg, trained, ids).items():
    with_regret = name != "raw_menus" and cfg.eval.regret_instances > 0
    fn, pargs = _cell_fn(builder, params, lambda m, a, r: evaluate.audit(
        m, a, r if with_regret else None, grid))
    arrays, r = fn(*pargs, mk, reg)
    for c, (valuation, _) in enumerate(cells):
      # Singer's rule runs on submodular cells too, as an unproven reference whose
      # overspends are counted (its budget feasibility is proven for additive values only).
      cell_mk = jax.tree.map(lambda x: x[c], mk)
      res = evaluate.summarize(jax.tree.map(lambda x: x[c], arrays),
                               None if r is None else r[c], cell_mk, opt[c])
      if name == "spp":
        res["alpha"] = float(params[c])
      results[c][name] = res
      if writer:
        writer.write(cfg.optim.steps, {f"{names[c]}/{name}/{k}": v for k, v in res.items()},
                     split="eval")
    if cfg.eval.timing and name in ("bfmnet", "regretnet"):
      out_fn, oargs = _cell_fn(builder, params, evaluate.outcomes)
      sec = bench.time_call(out_fn, *oargs, mk, warmup=1, iters=1, min_time=0.5)
      for c in range(len(cells)):
        results[c]["inference_per_s"][name] = mk["costs"].shape[0] * mk["costs"].shape[1] / sec
  if writer:
    writer.write(cfg.optim.steps, {"milp_timeouts": timeouts}, split="eval")
  return results


def train_and_evaluate(config, workdir: str) -> dict:
  """One market cell (config.market): train BFMNet (+ RegretNet) and audit everything."""
  _check(config)
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir, config.optim.steps)
  cell = (config.market.valuation, config.market.cost_dist)
  return run_cells(config, [cell], workdir, writer)[0]


def _variant(config, n, k):
  s = config.study
  cfg = config_lib.override(config, {
      "market.n": n, "optim.steps": s.steps[k], "optim.batch": s.batch[k],
      "eval.instances": s.eval_instances[k], "eval.regret_instances": s.regret_instances[k]})
  cfg.optim.log_every = min(cfg.optim.log_every, cfg.optim.steps)
  return cfg


def plan(config) -> planner.Plan:
  """One training step of the grid study's BFMNet sweep at the largest n, for the planner.

  Every run of the sweep (cells x learning rates x hinge weights) and of the seeds pass
  that follows it (each cell's chosen setting at `study.seeds - 1` more seeds, the same
  steps) advances one step; the runs are spread over the devices exactly as
  `train_lib.make_chunk` spreads them (with `map_runs`, each device maps its block of
  runs). The study trains the two sets as two programs one after the other; planned as
  one, the FLOPs are those of both and the memory theirs together (an over-count). One
  step, not a logged chunk: XLA's cost analysis counts a scan body once. Nothing is
  allocated: the states are `jax.eval_shape` of the runs' initialisation.
  """
  from jaxpapers.papers.bfmnet import grid_study  # imports this module
  k = int(np.argmax(config.study.ns))
  n = config.study.ns[k]
  cfg = _variant(config, n, k)
  cells = [(v, d) for v in config.study.valuations for d in config.study.cost_dists]
  grid = grid_study.settings(config, "bfmnet", n)
  sweep_runs = len(cells) * len(grid)
  extra = len(cells) * (int(config.study.seeds) - 1)  # the seeds pass (grid_study.run_n)
  runs = sweep_runs + extra
  # The seeds pass's settings are chosen on validation; any grid entry costs the same.
  lrs = [g[0] for g in grid] * len(cells) + [grid[0][0]] * extra
  penalties = [g[1] for g in grid] * len(cells) + [grid[0][1]] * extra
  seeds = [cfg.seed] * sweep_runs + [cfg.seed + 1 + i % max(int(config.study.seeds) - 1, 1)
                                     for i in range(extra)]
  built = {}

  def abstract_states():  # traced only: the model and optimizer come out as a side value
    model, opt, states = train_lib.init_states(
        cfg, "bfmnet", jax.random.PRNGKey(cfg.seed), runs, lrs=lrs, seeds=seeds,
        penalties=penalties)
    built.update(model=model, opt=opt)
    return states
  states = jax.eval_shape(abstract_states)
  model, opt = built["model"], built["opt"]
  ids = jax.ShapeDtypeStruct((runs, 2), jnp.int32)
  start = jax.ShapeDtypeStruct((), jnp.int32)
  one = train_lib.cell_fn(train_lib.make_step(cfg, "bfmnet", model, opt), 1)
  if cfg.optim.map_runs:
    d = jax.device_count()
    per = sharding.padded_size(runs, d) // d
    fold = lambda x: jax.ShapeDtypeStruct((d, per) + tuple(x.shape[1:]), x.dtype)  # noqa: E731
    block = lambda s, i, c: jax.lax.map(lambda a: one(a[0], i, a[1]), (s, c))  # noqa: E731
    fn, args = sharding.spread_plan(block, jax.tree.map(fold, states), start, fold(ids),
                                    in_axes=(0, None, 0))
    # XLA counts the lax.map body (one run's step) once: the run calls it `per` times a step.
    steps, what = cfg.optim.steps * per, f"one run's step ({per} per device per step)"
  else:
    fn, args = sharding.spread_plan(one, states, start, ids, in_axes=(0, None, 0),
                                    donate_argnums=(0,))
    steps, what = cfg.optim.steps, "one step of every run"
  label = (f"BFMNet grid sweep + seeds pass, n={n}: {runs} runs ({len(cells)} cells x "
           f"{len(grid)} (lr, hinge) + {len(cells)} cells x {extra // len(cells)} seeds), "
           f"{cfg.optim.batch} markets per step, hidden {cfg.model.hidden}, "
           f"map_runs={cfg.optim.map_runs}; {what}")
  return planner.Plan(fn, args, steps=steps, label=label)


def run_study(config, workdir: str) -> str:
  """The n x valuation x cost table against classical and RegretNet baselines."""
  if config.study.name != "main":
    from jaxpapers.papers.bfmnet import studies  # the other studies; imports this module
    return studies.run(config, workdir)
  metrics_lib.write_config(workdir, config)
  rows, timing = [], []
  t_start = time.perf_counter()
  cells = [(v, d) for v in config.study.valuations for d in config.study.cost_dists]
  for k, n in enumerate(config.study.ns):
    # The table is BFMNet against the best proven-truthful classical baseline, so they are
    # always evaluated here, and so is the RegretNet baseline (`classical=False` and
    # `baseline=False` only speed up a single training run, e.g. the smoke config's).
    cfg = config_lib.override(_variant(config, n, k),
                              {"eval.classical": True, "baseline.train": True})
    t0 = time.perf_counter()
    workdir_n = os.path.join(workdir, f"n{n}")
    metrics_lib.write_config(workdir_n, cfg)
    writer = metrics_lib.MetricsWriter(workdir_n, cfg.optim.steps)
    results = run_cells(cfg, cells, workdir_n, writer)
    wall = time.perf_counter() - t0
    for (valuation, dist), res in zip(cells, results):
      rows.append(_row(n, valuation, dist, res))
      print(f"[study] n={n} {valuation} {dist}: {rows[-1]}", flush=True)
    timing.append(_timing_row(cfg, n, len(cells), results[0], wall))
  commit = study_lib.git_commit(paths=PAPER_PATHS)
  cmd = "python launch/study.py --config=configs/bfmnet.py --workdir=DIR"
  header = (f"BFMNet study (`{cmd}`), commit {commit}, "
            f"{time.perf_counter() - t_start:.0f} s wall on this machine.\n"
            "Value = buyer value / non-strategic optimum (ratio of sums). "
            "Paper claim: up to +34.1% over classical baselines.")
  md = study_lib.write_table(workdir, "bfmnet_main", rows, header=header)
  md += "\n" + study_lib.write_table(workdir, "bfmnet_timing", timing,
                                     header="Training / inference time vs n.")
  return md


def proven_truthful(res, valuation):
  """Values of the classical baselines proven truthful and budget feasible in this cell."""
  names = (["singer"] if valuation == "additive" else []) + ["cgl", "greedy_half", "spp"]
  return {k: res[k]["value_ratio"] for k in names if k in res}


def classical_columns(res, valuation):
  sg = res["singer"]
  return {"Singer": sg["value_ratio"] if valuation == "additive" else "-",
          "Singer_rule_unproven": "-" if valuation == "additive" else sg["value_ratio"],
          "Singer_budget_viol": sg["budget_viol"],
          "CGL": res["cgl"]["value_ratio"], "GreedyHalf": res["greedy_half"]["value_ratio"],
          "SPP": res["spp"]["value_ratio"], "SPP_alpha": res["spp"]["alpha"],
          "classical_regret_max": max(res[k].get("regret_max", 0.0)
                                      for k in ("cgl", "greedy_half", "spp"))}


def _row(n, valuation, dist, res):
  bfm = res["bfmnet"]
  truthful = proven_truthful(res, valuation)
  best_name = max(truthful, key=truthful.get)
  row = {"n": n, "valuation": valuation, "costs": dist, "BFMNet": bfm["value_ratio"]}
  row.update(classical_columns(res, valuation))
  row.update({"best_truthful": best_name,
              "gain_vs_best_truthful_%": 100.0 * (bfm["value_ratio"] / truthful[best_name] - 1),
              "BFMNet_regret_max": bfm["regret_max"],
              "BFMNet_budget/IR_viol": f"{bfm['budget_viol']}/{bfm['ir_viol']}",
              "raw_menus_budget_viol": res["raw_menus"]["budget_viol"]})
  if "regretnet" in res:
    rn = res["regretnet"]
    row.update({"RegretNet": rn["value_ratio"], "RegretNet_regret_mean": rn["regret_mean"],
                "RegretNet_regret_max": rn["regret_max"],
                "RegretNet_budget_viol": rn["budget_viol"]})
  return row


def _timing_row(cfg, n, cells, res, wall):
  inf = res.get("inference_per_s", {})
  nan = float("nan")
  return {"n": n, "cells": cells, "batch": cfg.optim.batch, "steps": cfg.optim.steps,
          "BFMNet_train_steps/s": res["train"]["bfmnet"]["steps_per_s"],
          "RegretNet_train_steps/s": res["train"].get("regretnet", {}).get("steps_per_s", nan),
          "BFMNet_infer_inst/s": inf.get("bfmnet", nan),
          "RegretNet_infer_inst/s": inf.get("regretnet", nan),
          "wall_s_all_cells": wall}


def benchmark(config, workdir: str) -> dict:
  """BFMNet training steps/s and inference instances/s (plus baselines) at config.n."""
  _check(config)
  metrics_lib.write_config(workdir, config)
  ids = markets_lib.cell_ids(config.market.valuation, config.market.cost_dist)[None]
  model, opt, states = train_lib.init_states(config, "bfmnet", jax.random.PRNGKey(config.seed), 1)
  length = config.optim.log_every
  chunk = train_lib.make_chunk(train_lib.make_step(config, "bfmnet", model, opt), length)
  states, _ = chunk(states, jnp.asarray(0), ids)
  jax.block_until_ready(states)
  t0 = time.perf_counter()
  states, m = chunk(states, jnp.asarray(length), ids)
  jax.block_until_ready(m)
  dt = time.perf_counter() - t0
  out = {"n": config.market.n, "train_steps_per_s": length / dt,
         "train_instances_per_s": length * config.optim.batch / dt}
  mk = jax.vmap(lambda i: markets_lib.sample_markets(
      jax.random.PRNGKey(1), config.eval.instances, config.market.n, i,
      config.market.budget_per_seller))(ids)
  trained = {"bfmnet": (model, states["params"])}
  for name, (builder, params) in mechanism_builders(config, trained).items():
    fn, args = _cell_fn(builder, params, evaluate.outcomes)
    sec = bench.time_call(fn, *args, mk, warmup=1, iters=1, min_time=1.0)
    out[f"{name}_instances_per_s"] = config.eval.instances / sec
  metrics_lib.MetricsWriter(workdir).write(0, out, split="benchmark")
  return out
