"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

Launcher entries: `train_and_evaluate` runs the core supervised loop (mesh, checkpoints,
exact resume) on one configured network; `run_study` runs the MLP depth study (study.py,
`study=depth`) or the architecture study (study_resnet.py, `study=resnet`), both vmapped;
`benchmark` times the train step (see benchmark.py).
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import loop
from jaxpapers.core import planner
from jaxpapers.data import sources
from jaxpapers.papers.stompp import model as model_lib
from jaxpapers.papers.stompp import train_lib


# Shape-only datasets for `plan` (`data=shapes:imagenet`): the paper's input shapes and
# class counts, so launch/plan.py compiles the paper's networks without the data files.
SHAPES = {"cifar10": ((32, 32, 3), 10), "cifar100": ((32, 32, 3), 100),
          "imagenet": ((224, 224, 3), 1000)}


class ShapeOnly:
  """A dataset's name, input shape and classes; no images (planning only)."""

  def __init__(self, name: str):
    key = name.split(":", 1)[1]
    if key not in SHAPES:
      raise ValueError(f"data={name!r}: shape-only data are {['shapes:' + k for k in SHAPES]}")
    self.name, (self.input_shape, self.num_classes) = name, SHAPES[key]


def load_data(config):
  name = config.data.name
  if name.startswith("shapes:"):
    return ShapeOnly(name)
  if name == "auto":  # Fashion-MNIST where installed, the bundled digits otherwise
    name = "fashion_mnist" if os.path.isdir(
        config.data.path or sources.FASHION_MNIST_DIR) else "digits"
  ds = sources.load(name, config.data.path)
  return sources.normalize(ds) if config.data.get("normalize", False) else ds


def _shape_batch(ds, batch_size):
  """A zero batch of the right shape that allocates nothing (a broadcast view)."""
  def batch(step, rows):
    del step
    n = len(range(batch_size)[rows])
    return {"image": np.broadcast_to(np.float32(0), (n, *ds.input_shape)),
            "label": np.broadcast_to(np.int32(0), (n,))}
  return batch


def make_task(config, ds):
  model = model_lib.build(config, ds.num_classes)
  optimizer = train_lib.make_optimizer(config)
  train_step, eval_step = train_lib.bind(config, model, optimizer)
  if isinstance(ds, ShapeOnly):  # planning: shapes only, nothing to evaluate
    return model, loop.Task(
        init=lambda rng: train_lib.init_state(config, model, optimizer, ds.input_shape, rng),
        train_step=train_step, eval_step=eval_step,
        train_batch=_shape_batch(ds, config.train.batch_size), eval_batches=None)
  return model, loop.Task(
      init=lambda rng: train_lib.init_state(config, model, optimizer, ds.input_shape, rng),
      train_step=train_step,
      eval_step=eval_step,
      train_batch=lambda step, rows: sources.train_batch(
          ds, config.seed, step, config.train.batch_size, rows),
      eval_batches=lambda rows: sources.eval_batches(ds, config.eval.batch_size, rows),
  )


def committed_fraction(config, model, state, step: int) -> float:
  """Fraction of all binarizable entries committed by the mask at `step`."""
  progress = train_lib.progress_at(config, model.num_binary, step)
  total = committed = 0.0
  for name in model_lib.binary_layer_names(model.num_binary):
    for ranks in state["ranks"].get(name, {}).values():
      p = progress[int(name[3:])]
      committed += float(jnp.floor(p * ranks.size))
      total += ranks.size
  return committed / max(total, 1.0)


def train_and_evaluate(config, workdir: str):
  ds = load_data(config)
  if isinstance(ds, ShapeOnly):
    raise ValueError(f"data={ds.name!r} is shape-only (for launch/plan.py); train on "
                     "digits, fashion_mnist or tfds:<name>")
  model, task = make_task(config, ds)
  print(f"StoMPP: {config.model.name} depth={config.model.get('depth')} "
        f"binary layers={model.num_binary} rule={config.binarize.rule} "
        f"order={config.binarize.order} data={ds.name} devices={jax.device_count()}",
        flush=True)
  state, final = loop.train(config, workdir, task)
  frac = committed_fraction(config, model, jax.device_get(state), config.train.steps)
  print(f"final test accuracy (fully committed binary network, hard signs only): "
        f"{final['accuracy']:.4f}  [committed fraction {frac:.3f}]", flush=True)
  return state, final


def plan(config) -> planner.Plan:
  """The configured network's train step, for `launch/plan.py` (nothing allocated)."""
  ds = load_data(config)
  model, task = make_task(config, ds)
  fn, args = loop.plan_step(config, task)
  label = (f"StoMPP {config.model.name} width={config.model.width} stem={config.model.stem} "
           f"rule={config.binarize.rule} data={ds.name} {ds.input_shape} batch "
           f"{config.train.batch_size} mesh={config.mesh}")
  return planner.Plan(fn, args, steps=config.train.steps, label=label,
                      bf16=config.compute_dtype == "bfloat16")


def run_study(config, workdir: str):
  if config.study.name == "resnet":
    from jaxpapers.papers.stompp import study_resnet
    return study_resnet.run(config, workdir)
  from jaxpapers.papers.stompp import study
  return study.run(config, workdir)


def benchmark(config, workdir: str):
  from jaxpapers.papers.stompp import benchmark as bench
  return bench.run(config, workdir)
