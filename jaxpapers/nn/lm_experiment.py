"""Small-LM workbench: launcher entries for `configs/lm.py`.

`train_and_evaluate` pretrains one pattern-string LM (or, with `population.lrs` /
`population.seeds`, a population of them in one vmapped program) through `core.loop`;
`run_study` is an LR sweep as a population (seeds x LRs), the LR picked on one half of
the held-out windows and reported on the other; `benchmark` times the training step
(see lm_bench.py).
"""
from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import loop
from jaxpapers.core import planner
from jaxpapers.core import population
from jaxpapers.core import study as study_lib
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm
from jaxpapers.nn import params as params_lib
from jaxpapers.nn import stack


def load_data(config) -> text_lib.TokenData:
  d = config.data
  return text_lib.prepare(d.corpus, d.tokenizer, d.vocab_size, d.max_chars or None,
                          d.holdout, d.path)


def build_model(config, vocab_size: int, blocks=None, **apply_kw):
  """(stack.Model, lm.LMModel) from config.model; `blocks` extends the block letters;
  `apply_kw` reaches the stack's apply (e.g. unroll=True for exact FLOP counts)."""
  m = config.model
  cfg = stack.StackConfig(
      vocab_size=vocab_size, dim=m.dim, pattern=m.pattern, n_heads=m.n_heads,
      n_kv_heads=m.n_kv_heads or None, mlp=m.mlp, positions=m.positions,
      max_len=max(1024, config.data.seq_len), tie_embeddings=m.tie_embeddings,
      attn_scale="linear" if m.parametrization == "mup" else "sqrt",
      # muP's attention equals SP's 1/sqrt(head_dim) at the base width
      attn_base_head_dim=(m.base_width // m.n_heads if m.parametrization == "mup" else None))
  model = stack.build(cfg, blocks)
  if m.parametrization == "standard":
    par = params_lib.standard(m.init_std)
  elif m.parametrization == "mup":
    par = params_lib.mup(m.dim, m.base_width, m.init_std)
  else:
    raise ValueError(f"unknown parametrization {m.parametrization!r}; expected 'standard' or 'mup'")
  return model, lm.from_stack(model, par, **apply_kw)


def members(config) -> list[dict]:
  seeds = [config.seed + i for i in range(config.population.seeds)]
  lrs = config.population.lrs or (config.optim.lr,)
  return population.grid(seeds, lr=lrs)


def train_and_evaluate(config, workdir: str):
  data = load_data(config)
  model, lm_model = build_model(config, data.vocab_size)
  n_params = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(
      model.specs, is_leaf=params_lib.is_spec))
  pop = members(config)
  print(f"LM: pattern={config.model.pattern} d={config.model.dim} params={n_params:,} "
        f"data={data.name} ({len(data.train):,} train / {len(data.val):,} held-out tokens) "
        f"members={len(pop)} devices={jax.device_count()}", flush=True)
  if len(pop) == 1:
    task = lm.make_task(config, data, lm_model)
    state, final = loop.train(config, workdir, task)
    print(f"held-out bits per byte: {final['bpb']:.4f}", flush=True)
    return state, final
  task = population.population_task(
      lambda seed, hp: lm.make_task(config, data, lm_model, seed=seed, hparams=hp), pop)
  state, final = loop.train(config, workdir, task)
  for m, e in zip(pop, population.unstack(final, len(pop))):
    print(f"member seed={m['seed']} lr={m['lr']:.3g}: held-out bpb {e['bpb']:.4f}", flush=True)
  return state, final


def plan(config) -> planner.Plan:
  """The LM train step (one run, layers unrolled so XLA counts every layer's FLOPs)."""
  data = load_data(config)
  model, lm_model = build_model(config, data.vocab_size, unroll=True)
  fn, args = loop.plan_step(config, lm.make_task(config, data, lm_model))
  n_params = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(
      model.specs, is_leaf=params_lib.is_spec))
  m = config.model
  label = (f"LM pattern={m.pattern} d={m.dim} params={n_params:,} batch "
           f"{config.train.batch_size} x {config.data.seq_len} mesh={config.mesh} "
           f"compute_dtype={config.compute_dtype}")
  return planner.Plan(fn, args, steps=config.train.steps, label=label,
                      bf16=config.compute_dtype == "bfloat16")


def nats_fn(model: stack.Model):
  """A jitted (params, tokens_BxT1) -> total next-token nats (compile it once, reuse it)."""
  return jax.jit(lambda p, t: jnp.sum(lm.next_token_nats(model.apply, p, t, None)))


