"""Online identification under parameter drift: launcher entry points.

`train_and_evaluate` runs every estimator on the same drifting streams at one horizon
(3 drift kinds x seeds in one vmapped scan) and logs the cumulative dynamic regret
(~30 s at the default T = 32000, so no checkpointing); with `task=cmapss` it computes
the C-MAPSS health indicators (residual proxy and baselines) in seconds. `run_study` is
the regret-vs-T study of the README (`study=large_t`: the slope check up to T = 256000);
`benchmark` times the vmapped scan.
"""
from __future__ import annotations

import os
import time

import jax
import numpy as np

from jaxpapers.core import bench
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.drift_ident import drift
from jaxpapers.papers.drift_ident import estimators
from jaxpapers.papers.drift_ident import simulate

PATHS = ["jaxpapers/papers/drift_ident", "configs/drift_ident.py",
         "tests/test_drift_ident.py", "colabs/drift_ident.ipynb"]


def grid(config, betas, noises, seeds):
  """Flat (seed, kind, beta, noise) lists of the full cross product."""
  kinds = [drift.kind_index(k) for k in config.drift.kinds]
  rows = [(config.seed + s, k, b, n) for b in betas for n in noises for k in kinds
          for s in range(seeds)]
  return [list(c) for c in zip(*rows)]


def cmapss_task(config, workdir):
  """Health indicators on one C-MAPSS subset: train trends and test-RUL agreement."""
  from jaxpapers.papers.drift_ident import cmapss, health  # pylint: disable=g-import-not-at-top
  c = config.cmapss
  directory, source = c.dir, "NASA files"
  if c.synthetic:
    directory = cmapss.write_synthetic(os.path.join(workdir, "cmapss_synthetic"), c.subset,
                                       seed=config.seed)
    source = "GENERATED files in the NASA format (not real data)"
  elif not directory:
    raise FileNotFoundError("task=cmapss needs cmapss_dir=<folder with train_FD001.txt, "
                            "test_FD001.txt, RUL_FD001.txt> (or cmapss_synthetic=true). "
                            + cmapss.HOW_TO_GET)
  t0 = time.perf_counter()
  out = health.run(directory, c.subset, c)
  elapsed = time.perf_counter() - t0
  writer = metrics_lib.MetricsWriter(workdir, verbose=False)
  final = {f"train/{r['indicator']}/median_spearman": r["median_spearman"]
           for r in out["train"]}
  final.update({f"test/{m}/spearman_vs_minus_rul": v for m, v in out["test"].items()
                if m != "engines"})
  final["seconds"] = elapsed
  writer.write(0, final, split="eval")
  head = (f"C-MAPSS {c.subset} ({source}: {directory}), {out['regimes']} operating "
          f"regime(s), sensors {' '.join(out['sensors'])}, {c.window}-cycle blocks, commit "
          f"{study_lib.git_commit(PATHS)}")
  rows = [dict(r, test_spearman_hi_vs_minus_rul=out["test"][r["indicator"]])
          for r in out["train"]]
  md = study_lib.write_table(
      workdir, "cmapss", rows,
      header=f"### {head}\n\nTrain engines: Spearman(HI, cycle) per engine (median, "
             f"fractions > 0 and > 0.5). Test engines ({out['test']['engines']}): Spearman "
             "between the HI of the last complete block and -RUL (RUL file).")
  print(md, flush=True)
  return final


