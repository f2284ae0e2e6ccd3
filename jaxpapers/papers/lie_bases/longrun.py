"""Resumable long runs of single study cells (issue 47): the study's 3000-step cap left
several rows still falling, so this reruns one cell (the learned path on one target, or
its baselines) with a higher cap and, where the study's choice sat on a grid edge, a
wider learning-rate grid, under the study's own rule (chunks, stop when the validation-
selected lane's best-so-far training gap falls by < tol over a chunk; per rank group in
the rank sweep). Same data, seeds and initialization keys as the study (`experiment`).

The path's Adam state and its whole loss history (preallocated to the cap) are one
checkpoint, saved after every chunk, so a run cut by `--budget_s` (exit code 3) resumes
exactly on the same workdir; when it is flat or capped it writes rows.md / raw.json /
curves.png there. Baselines (neural QR, Stiefel GD, Riemannian Adam) are cheap and run in
one go. Usage (from the repository root):

  python -m jaxpapers.papers.lie_bases.longrun --target=bm --method=path --ranks=1,2,4,8 \
      --lrs=0.001,0.003,0.01,0.03 --cap=20000 --workdir=/tmp/lie_long_bm

`--fork=DIR[,DIR...]` starts a new path cell from some lanes of finished or cut cells
(their newest checkpoints, at one step): to continue a few lanes of a sweep past its cap
without the others, or to select over lanes trained in several runs (a learning rate
added to a grid later, trained from the same initialization: `--init_rank`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.lie_bases import experiment as E
from jaxpapers.papers.lie_bases import methods, study, targets

ARGS_FILE = "longrun_args.json"  # the arguments of a workdir's first call (for --fork)
COLUMNS = ["target", "method", "setting", "steps", "last-chunk gap fall", "train gap",
           "orth err", "sin angle", "shape", "objective", "4x sin angle", "4x shape", "s"]


class ForkError(ValueError):
  """A --fork source that cannot give this cell its lanes."""


def _floats(text: str) -> tuple:
  return tuple(float(x) for x in text.split(",") if x)


def _ints(text: str) -> tuple:
  return tuple(int(x) for x in text.split(",") if x)


def _problem(config, name, lags):
  problem, data = E.setup(config, name)
  # the evaluation grid needs no data (E.setup would also sample curves there: on a 96^2
  # square that einsum alone takes minutes)
  fine = targets.make_problem(name, config.target,
                              E.nodes_per_axis(config, name, config.target.fine_factor))
  if lags:  # the Schroedinger one-lag ablation (or another lag set)
    problem, fine = (dataclasses.replace(x, lags=lags) for x in (problem, fine))
  return problem, fine, data


def _template(config, args, problem, data):
  """(ranks, spec, hp, fresh state) of a path cell: lanes rank-major (r, then lr); the
  MLP has max(ranks, init_rank) (a, b) pairs, so `--init_rank` gives a subset of a rank
  sweep's lanes the sweep's own initialization."""
  ranks = args.ranks or (config.model.rank,)
  spec = methods.spec_from(config.model)._replace(rank=max(max(ranks), args.init_rank))
  if args.features:
    spec = spec._replace(features=args.features)
  hp = E.variants(problem, spec, args.lrs, ranks=ranks)
  seeds = data["train"].shape[0]
  keys = jnp.stack([E._key(config, problem.name, i, "path") for i in range(seeds)])  # noqa: SLF001
  params0 = jax.vmap(lambda k: methods.init_path(k, problem.grid.dim, spec))(keys)
  state = {"st": jax.vmap(jax.vmap(methods.path_state, (None, 0)), (0, None))(params0, hp["lr"]),
           "curves": jnp.zeros((seeds, hp["lr"].size, args.cap), jnp.float32),
           "seconds": jnp.zeros((), jnp.float32)}  # training wall time over all calls
  return ranks, spec, hp, state


def _fork(config, args, problem, data, spec, hp):
  """(state, step): the lanes of this cell taken from the newest checkpoints of the
  `--fork` workdirs (every lane (r, lr) must be in one of them, all at the same step),
  their loss histories copied into this cell's (longer) history. The sources' training
  seconds are summed into this cell's."""
  lanes = list(zip(np.asarray(hp["rank"]).tolist(), np.asarray(hp["lr"]).tolist()))
  found, step, seconds = [None] * len(lanes), None, 0.0
  sources = []
  for d in args.fork.split(","):
    src = _parser().parse_args(_argv_of(d))
    for key in ("config", "target", "method", "features", "lags"):
      if getattr(src, key) != getattr(args, key):
        raise ForkError(f"--fork: {d} has {key}={getattr(src, key)!r}, this run "
                        f"{getattr(args, key)!r}")
    _, src_spec, src_hp, src_state = _template(config, src, problem, data)
    if src_spec != spec:
      raise ForkError(f"--fork: {d} initializes {src_spec}, this run {spec} "
                      "(set --init_rank to the source's largest r)")
    ckpt = checkpoint_lib.Checkpointer(d)
    st, s_step = ckpt.restore_or(src_state)
    ckpt.close()
    if s_step == 0 or (step is not None and s_step != step):
      raise ForkError(f"--fork: {d} is at step {s_step}, expected "
                      f"{'> 0' if step is None else step}")
    step = s_step
    seconds += float(st["seconds"])
    src_lanes = list(zip(np.asarray(src_hp["rank"]).tolist(),
                         np.asarray(src_hp["lr"]).tolist()))
    for j, (r, lr) in enumerate(lanes):
      for i, (sr, slr) in enumerate(src_lanes):
        if found[j] is None and sr == r and np.isclose(slr, lr, rtol=1e-6):
          found[j] = (len(sources), i)
    sources.append(st)
  missing = [f"r={r} lr={lr:g}" for (r, lr), f in zip(lanes, found) if f is None]
  if missing:
    raise ForkError(f"--fork: lanes {', '.join(missing)} are in none of {args.fork}")
  if step > args.cap:
    raise ForkError(f"--fork: the sources are at step {step}, past --cap={args.cap}")
  st = jax.tree.map(lambda *leaves: jnp.stack(
      [leaves[k][:, i] for k, i in found], axis=1), *[s["st"] for s in sources])
  curves = np.zeros((data["train"].shape[0], len(lanes), args.cap), np.float32)
  for j, (k, i) in enumerate(found):
    curves[:, j, :step] = np.asarray(sources[k]["curves"])[:, i, :step]
  return {"st": st, "curves": jnp.asarray(curves),
          "seconds": jnp.asarray(seconds, jnp.float32)}, step


