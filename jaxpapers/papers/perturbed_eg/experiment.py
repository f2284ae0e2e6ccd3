"""Perturbed S-EG / S-OGDA (abstract 19): training entry, the rate study and the benchmark.

`train_and_evaluate` runs one configured method on one problem over all horizons and
seeds as a single jitted program and writes the last-iterate and averaged-iterate gaps
per horizon to metrics.jsonl. `run_study` does that for the four methods on the
constrained problems (horizons 1e2..1e6, >= 20 seeds), fits the log-log slope of the
last-iterate gap with a confidence interval across seeds, runs the unconstrained
almost-sure experiment with decaying single-timescale steps, and writes the table and a
log-log plot into the workdir. `benchmark` times the vmapped JAX program against a plain
NumPy loop of the same algorithm. `train_and_evaluate` runs in chunks of blocks with an
orbax checkpoint of the iterates after each, so a killed run resumes to the same numbers;
the study's programs run in one piece (each a few minutes at most, deterministic).
"""
from __future__ import annotations

import functools
import os
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.perturbed_eg import analysis, gaps, methods, problems
from jaxpapers.papers.perturbed_eg import reference_numpy, schedules

PATHS = ["jaxpapers/papers/perturbed_eg", "configs/perturbed_eg.py"]


def build_problem(config, name: str | None = None):
  p = config.problem
  return problems.make(name or p.name, p.n, p.m, seed=p.instance_seed, rank=p.rank)


@functools.partial(jax.jit, static_argnames=("spec",))
def _metric_grid(spec, data, xs, ys):
  return jax.vmap(jax.vmap(jax.vmap(functools.partial(gaps.metric, spec, data))))(xs, ys)


@jax.jit
def _anchor_distance(data, xs, ys):
  ax, ay = gaps.anchor_projection(data)
  lift = lambda a: a.reshape((1,) * (xs.ndim - 1) + a.shape)  # noqa: E731
  return jnp.sqrt(((xs - lift(ax)) ** 2).sum(-1) + ((ys - lift(ay)) ** 2).sum(-1))


def _by_horizon(plan: methods.Plan, grid, group: int) -> tuple[np.ndarray, np.ndarray]:
  """(lanes, slots, seeds) slot values of one variant -> (sorted T, values (H, seeds))."""
  mask = plan.slot_group == group
  steps = plan.slot_steps[mask]
  order = np.argsort(steps)
  return steps[order], np.asarray(grid)[mask][order]


def build_run(config, spec, keys, horizons, seed: int | None = None,
              vanilla_t_max: int | None = None):
  """(plan, method, rng, useful seed-steps) of methods `keys` (one algorithm).

  Constrained problems use the horizon schedule: one run per (method, T) with constants
  fixed by T, all packed into lanes of length max(horizons) (vanilla runs only up to
  `vanilla_t_max`). The unconstrained problem, and the two-timescale prior method
  everywhere, use the anytime schedule: one decaying lane per method, its iterate read
  at every T of the grid.
  """
  algorithms = {schedules.lookup(k)[1] for k in keys}
  if len(algorithms) != 1:
    raise ValueError(f"methods {keys} mix algorithms {algorithms}; run them separately")
  sched, block, seeds = config.schedule, config.run.block, config.run.seeds
  free = spec.x_set == "free"
  two = [schedules.lookup(k)[3] for k in keys]
  if not free and any(two) and not all(two):
    raise ValueError("on constrained problems the two-timescale baseline 'dseg' runs as "
                     "its own (anytime) program: pass it alone")
  if free or all(two):
    plan = methods.merge([schedules.anytime_plan(k, sched, spec.lipschitz, max(horizons),
                                                 horizons, block) for k in keys])
    useful = len(keys) * max(horizons) * seeds
  else:
    runs = []
    for g, k in enumerate(keys):
      perturbed = schedules.lookup(k)[2]
      hz = [t for t in horizons if perturbed or vanilla_t_max is None or t <= vanilla_t_max]
      runs += schedules.horizon_runs(sched, spec.lipschitz, perturbed, hz, group=g)
    plan = methods.horizon_plan(runs, block)
    useful = int(sum(r[1] for r in runs)) * seeds
  method = methods.Method(algorithms.pop(), config.noise.sigma, t0=sched.t0)
  rng = jax.random.fold_in(jax.random.key(config.seed if seed is None else seed),
                           zlib.crc32(spec.name.encode()) % (2**31))
  return plan, method, rng, useful


