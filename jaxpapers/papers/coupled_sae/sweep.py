"""Multisubject coupled SAE (abstract 1): what the simulator decides (issue 45, item 1).

Sweeps the simulator: dense fraction x planted atoms, for the TopK-ReLU generator (the
model's own class) and the smooth one (no threshold, no TopK), every cell over seeds, and
reports coupled / two-stage / PCA (and the oracle) as % of dense ridge, mean and std over
seeds. Each (cell, seed) row is appended to `sweep_rows.jsonl` as it finishes, so a killed
sweep resumes; the table `sweep.md` is rebuilt from the rows. Features come from the
workdir's cache (extracted once, as in the study).

  python -m jaxpapers.papers.coupled_sae.sweep --workdir=/tmp/csae_sweep \
      --config="steps=600,n_subjects=3" --generators=topk,smooth --dense=0,0.3,0.6,0.9 \
      --planted=10,50,200 --seeds=0,1,2
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import time

import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.coupled_sae import data as data_lib
from jaxpapers.papers.coupled_sae import experiment
from jaxpapers.papers.coupled_sae import methods

METHODS = ("coupled", "two_stage", "pca", "pca_tuned", "coupled_refit", "oracle")


def edges(config, row) -> dict:
  """Whether a row's selected coupled (lr, beta), PCA k and SAE lr lie on their grid's edge."""
  t = config.train
  on = lambda v, g: len(g) > 1 and (v <= min(g) * (1 + 1e-6) or v >= max(g) * (1 - 1e-6))  # noqa: E731
  out = {"edge_coupled": bool(on(row["coupled_lr"], t.lrs) or on(row["coupled_beta"], t.betas))}
  if "pca_k" in row:
    out["edge_pca_k"] = bool(on(row["pca_k"], config.eval.pca_ks))
  if "two_stage_lr" in row:
    out["edge_two_stage"] = bool(on(row["two_stage_lr"], t.sae_lrs))
  return out


def row_of(config, out) -> dict:
  """The sweep's row of one seed's summary (`experiment.summarize` or a study seed)."""
  keep = [f"pct_dense_{m}" for m in METHODS] + [
      "r_dense", "recovery_coupled", "recovery_two_stage", "recovery_pca", "coupled_lr",
      "coupled_beta", "two_stage_lr", "pca_k", "pca_grid", "grid", "sae_grid"]
  row = {k: out[k] for k in keep if k in out}
  if "transfer" in out:
    row["transfer"] = out["transfer"]
  for k in ("repro", "align"):
    for m in ("coupled", "two_stage", "posthoc_pca", "truth"):
      if f"{k}_{m}" in out:
        row[f"{k}_{m}"] = out[f"{k}_{m}"]
  row.update(edges(config, row))
  return row


def run_cell(config, feats, seed: int, ckpt_dir: str | None = None, log=None) -> dict:
  """One (cell, seed) row. With `ckpt_dir` both grids are checkpointed every
  `train.ckpt_every` steps and a killed run resumes there (`methods.train_grid`)."""
  sfeats = data_lib.for_seed(feats, config, seed)
  resp = data_lib.responses_for(sfeats, config, seed)
  fit = methods.fit_all(config, sfeats, resp, seed, ckpt_dir=ckpt_dir,
                        log=log or (lambda *_: None))
  out, _ = experiment.summarize(config, sfeats, resp, fit, seed)
  return row_of(config, out)


def study_rows(study_dir: str, base) -> list:
  """Rows of a finished study (`launch/study.py` workdir) as sweep rows of its cell.

  The study runs the same `for_seed` / `responses_for` / `fit_all` / `summarize` chain
  as `run_cell`, so a study at the sweep's sizes is that cell; its training settings
  must equal the sweep's (else the rows would mix two settings).
  """
  with open(os.path.join(study_dir, "config.json")) as f:
    c = json.load(f)
  want = base.to_dict()
  for sec in ("train", "model", "data", "eval"):
    for k, v in want[sec].items():
      got = c[sec].get(k)
      same = (list(got) == list(v)) if isinstance(v, (tuple, list)) else got == v
      if not same:
        raise ValueError(f"--from_study {study_dir}: {sec}.{k}={got!r} differs from the "
                         f"sweep's {v!r}")
  for k in ("n_subjects", "rows", "cols", "peak_ceiling"):
    if c["sim"][k] != want["sim"][k]:
      raise ValueError(f"--from_study {study_dir}: sim.{k}={c['sim'][k]!r} differs from the "
                       f"sweep's {want['sim'][k]!r}")
  sim = c["sim"]
  cfg = config_lib.override(base, {"sim.generator": sim["generator"],
                                   "sim.dense_frac": sim["dense_frac"],
                                   "sim.n_planted": sim["n_planted"]})
  rows = []
  seeds_dir = os.path.join(study_dir, "seeds")
  for name in sorted(os.listdir(seeds_dir)):
    if name.startswith("seed") and name.endswith(".json"):
      with open(os.path.join(seeds_dir, name)) as f:
        out = json.load(f)
      row = row_of(cfg, out)
      row.update(generator=sim["generator"], dense_frac=sim["dense_frac"],
                 n_planted=sim["n_planted"], seed=out["seed"], seconds=out.get("seconds"),
                 overrides=f"from_study={study_dir}")
      rows.append(row)
  return rows


def table(rows, shift=None) -> str:
  """Per cell: each method's % of dense ridge, and the coupled model's paired per-seed gap
  to PCA and to two-stage (same subjects, stories, features). "better"/"worse": the gap's
  mean is beyond the largest seed std (either method's, or the gap's); else "within
  spread". `shift` ({baseline: (lo, hi)}, e.g. from `reduction_bias`): a call stands only
  if the gap moved by lo and by hi gets the same call; else "undecided"."""
  cells = {}
  for r in rows:
    cells.setdefault((r["generator"], r["dense_frac"], r["n_planted"]), []).append(r)
  lines = ["| generator | dense frac | planted atoms | seeds | coupled | two-stage | PCA-50 | "
           "PCA-k (k on val) | oracle | coupled - PCA-50 | vs PCA-50 | coupled - PCA-k | "
           "vs PCA-k | coupled - two-stage | vs two-stage | edge picks: coupled / SAE lr / PCA k |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  sd = lambda a: float(a.std(ddof=1)) if len(a) > 1 else 0.0  # noqa: E731
  f = lambda a: f"{a.mean():.1f} ± {sd(a):.1f}" if len(a) else "-"  # noqa: E731
  for (g, d, k), rs in sorted(cells.items()):
    # Rows from before the tuned PCA-k baseline lack it: its columns read "-".
    v = {m: np.array([r[f"pct_dense_{m}"] for r in rs if f"pct_dense_{m}" in r])
         for m in METHODS}
    cols = []
    for other in ("pca", "pca_tuned", "two_stage"):
      if len(v[other]) != len(rs):
        cols += ["-", "-"]
        continue
      gap = v["coupled"] - v[other]
      spread = max(sd(v["coupled"]), sd(v[other]), sd(gap))
      call = lambda m: ("better" if m > spread else  # noqa: E731
                        "worse" if m < -spread else "within spread")
      calls = {call(gap.mean() + s) for s in (shift or {}).get(other, (0.0,))} | {
          call(gap.mean())}
      cols += [f(gap), calls.pop() if len(calls) == 1 else "undecided"]
    edge = (" / ".join(str(sum(bool(r.get(e)) for r in rs))
                       for e in ("edge_coupled", "edge_two_stage", "edge_pca_k"))
            if all("edge_coupled" in r for r in rs) else "-")
    lines.append(f"| {g} | {d:g} | {k} | {len(rs)} | {f(v['coupled'])} | "
                 f"{f(v['two_stage'])} | {f(v['pca'])} | {f(v['pca_tuned'])} | "
                 f"{f(v['oracle'])} | " + " | ".join(cols) + f" | {edge} |")
  return "\n".join(lines)


def reduction_bias(reduced, full) -> dict:
  """{baseline: (lo, hi)}: over the cells in both row sets, the range of (full-size minus
  reduced) mean paired gap coupled - baseline, i.e. how far the reduced setting moved the
  call's quantity where both were run."""
  def gaps(rows):
    cells = {}
    for r in rows:
      cells.setdefault((r["generator"], r["dense_frac"], r["n_planted"]), []).append(r)
    return {c: {o: float(np.mean([r["pct_dense_coupled"] - r[f"pct_dense_{o}"] for r in rs]))
                for o in ("pca", "pca_tuned", "two_stage")} for c, rs in cells.items()}
  a, b = gaps(reduced), gaps(full)
  both = sorted(set(a) & set(b))
  if not both:
    raise ValueError("reduction_bias: no cell was run at both sizes")
  return {o: (min(b[c][o] - a[c][o] for c in both), max(b[c][o] - a[c][o] for c in both))
          for o in ("pca", "pca_tuned", "two_stage")}


