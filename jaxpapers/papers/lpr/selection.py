"""LPR: Layer Precision Reduction for AE anomaly detection -- per-set bottleneck selection.

Issue 50: the plain AE must match its linear special case, PCA reconstruction error,
on every set. A single code size cannot: a 16-unit code is no bottleneck on a 9-feature
table (breastw), while PCA keeps 1 of 9 directions. So the bottleneck, the one
hyper-parameter that scales with the input width, is chosen per set, for the AE and for
PCA's k alike, and with it the AE's capacity (`ARCHS`, a ladder: the linear AE
d -> code -> d, the smallest member of the family, which PCA's optimum belongs to, the
study's deep AE, then the same depth 2x (wide), 4x (wider), 8x and 16x as wide), by one
rule that never sees a test row:

  * each set's TRAINING split is split again, stratified 70/30 (data seed), as in
    `ae_tuning.validation_split`;
  * grid: code sizes (PCA: components) 1, 2, 4, ... below d, and d - 1, capped at the
    network's `latent` width (so it spans the whole range of bottlenecks; 1 and d - 1 are
    the ends of what a bottleneck can be, not arbitrary edges);
  * the AE (no LPR) is trained on the 70% with each code, for every study seed, and
    scored by AUROC on the 30% with the labels of those training rows; PCA the same;
  * the (capacity, code) pair (PCA: k) with the best validation AUROC, averaged over
    seeds, is chosen; ties go to the smaller model (linear, deep, wide, wider, x8, x16,
    then the smaller code or k);
  * capacities: every set searches `archs` (the study: linear, deep, wide); with
    `extend`, a set whose pick is at the largest capacity it searched also searches the
    next rung of the ladder, until its pick is below the top (DONE.md: extend the grid
    until the choice is inside it). A set whose pick is below its top is not searched
    further up: the rule assumes the validation AUROC does not rise again past a
    capacity that lost to a smaller one.

The AE's choice is used by the whole AE family (VAE, DAE, MemAE), with and without LPR.
All (set, code, seed) validation runs are one vmapped program: each (set, code) pair is
a stacked "dataset" with its own `code_n`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np
from sklearn import metrics
from sklearn import model_selection

from jaxpapers.papers.lpr import classical
from jaxpapers.papers.lpr import datasets as data_lib
from jaxpapers.papers.lpr import detectors


# Capacities searched: the linear AE (no hidden layer, linear code), the deep AE of the
# study's config (`model.hidden`, ReLU code) and the same depth with every hidden layer
# twice (64-32 -> 128-64, wide) and four times (256-128, wider) as wide; listed smallest
# first (the tie rule).
ARCHS = ("linear", "deep", "wide", "wider", "x8", "x16")
WIDTH_FACTOR = {"wide": 2, "wider": 4, "x8": 8, "x16": 16}


def arch_config(cfg: detectors.DetectorConfig, arch: str) -> detectors.DetectorConfig:
  """The detector config of a capacity: `cfg` itself (deep), its linear AE, or its
  hidden layers 2x (wide) or 4x (wider) as wide."""
  if arch == "deep":
    return cfg
  if arch == "linear":
    return dataclasses.replace(cfg, hidden=(), code_relu=False)
  if arch in WIDTH_FACTOR:
    return dataclasses.replace(cfg, hidden=tuple(WIDTH_FACTOR[arch] * h for h in cfg.hidden))
  raise ValueError(f"unknown capacity {arch!r}; expected one of {ARCHS}")


def code_grid(d: int, latent: int) -> list:
  """Code sizes searched for a set with d features: powers of two below d and d - 1,
  at most `latent` (the width of the network's code); at least [1]."""
  top = max(1, min(d - 1, latent))
  grid = {2 ** i for i in range(8) if 2 ** i <= top} | {top}
  return sorted(grid)


def validation_split(d: data_lib.ADData, seed: int = 0, frac: float = 0.3):
  """(fit, val) views of a set: its training rows split again, stratified; no test row."""
  idx_fit, idx_val = model_selection.train_test_split(
      np.arange(len(d.y_train)), test_size=frac, stratify=d.y_train, random_state=seed)
  return data_lib.ADData(d.name + "/val", d.x_train[idx_fit], d.y_train[idx_fit],
                         d.x_train[idx_val], d.y_train[idx_val])


def _pick(grid, vals) -> int:
  """The grid value of the best validation AUROC; ties (to 1e-9) go to the smaller one."""
  best = max(vals)
  return next(g for g, v in zip(grid, vals) if v >= best - 1e-9)


def _rungs(archs, extend: bool) -> list:
  """The capacities searched for every set (`archs`, smallest first), then, with
  `extend`, the larger rungs of `ARCHS` that a set searches only while its pick sits
  at the top of what it has searched."""
  top = ARCHS.index(archs[-1])
  return list(archs) + (list(ARCHS[top + 1:]) if extend else [])


def select(cfg: detectors.DetectorConfig, data: list, seeds, keeps=None, seed: int = 0,
           opt_level: int = -1, archs=ARCHS, partial: str | None = None,
           extend: bool = False, fit=None) -> list:
  """Per set: the AE's code size and PCA's k by the validation rule (module docstring).

  `archs`: the capacities searched for every set. `extend`: DONE.md's "extend the grid
  until the choice is inside it", as a rule: a set whose (capacity, code) pick is at the
  largest capacity it has searched also searches the next rung of `ARCHS` (x 2 wider),
  and so on, until its pick is below the top or the ladder ends (`capacity_edge`).
  `partial`: a file keeping the validation AUROCs of every finished (capacity, set,
  code), written after each capacity, so a killed selection resumes after the last
  finished capacity (a study split into jobs); stale or foreign entries are keyed out.
  `fit`: `detectors.fit` (a test can wrap it).

  `cfg` is the plain AE of the study (its `latent` caps the grid; no LPR in the rule).
  `keeps`: the classical detectors' column masks (PCA sees the same columns as in the
  study). Returns one dict per set with the grids, validation AUROCs (%) and choices.
  """
  assert cfg.kind == "ae", cfg.kind
  fit = fit or detectors.fit
  bad = [a for a in archs if a not in ARCHS]
  if bad or not archs:
    raise ValueError(f"model.select_archs: unknown {bad}; expected some of {ARCHS}")
  archs = tuple(a for a in ARCHS if a in archs)  # smallest first: the tie rule's order
  vals = [validation_split(d, seed) for d in data]
  grids = [code_grid(d.x_train.shape[1], cfg.latent) for d in data]
  entries = [(j, c) for j, g in enumerate(grids) for c in g]
  # One AUROC per (capacity, set, code): a set's validation runs do not depend on which
  # sets share the program (padding invariance, tests), so any saved entry is reusable.
  key = json.dumps([[int(s) for s in seeds], dataclasses.asdict(cfg)], default=str)
  # Entries are keyed by set name, a digest of its validation rows and the code size.
  digest = [hashlib.sha1(b"".join(np.ascontiguousarray(a).tobytes() for a in (
      v.x_train, v.y_train, v.x_test, v.y_test))).hexdigest()[:12] for v in vals]
  names = [f"{d.name}/{h}" for d, h in zip(data, digest)]
  ekey = [f"{names[j]}/{c}" for j, c in entries]
  auc = {}
  if partial and os.path.exists(partial):
    with open(partial) as f:
      saved = json.load(f)
    if saved.get("key") == key:
      auc = saved["auc"]
  searched = [[] for _ in data]

  def pick(j):
    cands = [(a, c) for a in searched[j] for c in grids[j]]
    return _pick(cands, [auc[a][f"{names[j]}/{c}"] for a, c in cands])

  for arch in _rungs(archs, extend):
    if arch in archs:
      active = list(range(len(data)))
    else:  # an extension rung: the sets whose pick is the previous (top) rung
      active = [j for j in range(len(data)) if pick(j)[0] == searched[j][-1]]
    if not active:
      break
    todo = [e for e, (j, _) in enumerate(entries)
            if j in active and ekey[e] not in auc.get(arch, {})]
    if todo:
      stacked = detectors.pad_stack([vals[entries[e][0]] for e in todo],
                                    code_n=[entries[e][1] for e in todo])
      ds, sd = [a.ravel() for a in np.meshgrid(np.arange(len(todo)), np.asarray(seeds),
                                               indexing="ij")]
      out = fit(arch_config(cfg, arch), stacked, ds, sd, np.zeros(len(ds)), opt_level)
      got = 100 * np.asarray(out["auroc"]).reshape(len(todo), len(seeds)).mean(1)
      auc.setdefault(arch, {}).update({ekey[e]: float(v) for e, v in zip(todo, got)})
      if partial:
        with open(partial + ".tmp", "w") as f:
          json.dump({"key": key, "auc": auc}, f)
        os.replace(partial + ".tmp", partial)  # atomic: a kill never leaves half a file
    for j in active:
      searched[j].append(arch)
  rows = []
  for j, d in enumerate(data):
    ae_val = {a: [auc[a][f"{names[j]}/{c}"] for c in grids[j]] for a in searched[j]}
    arch, code = pick(j)
    keep = None if keeps is None else keeps[j]
    # PCA's grid: the same sizes on the (kept) columns it is fit on.
    n_cols = int(d.x_train.shape[1] if keep is None else np.sum(keep))
    pgrid = code_grid(n_cols, cfg.latent)
    v = vals[j]
    pca_val = [100 * float(metrics.roc_auc_score(
        v.y_test, classical.score("pca_recon", v.x_train, v.x_test, 0,
                                  None if keep is None else keep, k))) for k in pgrid]
    # On an edge: the pick is the largest capacity searched and no larger one was tried.
    edge = arch == searched[j][-1] and (not extend or arch == ARCHS[-1])
    rows.append({"dataset": d.name, "d": int(d.x_train.shape[1]),
                 "val_anomalies": int(v.y_test.sum()), "val_rows": int(len(v.y_test)),
                 "code_grid": grids[j], "ae_val": ae_val, "arch": arch, "code": code,
                 "capacity_edge": bool(edge and len(searched[j]) > 1),
                 "pca_grid": pgrid, "pca_val": pca_val, "pca_k": _pick(pgrid, pca_val)})
  return rows


def table(rows: list) -> list:
  """Markdown rows: each set's grid with its validation AUROCs; the choice in brackets;
  '-' where a set did not search a capacity (its pick was below it)."""
  def fmt(grid, vals, pick):
    return " ".join(f"[{g}: {v:.1f}]" if g == pick else f"{g}: {v:.1f}"
                    for g, v in zip(grid, vals))
  archs = [a for a in ARCHS if any(a in r["ae_val"] for r in rows)]
  out = []
  for r in rows:
    row = {"dataset": r["dataset"], "d": r["d"],
           "val anomalies / rows": f"{r['val_anomalies']} / {r['val_rows']}"}
    for a in archs:
      row[f"{a} AE code: val. AUROC"] = (
          fmt(r["code_grid"], r["ae_val"][a], r["code"] if a == r["arch"] else None)
          if a in r["ae_val"] else "-")
    row["PCA k: val. AUROC"] = fmt(r["pca_grid"], r["pca_val"], r["pca_k"])
    out.append(row)
  return out


def load_or_select(path: str | None, names: list, fn) -> list:
  """The selection saved at `path` (a resumed run) if it covers `names`, else fn()."""
  if path and os.path.exists(path):
    with open(path) as f:
      rows = json.load(f)
    if [r["dataset"] for r in rows] == list(names):
      return rows
  rows = fn()
  if path:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
      json.dump(rows, f, indent=1)
    os.replace(path + ".tmp", path)  # atomic: a killed run never leaves half a file
  return rows
