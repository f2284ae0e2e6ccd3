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

Then (`max_steps` > 0, `select_training`) each set's Adam steps and learning rate by the
same rule at its (capacity, code) pick: snapshots 100, 200, 400, ... of one run per rate,
both grids extended while the pick is on their edge; with `lpr_bits`, the AE with LPR
chooses its own steps and rate by the same rule at the same (capacity, code) pick.

The AE's choice is used by the whole AE family (VAE, DAE, MemAE), with and without LPR,
except the steps and rate of the AE with LPR where it chose its own (`lpr_training`).
Each (set, code) pair is a stacked "dataset" with its own `code_n`; `detectors.fit`
runs all of one set's entries and seeds as one program at the set's own shapes, so a
set's validation AUROCs do not depend on which sets share the call.
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
           extend: bool = False, fit=None, max_steps: int = 0,
           lrs=(3e-4, 1e-3, 3e-3), lpr_bits: float = 0.0) -> list:
  """Per set: the AE's code size and PCA's k by the validation rule (module docstring).

  `archs`: the capacities searched for every set. `extend`: DONE.md's "extend the grid
  until the choice is inside it", as a rule: a set whose (capacity, code) pick is at the
  largest capacity it has searched also searches the next rung of `ARCHS` (x 2 wider),
  and so on, until its pick is below the top or the ladder ends (`capacity_edge`).
  `partial`: a file keeping the validation AUROCs of every finished (capacity, set,
  code), written after each capacity, so a killed selection resumes after the last
  finished capacity (a study split into jobs); stale or foreign entries are keyed out.
  `fit`: `detectors.fit` (a test can wrap it). `max_steps` > 0: then each set's
  training length and learning rate by the same rule at its (capacity, code) pick
  (`select_training`, starting from snapshots up to `max_steps` and the rates `lrs`).
  `lpr_bits` > 0 (with `max_steps`): the AE with LPR at that width chooses its own
  steps and rate by the same rule at the same (capacity, code) pick (`lpr_training` in
  each row; issue 50, tenth pass: the LPR gain depends on the training length, so
  AE+LPR must not inherit the plain AE's early-stopped length).

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
  # (`eval_steps`, added with the training-length stage, is left out of the key while
  # unset, so partial files of earlier selections stay valid.)
  fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "eval_steps" or v}
  key = json.dumps([[int(s) for s in seeds], fields], default=str)
  # Entries are keyed by set name, a digest of its validation rows and the code size.
  digest = [hashlib.sha1(b"".join(np.ascontiguousarray(a).tobytes() for a in (
      v.x_train, v.y_train, v.x_test, v.y_test))).hexdigest()[:12] for v in vals]
  names = [f"{d.name}/{h}" for d, h in zip(data, digest)]
  ekey = [f"{names[j]}/{c}" for j, c in entries]
  auc = {}
  train = {}  # the training-length stage's runs (select_training)
  if partial and os.path.exists(partial):
    with open(partial) as f:
      saved = json.load(f)
    if saved.get("key") == key:
      auc, train = saved["auc"], saved.get("train", {})
  searched = [[] for _ in data]

  def save():
    if partial:
      with open(partial + ".tmp", "w") as f:
        json.dump({"key": key, "auc": auc, "train": train}, f)
      os.replace(partial + ".tmp", partial)  # atomic: a kill never leaves half a file

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
      save()
    for j in active:
      searched[j].append(arch)
  picks = [pick(j) for j in range(len(data))]
  trained = (select_training(cfg, vals, names, picks, seeds, max_steps, lrs, train, save,
                             fit, opt_level) if max_steps else [{}] * len(data))
  if max_steps and lpr_bits > 0:
    own = select_training(cfg, vals, names, picks, seeds, max_steps, lrs, train, save, fit,
                          opt_level, bits=lpr_bits)
    trained = [{**t, "lpr_training": {"bits": float(lpr_bits), **o}}
               for t, o in zip(trained, own)]
  rows = []
  for j, d in enumerate(data):
    ae_val = {a: [auc[a][f"{names[j]}/{c}"] for c in grids[j]] for a in searched[j]}
    arch, code = picks[j]
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
                 "pca_grid": pgrid, "pca_val": pca_val, "pca_k": _pick(pgrid, pca_val),
                 **trained[j]})
  return rows


# The training-length stage: snapshots every doubling from 100 steps, up to STEPS[-1];
# learning rates a ladder of x ~3 steps, every set starting from `lrs`.
STEPS = (100, 200, 400, 800, 1600, 3200, 6400)
LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)


def select_training(cfg, vals, names, picks, seeds, max_steps: int, lrs, train: dict,
                    save, fit, opt_level: int = -1, bits: float = 0.0) -> list:
  """Per set: Adam steps and learning rate by the validation rule, at its (capacity,
  code) pick.

  The same rule as the capacity and code: the plain AE (no LPR) trained on the set's
  70% for every study seed, scored by AUROC on its 30%; the (steps, lr) pair with the
  best mean wins, ties to fewer steps, then the smaller rate. One run of S steps
  scores its model after every snapshot of `STEPS` up to S (`DetectorConfig.eval_steps`),
  so the grid's steps cost one training. Grids are extended while a pick is on their
  edge (DONE.md): a pick at the largest rate searched adds the next rate of `LRS` (the
  smallest: the previous one), a pick at S = the longest run retrains every rate of
  the set for 2S steps; until the pick is inside or the ladders end (`lr_edge`,
  `steps_edge`: a pick at 6400 steps, or at the first snapshot, 100 steps, below which
  nothing is searched). `train` keeps every finished (set, capacity, code, lr, S) run (`save`
  writes it after each program: the selection resumes). Returns one dict per set:
  `steps`, `lr`, the grids and validation AUROCs (`train_val`: {lr: [per snapshot]}),
  the training loss per snapshot (`train_loss`: mean over seeds of the minibatch loss
  over the 50 steps before it) and the edge flags. `bits` > 0: the same for the AE with
  LPR at that width (its runs keyed apart from the plain AE's).
  """
  bad = [r for r in lrs if r not in LRS]
  if bad or not lrs or max_steps not in STEPS:
    raise ValueError(f"model.select_lrs {tuple(lrs)} must be in {LRS} and "
                     f"model.select_steps={max_steps} in {STEPS}")
  lr_sets = [sorted(lrs) for _ in vals]
  top = [max_steps for _ in vals]

  def tkey(j, lr, steps):
    arch, code = picks[j]
    return f"{names[j]}/{arch}/{code}/{lr:g}/{steps}" + (f"/lpr{bits:g}" if bits else "")

  def choose(j):
    snaps = [s for s in STEPS if s <= top[j]]
    cands = [(s, r) for s in snaps for r in lr_sets[j]]  # the tie order: fewer steps
    return _pick(cands, [train[tkey(j, r, top[j])]["val"][snaps.index(s)] for s, r in cands])

  while True:
    todo = [(j, r) for j in range(len(vals)) for r in lr_sets[j]
            if tkey(j, r, top[j]) not in train]
    for arch, steps in sorted({(picks[j][0], top[j]) for j, _ in todo},
                              key=lambda a: (ARCHS.index(a[0]), a[1])):
      group = [(j, r) for j, r in todo if (picks[j][0], top[j]) == (arch, steps)]
      snaps = tuple(s for s in STEPS if s < steps)
      stacked = detectors.pad_stack([vals[j] for j, _ in group],
                                    code_n=[picks[j][1] for j, _ in group],
                                    lr=[r for _, r in group])
      ds, sd = [a.ravel() for a in np.meshgrid(np.arange(len(group)), np.asarray(seeds),
                                               indexing="ij")]
      run_cfg = dataclasses.replace(arch_config(cfg, arch), steps=steps, eval_steps=snaps)
      out = fit(run_cfg, stacked, ds, sd, np.full(len(ds), float(bits)), opt_level)
      val = np.concatenate([np.asarray(out["auroc_at"]).reshape(len(ds), -1),
                            np.asarray(out["auroc"]).reshape(len(ds), 1)], 1)
      val = 100 * val.reshape(len(group), len(seeds), -1).mean(1)
      losses = np.asarray(out["losses"]).reshape(len(group), len(seeds), steps).mean(1)
      win = [losses[:, max(0, s - 50):s].mean(1) for s in snaps + (steps,)]
      for g, (j, r) in enumerate(group):
        train[tkey(j, r, steps)] = {"val": [float(v) for v in val[g]],
                                    "loss": [float(w[g]) for w in win]}
      save()
    moved = False
    for j in range(len(vals)):
      s, r = choose(j)
      i = LRS.index(r)
      if r == lr_sets[j][-1] and i + 1 < len(LRS):
        lr_sets[j].append(LRS[i + 1])
      elif r == lr_sets[j][0] and i > 0:
        lr_sets[j].insert(0, LRS[i - 1])
      elif s == top[j] and top[j] < STEPS[-1]:
        top[j] *= 2
      else:
        continue
      moved = True
    if not moved:
      break
  rows = []
  for j in range(len(vals)):
    s, r = choose(j)
    snaps = [t for t in STEPS if t <= top[j]]
    rows.append({"steps": s, "lr": r, "steps_grid": snaps, "lr_grid": list(lr_sets[j]),
                 "train_val": {f"{q:g}": train[tkey(j, q, top[j])]["val"]
                               for q in lr_sets[j]},
                 "train_loss": {f"{q:g}": train[tkey(j, q, top[j])]["loss"]
                                for q in lr_sets[j]},
                 "lr_edge": r in (LRS[0], LRS[-1]), "steps_edge": s in (STEPS[0], STEPS[-1])})
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


def training_table(rows: list, lpr: bool = False) -> list:
  """Markdown rows of the training-length stage (rows without it are skipped; `lpr`:
  the AE with LPR's own stage, `lpr_training`, rows without it skipped): per
  learning rate searched, the validation AUROC after each snapshot, [chosen]; at the
  chosen rate, the validation AUROC's change over the next doubling and to the best
  longer run (<= 0 by the rule: the curve does not rise past the pick), and the
  training loss at the pick and at twice its steps."""
  out = []
  for r in rows:
    if lpr:
      if "lpr_training" not in r:
        continue
      r = {**r, **r["lpr_training"]}
    if "steps" not in r:
      continue
    row = {"dataset": r["dataset"], "pick": f"{r['arch']} {r['code']}",
           "steps": " ".join(map(str, r["steps_grid"]))}
    for q in LRS:
      vals = r["train_val"].get(f"{q:g}")
      row[f"lr {q:g}: val. AUROC per steps"] = "-" if vals is None else " ".join(
          f"[{v:.1f}]" if (s, q) == (r["steps"], r["lr"]) else f"{v:.1f}"
          for s, v in zip(r["steps_grid"], vals))
    loss = r["train_loss"][f"{r['lr']:g}"]
    val = r["train_val"][f"{r['lr']:g}"]
    i = r["steps_grid"].index(r["steps"])
    row["chosen"] = f"{r['steps']} steps, lr {r['lr']:g}"
    # The validation curve past the pick: the next doubling and the best longer run.
    row["val. 2x pick - pick; best longer - pick"] = (
        f"{val[i + 1] - val[i]:+.2f}; {max(val[i + 1:]) - val[i]:+.2f}"
        if i + 1 < len(val) else "- (top: edge)")
    row["train loss at pick / 2x pick"] = (
        f"{loss[i]:.4g} / {loss[i + 1]:.4g} ({100 * (1 - loss[i + 1] / loss[i]):+.0f}% fall)"
        if i + 1 < len(loss) else f"{loss[i]:.4g} / - (top: edge)")
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
