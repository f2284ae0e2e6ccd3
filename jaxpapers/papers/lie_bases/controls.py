"""The trivial model and the positive controls of one study cell (issue 47's review).

A learned basis that fails must be shown to fail for the method, not for the setting:

* `exact` rows, no training: the exact answer of the discrete problem (`methods.
  exact_basis`: SVD of the training curves, eigh, exact DMD) and, for the dynamics target,
  `pod_basis`, the POD of the training snapshots: the trivial model every learned row must
  beat, and the textbook start of DMD. Also on a finer base grid (`--config=...:n=128`:
  the 24^2 square), where no exact row existed.
* `rgd`: textbook Riemannian gradient descent on the Stiefel manifold (`rgd_armijo`:
  Absil, Mahony & Sepulchre 2008, Alg. 1 with Armijo backtracking and the QR retraction;
  float64; no tuned hyper-parameter) on the study's own objective, from the study's
  Fourier start and from the POD start: whether the objective's minimum is where the
  target's answer is (a positive control), and whether a plain optimizer also stalls
  from Fourier.
* `path`: the study's learned path (same MLP, initialization keys, Adam, lr grid,
  validation selection and stopping rule as `longrun`) started from each seed's POD basis
  instead of Fourier (`fit_path_from`).

Rows, selections and curves are written like `longrun` cells (rows.md, raw.json,
curves.png in the workdir; `longrun --collect` gathers them). Usage (from the repository
root):

  python -m jaxpapers.papers.lie_bases.controls --target=schrodinger --method=exact \
      --workdir=/tmp/ctl/schr_exact
  python -m jaxpapers.papers.lie_bases.controls --target=schrodinger --method=rgd \
      --starts=fourier,pod --cap=6000 --workdir=/tmp/ctl/schr_rgd
  python -m jaxpapers.papers.lie_bases.controls --target=schrodinger --method=path \
      --lrs=0.001,0.003,0.01 --cap=6000 --workdir=/tmp/ctl/schr_path_pod
"""
from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.lie_bases import experiment as E
from jaxpapers.papers.lie_bases import longrun, methods, study, targets

STARTS = ("fourier", "pod")


def pod_basis(problem, train) -> np.ndarray:
  """POD of the training snapshots (weighted coordinates), no training: the m leading
  eigenvectors of the real second moment Re(sum_t psi_t psi_t^H), i.e. the real
  m-dimensional subspace that captures the most snapshot energy (the objective's
  lost-energy term is smallest there). train: (2, k, T, N) real and imaginary parts."""
  train = np.asarray(train, np.float64)
  flat = train.reshape(2, -1, train.shape[-1])  # (2, k T, N)
  second = flat[0].T @ flat[0] + flat[1].T @ flat[1]  # Re(Psi^T conj(Psi))
  vecs = np.linalg.eigh(second)[1][:, ::-1][:, :problem.m]
  # each function's sign fixed (positive weighted sum), as the truth's roughly is
  return vecs * np.where(np.sum(vecs, 0) < 0, -1.0, 1.0)[None, :]


def qr_retract_np(y: np.ndarray) -> np.ndarray:
  """The QR retraction with a positive R diagonal (NumPy, float64)."""
  q, r = np.linalg.qr(y)
  return q * np.where(np.diagonal(r) < 0, -1.0, 1.0)[None, :]


def rgd_armijo(value_and_grad, value, x0, iters: int, step0: float = 1.0,
               c: float = 1e-4, max_step: float = 1e3, min_step: float = 1e-12):
  """Riemannian gradient descent on the Stiefel manifold with Armijo backtracking.

  Absil, Mahony & Sepulchre (2008), Alg. 1: Riemannian gradient = tangent projection
  G - X sym(X^T G) (embedded metric), trial step a (doubled after every accepted step,
  at most max_step), halved until f(R(X - a g)) <= f(X) - c a |g|^2, R the QR retraction.
  A step below min_step is not taken (the iterate stays; the loss is recorded).
  `value_and_grad(x) -> (f, G)` and `value(x) -> f` may return JAX or NumPy arrays.
  Returns (x, losses (iters,) at the start of each iteration, step size, |grad|).
  """
  x, a = np.asarray(x0, np.float64), float(step0)
  losses, gnorm = np.zeros(iters), np.inf
  for it in range(iters):
    f, g = value_and_grad(x)
    f, g = float(f), np.asarray(g, np.float64)
    xg = x.T @ g
    rg = g - x @ (0.5 * (xg + xg.T))
    g2 = float(np.sum(rg * rg))
    losses[it], gnorm = f, g2 ** 0.5
    a = min(2.0 * a, max_step)
    while a >= min_step:
      xn = qr_retract_np(x - a * rg)
      if float(value(xn)) <= f - c * a * g2:
        x = xn
        break
      a *= 0.5
  return x, losses, a, gnorm


def _fine(config, name):
  # the evaluation grid needs no data (as in longrun)
  return targets.make_problem(name, config.target,
                              E.nodes_per_axis(config, name, config.target.fine_factor))


