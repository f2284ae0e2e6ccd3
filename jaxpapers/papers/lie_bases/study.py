"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): the study.

For every target: the fixed reference basis, the learned path (Adam learning rate chosen
on validation), a neural basis orthonormalised by QR under the quadrature (the
resolution-independent neural competitor), Stiefel-Cayley gradient descent and
Riemannian Adam on the Stiefel manifold, LOBPCG for the operator target, and the exact
decomposition. Every iterative method runs under the same cap and stopping rule: chunks
of `study.chunk` steps until the validation-selected lane's gap to the training
objective's optimum stops falling (`experiment.is_flat`); the curves are written. On the
sweep target the rank sweep (generator rank 2r, learning rate selected per rank), on the
Schroedinger target the one-lag residual as an ablation of the multi-lag one, on the
square a smaller number of MLP frequencies with the generator's quadrature error as the
diagnostic of the 4x-grid failure. Writes lie_bases_study.{md,json,png}.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.lie_bases import experiment as E
from jaxpapers.papers.lie_bases import generator, methods

SHAPE_KEY = {"pca": "func_err", "operator": "func_err", "dynamics": "purity"}
OBJ_KEY = {"pca": "ev_gap", "operator": "rq_err", "dynamics": "test_resid"}


def _ms(v) -> str:
  v = np.asarray(v, np.float64)
  return f"{v.mean():.3g} ± {v.std():.1g}"


def _gap_curve(curves, opt) -> np.ndarray:
  """Mean over seeds of the best-so-far training gap, curves (seeds, T)."""
  return np.minimum.accumulate(np.asarray(curves) - opt[:, None], axis=-1).mean(0)


class Table:
  """Rows (markdown), raw per-seed rows (json), selections and convergence curves."""

  def __init__(self, writer):
    self.rows, self.raws, self.selections, self.curves = [], [], [], {}
    self.writer = writer

  def select(self, target, method, name, grid, val, index):
    """Records a validation selection with its whole grid (an edge choice shows)."""
    means = np.asarray(val, np.float64).mean(0)
    edge = " (edge of grid)" if len(grid) > 1 and index in (0, len(grid) - 1) else ""
    fmt = lambda g: g if isinstance(g, str) else f"{float(g):.3g}"  # noqa: E731
    self.selections.append(
        f"{target} / {method}: {name} grid [{', '.join(fmt(g) for g in grid)}], mean val "
        f"[{', '.join(f'{v:.6g}' for v in means)}] -> {fmt(grid[index])}{edge}")

  def add(self, target, method, setting, problem, on_grid, on_fine, seconds, steps=None,
          curve=None, chunk=None):
    kind = problem.kind
    sk = None if target == "sheet" else SHAPE_KEY[kind]  # sheet: degenerate eigenvalues
    ok = OBJ_KEY[kind]
    rel = "-"
    if curve is not None and chunk and len(curve) > chunk:
      rel = f"{(curve[-chunk - 1] - curve[-1]) / max(abs(curve[-1]), 1e-7):.2g}"
    row = {"target": target, "method": method, "setting": setting,
           "steps": "-" if steps is None else str(steps),
           "last-chunk gap fall": rel,
           "train gap": "-" if curve is None else f"{curve[-1]:.3g}",
           "orth err": _ms(on_grid["orth_err"]), "sin angle": _ms(on_grid["sin_angle"]),
           "shape": f"{sk}: {_ms(on_grid[sk])}" if sk else "-",
           "objective": f"{ok}: {_ms(on_grid[ok])}",
           "4x sin angle": _ms(on_fine["sin_angle"]) if on_fine else "n/a",
           "4x shape": (_ms(on_fine[sk]) if sk else "-") if on_fine else "n/a",
           "s": f"{seconds:.0f}"}
    self.rows.append(row)
    raw = {"target": target, "method": method, "setting": setting, "steps": steps}
    raw.update({f"grid_{k}": np.asarray(v).tolist() for k, v in on_grid.items()})
    if on_fine:
      raw.update({f"fine_{k}": np.asarray(v).tolist() for k, v in on_fine.items()})
    self.raws.append(raw)
    if curve is not None:
      self.curves[f"{target} / {method} / {setting}"] = np.asarray(curve)
    self.writer.write(len(self.rows), {k: float(np.mean(v)) for k, v in on_grid.items()},
                      split=f"study/{target}/{method}")


