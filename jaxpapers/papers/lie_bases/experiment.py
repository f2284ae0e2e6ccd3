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

import functools
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


def optimum(problem, data) -> np.ndarray:
  """Per seed, the training objective's optimum where it is known (pca: the SVD of the
  training curves; operator: eigh) or the best known value (dynamics: the better of the
  true modes and exact DMD): the reference of every convergence curve."""
  coef = targets.brockett_weights(problem.m)
  kind = targets.loss_kind(problem)
  out = []
  for tr in data["train"]:
    cands = [methods.exact_basis(problem, tr)]
    if problem.kind == "dynamics":
      cands.append(problem.truth_w[:, :problem.m])
    out.append(min(float(targets.objective(kind, np.asarray(u, np.float32), tr, coef))
                   for u in cands))
  return np.asarray(out)


def flat(curves: np.ndarray, opt: np.ndarray, chunk: int) -> np.ndarray:
  """Relative decrease of the best-so-far gap to the optimum over the last `chunk` steps,
  per lane (mean gap over seeds): curves (seeds, V, T), opt (seeds,) -> (V,)."""
  best = np.minimum.accumulate(curves - opt[:, None, None], axis=-1).mean(0)  # (V, T)
  if best.shape[-1] <= chunk:
    return np.full(best.shape[0], np.inf)
  now, before = best[:, -1], best[:, -chunk - 1]
  return (before - now) / np.maximum(np.abs(now), 1e-7)


def is_flat(curves, val, opt, chunk: int, tol, groups=None) -> bool:
  """Whether, in every group of lanes (default: all lanes one group), the lane with the
  best mean validation loss has a gap that fell by less than `tol` over the last chunk."""
  val = np.where(np.isfinite(val), np.asarray(val), np.inf).mean(0)
  rel = flat(curves, opt, chunk)
  groups = groups or [list(range(val.size))]
  return all(rel[g[int(np.argmin(val[g]))]] < tol for g in groups)


def until_flat(advance, validate, opt, max_steps: int, chunk: int, tol, groups=None):
  """Runs `advance(n) -> losses (seeds, V, n)` in chunks until `is_flat` or `max_steps`.
  tol None: exactly max_steps. Returns (curves (seeds, V, T), steps)."""
  curves, done = [], 0
  while done < max_steps:
    n = min(chunk, max_steps - done)
    curves.append(np.asarray(advance(n)))
    done += n
    if tol is not None and is_flat(np.concatenate(curves, -1), validate(), opt, chunk, tol,
                                   groups):
      break
  return np.concatenate(curves, -1), done


