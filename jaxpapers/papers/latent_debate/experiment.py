"""Latent debate (arXiv 2512.01909): training entry, study and planner step.

`train_and_evaluate` loads the LLM (SmolLM2-135M-Instruct from its GGUF, or our small
random llama for smoke runs), builds the statement set (generated families or user
CSVs), extracts every statement's latent arguments in one batched, cached pass, and
analyzes one train / validation / test split (faithfulness of the debate surrogate,
detection AUROC of every detector, depth profile of the disagreement). `run_study` does
that for `split.n_splits` splits and writes the table (mean, spread), the raw rows, a
plot and the verdicts into the workdir. `plan` is the batched decomposition pass for
`launch/plan.py`.
"""
from __future__ import annotations

import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner, sharding
from jaxpapers.core import study as study_lib
from jaxpapers.core import validate as validate_lib
from jaxpapers.nn import llama
from jaxpapers.papers.latent_debate import analysis, detectors, extract, lm as lm_lib, statements

PATHS = ["jaxpapers/papers/latent_debate", "configs/latent_debate.py"]

# SmolLM2-135M's shapes, for the planner (no weights needed).
SMOLLM2_CFG = llama.LlamaConfig(vocab_size=49152, dim=576, n_layers=30, n_heads=9,
                                n_kv_heads=3, hidden_dim=1536, head_dim=64,
                                rope_theta=100000.0, norm_eps=1e-5)


def validate(config) -> None:
  """The paper's own pre-flight checks (jaxpapers/core/validate.py runs them first)."""
  for name in ("probe.mlp_steps", "probe.ccs_steps", "probe.ccs_restarts",
               "data.n_per_family", "split.n_splits", "data.n_templates"):
    group, key = name.split(".")
    if group in config and key in config[group] and int(config[group][key]) < 1:
      raise ValueError(f"config field {name}={config[group][key]} must be >= 1")
  for path in (p for p in config.data.csv.split("+") if p):
    if not os.path.isfile(path):
      raise FileNotFoundError(f"config field data.csv: no such file {path!r} ('+'-separated "
                              "statement,label CSVs, or leave it empty for the generator)")
    validate_lib.check_file("data.csv", path)


def load_statements(config) -> statements.StatementSet:
  d = config.data
  if d.csv:
    return statements.concat([statements.load_csv(p) for p in d.csv.split("+") if p])
  return statements.generate(tuple(d.families), d.n_per_family, d.seed)


def prepare(config, workdir: str | None, log=print):
  ss = load_statements(config)
  lm = lm_lib.load(config.model.lm)
  log(f"latent debate: {lm.name} ({lm.cfg.n_layers} layers, d={lm.cfg.dim}), "
      f"{len(ss)} statements, families {sorted(set(ss.families))}, "
      f"{config.data.n_templates} templates, devices={jax.device_count()}")
  feats = extract.extract(config, lm, ss, workdir, log=log)
  return ss, lm, feats


def _scalars(res: dict) -> dict:
  return {k: v for k, v in res.items() if isinstance(v, float) and np.isfinite(v)}


