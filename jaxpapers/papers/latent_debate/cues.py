"""Latent debate (arXiv 2512.01909): input-only detectors, the audit of surface cues.

A statement family is only a test of judgement if nothing on its surface gives the label
away. The independent review of issue 42 found that `negated_comparison`'s first number
did (the smaller number came first exactly for true statements), and that SmolLM2-135M
followed it. These detectors see the statement's text only, never the model:

  surface logreg   L2 logistic regression on additive surface features: each word, each
                   word at its position from the start and from the end (the slots of a
                   template), each number's value / 100, parity and digit count, the
                   count of numbers. Additive, so it reads each slot's association with
                   the label, not the fact that relates the slots (which is the task).
  numbers logreg   logistic regression on the statement's numbers alone, (a, b).
  difficulty       -|a - b| for a two-number statement (closer numbers are harder).
  word x number    logistic regression on the words crossed with ONE number (its value,
                   parity and digit count; each number slot in turn, the others unseen).
                   It solves a comparison partly ("87 is not larger than b" is false
                   with probability ~0.88 whatever b is): partial task solving, not a
                   planted cue, but a model that used it would look as if it judged, so
                   the "does the model judge?" gates compare with it too. Crossing the
                   words with both numbers would be the task itself (AUROC 1.0).

`audit` fits the surface and numbers detectors on a large generated sample of each family
and scores a second, disjoint one: a cue-free family's additive AUROC lies within noise
of 0.5 (the word x number detector is reported beside it, not part of the cue-free rule).

  python -m jaxpapers.papers.latent_debate.cues --out=results/cue_audit.json
"""
from __future__ import annotations

import argparse
import json
import re
import time

import numpy as np
from sklearn.feature_extraction import DictVectorizer
from sklearn.linear_model import LogisticRegression

from jaxpapers.papers.latent_debate import detectors, statements

_TOKEN = re.compile(r"[A-Za-z]+|\d+")
AUDIT_CS = (1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0)


def numbers(statement: str) -> list:
  return [int(x) for x in re.findall(r"\d+", statement)]


def surface_dict(statement: str, n_pos: int = 8) -> dict:
  toks = _TOKEN.findall(statement.lower())
  d = {}
  for i, t in enumerate(toks):
    key = "#" if t.isdigit() else t           # numbers enter through their values below
    d[f"w={key}"] = d.get(f"w={key}", 0) + 1
    if i < n_pos:
      d[f"p{i}={key}"] = 1
    if len(toks) - 1 - i < n_pos:
      d[f"q{len(toks) - 1 - i}={key}"] = 1
  nums = numbers(statement)
  d["n_numbers"] = len(nums)
  for k, v in enumerate(nums[:3]):
    d[f"num{k}"] = v / 100
    d[f"num{k}_odd"] = v % 2
    d[f"num{k}_digits"] = len(str(v))
  return d


class Surface:
  """The surface features' vectorizer, fitted on one set of statements."""

  def __init__(self, fit_statements):
    self.vec = DictVectorizer(sparse=False)
    self.vec.fit([surface_dict(s) for s in fit_statements])

  def __call__(self, sents) -> np.ndarray:
    return self.vec.transform([surface_dict(s) for s in sents]).astype(np.float64)


def interaction_dict(statement: str, slot: int) -> dict:
  """The words (a bag) crossed with the `slot`-th number's value / 100, parity and digit
  count; the other numbers are not seen."""
  words = sorted({t for t in _TOKEN.findall(statement.lower()) if not t.isdigit()})
  v = numbers(statement)[slot]
  num = {"num": v / 100, "odd": v % 2, "digits": len(str(v))}
  d = dict(num)
  for w in words:
    d[f"w={w}"] = 1
    for k, x in num.items():
      d[f"w={w}*{k}"] = x
  return d


class Interaction:
  """The word x one-number features' vectorizer, fitted on one set of statements."""

  def __init__(self, fit_statements, slot: int):
    self.slot = slot
    self.vec = DictVectorizer(sparse=False)
    self.vec.fit([interaction_dict(s, slot) for s in fit_statements])

  def __call__(self, sents) -> np.ndarray:
    return self.vec.transform([interaction_dict(s, self.slot)
                               for s in sents]).astype(np.float64)


def n_slots(sents, k_max: int = 3) -> int:
  """How many number slots every statement has (at most k_max)."""
  return min([k_max] + [len(numbers(s)) for s in sents])


