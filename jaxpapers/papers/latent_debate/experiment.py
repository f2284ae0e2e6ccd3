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

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner, sharding
from jaxpapers.core import study as study_lib
from jaxpapers.core import validate as validate_lib
from jaxpapers.nn import llama
from jaxpapers.papers.latent_debate import analysis, extract, lm as lm_lib, statements

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


def train_and_evaluate(config, workdir: str) -> dict:
  metrics_lib.write_config(workdir, config)
  ss, _, feats = prepare(config, workdir)
  fam_ids, fam_names = ss.family_ids()
  res = analysis.analyze(config, feats, ss.labels, fam_ids, fam_names, config.split.seed)
  writer = metrics_lib.MetricsWriter(workdir)
  writer.write(0, _scalars(res), split="eval")
  print(f"model accuracy {res['accuracy_test']:.3f}; surrogate agreement DF-QuAD "
        f"{res['agree_dfquad']:.3f}, QE {res['agree_qe']:.3f}; AUROC mid-layer disagreement "
        f"{res['auroc/mid-layer disagreement']:.3f}, debate logreg "
        f"{res['auroc/debate features (logreg)']:.3f}, probability "
        f"{res['auroc/probability']:.3f}", flush=True)
  return res


DETECTORS = ("probability", "margin", "entropy", "linear probe", "error probe (logreg)",
             "MLP probe (SAPLMA)", "mass-mean probe", "CCS", "resampling (SelfCheck)",
             "mid-layer disagreement", "mid-layer lens disagreement",
             "debate features (logreg)", "debate + probability (logreg)",
             "mid-layer head disagreement", "debate + head features (logreg)", "random")
DEBATE = ("mid-layer disagreement", "debate features (logreg)")


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
  for sem in ("dfquad", "qe"):
    add("agreement", f"{sem}: all test statements", f"agree_{sem}")
    add("agreement", f"{sem}: per-head debate, all test statements", f"agree_{sem}_heads")
    add("agreement", f"{sem}: share without verdict (tie at 0.5)", f"noverdict_{sem}")
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


def verdicts(table, command, commit) -> dict:
  get = {r["quantity"]: r for r in table}
  df = get["dfquad: all test statements"]
  qe = get["qe: all test statements"]
  maj = get["trivial: majority answer"]
  agree = max(df, qe, key=lambda r: r["mean"])  # the better of the two semantics
  if agree["mean"] >= 0.9 and agree["mean"] > maj["mean"] + 0.05:
    v1 = "holds"
  elif agree["mean"] >= 0.75 and agree["mean"] > maj["mean"]:
    v1 = "partly"
  else:
    v1 = "does not hold at our scale"
  mid = get["mid-layer disagreement"]
  early, late = get["disagreement, early third"], get["disagreement, late third"]
  # The random detector's AUROC over the same splits is the noise level a detector has
  # to clear (few errors per test split), not just 0.5.
  rnd = get["random"]
  floor = max(0.5, rnd["mean"] + rnd["std"]) if np.isfinite(rnd["mean"]) else 0.5
  if mid["mean"] - mid["std"] > floor and mid["mean"] >= 0.6:
    v2 = "holds" if mid["mean"] >= max(early["mean"], late["mean"]) else "partly"
  elif mid["mean"] - mid["std"] > floor:
    v2 = "partly"
  else:
    v2 = "does not hold at our scale"
  base = [d for d in DETECTORS if d not in DEBATE and "debate" not in d and d != "random"
          and "lens" not in d and "disagree" not in d]
  best = max(base, key=lambda d: get[d]["mean"])
  ours = max(DEBATE, key=lambda d: get[d]["mean"])
  gap = get[ours]["mean"] - get[best]["mean"]
  v3 = "holds" if gap >= -0.03 else ("partly" if gap >= -0.1 else
                                      "does not hold at our scale")
  f = lambda r: f"{r['mean']:.3f} +- {r['std']:.3f}"  # noqa: E731
  return {"status": "implemented", "command": command, "commit": commit, "claims": [
      {"claim": "latent debate is a faithful surrogate (consistent with the LLM's predictions)",
       "ours": f"test agreement DF-QuAD {f(df)}, QE {f(qe)}; majority-answer baseline "
               f"{f(maj)}", "verdict": v1},
      {"claim": "high disagreement in the middle layers is linked to hallucinations",
       "ours": f"AUROC of mid-layer disagreement for errors {f(mid)} (early third "
               f"{f(early)}, late third {f(late)}; random detector {f(rnd)})",
       "verdict": v2},
      {"claim": "latent debate is a strong baseline for hallucination detection",
       "ours": f"best debate detector '{ours}' AUROC {f(get[ours])} vs best baseline "
               f"'{best}' {f(get[best])} (gap {gap:+.3f})", "verdict": v3}]}


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
    res = analysis.analyze(config, feats, ss.labels, fam_ids, fam_names, seed)
    writer.write(k, _scalars(res), split=f"study/split{seed}")
    rows.append(res)
  L = lm.cfg.n_layers
  table = summarize(rows, fam_names, L, config.data.n_templates)
  header = (f"Latent debate study (commit {commit}); {lm.name}, {len(ss)} statements "
            f"({', '.join(fam_names)}), {config.split.n_splits} stratified splits "
            f"(train/val/test {1 - config.split.val - config.split.test:.1f}/"
            f"{config.split.val}/{config.split.test}), hyper-parameters on validation; "
            f"wall {time.perf_counter() - start:.0f} s.")
  md = study_lib.write_table(workdir, "latent_debate_study", table,
                             ["section", "quantity", "mean", "std", "splits"], header)
  sel = [{k: r[k] for k in r if k.startswith(("sel_", "temp_", "edges", "split", "ccs_loss"))}
         for r in rows]
  with open(os.path.join(workdir, "latent_debate_rows.json"), "w") as f:
    json.dump({"rows": rows, "selections": sel}, f, indent=1, default=str)
  plot(os.path.join(workdir, "latent_debate_study.png"), rows, table, L)
  command = "python launch/study.py --config=configs/latent_debate.py --workdir=..."
  if sys.argv and sys.argv[0].endswith("study.py"):   # the command that ran it
    command = "python " + " ".join(sys.argv)
  with open(os.path.join(workdir, "verdicts.json"), "w") as f:
    json.dump(verdicts(table, command, commit), f, indent=1)
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
