"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): launcher entries.

`train_and_evaluate` pretrains one hybrid (or, with population.lrs / population.seeds,
an LR x seed population in one vmapped program) through `core.loop` (progress lines,
checkpoints, exact resume); `run_study` runs the study of `study.py`.
"""
from __future__ import annotations

from jaxpapers.core import loop
from jaxpapers.core import population
from jaxpapers.data import text as text_lib
from jaxpapers.papers.hybrid_mup import model as model_lib


def load_data(config) -> text_lib.TokenData:
  d = config.data
  return text_lib.prepare(d.corpus, d.tokenizer, d.vocab_size, d.max_chars or None,
                          d.holdout, d.path)


def members(config) -> list[dict]:
  seeds = [config.seed + i for i in range(config.population.seeds)]
  lrs = config.population.lrs or (config.optim.lr,)
  return population.grid(seeds, lr=lrs)


def train_and_evaluate(config, workdir: str):
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
  return study.run(config, workdir)