def summarize_run(config, spec, data, keys, plan, snaps, seconds, useful) -> dict:
  """Gaps of every slot, grouped per method: {key: {"steps", "last", "avg", ...}}."""
  last = np.asarray(_metric_grid(spec, data, snaps.x, snaps.y))
  avg = np.asarray(_metric_grid(spec, data, snaps.avg_x, snaps.avg_y))
  out = {}
  for g, k in enumerate(keys):
    steps, lv = _by_horizon(plan, last, g)
    res = {"label": schedules.lookup(k)[0], "steps": steps, "last": lv,
           "avg": _by_horizon(plan, avg, g)[1], "seconds": seconds}
    if spec.x_set == "free":
      res["to_anchor"] = _by_horizon(plan, _anchor_distance(data, snaps.x, snaps.y), g)[1]
    out[k] = res
  out["_program"] = {"seconds": seconds, "useful_seed_steps": useful,
                     "lane_seed_steps": int(plan.eta.size * config.run.block
                                            * config.run.seeds)}
  return out


def run_methods(config, spec, data, keys, horizons, seed: int | None = None,
                vanilla_t_max: int | None = None) -> dict:
  """Runs methods `keys` (one algorithm) on one problem as one program (see build_run).

  Returns {key: {"steps", "last" (H, seeds), "avg" (H, seeds), ...}, "_program": timing}.
  """
  plan, method, rng, useful = build_run(config, spec, keys, horizons, seed, vanilla_t_max)
  t0 = time.perf_counter()
  snaps = methods.run_plan(spec, method, data, plan, rng, config.run.seeds,
                           config.run.block)
  jax.block_until_ready(snaps)
  seconds = time.perf_counter() - t0
  return summarize_run(config, spec, data, keys, plan, snaps, seconds, useful)


def _run_checkpointed(config, spec, data, keys, horizons, workdir, stop_after):
  """Like run_methods, in chunks of `run.checkpoint_blocks` blocks with an orbax
  checkpoint of (state, snapshots) after each; a restarted run resumes bitwise."""
  plan, method, rng, useful = build_run(config, spec, keys, horizons)
  arrays = tuple(jnp.asarray(a) for a in plan[:5])
  decay = jnp.asarray(plan.decay)
  n_blocks = plan.eta.shape[0]
  chunk = max(1, min(config.run.checkpoint_blocks, n_blocks))
  state, snaps = methods.init_carry(spec, data, plan.eta.shape[1],
                                    plan.slot_steps.shape[1], config.run.seeds)
  ckpt = checkpoint_lib.Checkpointer(workdir, keep=1)
  saved, start = ckpt.restore_or({"state": state._asdict(), "snaps": snaps._asdict()})
  carry = (methods.State(**saved["state"]), methods.Snapshots(**saved["snaps"]))
  t0 = time.perf_counter()
  for b0 in range(start, n_blocks, chunk):
    if stop_after is not None and b0 >= stop_after:
      ckpt.close()
      return None
    b1 = min(b0 + chunk, n_blocks)
    carry = methods.run_blocks(spec, method, data,
                               tuple(a[b0:b1] for a in arrays) + (decay,), rng, carry,
                               jnp.asarray(b0), block=config.run.block,
                               seeds=config.run.seeds)
    ckpt.save(b1, {"state": carry[0]._asdict(), "snaps": carry[1]._asdict()})
    print(f"block {b1}/{n_blocks} ({b1 * config.run.block} steps per lane)", flush=True)
  ckpt.close()
  jax.block_until_ready(carry)
  return summarize_run(config, spec, data, keys, plan, carry[1],
                       time.perf_counter() - t0, useful)


def validate(config) -> None:
  """The launcher's pre-flight hook (core/validate.py): a run needs one horizon at least."""
  if not config.run.horizons:
    raise ValueError(f"config field run.horizons=() is empty: t_max must be at least one "
                     f"noise block (run.block={config.run.block} steps)")


