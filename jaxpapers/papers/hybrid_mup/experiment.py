"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): launcher entries.

`train_and_evaluate` pretrains one hybrid (or, with population.lrs / population.seeds,
an LR x seed population in one vmapped program) through `core.loop` (progress lines,
checkpoints, exact resume); `run_study` runs the study of `study.py`.
"""
from __future__ import annotations

from jaxpapers.core import loop
from jaxpapers.core import population
from jaxpapers.nn.lm_experiment import load_data, members  # the workbench's, shared
from jaxpapers.papers.hybrid_mup import model as model_lib


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
