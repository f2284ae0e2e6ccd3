"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): the
launcher entries.

`train_and_evaluate` trains the learned path on one target: every (seed, learning rate)
lane in one jitted program, in `lax.scan` chunks with a checkpoint after each, selects the
learning rate on the validation split, and writes the endpoint's metrics on the training
grid and on a 4x finer grid. `run_study` (in study.py) compares it with the baselines and
runs the universality sweeps. Everything the study and the notebook need is here:
`setup`, `fit_path`, `fit_stiefel`, `evaluate`.
"""
from __future__ import annotations

import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.papers.lie_bases import data as data_lib
from jaxpapers.papers.lie_bases import methods, quadrature, targets

PATHS = ["jaxpapers/papers/lie_bases", "configs/lie_bases.py"]


def nodes_per_axis(config, name: str, factor: int = 1) -> int:
  n = config.target.n2d if name == "sheet" else config.target.n
  return n * factor


def setup(config, name: str, factor: int = 1, seeds: int | None = None):
  """(problem, data) at `factor` x the training resolution; data leaves have a seed axis."""
  seeds = config.train.seeds if seeds is None else seeds
  n = nodes_per_axis(config, name, factor)
  if name == "file":
    problem, splits = data_lib.file_problem(config.target.data_path, config.target, n)
    return problem, {k: np.stack([v] * seeds) for k, v in splits.items()}
  problem = targets.make_problem(name, config.target, n)
  per_seed = [targets.sample_data(problem, config.target, config.seed + i)
              for i in range(seeds)]
  return problem, {k: np.stack([d[k] for d in per_seed]) for k in per_seed[0]}


def geometry(problem: targets.Problem):
  g = problem.grid
  return (jnp.asarray(methods.normalized_coords(g)), jnp.asarray(g.sqrt_w, jnp.float32),
          jnp.asarray(problem.ref_w, jnp.float32))


def _key(config, name: str, seed: int, method: str):
  """Initialization randomness from (target, seed, method) only."""
  return jax.random.fold_in(jax.random.key(config.seed + seed),
                            zlib.crc32(f"{name}/{method}".encode()) % (2 ** 31))


def _tile(tree, count: int):
  return jax.tree.map(lambda x: jnp.repeat(x[:, None], count, axis=1), tree)


def variants(problem, spec: methods.PathSpec, lrs, ranks=None, steps=None, refs=None):
  """Lane hyper-parameters: the product of the given lrs x ranks x steps x start bases."""
  ranks = ranks or (spec.rank,)
  steps = steps or (spec.steps,)
  refs = refs or (problem.ref_w,)
  rows = [(lr, r, k, ref) for ref in refs for r in ranks for k in steps for lr in lrs]
  return {"lr": jnp.asarray([x[0] for x in rows], jnp.float32),
          "rank": jnp.asarray([x[1] for x in rows], jnp.int32),
          "steps": jnp.asarray([x[2] for x in rows], jnp.float32),
          "ref": jnp.asarray(np.stack([x[3] for x in rows]), jnp.float32)}


def fit_path(config, problem, data, spec: methods.PathSpec, hp: dict, steps: int,
             chunk: int | None = None, workdir: str | None = None, writer=None):
  """Trains the path on all (seed, variant) lanes (variants: `variants(...)`).

  With `workdir`, checkpoints after every chunk and resumes from the latest one.
  Returns dict(params (seeds, V, ...), u (seeds, V, N, m), val (seeds, V), curves
  (seeds, V, steps done in this call)).
  """
  seeds = data["train"].shape[0]
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  s, sqrt_w, _ = geometry(problem)
  keys = jnp.stack([_key(config, problem.name, i, "path") for i in range(seeds)])
  params0 = jax.vmap(lambda k: methods.init_path(k, problem.grid.dim, spec))(keys)
  state = jax.vmap(jax.vmap(methods.path_state, (None, 0)), (0, None))(params0, hp["lr"])
  ckpt, start = None, 0
  if workdir is not None:
    ckpt = checkpoint_lib.Checkpointer(workdir)
    state, start = ckpt.restore_or(state)
  train, val = jnp.asarray(data["train"]), jnp.asarray(data["val"])
  chunk = chunk or steps
  curves, step, us, vals = [], start, None, None
  while step < steps or us is None:
    n = min(chunk, steps - step)
    state, losses, us, vals = methods.path_chunk(state, hp, s, sqrt_w, train, val, coef,
                                                 kind=problem.kind, spec=spec, n=n)
    step += n
    if writer is not None and n:
      last, v = np.asarray(losses[:, :, -1]), np.asarray(vals)
      row = {}
      for i, lr in enumerate(np.asarray(hp["lr"])):
        row[f"loss_lr{lr:g}"] = float(last[:, i].mean())
        row[f"val_lr{lr:g}"] = float(v[:, i].mean())
      metrics_lib.check_finite(step, row)
      writer.write(step, row)
    curves.append(np.asarray(losses))
    if ckpt is not None and n:
      ckpt.save(step, state)
  if ckpt is not None:
    ckpt.close()
  return {"params": state["params"], "u": np.asarray(us), "val": np.asarray(vals),
          "curves": np.concatenate(curves, -1)}


def select(fit: dict, hp: dict) -> dict:
  """The variant with the best mean validation loss (over seeds)."""
  best = int(np.argmin(np.where(np.isfinite(fit["val"]), fit["val"], np.inf).mean(0)))
  return {"params": jax.tree.map(lambda x: x[:, best], fit["params"]),
          "u": fit["u"][:, best], "lr": float(hp["lr"][best]), "index": best,
          "curves": fit["curves"][:, best]}


def fit_stiefel(problem, data, taus, steps: int):
  """The Stiefel-Cayley baseline on all (seed, tau) lanes, tau chosen on validation.

  `taus` are in units of 1/L, L the objective's curvature (`targets.curvature`, from
  seed 0's training data), so one grid fits objectives of very different scales (the
  oscillator's discretized H has lambda_max ~ 1e4).
  """
  seeds = data["train"].shape[0]
  scale = 1.0 / targets.curvature(problem.kind, data["train"][0],
                                  targets.brockett_weights(problem.m))
  taus = jnp.asarray(np.asarray(taus) * scale, jnp.float32)
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  x0 = jnp.broadcast_to(jnp.asarray(problem.ref_w, jnp.float32),
                        (seeds, taus.size) + problem.ref_w.shape)
  x, losses = methods.stiefel_chunk(jnp.array(x0), taus, jnp.asarray(data["train"]), coef,
                                    kind=problem.kind, n=steps)
  val = np.asarray(methods.stiefel_eval(x, jnp.asarray(data["val"]), coef, kind=problem.kind))
  val = np.where(np.isfinite(val), val, np.inf)  # a diverged step size is never chosen
  best = int(np.argmin(val.mean(0)))
  return {"u": np.asarray(x[:, best]), "tau": float(taus[best]),
          "tau_rel": float(np.asarray(taus)[best] / scale), "val": val,
          "curves": np.asarray(losses)}


def path_on(problem, params, spec: methods.PathSpec, steps: int | None = None, ref=None,
            rank=None):
  """The learned endpoint on another grid (the same functions, re-integrated there).

  `steps` integration steps (default spec.steps; more gives a finer path, same functions).
  """
  s, sqrt_w, u0 = geometry(problem)
  u0 = u0 if ref is None else jnp.asarray(ref, jnp.float32)
  n = steps or spec.steps
  f = lambda p: methods.path_endpoint(p, s, sqrt_w, u0, spec, rank=rank,  # noqa: E731
                                      max_steps=n)
  return np.asarray(jax.jit(jax.vmap(f))(params))


def interpolate(coarse, fine, u_w: np.ndarray) -> np.ndarray:
  """Spectral (Legendre) interpolation of weighted node values onto a finer grid."""
  mat = quadrature.legendre_interp(coarse.grid, fine.grid.x)
  vals = np.asarray(u_w, np.float64) / coarse.grid.sqrt_w[:, None]
  return fine.grid.sqrt_w[:, None] * np.einsum("pn,snm->spm", mat, vals)


def evaluate(problem, u_w: np.ndarray, test=None) -> dict:
  """Per-seed metrics (seeds, ...) -> {metric: array over seeds}."""
  rows = [targets.metrics(problem, u_w[i], None if test is None else test[i])
          for i in range(u_w.shape[0])]
  return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def train_and_evaluate(config, workdir: str) -> dict:
  """The learned path on `config.target.name`: metrics.jsonl, checkpoints, summary."""
  metrics_lib.write_config(workdir, config)
  name = config.target.name
  spec = methods.spec_from(config.model)
  problem, data = setup(config, name)
  writer = metrics_lib.MetricsWriter(workdir, total_steps=config.train.steps)
  t0 = time.perf_counter()
  hp = variants(problem, spec, config.optim.lrs)
  fit = select(fit_path(config, problem, data, spec, hp, config.train.steps,
                        chunk=config.train.log_every, workdir=workdir, writer=writer), hp)
  seconds = time.perf_counter() - t0
  fine, _ = setup(config, name, factor=config.target.fine_factor, seeds=1)
  on_grid = evaluate(problem, fit["u"], data["test"])
  on_fine = evaluate(fine, path_on(fine, fit["params"], spec))
  ref = evaluate(problem, np.stack([problem.ref_w] * fit["u"].shape[0]), data["test"])
  summary = {"lr": fit["lr"], "seconds": seconds}
  summary.update({f"{k}": float(v.mean()) for k, v in on_grid.items()})
  summary.update({f"fine_{k}": float(v.mean()) for k, v in on_fine.items()})
  summary.update({f"reference_{k}": float(v.mean()) for k, v in ref.items()})
  metrics_lib.check_finite(config.train.steps, summary)
  writer.write(config.train.steps, summary, split="summary")
  np.savez(f"{workdir}/basis.npz", x=problem.grid.x, w=problem.grid.w,
           u=fit["u"] / problem.grid.sqrt_w[None, :, None])
  return summary


def plan(config):
  """One Adam step of every (seed, learning rate) lane of the learned path, for
  `launch/plan.py`: the configured target's training step, seeds spread over the devices
  as `methods.path_chunk` spreads them. XLA counts a rolled loop's body once, so the
  planned step integrates with the scan unrolled (the same arithmetic, every step
  counted) and `steps` = the run's optimization steps. The Stiefel baseline (no
  network, N x m updates) and the evaluation are not planned. Nothing is allocated
  beyond the problem's quadrature nodes (numpy, host).
  """
  from jaxpapers.core import planner, sharding  # pylint: disable=g-import-not-at-top
  name = config.target.name if config.target.name != "file" else "bm"  # file: bm shapes
  spec = methods.spec_from(config.model)._replace(unroll=True)
  problem = targets.make_problem(name, config.target, nodes_per_axis(config, name))
  seeds = config.train.seeds
  hp = variants(problem, spec, config.optim.lrs)
  s, sqrt_w, _ = geometry(problem)
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  state = jax.eval_shape(lambda: jax.vmap(jax.vmap(methods.path_state, (None, 0)), (0, None))(
      jax.vmap(lambda k: methods.init_path(k, problem.grid.dim, spec))(
          jax.vmap(jax.random.key)(jnp.arange(seeds))), hp["lr"]))

  def step(st, hp, s, sqrt_w, tr, coef):
    return jax.vmap(lambda st, h: methods.path_step(st, h, tr, s, sqrt_w, coef,
                                                    kind=problem.kind, spec=spec))(st, hp)

  train = jax.ShapeDtypeStruct((seeds,) + _train_shape(problem, config), jnp.float32)
  fn, args = sharding.spread_plan(step, state, hp, s, sqrt_w, train, coef,
                                  in_axes=(0, None, None, None, 0, None))
  label = (f"lie_bases path step: {name} ({problem.kind}), {problem.grid.x.shape[0]} nodes, "
           f"m={problem.m}, rank 2r={2 * spec.rank}, MLP {spec.width}x{spec.depth}, "
           f"{spec.steps} integration steps (unrolled), {seeds} seeds x "
           f"{len(config.optim.lrs)} lrs")
  return planner.Plan(fn, args, steps=config.train.steps, label=label)


def _train_shape(problem, config) -> tuple:
  """Shape of one seed's training data (what `targets.sample_data` returns)."""
  n = problem.grid.x.shape[0]
  if problem.kind == "pca":
    return (config.target.n_train, n)
  if problem.kind == "operator":
    return (n, n)
  return (2, config.target.n_traj, config.target.snapshots, n)


def run_study(config, workdir: str):
  from jaxpapers.papers.lie_bases import study
  return study.run(config, workdir)