def train_and_evaluate(config, workdir: str, stop_after: int | None = None) -> dict:
  """One method, one problem, all horizons x seeds; writes metrics.

  Runs in chunks of `config.run.checkpoint_blocks` blocks with a checkpoint after each,
  so a killed run resumes from its workdir to the same numbers; `stop_after` (a block
  index) ends the run there as a kill would (exact-resume test).
  """
  metrics_lib.write_config(workdir, config)
  spec, data = build_problem(config)
  horizons = list(config.run.horizons)
  key = config.method.name
  out = _run_checkpointed(config, spec, data, [key], horizons, workdir, stop_after)
  if out is None:
    return {}
  res, program = out[key], out["_program"]
  # Every row (at lane-step horizons) comes from the final snapshots: a resumed run
  # writes them all again.
  metrics_lib.truncate_after(workdir, -1, splits=("eval", "summary"))
  writer = metrics_lib.MetricsWriter(workdir, total_steps=max(horizons))
  for t, last, avg in zip(res["steps"], res["last"], res["avg"]):
    row = {"last_median": float(np.median(last)), "last_mean": float(last.mean()),
           "last_max": float(last.max()), "avg_median": float(np.median(avg))}
    metrics_lib.check_finite(int(t), row)
    writer.write(int(t), row, split="eval")
  slope, lo, hi = analysis.slope_ci(res["steps"], res["last"])
  summary = {"slope_last": slope, "slope_lo": lo, "slope_hi": hi,
             "seconds": program["seconds"], "seed_iterations_per_s":
             program["useful_seed_steps"] / program["seconds"]}
  writer.write(int(max(horizons)), summary, split="summary")
  return {**summary, "last": res["last"]}


def plan(config) -> planner.Plan:
  """One iteration of the configured run's program (every lane x seed), for launch/plan.py.

  The run is a scan over blocks of `block` steps with a scan over the steps inside.
  XLA's cost analysis counts a loop body once, so the planned program is the same lane
  program with blocks of one step (one iteration and its noise draw), and `steps` is the
  run's iteration count T_max; the arguments are abstract and carry the lanes' spread
  sharding (nothing is allocated).
  """
  spec, data = build_problem(config)
  key = config.method.name
  horizons = list(config.run.horizons)
  run_plan, method, rng, _ = build_run(config, spec, [key], horizons)
  block, seeds = config.run.block, config.run.seeds
  n_lanes, n_slots = run_plan.eta.shape[1], run_plan.slot_steps.shape[1]
  carry = jax.eval_shape(lambda: methods.init_carry(spec, data, n_lanes, n_slots, seeds))
  rows = tuple(jax.ShapeDtypeStruct(a[:1].shape, a.dtype) for a in run_plan[:5])
  decay = jax.ShapeDtypeStruct(run_plan.decay.shape, run_plan.decay.dtype)
  lane_args = jax.eval_shape(methods.lane_args, rows + (decay,), carry)
  shared = (jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), data),
            jax.eval_shape(lambda: rng), jax.ShapeDtypeStruct((), jnp.int32))
  fn, args = sharding.spread_plan(methods.lane_fn(spec, method, 1, seeds), *lane_args,
                                  *shared, in_axes=methods.LANE_AXES,
                                  donate_argnums=(methods.CARRY_ARG,))
  t_max = run_plan.eta.shape[0] * block
  label = (f"perturbed_eg {key} on {spec.name} {config.problem.n}x{config.problem.m}: "
           f"{n_lanes} lanes (horizons {horizons[0]}..{horizons[-1]}) x {seeds} seeds, "
           f"one iteration (x {t_max})")
  return planner.Plan(fn, args, steps=t_max, label=label)


def tail_slope(res, tail_min: int):
  """Slope and CI over the horizons T >= tail_min (nan if fewer than 2 of them)."""
  keep = np.asarray(res["steps"]) >= tail_min
  if keep.sum() < 2:
    return float("nan"), float("nan"), float("nan")
  return analysis.slope_ci(np.asarray(res["steps"])[keep], np.asarray(res["last"])[keep])


def _row(problem, res, claim, tail_min: int = 32_000):
  slope, lo, hi = analysis.slope_ci(res["steps"], res["last"])
  tslope, tlo, thi = tail_slope(res, tail_min)
  per_seed = analysis.loglog_slopes(res["steps"], res["last"])
  aslope, _, _ = analysis.slope_ci(res["steps"], res["avg"])
  t = res["steps"]
  return {"problem": problem, "method": res["label"], "T range": f"{t[0]:.0e}-{t[-1]:.0e}",
          "last-iterate slope": slope, "95% CI": f"[{lo:.3f}, {hi:.3f}]",
          "tail slope": tslope, "tail 95% CI": f"[{tlo:.3f}, {thi:.3f}]",
          f"median gap @T_min": float(np.median(res["last"][0])),
          f"median gap @T_max": float(np.median(res["last"][-1])),
          "avg-iterate slope": aslope, "claim": claim,
          # How many seeds' own fitted slope is negative (convergence along each seed).
          "seeds with slope < 0": f"{int((per_seed < 0).sum())}/{per_seed.size}",
          "program s": res["seconds"]}