def train_and_evaluate(config, workdir):
  if config.task == "cmapss":
    metrics_lib.write_config(workdir, config)
    return cmapss_task(config, workdir)
  metrics_lib.write_config(workdir, config)
  horizon = config.run.horizon
  seeds, kinds, betas, noises = grid(config, [config.drift.beta], [config.system.noise],
                                     config.run.seeds)
  t0 = time.perf_counter()
  out = simulate.run_batch(config.system, config.steps, horizon, config.run.records,
                           seeds, kinds, betas, noises, config.drift.scale)
  elapsed = time.perf_counter() - t0
  writer = metrics_lib.MetricsWriter(workdir, total_steps=horizon, verbose=False)
  kinds = np.asarray(kinds)
  for i, t in enumerate(out["t"][0]):
    row = {}
    for j, m in enumerate(estimators.METHODS):
      row[f"regret/{m}"] = float(out["pseudo"][:, i, j].mean())
      row[f"realised_regret/{m}"] = float(out["regret"][:, i, j].mean())
      row[f"error/{m}"] = float(np.linalg.norm(
          out["theta"][:, i, j] - out["theta_star"][:, i], axis=-1).mean())
    row["variation"] = float(out["variation"][:, i].mean())
    row["vhat"] = float(out["vhat"][:, i].mean())
    row["eta_adaptive"] = float(out["eta"][:, i].mean())
    row["eta_oracle"] = float(out["eta_oracle"].mean())
    metrics_lib.check_finite(int(t), row)
    writer.write(int(t), row)
  final = {}
  for k, name in enumerate(config.drift.kinds):
    sel = kinds == k
    for j, m in enumerate(estimators.METHODS):
      final[f"{name}/regret/{m}"] = float(out["pseudo"][sel, -1, j].mean())
    final[f"{name}/vhat_over_v"] = float(
        (out["vhat"][sel, -1] / out["variation"][sel, -1]).mean())
  final["steps_per_s"] = len(seeds) * horizon / elapsed  # includes compilation
  writer.write(horizon, final, split="eval")
  print(" ".join(f"{k}={v:.4g}" for k, v in final.items()), flush=True)
  return final


def run_study(config, workdir):
  from jaxpapers.papers.drift_ident import study  # heavier: matplotlib
  if config.study.name not in ("regret", "large_t"):
    raise ValueError(f"unknown study {config.study.name!r}; declared: regret, large_t")
  metrics_lib.write_config(workdir, config)
  commit = study_lib.git_commit(PATHS)  # stamped when the study starts
  if config.study.name == "large_t":
    return study.run_large_t(config, workdir, commit=commit)
  return study.run(config, workdir, commit=commit)


def plan(config):
  """One time step of every run of the regret study's grid, for `launch/plan.py`.

  The study runs the (beta x noise x kind x seed) grid as one spread batch per horizon;
  a run is a nested `lax.scan` over T steps, whose body XLA counts once, so the planned
  program is the same batch at T = 1 (one step, one record) and `steps` = the sum of
  the study's horizons (the per-step cost does not depend on T; records are O(50) per
  run). Nothing is allocated.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jaxpapers.core import planner, sharding  # pylint: disable=g-import-not-at-top
  s = config.study
  seeds, _, _, _ = grid(config, s.betas, s.noises, config.run.seeds)
  n = len(seeds)
  one = simulate.one_run(config.system, config.steps, 1, 1, config.drift.scale)
  sds = jax.ShapeDtypeStruct
  fn, args = sharding.spread_plan(one, sds((n,), jnp.int32), sds((n,), jnp.int32),
                                  sds((n,), jnp.float32), sds((n,), jnp.float32))
  label = (f"drift_ident step: {n} runs ({len(s.betas)} betas x {len(s.noises)} noises x "
           f"{len(config.drift.kinds)} kinds x {config.run.seeds} seeds), "
           f"{config.system.name} d={config.system.dim}, {len(estimators.METHODS)} "
           f"estimators; horizons {min(s.horizons)}..{max(s.horizons)} "
           f"({sum(s.horizons)} steps in all)")
  return planner.Plan(fn, args, steps=sum(s.horizons), label=label)


def benchmark(config, workdir):
  """Steps/s of the jitted, vmapped scan (all six estimators + the data stream)."""
  del workdir
  horizon, batch = config.bench.horizon, config.bench.batch
  fn = simulate.batch_fn(config.system, config.steps, horizon, 10, config.drift.scale)
  kinds = [drift.kind_index(config.drift.kinds[i % len(config.drift.kinds)])
           for i in range(batch)]
  args = (np.arange(batch, dtype=np.int32), np.asarray(kinds, np.int32),
          np.full((batch,), config.drift.beta, np.float32),
          np.full((batch,), config.system.noise, np.float32))
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  first = time.perf_counter() - t0
  sec = bench.time_call(fn, *args, warmup=1, iters=1, min_time=3.0)
  return dict(system=config.system.name, horizon=horizon, batch=batch,
              estimators=len(estimators.METHODS),
              compile_and_first_call_s=first, seconds_per_call=sec,
              run_steps_per_s=batch * horizon / sec,
              estimator_updates_per_s=batch * horizon * len(estimators.METHODS) / sec,
              device=str(jax.devices()[0].platform),
              note="shared 2-core CPU; timings are noisy")
