"""Latent debate (arXiv 2512.01909): faithfulness and hallucination detection on one split.

`analyze` takes the extracted arguments of a statement set and one stratified
train / validation / test split (by family and label) and measures:

  faithfulness  agreement of the surrogate's verdict with the model's answer on the test
                statements, for DF-QuAD and quadratic energy (each with its base-score
                temperature chosen on validation), per statement family, per layer
                subset (the debate built from some layers only) and per prompt template;
                positive control: the plain sum of the DLA arguments (exact, so 1.0);
                trivial model: the majority answer of the training statements
  detection     test AUROC of every detector for the model's errors, each detector's
                hyper-parameters chosen by validation AUROC over a printed grid
  depth         per-layer disagreement (final strength of layer arguments that oppose
                the answer) for erroneous vs correct answers, and its per-layer AUROC
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.latent_debate import cues, debate, detectors


def stratified_split(groups_N, seed: int, val: float, test: float):
  """Index arrays (train, val, test), each group (family x label) split in proportion."""
  rng = np.random.default_rng([seed, 12345])
  tr, va, te = [], [], []
  for g in np.unique(groups_N):
    idx = rng.permutation(np.flatnonzero(groups_N == g))
    n_va = max(1, int(round(val * len(idx))))
    n_te = max(1, int(round(test * len(idx))))
    va += list(idx[:n_va])
    te += list(idx[n_va:n_va + n_te])
    tr += list(idx[n_va + n_te:])
  return np.sort(tr), np.sort(va), np.sort(te)


def fold_split(groups_N, k: int, n_folds: int, seed: int):
  """Index arrays (train, val, test) of cross-fitting fold k: each group (family x label)
  dealt round-robin over `n_folds` folds after one shuffle (the same for every k); test
  = fold k, validation = fold k + 1, training = the rest. The test folds of k = 0..n-1
  partition the statements, so their test scores pool into one score per statement."""
  rng = np.random.default_rng([seed, 54321])
  fold = np.empty(len(groups_N), int)
  for g in np.unique(groups_N):
    idx = rng.permutation(np.flatnonzero(groups_N == g))
    fold[idx] = (np.arange(len(idx)) + int(rng.integers(n_folds))) % n_folds
  te = np.flatnonzero(fold == k % n_folds)
  va = np.flatnonzero(fold == (k + 1) % n_folds)
  tr = np.flatnonzero((fold != k % n_folds) & (fold != (k + 1) % n_folds))
  return tr, va, te


def layer_subsets(n_layers: int) -> dict:
  """0/1 masks over the L + 1 layer arguments (index 0 = embedding)."""
  L = n_layers
  third = np.array_split(np.arange(1, L + 1), 3)
  def mask(layers):
    m = np.zeros(L + 1)
    m[list(layers)] = 1
    return m
  no_embed = np.ones(L + 1)
  no_embed[0] = 0
  return {"all": np.ones(L + 1), "without embedding (and offset)": no_embed,
          "first half": mask(range(0, L // 2 + 1)),
          "second half": mask(range(L // 2 + 1, L + 1)), "middle third": mask(third[1]),
          "without middle third": mask([0, *third[0], *third[2]]),
          "even layers": mask(range(0, L + 1, 2))}


def _select(grid, score_fn, log, name):
  """argmax over `grid` of score_fn(value) (validation); prints the whole grid."""
  scores = [score_fn(v) for v in grid]
  finite = np.array([s if np.isfinite(s) else -np.inf for s in scores])
  # Ties (a flat stretch of the grid) resolve to the middle of the tied values.
  best = np.flatnonzero(finite == finite.max())
  i = int(best[len(best) // 2])
  # The tuned value is the last entry of a tuple (layer, value) grid; booleans have no edge.
  value = lambda g: g[-1] if isinstance(g, tuple) else g  # noqa: E731
  values = sorted({value(g) for g in grid})
  on_edge = (len(values) > 2 and not isinstance(values[0], bool)
             and value(grid[i]) in (values[0], values[-1]))
  edge = " (on the grid's edge)" if on_edge else ""
  log(f"  select {name}: " + ", ".join(f"{v}: {s:.3f}" for v, s in zip(grid, scores))
      + f" -> {grid[i]}{edge}")
  if edge:
    EDGES.append(name)
  return grid[i], edge != ""


EDGES = []  # selections of the current analyze() call that landed on a grid's edge


def calibrated(feats: dict, n_templates: int, train_idx, calibrate: bool) -> dict:
  """The decision threshold moved to the median training logit difference (per template).

  A calibrated decision is sign(logit_T - logit_F - b). The offset b joins the embedding
  argument (a constant prior that every statement shares), so the arguments still add up
  exactly to the decision's logit difference; logit_false absorbs b for the baselines.
  """
  if not calibrate:
    return feats
  out = dict(feats)
  for t in range(n_templates):
    d = dict(feats[f"t{t}"])
    b = float(np.median((d["logit_true"] - d["logit_false"])[train_idx]))
    d["logit_false"] = d["logit_false"] + b
    d["dla"] = d["dla"].copy()
    d["dla"][:, 0] -= b
    d["lens"] = d["lens"] - b
    d["offset"] = b
    out[f"t{t}"] = d
  return out


def analyze(config, feats: dict, labels_N, family_ids_N, family_names, split_seed: int,
            log=print, inputs=None) -> dict:
  """One split's measurements. `inputs` (the statements' texts) feed the input-only
  detectors (`cues.py`), which never see the model."""
  n_t = config.data.n_templates
  groups = family_ids_N * 2 + labels_N
  if config.split.scheme == "folds":
    tr, va, te = fold_split(groups, split_seed - config.split.seed, config.split.n_splits,
                            config.split.seed)
  else:
    tr, va, te = stratified_split(groups, split_seed, config.split.val, config.split.test)
  feats = calibrated(feats, n_t, tr, config.decision.calibrate)
  t0 = feats["t0"]
  dla = t0["dla"]
  L = (dla.shape[1] - 1) // 2
  diff = t0["logit_true"] - t0["logit_false"]
  answer = (diff > 0).astype(int)
  err = (answer != labels_N).astype(int)
  res = {"split": split_seed, "offset": float(t0.get("offset", 0.0)), "n_train": len(tr), "n_val": len(va), "n_test": len(te),
         "accuracy_test": float(1 - err[te].mean()), "error_rate_test": float(err[te].mean()),
         "answer_true_rate": float(answer.mean()),
         # does the model judge the statements? its logit difference against the truth
         "model_truth_auroc_test": detectors.auroc(labels_N[te], diff[te])}
  EDGES.clear()

  # ------------------------------------------------------------------ faithfulness
  def agreement(dla_x, temp, semantics, idx, mask=None, ans=answer, heads=None):
    # Always the whole set (one compiled shape), then the rows asked for.
    top, _ = debate.surrogate(dla_x, temp, semantics, mask, heads)
    return float((np.asarray(debate.verdict(top))[idx] == ans[idx]).mean())

  temps = tuple(config.debate.temps)
  chosen = {}
  for sem in ("dfquad", "qe"):
    temp, edge = _select(temps, lambda t, s=sem: agreement(dla, t, s, va), log,
                         f"{sem} temperature (val agreement)")
    chosen[sem] = temp
    res[f"temp_{sem}"] = temp
    res[f"agree_{sem}"] = agreement(dla, temp, sem, te)
    top, _ = debate.surrogate(dla, temp, sem)
    res[f"noverdict_{sem}"] = float((np.asarray(debate.verdict(top))[te] == -1).mean())
    res[f"verdict_true_{sem}"] = float((np.asarray(debate.verdict(top))[te] == 1).mean())
    # the strict rule: topic above its base 0.5 => True, else False (no ties)
    res[f"agree_{sem}_strict"] = float(((np.asarray(top)[te] > 0.5).astype(int)
                                        == answer[te]).mean())
    for fi, fam in enumerate(family_names):
      idx = te[family_ids_N[te] == fi]
      res[f"agree_{sem}/{fam}"] = agreement(dla, temp, sem, idx)
    for name, mask in layer_subsets(L).items():
      res[f"agree_{sem}/layers:{name}"] = agreement(dla, temp, sem, te, mask)
    for t in range(n_t):
      dt = feats[f"t{t}"]
      ans_t = (dt["logit_true"] - dt["logit_false"] > 0).astype(int)
      res[f"agree_{sem}/template{t}"] = agreement(dt["dla"], temp, sem, te, ans=ans_t)
  heads = t0.get("head_dla")                                   # (N, L, H) or absent
  if heads is not None:
    # Per-head arguments: each layer's children are its attention heads and its MLP.
    for sem in ("dfquad", "qe"):
      temp, _ = _select(temps, lambda t, s=sem: agreement(dla, t, s, va, heads=heads), log,
                        f"{sem} temperature, per-head debate (val agreement)")
      res[f"temp_{sem}_heads"] = temp
      res[f"agree_{sem}_heads"] = agreement(dla, temp, sem, te, heads=heads)
  res["agree_dla_sum"] = float(((dla[te].sum(1) > 0).astype(int) == answer[te]).mean())
  majority = int(answer[tr].mean() >= 0.5)
  res["agree_majority"] = float((answer[te] == majority).mean())
  mid = np.array_split(np.arange(1, L + 1), 3)[1]
  res["agree_lens_mid"] = float(((t0["lens"][te, mid[-1]] > 0) == answer[te]).mean())

  # ------------------------------------------------------------------ debate features
  _, strengths = debate.surrogate(jnp.asarray(dla), chosen["dfquad"], "dfquad")
  strengths = np.asarray(strengths)
  feat = debate.features(dla, t0["lens"], strengths, answer)
  names = sorted(feat)
  x_debate = np.stack([feat[k] for k in names], 1)

  # ------------------------------------------------------------------ detection
  auc = lambda idx, s: detectors.auroc(err[idx], s[idx])  # noqa: E731
  scores = {}
  p_true = 1 / (1 + np.exp(-diff))
  scores["probability"] = 1 - np.maximum(p_true, 1 - p_true)
  scores["margin"] = -np.abs(diff)
  scores["entropy"] = t0["entropy"]
  scores["mid-layer disagreement"] = feat["disagree_middle"]
  scores["mid-layer lens disagreement"] = feat["lens_disagree_middle"]
  if heads is not None:
    hfeat = debate.head_features(heads, answer)
    scores["mid-layer head disagreement"] = hfeat["head_disagree_middle"]
    res["auroc_head_disagree_early"] = auc(te, hfeat["head_disagree_early"])
    res["auroc_head_disagree_late"] = auc(te, hfeat["head_disagree_late"])
  res["auroc_disagree_early"] = auc(te, feat["disagree_early"])
  res["auroc_disagree_late"] = auc(te, feat["disagree_late"])

  cs = tuple(config.probe.cs)
  single_class = lambda y: y.min() == y.max()  # noqa: E731

  def fit_logreg(x, y, c):
    xs = detectors.standardize(x[tr], x)[1]
    if single_class(y[tr]):
      return np.full(len(x), float(y[tr][0]))
    return detectors.logreg(xs[tr], y[tr], c).predict_proba(xs)[:, 1]

  c, edge = _select(cs, lambda c: auc(va, fit_logreg(x_debate, err, c)), log,
                    "debate detector C")
  scores["debate features (logreg)"] = fit_logreg(x_debate, err, c)
  res["sel_debate_C"] = c
  x_db_prob = np.concatenate([x_debate, scores["probability"][:, None]], 1)
  c, _ = _select(cs, lambda c: auc(va, fit_logreg(x_db_prob, err, c)), log,
                 "debate + probability C")
  scores["debate + probability (logreg)"] = fit_logreg(x_db_prob, err, c)
  if heads is not None:
    x_db_heads = np.concatenate([x_debate, np.stack([hfeat[k] for k in sorted(hfeat)], 1)], 1)
    c, _ = _select(cs, lambda c: auc(va, fit_logreg(x_db_heads, err, c)), log,
                   "debate + head features C")
    scores["debate + head features (logreg)"] = fit_logreg(x_db_heads, err, c)
    res["sel_debate_heads_C"] = c

  probe = t0["probe"]                                        # (N, P, D)
  layers = list(feats["probe_layers"])
  grid_lc = [(li, c) for li in range(len(layers)) for c in cs]

  def truth_probe(li, c):
    return detectors.risk_from_truth(fit_logreg(probe[:, li], labels_N, c), answer)

  (li, c), _ = _select(grid_lc, lambda v: auc(va, truth_probe(*v)), log,
                       "linear probe (layer index, C)")
  scores["linear probe"] = truth_probe(li, c)
  res["sel_linear"] = f"layer {layers[li]}, C={c}"
  (li, c), _ = _select(grid_lc, lambda v: auc(va, fit_logreg(probe[:, v[0]], err, v[1])),
                       log, "error probe (layer index, C)")
  scores["error probe (logreg)"] = fit_logreg(probe[:, li], err, c)
  res["sel_error_probe"] = f"layer {layers[li]}, C={c}"

  lrs = tuple(config.probe.mlp_lrs)
  mlp_risk = {}
  for li in range(len(layers)):
    xs_tr, xs_all = detectors.standardize(probe[tr, li], probe[:, li])
    (p_all,) = detectors.mlp_probe(xs_tr, labels_N[tr], [xs_all], lrs,
                                   steps=config.probe.mlp_steps, seed=split_seed)
    for j, lr in enumerate(lrs):
      mlp_risk[(li, lr)] = detectors.risk_from_truth(p_all[j], answer)
  (li, lr), _ = _select(list(mlp_risk), lambda v: auc(va, mlp_risk[v]), log,
                        "MLP probe (layer index, lr)")
  scores["MLP probe (SAPLMA)"] = mlp_risk[(li, lr)]
  res["sel_mlp"] = f"layer {layers[li]}, lr={lr}"

  def mass_mean(li, iid):
    xs_tr, xs_all = detectors.standardize(probe[tr, li], probe[:, li])
    theta = detectors.mass_mean_direction(xs_tr, labels_N[tr], iid=iid)
    proj = (xs_all @ theta)[:, None]
    if single_class(labels_N[tr]):
      return np.full(len(proj), 0.5)
    p = detectors.logreg(proj[tr], labels_N[tr], 1e6).predict_proba(proj)[:, 1]
    return detectors.risk_from_truth(p, answer)

  grid_mm = [(li, iid) for li in range(len(layers)) for iid in (False, True)]
  (li, iid), _ = _select(grid_mm, lambda v: auc(va, mass_mean(*v)), log,
                         "mass-mean (layer index, iid)")
  scores["mass-mean probe"] = mass_mean(li, iid)
  res["sel_mass_mean"] = f"layer {layers[li]}, iid={iid}"

  # CCS (unsupervised; its sign set on the training labels) at each probe layer, the
  # layer chosen on validation AUROC like the other probes'.
  ccs_by_layer = {}
  for li in range(len(layers)):
    # (N, 2, P, D) one contrast pair per probe layer; (N, 2, D) the final layer only
    cc = t0["ccs"][:, :, li] if t0["ccs"].ndim == 4 else t0["ccs"]
    xp, xn = detectors.ccs_normalize(cc[:, 0], cc[:, 1], cc[tr, 0], cc[tr, 1])
    theta, loss = detectors.ccs_fit(xp[tr], xn[tr], restarts=config.probe.ccs_restarts,
                                    steps=config.probe.ccs_steps, seed=split_seed)
    p_ccs = detectors.ccs_predict(theta, xp, xn)
    if ((p_ccs[tr] > 0.5) == labels_N[tr]).mean() < 0.5:
      p_ccs = 1 - p_ccs
    ccs_by_layer[li] = (p_ccs, loss)
    if t0["ccs"].ndim == 3:
      break
  li, _ = _select(list(ccs_by_layer), lambda v: auc(va, detectors.risk_from_truth(
      ccs_by_layer[v][0], answer)), log, "CCS layer index")
  p_ccs, loss = ccs_by_layer[li]
  res["sel_ccs"] = f"layer {layers[li] if t0['ccs'].ndim == 4 else layers[-1]}"
  res["ccs_loss"] = loss
  res["ccs_truth_acc_test"] = float(((p_ccs[te] > 0.5) == labels_N[te]).mean())
  scores["CCS"] = detectors.risk_from_truth(p_ccs, answer)

  p_t = np.stack([1 / (1 + np.exp(-(feats[f"t{t}"]["logit_true"] - feats[f"t{t}"]["logit_false"])))
                  for t in range(n_t)], 1)
  # SelfCheck-style: the exact expected disagreement of an answer resampled under a
  # uniformly drawn template (the baseline), and the 20-sample estimate beside it.
  scores["resampling (SelfCheck, exact)"] = detectors.expected_disagreement(p_t, answer)
  scores["resampling (20 samples)"] = detectors.resampling_risk(
      p_t, answer, config.detect.n_samples, seed=split_seed)
  # The latent arguments themselves: the DLA vector signed by the answer (so that
  # "pushes towards the answer" is positive), a logistic regression predicting the error.
  x_signed = dla * (2 * answer - 1)[:, None]
  c, _ = _select(cs, lambda c: auc(va, fit_logreg(x_signed, err, c)), log,
                 "signed DLA logreg C")
  scores["signed DLA vector (logreg)"] = fit_logreg(x_signed, err, c)
  res["sel_signed_dla_C"] = c
  if inputs is not None:
    # Input-only detectors (they never see the model): a truth logreg on the surface
    # features (risk of the model's answer), an error logreg on them, the difficulty.
    surf = cues.Surface([inputs[i] for i in tr])
    x_in = surf(inputs)
    c, _ = _select(cs, lambda c: auc(va, detectors.risk_from_truth(
        fit_logreg(x_in, labels_N, c), answer)), log, "input-only truth logreg C")
    p_in = fit_logreg(x_in, labels_N, c)
    scores["input only: truth logreg"] = detectors.risk_from_truth(p_in, answer)
    res["input_truth_auroc_test"] = detectors.auroc(labels_N[te], p_in[te])
    # the words crossed with one number (partial task solving; `cues.interaction_truth`)
    inter = cues.interaction_truth(inputs, labels_N, tr, va, cs)
    if inter is not None:
      res["input_interaction_truth_auroc_test"] = detectors.auroc(labels_N[te], inter[0][te])
      res["sel_input_interaction"] = [inter[1], inter[2]]
    c, _ = _select(cs, lambda c: auc(va, fit_logreg(x_in, err, c)), log,
                   "input-only error logreg C")
    scores["input only: error logreg"] = fit_logreg(x_in, err, c)
    diffic = cues.difficulty(inputs)
    if diffic is not None:
      scores["input only: difficulty -|a - b|"] = diffic
  scores["random"] = np.random.default_rng(split_seed).random(len(err))

  for name, s in scores.items():
    res[f"auroc/{name}"] = auc(te, s)
  res["edges"] = list(EDGES)
  # the test rows' scores, pooled over cross-fitting folds by the study (not in the JSON)
  res["_test"] = {"idx": te, "err": err[te], "label": labels_N[te], "diff": diff[te],
                  "scores": {k: np.asarray(v)[te] for k, v in scores.items()}}

  # ------------------------------------------------------------------ depth
  per_layer = debate.per_layer_disagreement(dla, strengths, answer)
  e, k = te[err[te] == 1], te[err[te] == 0]
  res["depth_err"] = per_layer[e].mean(0).tolist() if len(e) else []
  res["depth_ok"] = per_layer[k].mean(0).tolist() if len(k) else []
  res["depth_auroc"] = [auc(te, per_layer[:, l]) for l in range(L + 1)]
  return res
