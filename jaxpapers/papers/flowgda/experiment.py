"""FlowGDA: flow-matching gradual domain adaptation (abstract 10): training entry and study.

`train_and_evaluate` runs every method (and FlowGDA's ablations) on one benchmark for all
seeds, phase by phase (source model, target self-training, gradual self-training, DANN,
GOAT, GGF, FlowGDA), checkpointing the source model and the finished phases' results
through `core.checkpoint` after every phase, so a killed run resumes where it stopped and
ends with the same numbers. `run_study` (study.py) runs the benchmarks, the ablations and
the sensitivity to the number of intermediate domains and writes the table and plot.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import planner
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.flowgda import flow
from jaxpapers.papers.flowgda import nets
from jaxpapers.papers.flowgda import pipeline

PATHS = ["jaxpapers/papers/flowgda", "configs/flowgda.py"]
RESULTS = tuple(m for m in pipeline.METHODS if m != "flowgda") + tuple(pipeline.VARIANTS)
PHASES = tuple(m for m in pipeline.METHODS)  # 'flowgda' fills every variant row
LOSSES = ("cons", "anchor", "sem", "loss")


class _Stop(Exception):
  """Raised after the phase named by config.stop_after (simulates a killed run)."""


def seeds_of(config):
  return list(range(config.seed, config.seed + config.seeds))


def _template(config, in_dim, classes):
  s = config.seeds
  m = config.model
  arch = pipeline.arch_of(config)
  init = functools.partial(nets.classifier_init, in_dim=in_dim, hidden=arch["hidden"],
                           feat_dim=arch["feat"], head_hidden=m.head_hidden,
                           num_classes=classes, conv=arch["conv"])
  shapes = jax.eval_shape(jax.vmap(init), jax.random.split(jax.random.key(0), s))
  zeros = lambda a, *shape: jnp.zeros(shape, a)  # noqa: E731
  fields = {k: zeros(jnp.float32, len(RESULTS), s) for k in pipeline.FIELDS}
  return {"src": jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes), **fields,
          "seconds": zeros(jnp.float32, len(RESULTS)),
          "flow_loss": zeros(jnp.float32, len(RESULTS), len(LOSSES)),
          "done": zeros(jnp.int32, len(RESULTS))}


def _pack(src, out, template):
  state = jax.tree.map(np.asarray, dict(template, src=src))
  state = {k: np.array(v) if k != "src" else v for k, v in state.items()}
  for i, r in enumerate(RESULTS):
    if r in out:
      for k in pipeline.FIELDS:
        state[k][i] = out[r][k]
      state["seconds"][i] = out[r]["seconds"]
      state["flow_loss"][i] = [out[r].get("flow_loss", {}).get(k, 0.0) for k in LOSSES]
      state["done"][i] = 1
  return state


def _unpack(state):
  out = {}
  for i, r in enumerate(RESULTS):
    if int(state["done"][i]):
      out[r] = {k: np.asarray(state[k][i]) for k in pipeline.FIELDS}
      out[r]["seconds"] = float(state["seconds"][i])
      if r in pipeline.VARIANTS:
        out[r]["flow_loss"] = dict(zip(LOSSES, map(float, state["flow_loss"][i])))
  return out


def result_row(bench, method, res, n_inter):
  """One (benchmark, method) row: per selection rule (proxy; reverse validation, `rv`)
  the mean/std target accuracy, per-seed accuracies and the chosen hyper-parameters."""
  f = lambda k: np.asarray(res[k], float)  # noqa: E731
  hps = lambda k: [float(f"{x:.1e}") for x in f(k)]  # noqa: E731
  test, test_rv = f("test"), f("test_rv")
  return {"benchmark": bench, "D": n_inter + 2, "method": method,
          "target acc": float(test.mean()), "std": float(test.std()),
          "target acc rv": float(test_rv.mean()), "std rv": float(test_rv.std()),
          "val proxy": float(f("val").mean()), "rv score": float(f("rv").mean()),
          "seeds": [round(float(t), 4) for t in test],
          "seeds rv": [round(float(t), 4) for t in test_rv],
          "lr": hps("lr"), "wd": hps("wd"), "lr rv": hps("lr_rv"), "wd rv": hps("wd_rv"),
          "seconds": round(float(res["seconds"]), 1)}


def train_and_evaluate(config, workdir: str) -> dict:
  """Every method on `config.data.benchmark`, all seeds; resumes from the workdir."""
  metrics_lib.write_config(workdir, config)
  bench, seeds = config.data.benchmark, seeds_of(config)
  gs, _, mask = pipeline.load(config, bench, seeds, config.data.n_inter)
  template = _template(config, gs[0].x.shape[-1], mask.shape[0])
  ckpt = checkpoint_lib.Checkpointer(workdir, keep=2)
  state, step = ckpt.restore_or(template)
  metrics_lib.truncate_after(workdir, step, splits=("train",))  # rows at the phase count
  resume = {"src": state["src"], "out": _unpack(state)} if step else None
  writer = metrics_lib.MetricsWriter(workdir, total_steps=len(PHASES))

  def on_phase(phase, src, out):
    done = PHASES.index(phase) + 1  # a fixed step per phase, whatever runs
    rows = [r for r in RESULTS if r in out and (r == phase or
                                               (phase == "flowgda" and r in pipeline.VARIANTS))]
    m = {}
    for r in rows:
      m[f"{r}/target_acc"] = float(np.mean(out[r]["test"]))
      m[f"{r}/val_proxy"] = float(np.mean(out[r]["val"]))
      m[f"{r}/target_acc_rv"] = float(np.mean(out[r]["test_rv"]))
      for k, v in out[r].get("flow_loss", {}).items():
        m[f"{r}/flow_{k}"] = v
    metrics_lib.check_finite(done, m)
    writer.write(done, m)
    ckpt.save(done, _pack(src, out, template), force=True)
    if config.study.stop_after == phase:
      raise _Stop(phase)

  try:
    out = pipeline.run(config, bench, seeds, methods=config.methods,
                       variants=config.flow.variants, resume=resume, on_phase=on_phase)
  except _Stop as e:
    ckpt.close()
    print(f"stopped after phase {e} (config.study.stop_after); rerun to resume")
    return {"stopped_after": str(e)}
  ckpt.close()
  rows = [result_row(bench, r, out[r], config.data.n_inter) for r in RESULTS if r in out]
  md = study_lib.write_table(
      workdir, f"flowgda_{bench}", rows,
      ["method", "target acc", "std", "val proxy", "lr", "wd", "target acc rv", "std rv",
       "lr rv", "wd rv", "seconds"],
      header=f"FlowGDA on {bench} (D={config.data.n_inter + 2}, seeds {seeds}; commit "
             f"{study_lib.git_commit(paths=PATHS)}); hyper-parameters chosen per seed by "
             f"two rules: 'target acc' = {pipeline.RULES['proxy']}; 'target acc rv' = "
             f"{pipeline.RULES['rv']}")
  print(md)
  return {r: float(np.mean(out[r]["test"])) for r in out}


# Input size of each built-in benchmark (plan() needs shapes only, not the data).
IN_DIM = {"moons": 2, "digits": 64, "fashion_mnist": 784, "rot_mnist": 784, "gauss": 8,
          "tabular": 10}


def _in_dim(config) -> int:
  if config.data.benchmark != "npz":
    return IN_DIM[config.data.benchmark]
  with np.load(config.data.path) as f:  # reads the header of X_0 only
    return int(np.prod(f["X_0"].shape[1:]))


def plan(config) -> planner.Plan:
  """One velocity-field update of FlowGDA and its ablations, every seed, for plan.py.

  FlowGDA's program (seeds spread over the devices x ablation variants) dominates the
  run: each update solves two minibatch Sinkhorn problems per lane. The training is a
  scan whose body XLA's cost analysis counts once, so the planned program is one update
  (`flow.velocity_update`, the scan's body). The head's adaptation along the flow that
  follows (`flow.adapt_head` for every learning rate: n_int midpoint steps of the
  particles, each followed by steps_per_int Adam steps of the head) is counted in
  velocity-update equivalents: one adaptation round (one midpoint step and one head step)
  and one midpoint step alone are compiled the same way, and `steps` = flow.steps +
  (n_int x midpoint + n_int x steps_per_int x head step) / update FLOPs. Memory is the
  velocity update's. Arguments are abstract: features (seeds, D, n, feat) of the frozen
  encoder, nothing is loaded.
  """
  s, d, n = config.seeds, config.data.n_inter + 2, config.data.n
  feat, classes = config.model.feat, pipeline.MIN_CLASSES
  fc = config.flow
  # pylint: disable=protected-access
  hp = dict(pipeline._hp(config), batch=fc.batch, sigma=fc.sigma, epsilon=fc.epsilon,
            anchor_substeps=fc.anchor_substeps)
  weights = pipeline._flowgda_weights(config, list(pipeline.VARIANTS))
  # pylint: enable=protected-access
  n_var = len(pipeline.VARIANTS)

  def lane(params, state, run_key, zn, y, head0, mean, std, mask, wv, t):
    return flow.velocity_update(params, state, t, run_key, zn, y, head0, (mean, std),
                                mask, wv, hp)

  per_seed = jax.vmap(lane, (0, 0, None, None, None, None, None, None, None, 0, None))
  sds = jax.ShapeDtypeStruct
  start = jax.eval_shape(lambda k: flow.velocity_start(k, feat, hp)[:2], jax.random.key(0))
  lead = lambda a: sds((s, n_var) + a.shape, a.dtype)  # noqa: E731
  head = jax.eval_shape(lambda k: nets.mlp_init(k, (feat, config.model.head_hidden,
                                                    classes)), jax.random.key(0))
  args = (jax.tree.map(lead, start[0]), jax.tree.map(lead, start[1]),
          jax.eval_shape(lambda: jax.random.split(jax.random.key(0), s)),
          sds((s, d, n, feat), jnp.float32), sds((s, n), jnp.int32),
          jax.tree.map(lambda a: sds((s,) + a.shape, a.dtype), head),
          sds((s, feat), jnp.float32), sds((s, feat), jnp.float32),
          sds((classes,), jnp.bool_), jax.tree.map(lambda a: sds(a.shape, a.dtype), weights),
          sds((), jnp.int32))
  fn, args = sharding.spread_plan(per_seed, *args,
                                  in_axes=(0, 0, 0, 0, 0, 0, 0, 0, None, None, None))
  # The head adaptation, as pipeline.flowgda_program runs it (seeds spread, variants and
  # learning rates vmapped), at one round and at one midpoint step alone.
  n_int = fc.n_int_per_gap * (d - 1)
  spi = max(1, config.adapt.steps_per_round // fc.n_int_per_gap)
  lrs = sds((len(config.adapt.lr_grid),), jnp.float32)

  def adapt_round(vp, key, zn, y, head0, mean, std, mask, lrs):
    def one(p, lr):
      return flow.adapt_head(key, p, zn[0], y, head0, (mean, std), mask, lr, n_int=1,
                             steps_per_int=1, batch=config.adapt.batch)[0]
    return jax.vmap(lambda p: jax.vmap(lambda lr: one(p, lr))(lrs))(vp)

  def midpoint(vp, zn):
    return jax.vmap(lambda p: flow.integrate(p, zn[0], 0.0, 1.0 / n_int, 1))(vp)
  ax = (0, 0, 0, 0, 0, 0, 0, None, None)
  flops = lambda f, *a, **k: planner.compiled_costs(  # noqa: E731
      *sharding.spread_plan(f, *a, **k))["flops_per_device"]
  f_round = flops(adapt_round, args[0], *args[2:9], lrs, in_axes=ax)
  f_mid = flops(midpoint, args[0], args[3], in_axes=(0, 0))
  f_update = planner.compiled_costs(fn, args)["flops_per_device"]
  head = n_int * f_mid + n_int * spi * (f_round - f_mid)
  extra = int(round(head / f_update))
  label = (f"FlowGDA velocity update on {config.data.benchmark} (input {_in_dim(config)}, "
           f"D={d}, n={n}/domain, feat {feat}): {s} seeds x {n_var} variants, OT batch "
           f"{fc.batch}, velocity MLP {tuple(fc.hidden)}, x {fc.steps} updates + head "
           f"adaptation ({len(config.adapt.lr_grid)} lrs x {n_int} x {spi} steps, head "
           f"{config.model.head_hidden}) = {extra} updates' FLOPs")
  return planner.Plan(fn, args, steps=fc.steps + extra, label=label)


def run_study(config, workdir: str):
  from jaxpapers.papers.flowgda import study
  return study.run_study(config, workdir)