def _gap_cell(a, b) -> str:
  """Paired per-seed gap a - b: mean ± std, how many seeds a is ahead, and the call
  ("better"/"worse" beyond the largest seed std of a, b or the gap; as `table`)."""
  sd = lambda x: float(x.std(ddof=1)) if len(x) > 1 else 0.0  # noqa: E731
  gap = a - b
  spread = max(sd(a), sd(b), sd(gap))
  call = ("better" if gap.mean() > spread else "worse" if gap.mean() < -spread
          else "within spread")
  return f"{gap.mean():+.3f} ± {sd(gap):.3f} ({int((gap > 0).sum())}/{len(gap)}, {call})"


def maps_table(rows, n_trs=(30, 60, 120)) -> str:
  """Per cell: held-out-subject transfer (ridge on the frozen coupled codes minus dense
  ridge, test r, paired per seed, at each low-data size) and the map analyses: Yeo-7
  alignment (purity above chance) and cross-subject reproducibility, coupled minus the
  post hoc PCA of dense ridge weights (the claims' comparison), with the two-stage and
  planted values beside them."""
  cells = {}
  for r in rows:
    cells.setdefault((r["generator"], r["dense_frac"], r["n_planted"]), []).append(r)
  head = (["generator", "dense", "planted", "seeds"]
          + [f"transfer {n} TRs: coupled / dense, gap" for n in n_trs]
          + ["align coupled / two-stage / post hoc PCA / planted", "align coupled - post hoc PCA",
             "repro coupled / two-stage / post hoc PCA", "repro coupled - post hoc PCA"])
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  f = lambda a: f"{a.mean():.3f}"  # noqa: E731
  for (g, d, k), rs in sorted(cells.items()):
    cols = []
    for n in n_trs:
      got = [next((t for t in r.get("transfer", []) if t["n_trs"] == n), None) for r in rs]
      if any(t is None for t in got):
        cols.append("-")
        continue
      c, dn = (np.array([t[m] for t in got]) for m in ("coupled", "dense"))
      cols.append(f"{f(c)} / {f(dn)}, {_gap_cell(c, dn)}")
    for key in ("align", "repro"):
      names = ("coupled", "two_stage", "posthoc_pca") + (("truth",) if key == "align" else ())
      if not all(f"{key}_{m}" in r for r in rs for m in names):
        cols += ["-", "-"]
        continue
      v = {m: np.array([r[f"{key}_{m}"] for r in rs]) for m in names}
      cols += [" / ".join(f(v[m]) for m in names), _gap_cell(v["coupled"], v["posthoc_pca"])]
    lines.append(f"| {g} | {d:g} | {k} | {len(rs)} | " + " | ".join(cols) + " |")
  return "\n".join(lines)