def bpb(fn, params, windows: np.ndarray, token_bytes: np.ndarray, batch: int = 64) -> float:
  """Bits per byte of `params` on `windows` (N, T+1): sum of nats / (ln 2 * target bytes)."""
  nats = sum(float(fn(params, jnp.asarray(windows[i:i + batch])))
             for i in range(0, len(windows), batch))
  return nats / (math.log(2) * float(token_bytes[windows[:, 1:]].sum()))


def run_study(config, workdir: str):
  """LR sweep as one population: held-out bpb per (LR, seed); LR chosen on validation."""
  commit = study_lib.git_commit(paths=("jaxpapers/nn", "jaxpapers/core/loop.py",
                                       "jaxpapers/core/population.py",
                                       "jaxpapers/data/text.py", "configs/lm.py"))
  s = config.study
  run_cfg = config.copy_and_resolve_references()
  run_cfg.model.dim = s.dim
  run_cfg.model.pattern = s.pattern
  run_cfg.data.seq_len = s.seq_len
  run_cfg.train.batch_size = s.batch_size
  run_cfg.train.steps = s.steps
  run_cfg.train.eval_every = s.steps
  run_cfg.train.checkpoint_every = max(1, s.steps // 4)
  data = load_data(run_cfg)
  model, lm_model = build_model(run_cfg, data.vocab_size)
  seeds = [config.seed + i for i in range(s.seeds)]
  pop = population.grid(seeds, lr=s.lrs)
  task = population.population_task(
      lambda seed, hp: lm.make_task(run_cfg, data, lm_model, seed=seed, hparams=hp), pop)
  state, _ = loop.train(run_cfg, os.path.join(workdir, "population"), task)
  state = jax.device_get(state)
  windows = text_lib.eval_windows(data.val, s.seq_len,
                                  config.eval.max_windows or None)
  n_val = max(1, int(len(windows) * s.validation_frac))
  val_w, test_w = windows[:n_val], windows[n_val:]
  rows = []
  fn = nats_fn(model)
  for i, m in enumerate(pop):
    diverged = bool(state["diverged"][i])
    p = population.member(state, i)["params"]
    rows.append({"lr": m["lr"], "seed": m["seed"], "diverged": diverged,
                 "val_bpb": float("nan") if diverged else bpb(fn, p, val_w, data.token_bytes),
                 "test_bpb": float("nan") if diverged else bpb(fn, p, test_w, data.token_bytes)})
  table = []
  for lr in s.lrs:
    r = [x for x in rows if x["lr"] == lr]
    v = np.array([x["val_bpb"] for x in r])
    t = np.array([x["test_bpb"] for x in r])
    table.append({"lr": lr, "val_bpb": float(np.mean(v)), "val_std": float(np.std(v)),
                  "test_bpb": float(np.mean(t)), "test_std": float(np.std(t)),
                  "diverged": sum(x["diverged"] for x in r)})
  finite = [r for r in table if np.isfinite(r["val_bpb"])]
  best = min(finite, key=lambda r: r["val_bpb"]) if finite else None
  header = (f"LR sweep of `{s.pattern}` d={s.dim} "
            f"({config.model.parametrization}) on {data.name}: {s.steps} steps, batch "
            f"{s.batch_size} x {s.seq_len}, {len(seeds)} seeds, one "
            f"population of {len(pop)} members; bpb on {len(val_w)} validation / "
            f"{len(test_w)} test held-out windows. Commit {commit}.\n"
            + (f"Best LR on validation: {best['lr']:g} (test bpb {best['test_bpb']:.4f})."
               if best else "Every LR diverged."))
  md = study_lib.write_table(workdir, "lr_sweep", table, header=header, digits=4)
  study_lib.write_table(workdir, "lr_sweep_rows", rows, digits=4)
  _plot(workdir, table)
  print(md, flush=True)
  return table


def _plot(workdir, table):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(4.5, 3.2))
  lrs = [r["lr"] for r in table]
  ax.errorbar(lrs, [r["test_bpb"] for r in table], yerr=[r["test_std"] for r in table],
              marker="o", label="test")
  ax.plot(lrs, [r["val_bpb"] for r in table], "s--", label="validation")
  ax.set_xscale("log")
  ax.set_xlabel("peak learning rate")
  ax.set_ylabel("held-out bits per byte")
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "lr_sweep.png"), dpi=120)
  plt.close(fig)


def benchmark(config, workdir: str):
  from jaxpapers.nn import lm_bench  # pylint: disable=g-import-not-at-top
  return lm_bench.run(config, workdir)