def fit_path(config, problem, data, spec: methods.PathSpec, hp: dict, steps: int,
             chunk: int | None = None, workdir: str | None = None, writer=None,
             tol=None, opt=None, groups=None):
  """Trains the path on all (seed, variant) lanes (variants: `variants(...)`).

  With `workdir`, checkpoints after every chunk and resumes from the latest one. With
  `tol` (and `opt`, the per-seed optimum), stops early once the validation-selected
  lane's gap is flat (`is_flat`, per lane group `groups`); `steps` is then the cap.
  Returns dict(params (seeds, V, ...), u (seeds, V, N, m), val (seeds, V), curves
  (seeds, V, steps done in this call), steps).
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
  if writer is not None:  # rows at training steps
    writer.truncate_after(start, splits=("train",))
  train, val = jnp.asarray(data["train"]), jnp.asarray(data["val"])
  chunk = chunk or steps
  kind = targets.loss_kind(problem)
  curves, step, us, vals = [], start, None, None
  while step < steps or us is None:
    n = min(chunk, steps - step)
    state, losses, us, vals = methods.path_chunk(state, hp, s, sqrt_w, train, val, coef,
                                                 kind=kind, spec=spec, n=n)
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
    if tol is not None and step < steps and is_flat(np.concatenate(curves, -1), vals, opt,
                                                    chunk, tol, groups):
      break
  if ckpt is not None:
    ckpt.close()
  return {"params": state["params"], "u": np.asarray(us), "val": np.asarray(vals),
          "curves": np.concatenate(curves, -1), "steps": step}


def select(fit: dict, hp: dict) -> dict:
  """The variant with the best mean validation loss (over seeds)."""
  best = int(np.argmin(np.where(np.isfinite(fit["val"]), fit["val"], np.inf).mean(0)))
  return {"params": jax.tree.map(lambda x: x[:, best], fit["params"]),
          "u": fit["u"][:, best], "lr": float(hp["lr"][best]), "index": best,
          "curves": fit["curves"][:, best], "steps": fit.get("steps")}


def fit_stiefel(problem, data, taus, steps: int, chunk: int | None = None, tol=None,
                opt=None):
  """The Stiefel-Cayley baseline on all (seed, tau) lanes, tau chosen on validation.

  `taus` are in units of 1/L, L the objective's curvature (`targets.curvature`, from
  seed 0's training data), so one grid fits objectives of very different scales (the
  oscillator's discretized H has lambda_max ~ 1e4). `chunk`, `tol`, `opt`: `until_flat`.
  """
  seeds = data["train"].shape[0]
  kind = targets.loss_kind(problem)
  scale = 1.0 / targets.curvature(problem.kind, data["train"][0],
                                  targets.brockett_weights(problem.m))
  taus = jnp.asarray(np.asarray(taus) * scale, jnp.float32)
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  box = {"x": jnp.array(jnp.broadcast_to(jnp.asarray(problem.ref_w, jnp.float32),
                                         (seeds, taus.size) + problem.ref_w.shape))}
  train, valdata = jnp.asarray(data["train"]), jnp.asarray(data["val"])

  def advance(n):
    box["x"], losses = methods.stiefel_chunk(box["x"], taus, train, coef, kind=kind, n=n)
    return losses

  def validate():
    v = np.asarray(methods.stiefel_eval(box["x"], valdata, coef, kind=kind))
    return np.where(np.isfinite(v), v, np.inf)  # a diverged step size is never chosen

  curves, done = until_flat(advance, validate, opt, steps, chunk or steps, tol)
  val = validate()
  best = int(np.argmin(val.mean(0)))
  return {"u": np.asarray(box["x"][:, best]), "tau": float(taus[best]),
          "tau_rel": float(np.asarray(taus)[best] / scale), "val": val, "grid": list(taus / scale),
          "curves": curves, "steps": done, "index": best}


def fit_radam(problem, data, lrs, steps: int, chunk: int | None = None, tol=None, opt=None):
  """Riemannian Adam on the Stiefel manifold on all (seed, lr) lanes, lr chosen on
  validation; same start (the reference basis) and stopping rule as the path."""
  seeds = data["train"].shape[0]
  kind = targets.loss_kind(problem)
  lr = jnp.asarray(lrs, jnp.float32)
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  x0 = jnp.array(jnp.broadcast_to(jnp.asarray(problem.ref_w, jnp.float32),
                                  (seeds, lr.size) + problem.ref_w.shape))
  box = {"st": methods.radam_init(x0)}
  train, valdata = jnp.asarray(data["train"]), jnp.asarray(data["val"])

  def advance(n):
    box["st"], losses = methods.radam_chunk(box["st"], lr, train, coef, kind=kind, n=n)
    return losses

  def validate():
    v = np.asarray(methods.stiefel_eval(box["st"]["x"], valdata, coef, kind=kind))
    return np.where(np.isfinite(v), v, np.inf)

  curves, done = until_flat(advance, validate, opt, steps, chunk or steps, tol)
  val = validate()
  best = int(np.argmin(val.mean(0)))
  return {"u": np.asarray(box["st"]["x"][:, best]), "lr": float(lrs[best]), "val": val,
          "grid": list(lrs), "curves": curves, "steps": done, "index": best}


def fit_qr(config, problem, data, spec: methods.PathSpec, lrs, steps: int,
           chunk: int | None = None, tol=None, opt=None):
  """The neural-QR baseline (MLP functions + reference, QR under the quadrature) on all
  (seed, lr) lanes, Adam, lr chosen on validation, the path's stopping rule."""
  seeds = data["train"].shape[0]
  kind = targets.loss_kind(problem)
  lr = jnp.asarray(lrs, jnp.float32)
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  s, sqrt_w, ref = geometry(problem)
  keys = jnp.stack([_key(config, problem.name, i, "qr") for i in range(seeds)])
  params0 = jax.vmap(lambda k: methods.qr_init(k, problem.grid.dim, problem.m, spec))(keys)
  box = {"st": jax.vmap(jax.vmap(methods.path_state, (None, 0)), (0, None))(params0, lr)}
  train, valdata = jnp.asarray(data["train"]), jnp.asarray(data["val"])

  def advance(n):
    box["st"], losses, box["u"], box["val"] = methods.qr_chunk(
        box["st"], lr, s, sqrt_w, ref, train, valdata, coef, kind=kind,
        features=spec.features, n=n)
    return losses

  def validate():
    v = np.asarray(box["val"])
    return np.where(np.isfinite(v), v, np.inf)

  curves, done = until_flat(advance, validate, opt, steps, chunk or steps, tol)
  val = validate()
  best = int(np.argmin(val.mean(0)))
  return {"u": np.asarray(box["u"][:, best]), "lr": float(lrs[best]), "val": val,
          "grid": list(lrs), "curves": curves, "steps": done, "index": best,
          "params": jax.tree.map(lambda x: x[:, best], box["st"]["params"])}