def file_rows(spec: str) -> list:
  """Rows of a committed study rows file as sweep rows: `path:generator:dense:planted`
  (the file, e.g. results/coupled_sae_rows.json, holds each seed's summary, not its
  config, so the cell is named; its training settings must be the sweep's)."""
  path, g, d, k = spec.rsplit(":", 3)
  with open(path) as fh:
    got = json.load(fh)
  return [dict(r, generator=g, dense_frac=float(d), n_planted=int(k),
               overrides=f"from_rows={path}", commit=got.get("commit")) for r in got["rows"]]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--config", default="", help="overrides of configs/coupled_sae.py")
  ap.add_argument("--generators", default="topk,smooth")
  ap.add_argument("--dense", default="0,0.3,0.6,0.9")
  ap.add_argument("--planted", default="10,50,200")
  ap.add_argument("--seeds", default="0,1,2")
  ap.add_argument("--from_study", default="",
                  help="comma-separated study workdirs whose seeds are rows of their cell")
  ap.add_argument("--from_rows", default="",
                  help="comma-separated path:generator:dense:planted of study rows files")
  ap.add_argument("--ckpt", action="store_true",
                  help="checkpoint each run's grids under WORKDIR/ckpt (a killed run resumes; "
                       "for runs longer than one job)")
  a = ap.parse_args(argv)
  floats = lambda s: [float(x) for x in s.split(",") if x]  # noqa: E731
  gens = [g for g in a.generators.split(",") if g]
  dense, planted = floats(a.dense), [int(x) for x in floats(a.planted)]
  seeds = [int(x) for x in floats(a.seeds)]
  base = config_lib.load("configs/coupled_sae.py" + (f":{a.config}" if a.config else ""))
  os.makedirs(a.workdir, exist_ok=True)
  path = os.path.join(a.workdir, "sweep_rows.jsonl")
  rows = []
  if os.path.exists(path):
    with open(path) as f:
      rows = [json.loads(line) for line in f if line.strip()]
  key = lambda r: (r["generator"], r["dense_frac"], r["n_planted"], r["seed"])  # noqa: E731
  for d in [x for x in a.from_study.split(",") if x]:
    have = {key(r) for r in rows}
    new = [r for r in study_rows(d, base) if key(r) not in have]
    with open(path, "a") as f:
      for r in new:
        f.write(json.dumps(experiment._jsonable(r)) + "\n")  # pylint: disable=protected-access
    rows += new
  for spec in [x for x in a.from_rows.split(",") if x]:
    have = {key(r) for r in rows}
    new = [dict(row_of(base, r), **{k: r[k] for k in ("generator", "dense_frac", "n_planted",
                                                    "seed", "overrides", "commit")},
                seconds=r.get("seconds")) for r in file_rows(spec)]
    new = [r for r in new if key(r) not in have]
    with open(path, "a") as f:
      for r in new:
        f.write(json.dumps(experiment._jsonable(r)) + "\n")  # pylint: disable=protected-access
    rows += new
  done = {key(r) for r in rows}
  # Stamped when the sweep starts ("-dirty": the paper's code has uncommitted changes).
  commit = os.environ.get("JAXPAPERS_COMMIT") or study_lib.git_commit(paths=experiment.PATHS)
  # XLA sizes its CPU thread pool by the CPUs this process may run on, and a pool of
  # another size rounds matmuls differently (TopK amplifies it): rows reproduce bit for
  # bit only at the same count (README, "Reruns and CPU threads").
  cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  feats = data_lib.features_for(base, os.path.join(a.workdir, "cache"))
  for g, d, k, seed in itertools.product(gens, dense, planted, seeds):
    if (g, d, k, seed) in done:
      continue
    cfg = config_lib.override(base, {"sim.generator": g, "sim.dense_frac": d,
                                     "sim.n_planted": k})
    t0 = time.time()
    ckpt = os.path.join(a.workdir, "ckpt", f"{g}_{d:g}_{k}_{seed}") if a.ckpt else None
    log = lambda *m: print(time.strftime("%H:%M:%S"), *m, flush=True)  # noqa: E731
    row = run_cell(cfg, feats, seed, ckpt_dir=ckpt, log=log)
    row.update(generator=g, dense_frac=d, n_planted=k, seed=seed,
               seconds=time.time() - t0, overrides=a.config, commit=commit, cpus=cpus)
    rows.append(row)
    with open(path, "a") as f:
      f.write(json.dumps(experiment._jsonable(row)) + "\n")  # pylint: disable=protected-access
    print(f"{g} dense={d:g} planted={k} seed={seed}: coupled {row['pct_dense_coupled']:.1f} "
          f"two-stage {row['pct_dense_two_stage']:.1f} PCA-50 {row['pct_dense_pca']:.1f} "
          f"PCA-k {row['pct_dense_pca_tuned']:.1f}; picked (lr, beta) ({row['coupled_lr']:g}, "
          f"{row['coupled_beta']:g}), SAE lr {row['two_stage_lr']:g}, k {row['pca_k']} "
          f"({row['seconds']:.0f} s)", flush=True)
  md = table(rows) + "\n\n" + maps_table(rows)
  with open(os.path.join(a.workdir, "sweep.md"), "w") as f:
    f.write(md + "\n")
  print(md)


if __name__ == "__main__":
  main()
