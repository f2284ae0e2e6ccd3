"""lhdlm (learnable hierarchical discrete diffusion LM): launcher entries.

`train_and_evaluate` trains one model of config.model.kind (or a seeds x LRs population)
through core.loop, reports the held-out NELBO in bits per byte with its Monte-Carlo
standard error, and writes samples; `run_study` runs study.py; `plan` is the train step
that launch/plan.py compiles (README "## Scale").
"""
from __future__ import annotations

import json
import os

import jax
import numpy as np

from jaxpapers.core import loop
from jaxpapers.core import planner
from jaxpapers.core import population
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm
from jaxpapers.nn.lm_experiment import members
from jaxpapers.papers.lhdlm import data as data_lib
from jaxpapers.papers.lhdlm import model as model_lib
from jaxpapers.papers.lhdlm import sampler as sampler_lib

CORPORA = ("synthetic", "shakespeare", "python", "auto")


def validate(config) -> None:
  """lhdlm's own pre-flight checks (core/validate.py runs them after the shared ones)."""
  m, d = config.model, config.data
  if m.kind not in model_lib.KINDS:
    raise ValueError(f"config model.kind={m.kind!r}; expected one of {model_lib.KINDS}")
  if d.corpus not in CORPORA:
    raise ValueError(f"config data.corpus={d.corpus!r}; expected one of {CORPORA}")
  if d.path and not os.path.isfile(d.path):
    raise ValueError(f"config data.path={d.path!r}: no such file (give a UTF-8 text file)")
  if m.kind in ("hdlm", "lhdlm") and m.clusters < 1:
    raise ValueError(f"config model.clusters={m.clusters} must be >= 1")
  if m.gamma <= 0:
    raise ValueError(f"config model.gamma={m.gamma} must be > 0")
  if m.reg < 0:
    raise ValueError(f"config model.reg={m.reg} must be >= 0")
  if m.reg_target < 0:
    raise ValueError(f"config model.reg_target={m.reg_target} must be >= 0")
  if config.eval.samples < 1 or config.sample.steps < 1:
    raise ValueError("config eval.samples and sample.steps must be >= 1")
  if config.sample.method not in ("ancestral", "tau_leaping"):
    raise ValueError(f"config sample.method={config.sample.method!r}; expected "
                     "'ancestral' or 'tau_leaping'")
  if not 0 <= d.synthetic.overlap < 1:
    raise ValueError(f"config syn_overlap={d.synthetic.overlap} must be in [0, 1)")


def train_and_evaluate(config, workdir: str):
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  pop = members(config)
  print(f"lhdlm: kind={mdl.kind} C={mdl.C} d={config.model.dim} layers={config.model.layers} "
        f"params={model_lib.n_params(mdl):,} data={data.name} ({len(data.train):,} train / "
        f"{len(data.val):,} held-out tokens) members={len(pop)} eval_samples="
        f"{config.eval.samples} devices={jax.device_count()}", flush=True)
  if len(pop) == 1:
    state, final = loop.train(config, workdir, model_lib.make_task(config, data, mdl))
    finals, params = [final], [state["params"]]
  else:
    task = population.population_task(
        lambda seed, hp: model_lib.make_task(config, data, mdl, seed=seed, hparams=hp), pop)
    state, final = loop.train(config, workdir, task)
    finals = population.unstack(final, len(pop))
    params = [population.member(state, i)["params"] for i in range(len(pop))]
  for mem, e in zip(pop, finals):
    se = lm.mc_standard_error(e)
    print(f"member seed={mem['seed']} lr={mem['lr']:.3g}: held-out "
          f"{'NELBO' if mdl.kind != 'ar' else 'NLL'} {e['bpb']:.4f} bits/byte "
          f"(Monte-Carlo s.e. {se:.4f} over {config.eval.samples} draws)", flush=True)
  if mdl.kind != "ar":
    s = config.sample
    z = sampler_lib.sample(jax.random.PRNGKey(config.seed), mdl, params[0], s.n,
                           config.data.seq_len, s.steps, s.method)
    texts = [data.tokenizer.decode(np.asarray(row)) for row in z]
    with open(os.path.join(workdir, "samples.json"), "w") as f:
      json.dump({"method": s.method, "steps": s.steps, "samples": texts}, f, indent=1)
    print(f"{s.n} samples ({s.method}, {s.steps} steps) -> samples.json; first: "
          f"{texts[0][:120]!r}", flush=True)
  return state, final


def run_study(config, workdir: str):
  from jaxpapers.papers.lhdlm import study  # pylint: disable=g-import-not-at-top
  return study.run(config, workdir)


def _shape_data(config) -> text_lib.TokenData:
  """Random tokens of the configured vocabulary: the planner needs shapes, not text."""
  V = config.data.vocab_size if config.data.tokenizer == "bpe" else 256
  n = max(4 * (config.data.seq_len + 1) * 8, 4096)
  tok = np.random.default_rng(0).integers(0, V, n).astype(np.int32)
  return text_lib.TokenData(tok[:n // 2], tok[n // 2:], V, np.ones(V, np.int32), None,
                            f"shapes(V={V})")


def plan(config) -> planner.Plan:
  """The train step of one run at config's sizes (layers unrolled: XLA counts them all)."""
  data = _shape_data(config)
  mdl = model_lib.build(config, data.vocab_size, data.train, unroll=True)
  fn, args = loop.plan_step(config, model_lib.make_task(config, data, mdl))
  m = config.model
  label = (f"lhdlm kind={m.kind} C={mdl.C} d={m.dim} layers={m.layers} "
           f"params={model_lib.n_params(mdl):,} V={data.vocab_size} batch "
           f"{config.train.batch_size} x {config.data.seq_len} "
           f"microbatches={config.train.get('microbatches', 1)} mesh={config.mesh} "
           f"compute_dtype={config.compute_dtype}")
  return planner.Plan(fn, args, steps=config.train.steps, label=label,
                      bf16=config.compute_dtype == "bfloat16")