def interaction_truth(sents, labels, tr, va, cs=AUDIT_CS):
  """p(true) of every statement from the word x one-number logreg fitted on `tr`, its
  number slot and C chosen by AUROC on `va`: (p, slot, C), or None without numbers."""
  best = None
  for slot in range(n_slots(sents)):
    inter = Interaction([sents[i] for i in tr], slot)
    x = inter(sents)
    for c in cs:
      p = _fit_predict(x[tr], labels[tr], x, c)
      a = detectors.auroc(labels[va], p[va])
      if best is None or a > best[0]:
        best = (a, p, slot, c)
  return None if best is None else best[1:]


def number_matrix(sents, k: int = 2):
  """(N, k) the first k numbers of each statement, or None if one has fewer."""
  rows = [numbers(s)[:k] for s in sents]
  if any(len(r) < k for r in rows):
    return None
  return np.asarray(rows, np.float64)


def difficulty(sents):
  """-|a - b| of the first two numbers (None if a statement has fewer than two)."""
  x = number_matrix(sents)
  return None if x is None else -np.abs(x[:, 0] - x[:, 1])


def _fit_predict(x_tr, y_tr, x_ev, c):
  xs_tr, xs_ev = detectors.standardize(x_tr, x_ev)
  return LogisticRegression(C=c, max_iter=3000).fit(xs_tr, y_tr).predict_proba(xs_ev)[:, 1]


def fit_score(x_tr, y_tr, x_ev, cs=AUDIT_CS, seed: int = 0):
  """p(label) on x_ev from a logreg whose C is chosen by 2-fold validation AUROC on the
  training set (the choice never sees x_ev)."""
  rng = np.random.default_rng(seed)
  half = rng.permutation(len(x_tr)) < len(x_tr) // 2
  def val_auc(c):
    return np.mean([detectors.auroc(y_tr[~m], _fit_predict(x_tr[m], y_tr[m], x_tr[~m], c))
                    for m in (half, ~half)])
  best = max(cs, key=val_auc)
  return _fit_predict(x_tr, y_tr, x_ev, best), best


def null_sd(n_pos: int, n_neg: int) -> float:
  """Standard deviation of the AUROC of an uninformative score (Mann-Whitney null)."""
  return float(np.sqrt((n_pos + n_neg + 1) / (12 * n_pos * n_neg)))


def capacity(family: str, draws: int = 4000, seed: int = 0) -> int:
  """About how many distinct statements per label the family's generator has (the
  distinct ones among `draws` draws per label)."""
  rng = np.random.default_rng([seed, 4242])
  return min(len({statements.make_statement(family, rng, t) for _ in range(draws)})
             for t in (True, False))