def run_study(config, workdir: str) -> list[dict]:
  """The rate study: table `perturbed_eg_study.md` and plot `perturbed_eg_study.png`."""
  metrics_lib.write_config(workdir, config)
  commit = study_lib.git_commit(paths=PATHS)  # the code that runs, before any edits
  start = time.perf_counter()
  st = config.study
  writer = metrics_lib.MetricsWriter(workdir)
  rows, panels = [], {}
  if st.name == "breadth":
    return run_breadth(config, workdir, commit)
  theory = -(0.25 - config.schedule.eps)
  claims = {"seg": "no convergence", "sogda": "no convergence",
            "pseg": f"theory {theory:.2f} (< -1/7)", "psogda": f"theory {theory:.2f} (< -1/7)",
            "dseg": "prior ~T^-1/7 (two timescales)"}
  horizons = list(config.run.horizons)
  for name in st.problems:
    spec, data = build_problem(config, name)
    if name.startswith("quadratic_ball"):
      xs, ys = problems.stationary_point(data)
      print(f"[{name}] unconstrained stationary point |x| = {np.linalg.norm(xs):.3f}, "
            f"|y| = {np.linalg.norm(ys):.3f} (interior iff both < 1)", flush=True)
    free = spec.x_set == "free"
    keys = list(st.free_methods if free else st.methods)
    # One program per algorithm (its variants are lanes of that program); the anytime
    # two-timescale method is its own program on constrained problems.
    groups = {}
    for k in keys:
      _, alg, _, two = schedules.lookup(k)
      groups.setdefault((alg, two and not free), []).append(k)
    results = {}
    for group in groups.values():
      out = run_methods(config, spec, data, group, horizons,
                        vanilla_t_max=st.vanilla_t_max)
      results.update({k: out[k] for k in group})
    panel = {}
    for key in keys:
      res = results[key]
      claim = ("a.s. convergence, one timescale" if free and key in ("pseg", "psogda")
               else claims[key])
      row = _row(name, res, claim, st.tail_min)
      if free:
        row["max over seeds @T_max"] = float(res["last"][-1].max())
        row["min over seeds @T_min"] = float(res["last"][0].min())
        row["to z0's projection @T_max"] = float(np.median(res["to_anchor"][-1]))
      rows.append(row)
      writer.write(len(rows), {k: v for k, v in row.items() if isinstance(v, float)},
                   split=f"study/{name}/{key}")
      panel[res["label"]] = (res["steps"], res["last"])
      if key == "pseg" and not free:
        panel["perturbed S-EG (avg)"] = (res["steps"], res["avg"])
    metric = "distance to solutions" if free else "last-iterate gap"
    panels[f"{name}: {metric}"] = panel
    _write_rates(config, workdir, commit, start, rows, panels)
  return _write_rates(config, workdir, commit, start, rows, panels)


def _write_rates(config, workdir, commit, start, rows, panels):
  """Writes the rate table and plot (after every problem, so a cut run keeps its rows)."""
  st = config.study
  header = (f"Perturbed S-EG / S-OGDA rate study (commit {commit}); seeds={config.run.seeds}, "
            f"sigma={config.noise.sigma}, eps={config.schedule.eps}, "
            f"exponents (eta, mu) = {schedules.exponents(config.schedule)}; "
            f"wall {time.perf_counter() - start:.0f} s. For bilinear_free the 'gap' "
            "columns are distances to the solution set (one decaying run, checkpoints t).")
  columns = ["problem", "method", "T range", "last-iterate slope", "95% CI", "tail slope",
             "tail 95% CI",
             "median gap @T_min", "median gap @T_max", "avg-iterate slope", "claim",
             "seeds with slope < 0", "min over seeds @T_min", "max over seeds @T_max",
             "to z0's projection @T_max", "program s"]
  header += f" Tail slope: fitted over T >= {st.tail_min}."
  md = study_lib.write_table(workdir, "perturbed_eg_study", rows, columns, header)
  analysis.plot(os.path.join(workdir, "perturbed_eg_study.png"), panels,
                title=f"median and 10-90% band over {config.run.seeds} seeds")
  print(md)
  return rows