def bootstrap_auroc(y, s, n_boot: int = 1000, seed: int = 0):
  """AUROC of score s for labels y and its 95% percentile bootstrap interval
  (statements resampled with replacement)."""
  y, s = np.asarray(y).astype(int), np.asarray(s, np.float64)
  rng = np.random.default_rng(seed)
  boots = []
  for _ in range(n_boot):
    i = rng.integers(len(y), size=len(y))
    yi = y[i]
    n1 = yi.sum()
    if 0 < n1 < len(yi):   # Mann-Whitney U from average ranks (ties count half)
      r = scipy.stats.rankdata(s[i])
      boots.append((r[yi == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * (len(yi) - n1)))
  lo, hi = np.percentile(boots, [2.5, 97.5])
  return detectors.auroc(y, s), float(lo), float(hi)


def pooled(rows, n_boot: int = 1000) -> dict:
  """Cross-fitted test scores of the folds pooled into one score per statement: every
  detector's AUROC for the errors and the model's AUROC for the truth, each with a 95%
  bootstrap interval. Each fold's scores enter as their percentile ranks within the fold
  (a trained detector's scale differs from fold to fold, and mixing raw scales would
  understate it). None unless the folds partition the set."""
  parts = [r["_test"] for r in rows]
  idx = np.concatenate([p["idx"] for p in parts])
  if len(np.unique(idx)) != len(idx):
    return None
  # ranked by name: the scores and the logit difference, never the labels or errors
  ranked = lambda f: np.concatenate([scipy.stats.rankdata(f(p)) / len(f(p))  # noqa: E731
                                     for p in parts])
  err = np.concatenate([p["err"] for p in parts]).astype(int)
  lab = np.concatenate([p["label"] for p in parts]).astype(int)
  out = {"n": int(len(idx)), "n_errors": int(err.sum()),
         "model truth AUROC": bootstrap_auroc(lab, ranked(lambda p: p["diff"]), n_boot)}
  for name in parts[0]["scores"]:
    if all(name in p["scores"] for p in parts):
      out[name] = bootstrap_auroc(err, ranked(lambda p, n=name: p["scores"][n]), n_boot)
  return out


def train_and_evaluate(config, workdir: str) -> dict:
  metrics_lib.write_config(workdir, config)
  ss, _, feats = prepare(config, workdir)
  fam_ids, fam_names = ss.family_ids()
  res = analysis.analyze(config, feats, ss.labels, fam_ids, fam_names, config.split.seed,
                         inputs=ss.statements)
  writer = metrics_lib.MetricsWriter(workdir)
  writer.write(0, _scalars(res), split="eval")
  res.pop("_test", None)
  print(f"model accuracy {res['accuracy_test']:.3f}; surrogate agreement DF-QuAD "
        f"{res['agree_dfquad']:.3f}, QE {res['agree_qe']:.3f}; AUROC mid-layer disagreement "
        f"{res['auroc/mid-layer disagreement']:.3f}, debate logreg "
        f"{res['auroc/debate features (logreg)']:.3f}, probability "
        f"{res['auroc/probability']:.3f}", flush=True)
  return res


DETECTORS = ("probability", "margin", "entropy", "linear probe", "error probe (logreg)",
             "MLP probe (SAPLMA)", "mass-mean probe", "CCS", "resampling (SelfCheck, exact)",
             "resampling (20 samples)", "mid-layer disagreement", "mid-layer lens disagreement",
             "debate features (logreg)", "debate + probability (logreg)",
             "mid-layer head disagreement", "debate + head features (logreg)",
             "signed DLA vector (logreg)", "input only: truth logreg",
             "input only: error logreg", "input only: difficulty -|a - b|", "random")
# the debate's detectors (the best of them is compared with the best baseline)
DEBATE = ("mid-layer disagreement", "debate features (logreg)",
          "debate + head features (logreg)")
# not baselines of the verdict: the debate's own, its mixtures, the sampled resampling
# estimate (the exact one is the baseline), the trivial input-only detectors (a gate of
# their own) and the random score
NOT_BASELINES = DEBATE + ("mid-layer lens disagreement", "debate + probability (logreg)",
                          "mid-layer head disagreement", "signed DLA vector (logreg)",
                          "resampling (20 samples)", "input only: truth logreg",
                          "input only: error logreg", "input only: difficulty -|a - b|",
                          "random")
# the input-only truth detectors a model that judges has to beat (`judged`): the additive
# surface logreg and the words crossed with one number (partial task solving)
SURFACE_ROW = "input only: truth AUROC of the surface logreg (test)"
INTERACTION_ROW = "input only: truth AUROC of the word x one-number logreg (test)"
INPUT_ONLY = ("input only: truth logreg", "input only: error logreg",
              "input only: difficulty -|a - b|")


def _mean_std(rows, key):
  v = np.array([r[key] for r in rows if key in r], float)
  v = v[np.isfinite(v)]
  if not len(v):
    return float("nan"), float("nan")
  return float(v.mean()), float(v.std())


def summarize(rows, family_names, n_layers, n_templates):
  """Table rows: one per measured quantity, mean and std over splits."""
  table = []
  def add(section, name, key):
    m, s = _mean_std(rows, key)
    table.append({"section": section, "quantity": name, "mean": m, "std": s,
                  "splits": len([r for r in rows if key in r])})
  add("model", "accuracy (test)", "accuracy_test")
  add("model", "answers True (all)", "answer_true_rate")
  add("model", "truth AUROC of the logit difference (test)", "model_truth_auroc_test")
  add("model", SURFACE_ROW, "input_truth_auroc_test")
  add("model", INTERACTION_ROW, "input_interaction_truth_auroc_test")
  for sem in ("dfquad", "qe"):
    add("agreement", f"{sem}: all test statements", f"agree_{sem}")
    add("agreement", f"{sem}: per-head debate, all test statements", f"agree_{sem}_heads")
    add("agreement", f"{sem}: share without verdict (tie at 0.5)", f"noverdict_{sem}")
    add("agreement", f"{sem}: all test statements, strict rule (> 0.5 => True)",
        f"agree_{sem}_strict")
    add("agreement", f"{sem}: share of True verdicts", f"verdict_true_{sem}")
    for fam in family_names:
      add("agreement", f"{sem}: family {fam}", f"agree_{sem}/{fam}")
    for name in analysis.layer_subsets(n_layers):
      add("agreement", f"{sem}: layers {name}", f"agree_{sem}/layers:{name}")
    for t in range(n_templates):
      add("agreement", f"{sem}: template {t}", f"agree_{sem}/template{t}")
  add("agreement", "positive control: sum of DLA arguments", "agree_dla_sum")
  add("agreement", "logit lens at the middle third's last layer", "agree_lens_mid")
  add("agreement", "trivial: majority answer", "agree_majority")
  for d in DETECTORS:
    add("detection AUROC", d, f"auroc/{d}")
  add("detection AUROC", "disagreement, early third", "auroc_disagree_early")
  add("detection AUROC", "disagreement, late third", "auroc_disagree_late")
  add("detection AUROC", "head disagreement, early third", "auroc_head_disagree_early")
  add("detection AUROC", "head disagreement, late third", "auroc_head_disagree_late")
  add("probes", "CCS truth accuracy (test)", "ccs_truth_acc_test")
  return table


def judged(get, pool=None):
  """(bool, reason): does the model judge the statements? Its logit difference has to
  separate true from false better than chance and better than the strongest input-only
  truth detector (the additive surface logreg, the word x one-number logreg; pooled over
  the folds with a 95% bootstrap interval where the study has one: its lower end above
  both; else mean - std over the splits)."""
  inp = {q: get[q]["mean"] for q in (SURFACE_ROW, INTERACTION_ROW)
         if q in get and np.isfinite(get[q]["mean"])}
  name = max(inp, key=inp.get) if inp else None
  inp_m = inp[name] if inp else 0.5
  what = ("no input-only detector" if name is None else
          f"the strongest input-only detector ({name[len('input only: truth AUROC of the '):]}"
          f") {inp_m:.3f}")
  bar = max(0.5, inp_m)
  if pool is not None:
    m, lo, hi = pool["model truth AUROC"]
    why = (f"the model's truth AUROC pooled over {pool['n']} statements {m:.3f} "
           f"[95% CI {lo:.3f}, {hi:.3f}] vs chance 0.5 and {what}")
    return lo > bar, why
  r = get["truth AUROC of the logit difference (test)"]
  return (r["mean"] - r["std"] > bar,
          f"the model's truth AUROC {r['mean']:.3f} +- {r['std']:.3f} vs chance 0.5 and {what}")


def verdicts(table, command, commit, pool=None) -> dict:
  get = {r["quantity"]: r for r in table if not r["section"].startswith("pooled")}
  df = get["dfquad: all test statements"]
  qe = get["qe: all test statements"]
  maj = get["trivial: majority answer"]
  # The tie rule, fixed before the numbers: a topic within 1e-6 of its base 0.5 gives no
  # verdict and counts as disagreeing (a debate that does not move its topic decides
  # nothing; float32 rounding must not decide for it). The strict "> 0.5" rule is
  # reported beside it.
  sem = "dfquad" if df["mean"] > qe["mean"] else "qe"   # the better of the two semantics
  agree = get[f"{sem}: all test statements"]
  strict = get.get(f"{sem}: all test statements, strict rule (> 0.5 => True)", agree)
  templ = [r for q, r in get.items() if q.startswith(f"{sem}: template ")]
  fams = [r for q, r in get.items() if q.startswith(f"{sem}: family ")]
  worst = min([r["mean"] for r in templ + fams] or [agree["mean"]])
  if agree["mean"] >= 0.9 and worst >= 0.8 and agree["mean"] > maj["mean"] + 0.05:
    v1 = "holds"
  elif agree["mean"] >= 0.75 and agree["mean"] > maj["mean"]:
    v1 = "partly"
  else:
    v1 = "does not hold at our scale"
  mid = get["mid-layer disagreement"]
  early, late = get["disagreement, early third"], get["disagreement, late third"]
  # The random detector's AUROC over the same splits is the noise level a detector has
  # to clear (few errors per test split), not just 0.5; and the input-only detectors.
  rnd = get["random"]
  inputs = [get[d] for d in INPUT_ONLY if d in get and np.isfinite(get[d]["mean"])]
  best_in = max(inputs, key=lambda r: r["mean"]) if inputs else None
  floor = max(0.5, rnd["mean"] + rnd["std"]) if np.isfinite(rnd["mean"]) else 0.5
  if mid["mean"] - mid["std"] > floor and mid["mean"] >= 0.6 and (
      best_in is None or mid["mean"] > best_in["mean"]):
    v2 = "holds" if mid["mean"] >= max(early["mean"], late["mean"]) else "partly"
  elif mid["mean"] - mid["std"] > floor:
    v2 = "partly"
  else:
    v2 = "does not hold at our scale"
  base = [d for d in DETECTORS if d not in NOT_BASELINES and d in get
          and np.isfinite(get[d]["mean"])]
  best = max(base, key=lambda d: get[d]["mean"])
  ours = max([d for d in DEBATE if d in get and np.isfinite(get[d]["mean"])],
             key=lambda d: get[d]["mean"])
  gap = get[ours]["mean"] - get[best]["mean"]
  v3 = "holds" if gap >= -0.03 else ("partly" if gap >= -0.1 else
                                      "does not hold at our scale")
  ok, why = judged(get, pool)
  if not ok:
    v2 = v3 = "not measured"
  f = lambda r: f"{r['mean']:.3f} +- {r['std']:.3f}"  # noqa: E731
  pf = lambda name: (f"; pooled {pool[name][0]:.3f} [{pool[name][1]:.3f}, {pool[name][2]:.3f}]"  # noqa: E731
                     if pool and name in pool else "")
  gate = ("" if ok else f"not measured: the model does not judge the statements ({why}). ")
  sdla = get.get("signed DLA vector (logreg)")
  return {"status": "implemented", "command": command, "commit": commit,
          "model_judges_statements": bool(ok), "gate": why, "claims": [
      {"claim": "latent debate is a faithful surrogate (consistent with the LLM's predictions)",
       "ours": f"test agreement (tie = no verdict) DF-QuAD {f(df)}, QE {f(qe)}; "
               f"{sem} with the strict '> 0.5' rule {f(strict)}; worst template / family "
               f"{worst:.3f}; majority-answer baseline {f(maj)}", "verdict": v1},
      {"claim": "high disagreement in the middle layers is linked to hallucinations",
       "ours": gate + f"AUROC of mid-layer disagreement for errors {f(mid)}"
               f"{pf('mid-layer disagreement')} (early third {f(early)}, late third "
               f"{f(late)}; random detector {f(rnd)}"
               + (f"; best input-only detector {f(best_in)}" if best_in else "") + ")",
       "verdict": v2},
      {"claim": "latent debate is a strong baseline for hallucination detection",
       "ours": gate + f"best debate detector '{ours}' AUROC {f(get[ours])}{pf(ours)} vs best "
               f"baseline '{best}' {f(get[best])}{pf(best)} (gap {gap:+.3f})"
               + (f"; signed DLA vector logreg {f(sdla)}" if sdla else ""),
       "verdict": v3}]}


def plot(path, rows, table, n_layers):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(1, 3, figsize=(17, 4.2))
  layers = np.arange(n_layers + 1)
  for key, lab, col in (("depth_err", "model wrong", "C3"), ("depth_ok", "model right", "C0")):
    curves = np.array([r[key] for r in rows if len(r[key])])
    if len(curves):
      ax[0].plot(layers, curves.mean(0), color=col, label=lab)
      ax[0].fill_between(layers, curves.min(0), curves.max(0), color=col, alpha=0.2)
  ax[0].set_xlabel("layer (0 = embedding)")
  ax[0].set_ylabel("strength of opposing layer argument")
  ax[0].set_title("where the disagreement sits (test, mean and range over splits)")
  ax[0].legend()
  aucs = np.array([r["depth_auroc"] for r in rows], float)
  ax[1].plot(layers, np.nanmean(aucs, 0), "k.-")
  ax[1].axhline(0.5, color="gray", ls=":")
  ax[1].set_xlabel("layer")
  ax[1].set_ylabel("AUROC for errors")
  ax[1].set_title("per-layer disagreement as an error detector")
  det = [r for r in table if r["section"] == "detection AUROC"]
  ax[2].barh([r["quantity"] for r in det], [r["mean"] for r in det],
             xerr=[r["std"] for r in det], color=["C1" if ("debate" in r["quantity"] or
                                                          "disagree" in r["quantity"])
                                                 else "C7" for r in det])
  ax[2].axvline(0.5, color="gray", ls=":")
  ax[2].set_xlim(0.3, 1.0)
  ax[2].set_title("test AUROC (mean +- std over splits)")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def run_study(config, workdir: str):
  commit = study_lib.git_commit(paths=PATHS)
  start = time.perf_counter()
  metrics_lib.write_config(workdir, config)
  ss, lm, feats = prepare(config, workdir)
  fam_ids, fam_names = ss.family_ids()
  writer = metrics_lib.MetricsWriter(workdir)
  rows = []
  for k in range(config.split.n_splits):
    seed = config.split.seed + k
    print(f"split {seed}:", flush=True)
    res = analysis.analyze(config, feats, ss.labels, fam_ids, fam_names, seed,
                           inputs=ss.statements)
    writer.write(k, _scalars(res), split=f"study/split{seed}")
    rows.append(res)
  L = lm.cfg.n_layers
  table = summarize(rows, fam_names, L, config.data.n_templates)
  pool = pooled(rows, config.detect.n_boot)
  if pool is not None:
    for name, v in pool.items():
      if isinstance(v, tuple):
        table.append({"section": "pooled AUROC [95% bootstrap CI]", "quantity": name,
                      "mean": v[0], "std": float("nan"), "splits": pool["n"],
                      "ci_low": v[1], "ci_high": v[2]})
  # the test rows' scores (cross-fitted), for a later look; not committed
  np.savez(os.path.join(workdir, "test_scores.npz"), **{
      f"split{k}/{key}": v for k, r in enumerate(rows)
      for key, v in [*((kk, r["_test"][kk]) for kk in ("idx", "err", "label", "diff")),
                     *((f"score/{n}", sc) for n, sc in r["_test"]["scores"].items())]})
  for r in rows:
    r.pop("_test", None)
  header = (f"Latent debate study (commit {commit}); {lm.name}, {len(ss)} statements "
            f"({', '.join(fam_names)}), {config.split.n_splits} stratified splits "
            f"(train/val/test {1 - config.split.val - config.split.test:.1f}/"
            f"{config.split.val}/{config.split.test}), hyper-parameters on validation; "
            f"wall {time.perf_counter() - start:.0f} s.")
  md = study_lib.write_table(workdir, "latent_debate_study", table,
                             ["section", "quantity", "mean", "std", "splits", "ci_low",
                              "ci_high"], header)
  sel = [{k: r[k] for k in r if k.startswith(("sel_", "temp_", "edges", "split", "ccs_loss"))}
         for r in rows]
  with open(os.path.join(workdir, "latent_debate_rows.json"), "w") as f:
    json.dump({"rows": rows, "selections": sel}, f, indent=1, default=str)
  plot(os.path.join(workdir, "latent_debate_study.png"), rows, table, L)
  command = "python launch/study.py --config=configs/latent_debate.py --workdir=..."
  if sys.argv and sys.argv[0].endswith("study.py"):   # the command that ran it
    command = "python " + " ".join(sys.argv)
  with open(os.path.join(workdir, "verdicts.json"), "w") as f:
    json.dump(verdicts(table, command, commit, pool), f, indent=1)
  print(md, flush=True)
  print(json.dumps(sel, default=str), flush=True)
  return table


def plan(config) -> planner.Plan:
  """The batched decomposition pass (template 0: probes and contrast) on `run.batch` rows."""
  if config.model.lm == "smollm2":
    cfg = SMOLLM2_CFG
  else:
    cfg = lm_lib.tiny_lm().cfg
  layers = extract.probe_layers(config, cfg.n_layers)
  params = jax.eval_shape(lambda: llama.init(jax.random.key(0), cfg))
  fn = lambda p, t, l: lm_lib.decompose(p, t, l, 0, 1, cfg, layers, True,  # noqa: E731
                                        unroll=True)
  B, T = config.run.batch, config.plan.seq_len
  jitted, args = sharding.spread_plan(
      fn, params, jax.ShapeDtypeStruct((B, T), jnp.int32),
      jax.ShapeDtypeStruct((B,), jnp.int32), in_axes=(None, 0, 0))
  n = B if config.data.csv else len(config.data.families) * config.data.n_per_family
  steps = -(-n // B) * config.data.n_templates
  return planner.Plan(jitted, args, steps=steps,
                      label=f"latent debate decomposition pass, {cfg.n_layers} layers "
                            f"d={cfg.dim}, {B} rows x {T} tokens")