def run_exact(config, args, table) -> None:
  """The exact answer of the discrete problem and (dynamics) the POD, no training, on
  the training grid and Legendre-interpolated onto the 4x grid."""
  problem, data = E.setup(config, args.target)
  fine = _fine(config, args.target)
  t0 = time.perf_counter()
  names = {"pca": "exact SVD", "operator": "exact eigh", "dynamics": "exact DMD"}
  bases = {names[problem.kind]: np.stack([methods.exact_basis(problem, tr)
                                          for tr in data["train"]])}
  if problem.kind == "dynamics":
    bases["POD of training snapshots"] = np.stack([pod_basis(problem, tr)
                                                   for tr in data["train"]])
  for method, u in bases.items():
    table.add(args.target, method, "no training; 4x: Legendre interp.", problem,
              E.evaluate(problem, u, data["test"]),
              E.evaluate(fine, E.interpolate(problem, fine, u)), time.perf_counter() - t0)


def run_rgd(config, args, table) -> None:
  """`rgd_armijo` from each start in `args.starts` (float64: `main` enables x64), chunks
  of `args.chunk` iterations until every start's gap to the best-known value is flat
  (< tol) or the cap."""
  if not jax.config.jax_enable_x64:
    raise RuntimeError("run_rgd needs jax_enable_x64 (set by main before any array)")
  problem, data = E.setup(config, args.target)
  fine = _fine(config, args.target)
  opt = E.optimum(problem, data)
  kind = targets.loss_kind(problem)
  coef = targets.brockett_weights(problem.m).astype(np.float64)
  f = jax.jit(lambda u, d: targets.objective(kind, u, d, coef))
  vg = jax.jit(jax.value_and_grad(lambda u, d: targets.objective(kind, u, d, coef)))
  seeds = data["train"].shape[0]
  trains = [jnp.asarray(np.asarray(tr, np.float64)) for tr in data["train"]]
  x = {(i, s): np.asarray(_start(problem, data["train"][i], s), np.float64)
       for i in range(seeds) for s in args.starts}
  steps = {k: 1.0 for k in x}
  gnorm = {}
  t0 = time.perf_counter()

  def advance(n):
    out = np.zeros((seeds, len(args.starts), n))
    for (i, s), xi in x.items():
      x[i, s], out[i, args.starts.index(s)], steps[i, s], gnorm[i, s] = rgd_armijo(
          lambda u, d=trains[i]: vg(u, d), lambda u, d=trains[i]: f(u, d), xi, n,
          step0=steps[i, s])
    return out

  groups = [[j] for j in range(len(args.starts))]  # every start its own row
  curves, done = E.until_flat(advance, lambda: np.zeros((seeds, len(args.starts))), opt,
                              args.cap, args.chunk, args.tol, groups)
  for j, s in enumerate(args.starts):
    u = np.stack([x[i, s] for i in range(seeds)])
    table.add(args.target, f"Riemannian GD (Armijo, float64) from {s}",
              "no hyper-parameter; 4x: Legendre interp.", problem,
              E.evaluate(problem, u, data["test"]),
              E.evaluate(fine, E.interpolate(problem, fine, u)), time.perf_counter() - t0, done,
              study._gap_curve(curves[:, j], opt), args.chunk)  # noqa: SLF001
    table.raws[-1]["per_seed_train_gap"] = (curves[:, j, -1] - opt).tolist()
    table.raws[-1]["per_seed_rgrad_norm"] = [gnorm[i, s] for i in range(seeds)]


def _start(problem, train, start: str) -> np.ndarray:
  if start == "fourier":
    return problem.ref_w
  if start == "pod":
    return pod_basis(problem, train)
  raise ValueError(f"unknown start {start!r}; known: {', '.join(STARTS)}")


def fit_path_from(config, problem, data, spec, lrs, starts, cap: int, chunk: int, tol,
                  opt):
  """The learned path on every (seed, lr) lane, seed i starting from `starts[i]` (N, m)
  instead of the reference basis; otherwise `experiment.fit_path`'s program: the same
  initialization keys, Adam, chunks and `until_flat` rule on the lane validation selects.
  The seeds run as separate calls of `methods.path_chunk` (a start basis is a variant,
  shared by the seeds of one call). Returns dict(params (seeds, V, ...), u, val,
  curves (seeds, V, T), steps, hp per seed)."""
  seeds = data["train"].shape[0]
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  s, sqrt_w, _ = E.geometry(problem)
  kind = targets.loss_kind(problem)
  hps = [E.variants(problem, spec, lrs, refs=(starts[i],)) for i in range(seeds)]
  states = []
  for i in range(seeds):
    keys = jnp.stack([E._key(config, problem.name, i, "path")])  # noqa: SLF001
    params0 = jax.vmap(lambda k: methods.init_path(k, problem.grid.dim, spec))(keys)
    states.append(jax.vmap(jax.vmap(methods.path_state, (None, 0)), (0, None))(
        params0, hps[i]["lr"]))
  train, val = jnp.asarray(data["train"]), jnp.asarray(data["val"])
  box = {}

  def advance(n):
    outs = [methods.path_chunk(states[i], hps[i], s, sqrt_w, train[i:i + 1], val[i:i + 1],
                               coef, kind=kind, spec=spec, n=n) for i in range(seeds)]
    states[:] = [o[0] for o in outs]
    box["u"] = np.concatenate([np.asarray(o[2]) for o in outs])
    box["val"] = np.concatenate([np.asarray(o[3]) for o in outs])
    return np.concatenate([np.asarray(o[1]) for o in outs])

  curves, done = E.until_flat(advance, lambda: box["val"], opt, cap, chunk, tol)
  params = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[st["params"] for st in states])
  return {"params": params, "u": box["u"], "val": box["val"], "curves": curves,
          "steps": done, "hp": hps}