def gram_error(coarse, fine, params, spec) -> float:
  """Quadrature error of the generator's 2r x 2r core G = Z^T Z = int [a, b]^T [a, b]:
  the learned a, b integrated by the training rule vs the 4x rule, relative Frobenius
  error averaged over the integration midpoints and seeds. Large = the generator lives
  on frequencies the training quadrature does not resolve."""
  zs = []
  for prob in (coarse, fine):
    s, sqrt_w, _ = E.geometry(prob)
    zs.append(np.asarray(_core_factors(spec.features, spec.steps)(params, s, sqrt_w),
                         np.float64))  # (seeds, steps, N, 2r)
  gs = [np.einsum("...ni,...nj->...ij", z, z) for z in zs]
  errs = np.linalg.norm(gs[0] - gs[1], axis=(-2, -1)) / np.linalg.norm(gs[1], axis=(-2, -1))
  return float(np.mean(errs))


@functools.lru_cache(maxsize=None)
def _core_factors(features: int, steps: int):
  """jit: Z = W^1/2 [a, b] at every integration midpoint, for every seed's parameters."""
  def one(p, s, sqrt_w, t):
    a, b = generator.ab(p, s, t, features)
    return sqrt_w[:, None] * jnp.concatenate([a, b], -1)
  ts = (np.arange(steps) + 0.5) / steps
  per_seed = lambda p, s, sqrt_w: jax.vmap(one, (None, None, None, 0))(  # noqa: E731
      p, s, sqrt_w, jnp.asarray(ts, jnp.float32))
  return jax.jit(jax.vmap(per_seed, (0, None, None)))