def qr_on(problem, params, spec: methods.PathSpec) -> np.ndarray:
  """The neural-QR basis on another grid: its functions there, Gram-Schmidt there."""
  s, sqrt_w, ref = geometry(problem)
  f = lambda p: methods.qr_basis(p, s, sqrt_w, ref, spec.features)  # noqa: E731
  return np.asarray(jax.jit(jax.vmap(f))(params))


def fit_lobpcg(problem, data, preconds, steps: int):
  """LOBPCG from the reference basis, preconditioner chosen on validation (the
  operator has no data: validation = the objective itself). `steps` caps its iterations."""
  coef = targets.brockett_weights(problem.m).astype(np.float64)
  seeds = data["train"].shape[0]
  runs = [methods.lobpcg(problem, problem.ref_w, p, steps) for p in preconds]
  # The objective in float64 (float32 cannot rank converged runs), rounded to 1e-9
  # relative so that equally converged runs tie; ties go to fewer iterations.
  val = np.asarray([[float(np.sum(coef * np.sum(q * (np.asarray(data["val"][i], np.float64)
                                                      @ q), 0)) / np.sum(coef))
                     for q, _ in runs] for i in range(seeds)])
  mean = val.mean(0)
  best = min(range(len(runs)), key=lambda j: (round(mean[j] / abs(mean).max(), 9),
                                               len(runs[j][1])))
  return {"u": np.stack([runs[best][0]] * seeds), "precond": preconds[best], "val": val,
          "grid": list(preconds), "curves": [c for _, c in runs],
          "steps": len(runs[best][1]), "index": best}


def path_on(problem, params, spec: methods.PathSpec, steps: int | None = None, ref=None,
            rank=None):
  """The learned endpoint on another grid (the same functions, re-integrated there).

  `steps` integration steps (default spec.steps; more gives a finer path, same functions).
  """
  s, sqrt_w, u0 = geometry(problem)
  u0 = u0 if ref is None else jnp.asarray(ref, jnp.float32)
  return np.asarray(_endpoint_program(spec, steps or spec.steps, rank)(params, s, sqrt_w, u0))


@functools.lru_cache(maxsize=None)
def _endpoint_program(spec: methods.PathSpec, n: int, rank):
  """jit(vmap over seeds) of the endpoint, compiled once per (spec, steps, rank, shapes)."""
  f = lambda p, s, sqrt_w, u0: methods.path_endpoint(  # noqa: E731
      p, s, sqrt_w, u0, spec, rank=rank, max_steps=n)
  return jax.jit(jax.vmap(f, in_axes=(0, None, None, None)))


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
                                                    kind=targets.loss_kind(problem),
                                                    spec=spec))(st, hp)

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