def benchmark(config, workdir: str) -> dict:
  """Seed-iterations/s of the vmapped JAX study program vs a NumPy loop of the same."""
  metrics_lib.write_config(workdir, config)
  spec, data = build_problem(config)
  horizons = list(config.run.horizons)
  key = config.method.name
  run_methods(config, spec, data, [key], horizons)  # compile
  out = run_methods(config, spec, data, [key], horizons, seed=config.seed + 1)
  res, program = out[key], out["_program"]
  jax_rate = program["useful_seed_steps"] / program["seconds"]
  np_rates = reference_numpy.rates(spec, data, config, key, steps=config.bench.numpy_steps)
  out = {"problem": spec.name, "method": res["label"], "seeds": config.run.seeds,
         "useful_seed_iterations": program["useful_seed_steps"],
         "computed_seed_iterations": program["lane_seed_steps"],
         "jax_seconds": program["seconds"],
         "jax_seed_iterations_per_s": jax_rate,
         "numpy_single_run_iterations_per_s": np_rates["single"],
         "numpy_batched_seed_iterations_per_s": np_rates["batched"],
         "speedup_vs_numpy_single": jax_rate / np_rates["single"],
         "speedup_vs_numpy_batched": jax_rate / np_rates["batched"],
         "note": "shared 2-core CPU; timings are noisy"}
  metrics_lib.MetricsWriter(workdir).write(0, {k: v for k, v in out.items()
                                               if isinstance(v, float)}, split="benchmark")
  return out


def run_breadth(config, workdir: str, commit: str) -> list[dict]:
  """Several instances per family, a larger dimension and three noise levels.

  Per (family, instance seed, dimension, sigma): vanilla S-EG and perturbed S-EG (one
  program), slopes over the (shorter) horizon grid, and the plot of gap vs T.
  """
  st = config.study
  start = time.perf_counter()
  rows, panels = [], {}
  cases = []
  for fam in st.breadth_problems:
    for inst in st.breadth_instances:
      cases.append((fam, inst, config.problem.n, config.noise.sigma))
    cases.append((fam, 0, st.breadth_dim, config.noise.sigma))
    for sig in st.breadth_sigmas:
      if sig != config.noise.sigma:
        cases.append((fam, 0, config.problem.n, sig))
  horizons = list(config.run.horizons)
  theory = -(0.25 - config.schedule.eps)
  for fam, inst, dim, sig in cases:
    cfg = config_lib.override(config, {"problem.instance_seed": inst, "problem.n": dim,
                                      "problem.m": dim, "noise.sigma": sig})
    spec, data = build_problem(cfg, fam)
    keys = ["seg", "pseg"]
    out = run_methods(cfg, spec, data, keys, horizons, vanilla_t_max=st.vanilla_t_max)
    name = f"{fam} #{inst} {dim}x{dim} sigma={sig:g}"
    panel = {}
    for k in keys:
      claim = "no convergence" if k == "seg" else f"theory {theory:.2f}"
      row = _row(name, out[k], claim, st.tail_min)
      rows.append(row)
      panel[out[k]["label"]] = (out[k]["steps"], out[k]["last"])
      print(f"[breadth] {row}", flush=True)
    panels[name] = panel
  header = (f"Perturbed S-EG breadth study (commit {commit}); seeds={config.run.seeds}, "
            f"eps={config.schedule.eps}, T up to {max(horizons)}; wall "
            f"{time.perf_counter() - start:.0f} s. Tail slope: T >= {st.tail_min}.")
  columns = ["problem", "method", "T range", "last-iterate slope", "95% CI", "tail slope",
             "tail 95% CI", "median gap @T_min", "median gap @T_max", "avg-iterate slope",
             "claim", "seeds with slope < 0", "program s"]
  md = study_lib.write_table(workdir, "perturbed_eg_breadth", rows, columns, header)
  analysis.plot(os.path.join(workdir, "perturbed_eg_breadth.png"), panels,
                title=f"last-iterate gap, median and 10-90% over {config.run.seeds} seeds")
  print(md)
  return rows