def _argv_of(workdir: str) -> list:
  """The arguments that built a longrun workdir's checkpoints (its first call), from
  ARGS_FILE, or from raw.json for workdirs written before ARGS_FILE existed."""
  for name, key in ((ARGS_FILE, None), ("raw.json", "argv")):
    path = os.path.join(workdir, name)
    if os.path.isfile(path):
      with open(path) as f:
        data = json.load(f)
      return data if key is None else data[key]
  raise ForkError(f"--fork: {workdir} has neither {ARGS_FILE} nor raw.json "
                  "(not a longrun workdir)")


def run_path(config, args, table) -> bool:
  """Advances the path cell by chunks until flat, the cap or the time budget; True when
  finished (rows added to `table`)."""
  name, chunk = args.target, args.chunk
  problem, fine, data = _problem(config, name, args.lags)
  opt = E.optimum(problem, data)
  ranks, spec, hp, state = _template(config, args, problem, data)
  nl = len(args.lrs)
  groups = [list(range(i * nl, (i + 1) * nl)) for i in range(len(ranks))]
  coef = jnp.asarray(targets.brockett_weights(problem.m))
  s, sqrt_w, _ = E.geometry(problem)
  ckpt = checkpoint_lib.Checkpointer(args.workdir)
  if args.fork and ckpt.latest_step() is None:  # a new cell continuing other cells' lanes
    try:
      forked, step = _fork(config, args, problem, data, spec, hp)
    except ForkError:
      ckpt.close()
      raise
    ckpt.save(step, forked)
    ckpt.close()
    ckpt = checkpoint_lib.Checkpointer(args.workdir)
  state, step = ckpt.restore_or(state)
  curves = np.array(state["curves"])  # a writable copy
  if args.lanes:  # every lane's training gap from the checkpoint, no evaluation
    ckpt.close()
    gaps = np.minimum.accumulate(curves[..., :step] - opt[:, None, None], -1)
    falls = E.flat(curves[..., :step], opt, chunk)
    out = {"step": step, "lanes": [
        {"r": int(r), "lr": float(lr), "train_gap": float(gaps[:, i, -1].mean()),
         "gap_fall": float(falls[i]), "per_seed_train_gap": gaps[:, i, -1].tolist()}
        for i, (r, lr) in enumerate(zip(np.asarray(hp["rank"]), np.asarray(hp["lr"])))]}
    with open(os.path.join(args.workdir, "lanes.json"), "w") as f:
      json.dump(out, f, indent=1)
    for x in out["lanes"]:
      print(f"2r={2 * x['r']} lr={x['lr']:g}: gap {x['train_gap']:.3g}, "
            f"last-chunk fall {x['gap_fall']:.3g}")
    return None
  train, val = jnp.asarray(data["train"]), jnp.asarray(data["val"])
  kind = targets.loss_kind(problem)
  t0, spent = time.perf_counter(), 0.0
  # n = 0 when resuming a finished run: only the endpoints and validation losses.
  flat = args.report or step >= args.cap or (step > chunk and E.is_flat(
      curves[..., :step], np.asarray(_val(state, hp, s, sqrt_w, train, val, coef, kind, spec)),
      opt, chunk, args.tol, groups))
  while not flat:
    st, losses, _, vals = methods.path_chunk(state["st"], hp, s, sqrt_w, train, val, coef,
                                             kind=kind, spec=spec, n=chunk)
    curves[..., step:step + chunk] = np.asarray(losses)
    step += chunk
    state = {"st": st, "curves": jnp.asarray(curves),
             "seconds": state["seconds"] + (time.perf_counter() - t0 - spent)}
    spent = time.perf_counter() - t0
    ckpt.save(step, state)
    falls = E.flat(curves[..., :step], opt, chunk)
    v = np.asarray(vals).mean(0)
    sel = [g[int(np.argmin(v[g]))] for g in groups]
    print(f"step {step}: selected lanes {sel}, last-chunk gap fall "
          f"{[f'{falls[i]:.3g}' for i in sel]}, {time.perf_counter() - t0:.0f} s", flush=True)
    flat = step >= args.cap or E.is_flat(curves[..., :step], np.asarray(vals), opt, chunk,
                                          args.tol, groups)
    if not flat and time.perf_counter() - t0 > args.budget_s:
      ckpt.close()
      return False
  ckpt.close()
  st, _, us, vals = methods.path_chunk(state["st"], hp, s, sqrt_w, train, val, coef,
                                       kind=kind, spec=spec, n=0)
  us, vals = np.asarray(us), np.asarray(vals)
  label = f"features {args.features}" if args.features else (
      "1-lag residual" if args.lags == (1,) else "")
  for gi, r in enumerate(ranks):
    idx = groups[gi]
    best = idx[int(np.argmin(vals[:, idx].mean(0)))]
    tag = f"generator rank 2r={2 * r} (r={r})"
    table.select(name, " ".join(x for x in ("learned path", label, tag) if x), "lr",
                 list(args.lrs), vals[:, idx], idx.index(best))
    params = jax.tree.map(lambda x: x[:, best], st["params"])
    curve = study._gap_curve(curves[:, best, :step], opt)  # noqa: SLF001
    setting = f"{tag}, S={spec.steps}, lr={args.lrs[best % nl]:g}" + (
        f", {label}" if label else "")
    table.add(name, "learned path", setting, problem, E.evaluate(problem, us[:, best],
                                                                 data["test"]),
              E.evaluate(fine, E.path_on(fine, params, spec, rank=r)), float(state["seconds"]), step,
              curve, chunk)
    # quadrature error of the generator's core (training vs 4x rule): the diagnostic of
    # a 4x-grid degradation, for every target
    table.raws[-1]["gram_error"] = study.gram_error(problem, fine, params, spec)
    gaps = np.minimum.accumulate(curves[:, :, :step] - opt[:, None, None], -1)
    table.raws[-1]["per_seed_train_gap"] = gaps[:, best, -1].tolist()
    # every lane of the group: lr, mean final training gap, its last-chunk fall, mean val
    # and per-seed val (whether two lanes' validation losses differ beyond the seeds' noise)
    falls = E.flat(curves[..., :step], opt, chunk)
    table.raws[-1]["lanes"] = [
        {"lr": args.lrs[i % nl], "train_gap": float(gaps[:, i, -1].mean()),
         "gap_fall": float(falls[i]), "val": float(vals[:, i].mean()),
         "per_seed_val": vals[:, i].tolist()} for i in idx]
  return True