def study_target(config, name, table: Table, store: dict):
  spec = methods.spec_from(config.model)
  cap, chunk, tol = config.study.steps, config.study.chunk, config.study.tol
  lrs = tuple(config.optim.lrs)
  problem, data = E.setup(config, name)
  fine, _ = E.setup(config, name, factor=config.target.fine_factor, seeds=1)
  test = data["test"]
  seeds = data["train"].shape[0]
  opt = E.optimum(problem, data)
  ev = lambda p, u, t=None: E.evaluate(p, u, t)  # noqa: E731

  table.add(name, "reference (Fourier)", "-", problem, ev(problem, np.stack([problem.ref_w] * seeds), test),
            ev(fine, np.stack([fine.ref_w] * seeds)), 0.0)

  # The learned path. Sweep target: every rank x lr in one program, lr selected per rank.
  path_runs = []
  if name == config.study.sweep_target:
    ranks = tuple(config.study.ranks)
    sp = spec._replace(rank=max(ranks))
    hp = E.variants(problem, sp, lrs, ranks=ranks)
    groups = [list(range(i * len(lrs), (i + 1) * len(lrs))) for i in range(len(ranks))]
    path_runs.append(("", problem, fine, sp, hp, groups, ranks))
  elif name == "sheet":
    for f in config.study.sheet_features:
      sp = spec._replace(features=f)
      path_runs.append((f"features {f}", problem, fine, sp, E.variants(problem, sp, lrs),
                        None, (spec.rank,)))
  else:
    path_runs.append(("", problem, fine, spec, E.variants(problem, spec, lrs), None,
                      (spec.rank,)))
  if name == "schrodinger":  # ablation: the one-step residual of the earlier runs
    p1, f1 = (dataclasses.replace(x, lags=(1,)) for x in (problem, fine))
    path_runs.append(("1-lag residual", p1, f1, spec, E.variants(p1, spec, lrs), None,
                      (spec.rank,)))
  for label, prob, fin, sp, hp, groups, ranks in path_runs:
    o = opt if prob is problem else E.optimum(prob, data)
    t0 = time.perf_counter()
    fit = E.fit_path(config, prob, data, sp, hp, cap, chunk=chunk, tol=tol, opt=o,
                     groups=groups)
    sec = time.perf_counter() - t0
    for gi, r in enumerate(ranks):
      idx = groups[gi] if groups else list(range(len(lrs)))
      val = fit["val"][:, idx]
      best = idx[int(np.argmin(val.mean(0)))]
      tag = f"generator rank 2r={2 * r} (r={r})"
      table.select(name, " ".join(x for x in ("learned path", label, tag) if x), "lr",
                   list(lrs), val,
                   idx.index(best))
      params = jax.tree.map(lambda x: x[:, best], fit["params"])
      u_fine = E.path_on(fin, params, sp, rank=r if groups else None)
      setting = f"{tag}, S={sp.steps}, lr={float(hp['lr'][best]):g}" + (
          f", {label}" if label else "")
      curve = _gap_curve(fit["curves"][:, best], o)
      g = ev(prob, fit["u"][:, best], test)
      f = ev(fin, u_fine)
      table.add(name, "learned path", setting, prob, g, f, sec, fit["steps"], curve, chunk)
      entry = {"problem": prob, "fine": fin, "params": params, "u": fit["u"][:, best],
               "spec": sp, "rank": r, "curve": curve}
      if name == "sheet":
        entry["gram_error"] = gram_error(prob, fin, params, sp)
        table.raws[-1]["gram_error"] = entry["gram_error"]
      store[(name, "path", label, r)] = entry

  # Neural basis + QR under the quadrature (resolution independent, same start, Adam).
  t0 = time.perf_counter()
  qr = E.fit_qr(config, problem, data, spec, lrs, cap, chunk=chunk, tol=tol, opt=opt)
  sec = time.perf_counter() - t0
  table.select(name, "neural QR", "lr", qr["grid"], qr["val"], qr["index"])
  curve = _gap_curve(qr["curves"][:, qr["index"]], opt)
  table.add(name, "neural basis + QR", f"lr={qr['lr']:g}", problem, ev(problem, qr["u"], test),
            ev(fine, E.qr_on(fine, qr["params"], spec)), sec, qr["steps"], curve, chunk)
  store[(name, "qr")] = {"curve": curve}

  # Grid-bound baselines (4x grid through Legendre interpolation).
  t0 = time.perf_counter()
  st = E.fit_stiefel(problem, data, config.optim.taus, cap, chunk=chunk, tol=tol, opt=opt)
  sec = time.perf_counter() - t0
  table.select(name, "Stiefel-Cayley GD", "tau*L", st["grid"], st["val"], st["index"])
  curve = _gap_curve(st["curves"][:, st["index"]], opt)
  table.add(name, "Stiefel-Cayley GD", f"tau={st['tau_rel']:g}/L", problem,
            ev(problem, st["u"], test), ev(fine, E.interpolate(problem, fine, st["u"])), sec,
            st["steps"], curve, chunk)
  store[(name, "stiefel")] = {"curve": curve}
  t0 = time.perf_counter()
  ra = E.fit_radam(problem, data, tuple(config.study.radam_lrs), cap, chunk=chunk, tol=tol,
                   opt=opt)
  sec = time.perf_counter() - t0
  table.select(name, "Riemannian Adam", "lr", ra["grid"], ra["val"], ra["index"])
  curve = _gap_curve(ra["curves"][:, ra["index"]], opt)
  table.add(name, "Riemannian Adam (Stiefel)", f"lr={ra['lr']:g}", problem,
            ev(problem, ra["u"], test), ev(fine, E.interpolate(problem, fine, ra["u"])), sec,
            ra["steps"], curve, chunk)
  store[(name, "radam")] = {"curve": curve}
  if problem.kind == "operator":
    t0 = time.perf_counter()
    lo = E.fit_lobpcg(problem, data, tuple(config.study.preconds), cap)
    sec = time.perf_counter() - t0
    table.select(name, "LOBPCG", "preconditioner", lo["grid"], lo["val"], lo["index"])
    curve = np.minimum.accumulate(lo["curves"][lo["index"]] - opt.mean())
    table.add(name, "LOBPCG", f"preconditioner {lo['precond']}", problem,
              ev(problem, lo["u"], test), ev(fine, E.interpolate(problem, fine, lo["u"])),
              sec, lo["steps"], curve, None)  # stops on its residual norms
    store[(name, "lobpcg")] = {"curve": curve}
  exact = np.stack([methods.exact_basis(problem, data["train"][i]) for i in range(seeds)])
  label = {"pca": "exact SVD", "operator": "exact eigh", "dynamics": "exact DMD"}[problem.kind]
  table.add(name, label, "(4x: Legendre interp.)", problem, ev(problem, exact, test),
            ev(fine, E.interpolate(problem, fine, exact)), 0.0)
  store[(name, "exact")] = {"u": exact}
  store[name] = {"problem": problem, "fine": fine, "data": data, "opt": opt}


def long_paths(config, store) -> list[dict]:
  """Orthonormality error of the learned path re-integrated with many more steps."""
  e = store[(config.study.sweep_target, "path", "", config.model.rank)]
  out = []
  for scheme in ("cayley", "exp"):
    for k in config.study.long_steps:
      u = E.path_on(e["problem"], e["params"], e["spec"]._replace(scheme=scheme), steps=k,
                    rank=e["rank"])
      g0 = e["problem"].ref_w.T @ e["problem"].ref_w  # the start basis's own Gram
      err = [float(np.abs(x.T.astype(np.float64) @ x - g0).max()) for x in u]
      out.append({"scheme": scheme, "steps": k, "max |U^T W U - U0^T W U0|": float(np.max(err))})
  return out


