"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): the study.

For every target: the fixed reference basis, the learned path (Adam learning rate chosen
on validation), the Stiefel-Cayley baseline (step size chosen on validation) and the exact
decomposition, each measured on the training grid and on a 4x finer grid (the path is
re-integrated there; the grid-bound baselines need Legendre interpolation). On the sweep
target: error vs generator rank r in {1, 2, 4, 8} and vs integration steps (all lanes of
one program), the exponential integrator and the Legendre reference as ablations, and
the orthonormality error over long paths. Writes lie_bases_study.{md,json,png}.
"""
from __future__ import annotations

import os
import time

import jax
import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.lie_bases import experiment as E
from jaxpapers.papers.lie_bases import methods, targets

SHAPE_KEY = {"pca": "func_err", "operator": "func_err", "dynamics": "purity"}
OBJ_KEY = {"pca": "ev_gap", "operator": "rq_err", "dynamics": "test_resid"}


def _ms(v) -> str:
  v = np.asarray(v, np.float64)
  return f"{v.mean():.3g} ± {v.std():.1g}"


def _row(target, method, setting, on_grid, on_fine, seconds, kind):
  sk, ok = SHAPE_KEY[kind], OBJ_KEY[kind]
  if target == "sheet":
    sk = None  # degenerate eigenvalues: only the subspace is identified
  row = {"target": target, "method": method, "setting": setting,
         "orth err": _ms(on_grid["orth_err"]), "sin angle": _ms(on_grid["sin_angle"]),
         "shape": f"{sk}: {_ms(on_grid[sk])}" if sk else "-",
         "objective": f"{ok}: {_ms(on_grid[ok])}",
         "4x grid sin angle": _ms(on_fine["sin_angle"]) if on_fine else "n/a",
         "4x grid shape": _ms(on_fine[sk]) if on_fine and sk else ("n/a" if not on_fine else "-"),
         "s": f"{seconds:.0f}"}
  raw = {f"grid_{k}": np.asarray(v).tolist() for k, v in on_grid.items()}
  if on_fine:
    raw.update({f"fine_{k}": np.asarray(v).tolist() for k, v in on_fine.items()})
  return row, raw


def main_table(config, writer, rows, raws, store):
  spec = methods.spec_from(config.model)
  steps = config.study.steps
  for name in config.study.targets:
    problem, data = E.setup(config, name)
    fine, _ = E.setup(config, name, factor=config.target.fine_factor, seeds=1)
    test = data["test"]
    kind = problem.kind

    def add(method, setting, u_grid, u_fine, seconds):
      g = E.evaluate(problem, u_grid, test)
      f = E.evaluate(fine, u_fine) if u_fine is not None else None
      row, raw = _row(name, method, setting, g, f, seconds, kind)
      rows.append(row)
      raws.append({"target": name, "method": method, "setting": setting, **raw})
      writer.write(len(rows), {k: float(np.mean(v)) for k, v in g.items()},
                   split=f"study/{name}/{method}")

    seeds = data["train"].shape[0]
    add("reference (Fourier)", "-", np.stack([problem.ref_w] * seeds),
        np.stack([fine.ref_w] * seeds), 0.0)
    t0 = time.perf_counter()
    hp = E.variants(problem, spec, config.optim.lrs)
    fit = E.select(E.fit_path(config, problem, data, spec, hp, steps), hp)
    sec = time.perf_counter() - t0
    add("learned path", f"r={spec.rank}, S={spec.steps}, lr={fit['lr']:g}", fit["u"],
        E.path_on(fine, fit["params"], spec), sec)
    t0 = time.perf_counter()
    st = E.fit_stiefel(problem, data, config.optim.taus, steps)
    sec = time.perf_counter() - t0
    add("Stiefel-Cayley", f"tau={st['tau_rel']:g}/L (4x: Legendre interp.)", st["u"],
        E.interpolate(problem, fine, st["u"]), sec)
    exact = np.stack([methods.exact_basis(problem, data["train"][i]) for i in range(seeds)])
    label = {"pca": "exact SVD", "operator": "exact eigh", "dynamics": "exact DMD"}[kind]
    add(label, "(4x: Legendre interp.)", exact, E.interpolate(problem, fine, exact), 0.0)
    store[name] = {"problem": problem, "fine": fine, "fit": fit, "stiefel": st,
                   "data": data}


def sweeps(config, writer, rows, raws, store):
  """Rank and step sweeps + ablations on the sweep target at its selected lr."""
  name = config.study.sweep_target
  entry = store[name]
  problem, data, fine = entry["problem"], entry["data"], entry["fine"]
  lr = entry["fit"]["lr"]
  base = methods.spec_from(config.model)
  ranks, int_steps = tuple(config.study.ranks), tuple(config.study.int_steps)
  spec = base._replace(rank=max(ranks), steps=max(int_steps))
  out = []
  t0 = time.perf_counter()
  # Rank sweep at the default steps, step sweep at the default rank: one program.
  combos = [(r, base.steps) for r in ranks] + [(base.rank, k) for k in int_steps
                                               if k != base.steps]
  hp = {"lr": np.full(len(combos), lr, np.float32),
        "rank": np.asarray([c[0] for c in combos], np.int32),
        "steps": np.asarray([c[1] for c in combos], np.float32),
        "ref": np.stack([problem.ref_w] * len(combos)).astype(np.float32)}
  fit = E.fit_path(config, problem, data, spec, jax.tree.map(np.asarray, hp),
                   config.study.steps)
  sec = time.perf_counter() - t0
  for i, (r, k) in enumerate(combos):
    g = E.evaluate(problem, fit["u"][:, i], data["test"])
    params = jax.tree.map(lambda x: x[:, i], fit["params"])
    f = E.evaluate(fine, _fine_masked(fine, params, spec, r, k))
    kind = "rank" if k == base.steps else "steps"
    out.append({"sweep": kind, "rank r": r, "steps S": k, "grid": g, "fine": f})
    row, raw = _row(name, "learned path", f"r={r}, S={k}, lr={lr:g}", g, f, sec, problem.kind)
    row["method"] = f"sweep: {kind}"
    rows.append(row)
    raws.append({"target": name, "method": row["method"], "setting": row["setting"], **raw})
  # Does the Stiefel baseline lose on the oscillator for lack of steps (ill-conditioning:
  # lambda_max(H) / gap ~ 1e4 at 64 nodes)? The same tau grid with more steps.
  if "oscillator" in store:
    e = store["oscillator"]
    t0 = time.perf_counter()
    k = config.study.stiefel_long * config.study.steps
    st = E.fit_stiefel(e["problem"], e["data"], config.optim.taus, k)
    sec = time.perf_counter() - t0
    g = E.evaluate(e["problem"], st["u"], e["data"]["test"])
    f = E.evaluate(e["fine"], E.interpolate(e["problem"], e["fine"], st["u"]))
    row, raw = _row("oscillator", f"ablation: Stiefel-Cayley {k} steps",
                    f"tau={st['tau_rel']:g}/L", g, f, sec, "operator")
    rows.append(row)
    raws.append({"target": "oscillator", "method": row["method"], "setting": row["setting"],
                 **raw})
  # Ablations: exponential integrator; Legendre reference basis.
  for label, spec_a, ref, ref_f in [
      ("ablation: exp integrator", base._replace(scheme="exp"), problem.ref_w, fine.ref_w),
      ("ablation: Legendre start", base, *_legendre(config, problem, fine))]:
    t0 = time.perf_counter()
    hp = E.variants(problem, spec_a, (lr,), refs=(ref,))
    fa = E.select(E.fit_path(config, problem, data, spec_a, hp, config.study.steps), hp)
    sec = time.perf_counter() - t0
    g = E.evaluate(problem, fa["u"], data["test"])
    f = E.evaluate(fine, E.path_on(fine, fa["params"], spec_a, ref=ref_f))
    row, raw = _row(name, label, f"r={spec_a.rank}, S={spec_a.steps}, {spec_a.scheme}",
                    g, f, sec, problem.kind)
    rows.append(row)
    raws.append({"target": name, "method": label, "setting": row["setting"], **raw})
  return out


def _legendre(config, problem, fine):
  from jaxpapers.papers.lie_bases import quadrature
  ref = problem.grid.sqrt_w[:, None] * quadrature.reference_basis(problem.grid, "legendre",
                                                                   problem.m)
  ref_f = fine.grid.sqrt_w[:, None] * quadrature.reference_basis(fine.grid, "legendre",
                                                                 fine.m)
  return ref, ref_f


def _fine_masked(fine, params, spec, rank, steps):
  return E.path_on(fine, params, spec._replace(steps=steps), rank=rank)


def long_paths(config, store) -> list[dict]:
  """Orthonormality error of the learned path re-integrated with many more steps."""
  name = config.study.sweep_target
  entry = store[name]
  spec = methods.spec_from(config.model)
  out = []
  for scheme in ("cayley", "exp"):
    for k in config.study.long_steps:
      u = E.path_on(entry["problem"], entry["fit"]["params"], spec._replace(scheme=scheme),
                    steps=k)
      # Drift of the Gram matrix from the start basis's own (quadrature-exact) Gram.
      g0 = entry["problem"].ref_w.T @ entry["problem"].ref_w
      err = [float(np.abs(x.T.astype(np.float64) @ x - g0).max()) for x in u]
      out.append({"scheme": scheme, "steps": k, "max |U^T W U - U0^T W U0|": float(np.max(err))})
  return out


def plot(path, store, sweep_rows, config):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  names = [n for n in ("bm", "oscillator", "schrodinger") if n in store]
  fig, axes = plt.subplots(2, 3, figsize=(15, 8))
  for ax, name in zip(axes[0], names):
    e = store[name]
    p = e["problem"]
    x = p.grid.x[:, 0]
    # The seed with the median shape error (not a cherry-picked best).
    shape = E.evaluate(p, e["fit"]["u"])[SHAPE_KEY[p.kind]]
    seed = int(np.argsort(shape)[len(shape) // 2])
    u = e["fit"]["u"][seed] / p.grid.sqrt_w[:, None]
    v = p.truth_w / p.grid.sqrt_w[:, None]
    for k in range(min(4, p.m)):
      j = k if p.ordered else int(np.argmax(np.abs(e["fit"]["u"][seed][:, k] @ p.truth_w)))
      sign = np.sign(np.sum(u[:, k] * v[:, j] * p.grid.w)) or 1.0
      line, = ax.plot(x, sign * u[:, k], lw=2)
      ax.plot(x, v[:, j], "--", color=line.get_color(), lw=1)
    ax.set_title(f"{name}: learned (solid) vs target (dashed), median seed", fontsize=9)
  ax = axes[1, 0]
  for key, label in (("rank", "rank r"), ("steps", "steps S")):
    pts = [(r["rank r"] if key == "rank" else r["steps S"], r["grid"]["sin_angle"])
           for r in sweep_rows if r["sweep"] == key or (
               key == "steps" and r["sweep"] == "rank" and r["rank r"] == config.model.rank)]
    pts.sort()
    xs = [p[0] for p in pts]
    ax.errorbar(xs, [np.mean(p[1]) for p in pts], [np.std(p[1]) for p in pts], marker="o",
                label=f"vs {label}", capsize=3)
  ax.set_xscale("log", base=2)
  ax.set_ylabel("sin max principal angle to KL subspace")
  ax.set_title(f"universality sweeps ({config.study.sweep_target})")
  ax.legend()
  ax = axes[1, 1]
  e = store[config.study.sweep_target]
  ax.plot(np.mean(e["fit"]["curves"], 0), label=f"learned path (lr {e['fit']['lr']:g})")
  st = e["stiefel"]
  best = int(np.argmin(st["val"].mean(0)))
  ax.plot(np.mean(st["curves"][:, best], 0), label=f"Stiefel-Cayley (tau {st['tau_rel']:g}/L)")
  ax.set_xlabel("step")
  ax.set_ylabel("training objective")
  ax.set_title(f"{config.study.sweep_target}: training curves (mean over seeds)")
  ax.legend()
  ax = axes[1, 2]
  if "sheet" in store:
    e = store["sheet"]
    p = e["problem"]
    n = p.grid.n
    u = (e["fit"]["u"][0] / p.grid.sqrt_w[:, None])[:, 1].reshape(n, n)
    ax.imshow(u, origin="lower", extent=(0, 1, 0, 1))
    ax.set_title("sheet: 2nd learned basis function, seed 0")
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)


def run(config, workdir: str):
  metrics_lib.write_config(workdir, config)
  commit = study_lib.git_commit(paths=E.PATHS)  # stamped before anything runs
  start = time.perf_counter()
  writer = metrics_lib.MetricsWriter(workdir)
  rows, raws, store = [], [], {}
  main_table(config, writer, rows, raws, store)
  sweep_rows = sweeps(config, writer, rows, raws, store)
  longs = long_paths(config, store)
  wall = time.perf_counter() - start
  header = (f"lie_bases study (commit {commit}); seeds={config.train.seeds}, "
            f"{config.study.steps} optimization steps per method, n={config.target.n} nodes "
            f"(sheet {E.nodes_per_axis(config, 'sheet')}^2), 4x finer evaluation grid "
            f"(per axis); Stiefel tau in units of 1/L; "
            f"mean ± std over seeds; wall {wall:.0f} s.")
  columns = ["target", "method", "setting", "orth err", "sin angle", "shape", "objective",
             "4x grid sin angle", "4x grid shape", "s"]
  md = study_lib.write_table(workdir, "lie_bases_study", rows, columns, header)
  md += "\n" + study_lib.markdown_table(longs, digits=10)
  with open(os.path.join(workdir, "lie_bases_study.md"), "a") as f:
    f.write("\nLong paths (learned path of the sweep target, seeds max):\n\n"
            + study_lib.markdown_table(longs, digits=10))
  import json
  with open(os.path.join(workdir, "lie_bases_raw.json"), "w") as f:
    json.dump({"commit": commit, "wall_s": wall, "rows": raws, "long_paths": longs}, f,
              indent=1)
  plot(os.path.join(workdir, "lie_bases_study.png"), store, sweep_rows, config)
  print(md)
  return rows