def _val(state, hp, s, sqrt_w, train, val, coef, kind, spec):
  return methods.path_chunk(state["st"], hp, s, sqrt_w, train, val, coef, kind=kind,
                            spec=spec, n=0)[3]


def run_baseline(config, args, table) -> bool:
  """Neural QR / Stiefel GD / Riemannian Adam on one target, in one go."""
  name, chunk = args.target, args.chunk
  problem, fine, data = _problem(config, name, args.lags)
  opt = E.optimum(problem, data)
  spec = methods.spec_from(config.model)
  test = data["test"]
  t0 = time.perf_counter()
  if args.method == "qr":
    r = E.fit_qr(config, problem, data, spec, args.lrs, args.cap, chunk=chunk, tol=args.tol,
                 opt=opt)
    label, setting, u = "neural QR", f"lr={r['lr']:g}", r["u"]
    u_fine, method = E.qr_on(fine, r["params"], spec), "neural basis + QR"
    sel = ("lr", r["grid"])
  elif args.method == "stiefel":
    r = E.fit_stiefel(problem, data, args.lrs, args.cap, chunk=chunk, tol=args.tol, opt=opt)
    label, setting, u = "Stiefel-Cayley GD", f"tau={r['tau_rel']:g}/L", r["u"]
    u_fine, method = E.interpolate(problem, fine, u), "Stiefel-Cayley GD"
    sel = ("tau*L", r["grid"])
  else:
    r = E.fit_radam(problem, data, args.lrs, args.cap, chunk=chunk, tol=args.tol, opt=opt)
    label, setting, u = "Riemannian Adam", f"lr={r['lr']:g}", r["u"]
    u_fine, method = E.interpolate(problem, fine, u), "Riemannian Adam (Stiefel)"
    sel = ("lr", r["grid"])
  table.select(name, label, sel[0], sel[1], r["val"], r["index"])
  curve = study._gap_curve(r["curves"][:, r["index"]], opt)  # noqa: SLF001
  table.add(name, method, setting, problem, E.evaluate(problem, u, test),
            E.evaluate(fine, u_fine), time.perf_counter() - t0, r["steps"], curve, chunk)
  return True