def plot(path, store, table: Table, config):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(2, 3, figsize=(16, 9))
  # Top: learned functions (median seed) for bm (rank 2r = 2), oscillator, Schroedinger.
  panels = [(config.study.sweep_target, min(config.study.ranks)), ("oscillator", config.model.rank),
            ("schrodinger", config.model.rank)]
  for ax, (name, r) in zip(axes[0], panels):
    e = store.get((name, "path", "", r))
    if e is None:
      ax.axis("off")
      continue
    p = e["problem"]
    x = p.grid.x[:, 0]
    shape = E.evaluate(p, e["u"])[SHAPE_KEY[p.kind]]
    seed = int(np.argsort(shape)[len(shape) // 2])
    u = e["u"][seed] / p.grid.sqrt_w[:, None]
    v = p.truth_w / p.grid.sqrt_w[:, None]
    for k in range(min(4, p.m)):
      j = k if p.ordered else int(np.argmax(np.abs(e["u"][seed][:, k] @ p.truth_w)))
      sign = np.sign(np.sum(u[:, k] * v[:, j] * p.grid.w)) or 1.0
      line, = ax.plot(x, sign * u[:, k], lw=2)
      ax.plot(x, v[:, j], "--", color=line.get_color(), lw=1)
    ax.set_title(f"{name}: learned path, rank 2r={2 * r} (solid) vs target (dashed), "
                 "median seed", fontsize=8)
  # Bottom: convergence curves (gap of the training objective to its optimum).
  for ax, name in zip(axes[1], [n for n in ("bm", "oscillator", "schrodinger")]):
    for key, c in table.curves.items():
      if key.startswith(f"{name} /") and np.all(np.isfinite(c)):
        ax.plot(np.arange(1, len(c) + 1), np.maximum(c, 1e-9), label=key.split(" / ", 1)[1],
                lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step (LOBPCG: iteration)")
    ax.set_ylabel("training objective - optimum (best so far)")
    ax.set_title(f"{name}: convergence, mean over seeds", fontsize=9)
    ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)


def run(config, workdir: str):
  metrics_lib.write_config(workdir, config)
  commit = study_lib.git_commit(paths=E.PATHS)  # stamped before anything runs
  start = time.perf_counter()
  table = Table(metrics_lib.MetricsWriter(workdir))
  store = {}
  for name in config.study.targets:
    study_target(config, name, table, store)
    print(f"{name} done at {time.perf_counter() - start:.0f} s", flush=True)
  longs = long_paths(config, store)
  wall = time.perf_counter() - start
  header = (f"lie_bases study (commit {commit}); seeds={config.train.seeds}, every iterative "
            f"method in chunks of {config.study.chunk} steps until the selected lane's gap "
            f"to the training optimum falls by < {config.study.tol:g} (relative) over a "
            f"chunk, cap {config.study.steps} steps; n={config.target.n} nodes (sheet "
            f"{E.nodes_per_axis(config, 'sheet')}^2), 4x finer evaluation grid (per axis); "
            f"mean ± std over seeds; wall {wall:.0f} s.")
  columns = ["target", "method", "setting", "steps", "last-chunk gap fall", "train gap",
             "orth err", "sin angle", "shape", "objective", "4x sin angle", "4x shape", "s"]
  md = study_lib.write_table(workdir, "lie_bases_study", table.rows, columns, header)
  extra = ("\nSelections (validation; grid, mean validation loss per grid point, choice):\n\n"
           + "\n".join(f"- {s}" for s in table.selections)
           + "\n\nSquare: quadrature error of the learned generator's core G = Z^T Z "
           "(training rule vs 4x rule):\n\n"
           + "\n".join(f"- features {k[2]}: {v['gram_error']:.3g}" for k, v in store.items()
                       if isinstance(k, tuple) and k[0] == "sheet" and "gram_error" in v)
           + "\n\nLong paths (learned path of the sweep target, default rank, seeds max):\n\n"
           + study_lib.markdown_table(longs, digits=10))
  with open(os.path.join(workdir, "lie_bases_study.md"), "a") as f:
    f.write(extra)
  curves = {k: v[np.unique(np.geomspace(1, len(v), 60).astype(int)) - 1].tolist()
            for k, v in table.curves.items()}
  with open(os.path.join(workdir, "lie_bases_raw.json"), "w") as f:
    json.dump({"commit": commit, "wall_s": wall, "rows": table.raws, "long_paths": longs,
               "selections": table.selections, "curves_geomspaced": curves}, f, indent=1)
  plot(os.path.join(workdir, "lie_bases_study.png"), store, table, config)
  print(md + extra)
  return table.rows