def run_path(config, args, table) -> None:
  """The learned path from each seed's POD basis; lr chosen on validation."""
  problem, data = E.setup(config, args.target)
  fine = _fine(config, args.target)
  opt = E.optimum(problem, data)
  spec = methods.spec_from(config.model)
  seeds = data["train"].shape[0]
  starts = [pod_basis(problem, tr) for tr in data["train"]]
  t0 = time.perf_counter()
  fit = fit_path_from(config, problem, data, spec, args.lrs, starts, args.cap, args.chunk,
                      args.tol, opt)
  seconds = time.perf_counter() - t0
  best = int(np.argmin(fit["val"].mean(0)))
  table.select(args.target, "learned path from the POD start", "lr", list(args.lrs),
               fit["val"], best)
  fine_starts = E.interpolate(problem, fine, np.stack(starts))
  u_fine = np.concatenate([
      E.path_on(fine, jax.tree.map(lambda x: x[i:i + 1, best], fit["params"]), spec,
                ref=fine_starts[i]) for i in range(seeds)])
  table.add(args.target, "learned path from the POD start",
            f"generator rank 2r={2 * spec.rank} (r={spec.rank}), S={spec.steps}, "
            f"lr={args.lrs[best]:g}; 4x: re-integrated from the interpolated POD", problem,
            E.evaluate(problem, fit["u"][:, best], data["test"]), E.evaluate(fine, u_fine),
            seconds, fit["steps"], study._gap_curve(fit["curves"][:, best], opt),  # noqa: SLF001
            args.chunk)
  gaps = np.minimum.accumulate(fit["curves"] - opt[:, None, None], -1)[..., -1]
  table.raws[-1]["per_seed_train_gap"] = gaps[:, best].tolist()
  falls = E.flat(fit["curves"], opt, args.chunk)
  table.raws[-1]["lanes"] = [
      {"lr": lr, "train_gap": float(gaps[:, i].mean()), "gap_fall": float(falls[i]),
       "val": float(fit["val"][:, i].mean()), "per_seed_val": fit["val"][:, i].tolist(),
       "per_seed_sin_angle": [float(x) for x in E.evaluate(
           problem, fit["u"][:, i])["sin_angle"]],
       "per_seed_purity": [float(x) for x in E.evaluate(problem, fit["u"][:, i])["purity"]]}
      for i, lr in enumerate(args.lrs)]


def _floats(text: str) -> tuple:
  return tuple(float(x) for x in text.split(",") if x)


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--target", required=True, choices=("bm", "oscillator", "schrodinger",
                                                       "sheet"))
  p.add_argument("--method", required=True, choices=("exact", "rgd", "path"))
  p.add_argument("--starts", type=lambda t: tuple(x for x in t.split(",") if x),
                 default=STARTS, help="rgd: start bases (fourier, pod)")
  p.add_argument("--lrs", type=_floats, default=(0.001, 0.003, 0.01), help="path: lr grid")
  p.add_argument("--cap", type=int, default=6000)
  p.add_argument("--chunk", type=int, default=500)
  p.add_argument("--tol", type=float, default=0.01)
  p.add_argument("--workdir", required=True)
  p.add_argument("--config", default="configs/lie_bases.py", help="config spec (tests: :smoke)")
  return p


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  args = _parser().parse_args(argv)
  args.argv = argv
  bad = [s for s in args.starts if s not in STARTS]
  if bad:
    print(f"--starts: unknown {', '.join(bad)}; known: {', '.join(STARTS)}", file=sys.stderr)
    return 2
  if args.target != "schrodinger" and (args.method == "path" or (
      args.method == "rgd" and "pod" in args.starts)):
    print("the POD start exists for --target=schrodinger only", file=sys.stderr)
    return 2
  if args.method == "rgd":  # float64 throughout, before any array is made
    jax.config.update("jax_enable_x64", True)
  config = config_lib.load(args.config)
  commit = study_lib.git_commit(paths=E.PATHS)
  t0 = time.perf_counter()
  table = study.Table(metrics_lib.MetricsWriter(args.workdir))
  {"exact": run_exact, "rgd": run_rgd, "path": run_path}[args.method](config, args, table)
  longrun.write(table, args, commit, time.perf_counter() - t0)
  return 0


if __name__ == "__main__":
  sys.exit(main())