def write(table, args, commit, wall):
  os.makedirs(args.workdir, exist_ok=True)
  header = (f"lie_bases long run (commit {commit}): {' '.join(args.argv)}; chunks of "
            f"{args.chunk}, stop at < {args.tol:g} relative fall of the selected lane's "
            f"gap per chunk, cap {args.cap}; wall of the final call {wall:.0f} s")
  md = study_lib.write_table(args.workdir, "rows", table.rows, COLUMNS, header)
  md += "\nSelections:\n\n" + "\n".join(f"- {s}" for s in table.selections) + "\n"
  with open(os.path.join(args.workdir, "rows.md"), "w") as f:
    f.write(md)
  curves = {k: {"step": (ix := np.unique(np.geomspace(1, len(v), 80).astype(int)) - 1
                         ).tolist(), "gap": v[ix].tolist()} for k, v in table.curves.items()}
  with open(os.path.join(args.workdir, "raw.json"), "w") as f:
    json.dump({"commit": commit, "argv": args.argv, "rows": table.raws,
               "selections": table.selections, "curves_geomspaced": curves}, f, indent=1)
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for k, v in table.curves.items():
    ax.plot(np.arange(1, len(v) + 1), np.maximum(v, 1e-9), label=k, lw=1)
  ax.set(xscale="log", yscale="log", xlabel="step",
         ylabel="training objective - optimum (best so far, mean over seeds)")
  ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(args.workdir, "curves.png"), dpi=80)
  print(md)