def disjoint_samples(family: str, n: int, seed: int):
  """Two disjoint halves (each exactly balanced) of `n` distinct statements of a family,
  or of half its distinct statements where it has fewer (`capacity`)."""
  n = min(n, 2 * (capacity(family) // 2))
  ss = statements.generate((family,), n, seed)
  halves = []
  for part in (0, 1):
    idx = np.concatenate([np.flatnonzero(ss.labels == y)[part::2] for y in (1, 0)])
    halves.append(statements.StatementSet([ss.statements[i] for i in idx], ss.labels[idx],
                                          [ss.families[i] for i in idx]))
  return halves


def audit(families, n_fit: int = 2000, n_eval: int = 2000, seed: int = 11, log=print):
  """Per family: test AUROC of the surface and numbers detectors (fit on one generated
  sample, scored on a disjoint one), with the null standard deviation."""
  out = {}
  for fam in families:
    fit, ev = disjoint_samples(fam, n_fit + n_eval, seed)
    surf = Surface(fit.statements)
    p, c = fit_score(surf(fit.statements), fit.labels, surf(ev.statements))
    r = {"n_fit": len(fit), "n_eval": len(ev), "surface_auroc": detectors.auroc(ev.labels, p),
         "surface_C": c, "null_sd": null_sd(int(ev.labels.sum()), int((1 - ev.labels).sum()))}
    xa, xb = number_matrix(fit.statements), number_matrix(ev.statements)
    if xa is not None and xb is not None:
      p, c = fit_score(xa, fit.labels, xb)
      r["numbers_auroc"] = detectors.auroc(ev.labels, p)
      r["first_number_auroc"] = detectors.auroc(ev.labels, -xb[:, 0])
    best = max(abs(r[k] - 0.5) for k in ("surface_auroc", "numbers_auroc") if k in r)
    r["z"] = best / r["null_sd"]
    r["cue_free"] = bool(r["z"] < 3)
    if n_slots(fit.statements) and n_slots(ev.statements):
      # partial task solving: the words with one number (each slot; not in the rule)
      r["word_x_number_auroc"] = {}
      for slot in range(min(n_slots(fit.statements), n_slots(ev.statements))):
        inter = Interaction(fit.statements, slot)
        p, _ = fit_score(inter(fit.statements), fit.labels, inter(ev.statements))
        r["word_x_number_auroc"][f"number {slot}"] = detectors.auroc(ev.labels, p)
      r["word_x_number_best"] = max(r["word_x_number_auroc"].values())
    out[fam] = r
    log(f"{fam:22s} surface {r['surface_auroc']:.3f}"
        + (f" numbers {r['numbers_auroc']:.3f} (-a alone {r['first_number_auroc']:.3f})"
           if "numbers_auroc" in r else "")
        + f" null sd {r['null_sd']:.3f} -> {'cue-free' if r['cue_free'] else 'CUE'}"
        + (f"; word x one number {r['word_x_number_best']:.3f}"
           if "word_x_number_best" in r else ""),
        flush=True)
  return out


def answer_policy(sents, labels, diff) -> dict:
  """What a comparison family's answers follow: the AUROC of the model's logit difference
  for the truth, for "a < b" and for the relation word "smaller", overall and per word."""
  x = number_matrix(sents)
  smaller = np.array(["smaller" in s for s in sents]).astype(int)
  a_lt_b = (x[:, 0] < x[:, 1]).astype(int)
  out = {"truth": detectors.auroc(labels, diff), "a < b": detectors.auroc(a_lt_b, diff),
         "word 'smaller'": detectors.auroc(smaller, diff)}
  for w, name in ((0, "larger"), (1, "smaller")):
    m = smaller == w
    out[f"with '{name}': truth"] = detectors.auroc(labels[m], diff[m])
    out[f"with '{name}': a < b"] = detectors.auroc(a_lt_b[m], diff[m])
  return out


def study_policy(workdir: str) -> dict:
  """`answer_policy` of a study's cached template-0 logit differences (its config.json
  names the statements)."""
  import glob  # pylint: disable=g-import-not-at-top
  with open(f"{workdir}/config.json") as f:
    cfg = json.load(f)
  d = cfg["data"]
  ss = statements.generate(tuple(d["families"]), d["n_per_family"], d["seed"])
  (cache,) = glob.glob(f"{workdir}/cache/*/")
  chunks = sorted(glob.glob(f"{cache}t0_c*.npz"),
                  key=lambda p: int(re.search(r"_c(\d+)\.npz$", p)[1]))
  diff = np.concatenate([np.load(p)["logit_true"] - np.load(p)["logit_false"]
                         for p in chunks])[:len(ss)]
  out = answer_policy(ss.statements, ss.labels, diff)
  # the study's folds: the test AUROC of the word x one-number logreg, as the study's
  # analysis computes it (`analysis.analyze`; input only, so no forward pass is needed)
  from jaxpapers.papers.latent_debate import analysis  # pylint: disable=g-import-not-at-top
  sp = cfg["split"]
  fam_ids, _ = ss.family_ids()
  folds = []
  for k in range(sp["n_splits"]):
    tr, va, te = analysis.fold_split(fam_ids * 2 + ss.labels, k, sp["n_splits"], sp["seed"])
    p, slot, c = interaction_truth(ss.statements, ss.labels, tr, va, tuple(cfg["probe"]["cs"]))
    folds.append({"test_auroc": detectors.auroc(ss.labels[te], p[te]), "slot": slot, "C": c})
  return out, folds


def main(argv=None):
  ap = argparse.ArgumentParser(description="surface-cue audit of the statement families")
  ap.add_argument("--out", required=True)
  ap.add_argument("--families", default="+".join(statements.ALL_FAMILIES))
  ap.add_argument("--n", type=int, default=2000)
  ap.add_argument("--study_workdir", default="",
                  help="instead: what a comparison study's answers follow (its cache)")
  a = ap.parse_args(argv)
  if a.study_workdir:
    res, folds = study_policy(a.study_workdir)
    v = [r["test_auroc"] for r in folds]
    with open(a.out, "w") as f:
      json.dump({"workdir": a.study_workdir, "auroc_of_logit_difference": res,
                 "input only: truth AUROC of the word x one-number logreg (test, per fold)":
                 folds, "mean": float(np.mean(v)), "std": float(np.std(v))}, f, indent=1)
    print(json.dumps(res, indent=1), json.dumps(folds), f"{np.mean(v):.3f} +- {np.std(v):.3f}")
    return
  t = time.perf_counter()
  res = audit(tuple(a.families.split("+")), a.n, a.n)
  with open(a.out, "w") as f:
    json.dump({"command": "python -m jaxpapers.papers.latent_debate.cues "
               + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
               "rule": "cue-free iff the larger of |AUROC - 0.5| (surface, numbers) is "
                       "below 3 null standard deviations", "families": res,
               "wall_s": time.perf_counter() - t}, f, indent=1)


if __name__ == "__main__":
  main()
