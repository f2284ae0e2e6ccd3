"""Latent debate (arXiv 2512.01909): which statement families can the model judge?

The study needs a setting where the model is above chance but still errs (errors to
detect). This screens candidate families and prompts on a screening set kept apart from
the study's statements (`statements.generate(..., exclude=<the study set>)`, another
seed): for each few-shot count it runs the main template (0) once per statement and
reports, per family, the accuracy of the calibrated decision (threshold at the median
logit difference of all screened statements, as a study of all of them calibrates; and
at the family's own median, as a study of that family alone does), the raw accuracy
(threshold 0) and the AUROC of the logit difference against the labels, and beside it
the AUROC of the input-only detectors (`cues.py`: the additive surface logreg and the
words crossed with one number, each number slot; fitted on a large generated sample of
the family kept apart from the screened and the study's statements, so they show what
the input alone gives on the same statements). The rule (set before the cue-free screen,
issue 42; the word x number detector added after the review rev42c): a family is kept
when its own-median accuracy lies in [lo, hi] (above chance, errors left) AND the
model's AUROC beats max(0.5, the strongest input-only AUROC) by more than 2 null
standard deviations of an AUROC on that many statements.
With --shot_source=family each family's few-shot prefix holds that family's own
examples.

  python -m jaxpapers.papers.latent_debate.screen --out=/tmp/ld_screen --shots=0,1
  python -m jaxpapers.papers.latent_debate.screen --out=/tmp/ld_screen_f --shots=2,4,6 \
      --shot_source=family

Each shots setting is saved as an npz in --out as soon as it is computed (resumable).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from jaxpapers.papers.latent_debate import cues, detectors, lm as lm_lib, statements


def logit_diffs(lm, sents, shots: int, template: int = 0, batch: int = 32,
                examples=None) -> np.ndarray:
  tokens, last = lm_lib.encode(lm, sents, template)
  fn = lm_lib.batched_decompose(lm, (), False,
                                prefix=lm_lib.prefix_cache(lm, template, shots, examples))
  out = lm_lib.run_rows(fn, lm.params, tokens, last, batch)
  return out["logit_true"] - out["logit_false"]


def input_only_scores(ss, exclude, n_fit: int = 2000, seed: int = 21) -> dict:
  """{detector: p(true)} of each screened statement from the input-only detectors
  (`cues.py`) of its family: the surface logreg and the word x number logreg of each
  number slot, fitted on up to `n_fit` generated statements of that family, none of them
  screened or excluded (the study's). 0.5 where a detector does not apply."""
  out = {"surface": np.full(len(ss), 0.5)}
  fams = np.asarray(ss.families)
  for f in sorted(set(ss.families)):
    m = np.flatnonzero(fams == f)
    n = min(n_fit, 2 * (cues.capacity(f) // 2))
    fit = None
    while fit is None:
      try:
        fit = statements.generate((f,), n, seed, exclude=set(ss.statements) | set(exclude))
      except ValueError:          # a small family: fewer statements left
        n = 2 * (n // 4)
        if n < 8:
          break
    if fit is None:
      continue
    surf = cues.Surface(fit.statements)
    sents = [ss.statements[i] for i in m]
    out["surface"][m], _ = cues.fit_score(surf(fit.statements), fit.labels, surf(sents))
    for slot in range(min(cues.n_slots(fit.statements), cues.n_slots(sents))):
      inter = cues.Interaction(fit.statements, slot)
      p = out.setdefault(f"word x number {slot}", np.full(len(ss), 0.5))
      p[m], _ = cues.fit_score(inter(fit.statements), fit.labels, inter(sents))
  return out


def summarize(diff, labels, families, lo: float, hi: float, p_input=None) -> dict:
  fams = np.asarray(families)
  thr = float(np.median(diff))
  res = {"threshold": thr, "families": {}}
  for f in sorted(set(families)):
    m = fams == f
    acc = float(((diff[m] > thr) == labels[m]).mean())
    # a study of this family alone calibrates on its own statements' median
    acc_f = float(((diff[m] > np.median(diff[m])) == labels[m]).mean())
    model = detectors.auroc(labels[m], diff[m])
    r = {"n": int(m.sum()), "accuracy_calibrated": acc, "accuracy_family_calibrated": acc_f,
         "accuracy_raw": float(((diff[m] > 0) == labels[m]).mean()),
         "auroc_truth": model,
         "null_sd": cues.null_sd(int(labels[m].sum()), int((1 - labels[m]).sum()))}
    keep = lo <= acc_f <= hi
    if p_input is not None:   # the strongest input-only detector is the bar
      if not isinstance(p_input, dict):
        p_input = {"surface": p_input}
      r["input_aurocs_truth"] = {k: detectors.auroc(labels[m], p[m]) for k, p in p_input.items()}
      r["input_auroc_truth"] = max(r["input_aurocs_truth"].values())
      keep = keep and model - max(0.5, r["input_auroc_truth"]) > 2 * r["null_sd"]
    r["keep"] = bool(keep)
    res["families"][f] = r
  return res


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", required=True)
  ap.add_argument("--lm", default="smollm2")
  ap.add_argument("--families", default="+".join(statements.ALL_FAMILIES))
  ap.add_argument("--n", type=int, default=40, help="screening statements per family")
  ap.add_argument("--study_families", default="category",
                  help="'+'-separated families of the study (their statements are excluded)")
  ap.add_argument("--study_n", type=int, default=240, help="the study's n_per_family")
  ap.add_argument("--shots", default="0,6")
  ap.add_argument("--templates", default="0")
  ap.add_argument("--shot_source", default="fixed", choices=("fixed", "family"),
                  help="fixed: lm.SHOTS; family: each family's own generated examples")
  ap.add_argument("--lo", type=float, default=0.65)
  ap.add_argument("--hi", type=float, default=0.95)
  a = ap.parse_args(argv)
  fams = tuple(a.families.split("+"))
  os.makedirs(a.out, exist_ok=True)
  study = set()
  study_by = {f: set(statements.generate((f,), a.study_n, 0).statements)
              for f in a.study_families.split("+")}   # one rng stream per family
  study = set().union(*study_by.values())
  max_shots = max(int(x) for x in a.shots.split(","))
  examples = {}    # per family, as the study would draw them (never a study statement)
  if a.shot_source == "family":
    examples = {f: statements.family_examples((f,), max_shots, study_by.get(f, ()))
                for f in fams}
  shown = {q for ex in examples.values() for q, _ in ex}
  ss = statements.generate(fams, a.n, seed=1, exclude=study | shown)
  assert not (study | shown) & set(ss.statements)
  p_input = input_only_scores(ss, study | shown)
  lm = lm_lib.load(a.lm)
  report = {"command": "python -m jaxpapers.papers.latent_debate.screen " +
            " ".join(argv or os.sys.argv[1:]), "n_per_family": a.n, "lo": a.lo, "hi": a.hi,
            "shots": {}}
  settings = [(t, s) for t in (int(x) for x in a.templates.split(","))
              for s in (int(x) for x in a.shots.split(","))]
  for template, shots in settings:
    name = f"template{template}_shots{shots}" + ("_family" if examples else "")
    path = os.path.join(a.out, f"{name}.npz")
    if os.path.exists(path) and list(np.load(path)["statements"]) == ss.statements:
      diff = np.load(path)["diff"]
    else:
      t = time.perf_counter()
      if examples:   # each family behind its own examples' prefix
        diff = np.zeros(len(ss))
        fam_arr = np.array(ss.families)
        for f in fams:
          m = np.flatnonzero(fam_arr == f)
          diff[m] = logit_diffs(lm, [ss.statements[i] for i in m], shots, template,
                                examples=examples[f][:shots] if shots else None)
      else:
        diff = logit_diffs(lm, ss.statements, shots, template)
      np.savez(path, diff=diff, statements=np.array(ss.statements))
      print(f"{name}: {len(ss)} statements in {time.perf_counter() - t:.0f} s", flush=True)
    r = summarize(diff, ss.labels, ss.families, a.lo, a.hi, p_input)
    report["shots"][name] = r
    print(f"{name} (threshold {r['threshold']:+.3f}):")
    for f, v in r["families"].items():
      print(f"  {f:12s} acc cal {v['accuracy_calibrated']:.3f} family-cal "
            f"{v['accuracy_family_calibrated']:.3f} raw {v['accuracy_raw']:.3f} "
            f"AUROC {v['auroc_truth']:.3f} (input only {v['input_auroc_truth']:.3f}, null sd "
            f"{v['null_sd']:.3f}) {'keep' if v['keep'] else ''}", flush=True)
  with open(os.path.join(a.out, "screen.json"), "w") as fh:
    json.dump(report, fh, indent=1)
  return report


if __name__ == "__main__":
  main()