def collect(dirs, out: str) -> None:
  """Gathers finished cells (rows.md, raw.json) into out.md / out.json and one plot of
  every cell's convergence curve per target (out.png): the committed record."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  raws, mds = {}, []
  for d in dirs:
    with open(os.path.join(d, "raw.json")) as f:
      raws[os.path.basename(d.rstrip("/"))] = json.load(f)
    with open(os.path.join(d, "rows.md")) as f:
      mds.append(f"## {os.path.basename(d.rstrip('/'))}\n\n" + f.read())
  with open(out + ".md", "w") as f:
    f.write("\n".join(mds))
  with open(out + ".json", "w") as f:
    json.dump(raws, f, indent=1)
  names = sorted({r["target"] for raw in raws.values() for r in raw["rows"]})
  fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.5), squeeze=False)
  for ax, name in zip(axes[0], names):
    for cell, raw in raws.items():
      for k, c in raw["curves_geomspaced"].items():
        if k.startswith(f"{name} /"):
          ax.plot(np.asarray(c["step"]) + 1, np.maximum(c["gap"], 1e-9),
                  label=f"{cell}: {k.split(' / ', 1)[1]}", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="step", title=f"{name}: long runs",
           ylabel="training objective - optimum (best so far, mean over seeds)")
    ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(out + ".png", dpi=80)


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--target", required=True, choices=("bm", "oscillator", "schrodinger",
                                                       "sheet"))
  p.add_argument("--method", default="path", choices=("path", "qr", "stiefel", "radam"))
  p.add_argument("--ranks", type=_ints, default=(), help="r values (path; generator rank 2r)")
  p.add_argument("--lrs", type=_floats, required=True, help="lr grid (stiefel: tau*L grid)")
  p.add_argument("--init_rank", type=int, default=0,
                 help="path: initialize the MLP with this many (a, b) pairs if more than "
                 "max(ranks) (a rank sweep's init, for a subset of its lanes)")
  p.add_argument("--fork", default="",
                 help="path: comma-separated longrun workdirs whose newest checkpoints "
                 "(same step) hold every lane (r, lr) of this cell; a new workdir starts "
                 "from those lanes and their loss histories, e.g. to continue some lanes "
                 "of a sweep past its cap or to select over lanes of several runs")
  p.add_argument("--features", type=int, default=0)
  p.add_argument("--lags", type=_ints, default=())
  p.add_argument("--cap", type=int, default=20000)
  p.add_argument("--chunk", type=int, default=500)
  p.add_argument("--tol", type=float, default=0.01)
  p.add_argument("--budget_s", type=float, default=780.0)
  p.add_argument("--report", action="store_true",
                 help="path: write the rows of the checkpointed state now, no training")
  p.add_argument("--lanes", action="store_true",
                 help="path: write every lane's training gap at the checkpoint to "
                 "lanes.json, no training or evaluation")
  p.add_argument("--workdir", required=True)
  p.add_argument("--config", default="configs/lie_bases.py", help="config spec (tests: :smoke)")
  return p


def main(argv=None) -> int:
  p = _parser()
  if argv is None and len(sys.argv) > 2 and sys.argv[1] == "--collect":
    collect(sys.argv[3:], sys.argv[2])  # --collect OUT DIR...
    return 0
  argv = sys.argv[1:] if argv is None else list(argv)
  args = p.parse_args(argv)
  args.argv = argv
  if args.cap % args.chunk:
    print(f"cap {args.cap} is not a multiple of chunk {args.chunk}", file=sys.stderr)
    return 2
  config = config_lib.load(args.config)
  commit = study_lib.git_commit(paths=E.PATHS)
  t0 = time.perf_counter()
  os.makedirs(args.workdir, exist_ok=True)
  if not os.path.exists(os.path.join(args.workdir, ARGS_FILE)):  # the first call's
    with open(os.path.join(args.workdir, ARGS_FILE), "w") as f:
      json.dump(argv, f)
  table = study.Table(metrics_lib.MetricsWriter(args.workdir))
  try:
    done = (run_path if args.method == "path" else run_baseline)(config, args, table)
  except ForkError as e:  # a --fork that does not fit this cell: one line
    print(str(e), file=sys.stderr)
    return 2
  if done is None:  # --lanes
    return 0
  if not done:
    print("time budget reached: rerun the same command to resume", flush=True)
    return 3
  write(table, args, commit, time.perf_counter() - t0)
  return 0


if __name__ == "__main__":
  sys.exit(main())
