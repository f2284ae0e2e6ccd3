"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

The depth study: training rule x progression order x depth on the binary MLP, every cell
trained for several seeds at once (`vmap` over seeds, split over every device by
`core.sharding.spread`, `lax.scan` over steps, the whole
training set on device, batch indices precomputed on the host from (seed, step) exactly as
the launcher's loop draws them). Each cell reports the test accuracy of the fully
committed network (hard signs only) and keeps the per-layer gradient norms over training
(the gradient blockade). Writes `depth.md`/`depth.json` and `depth.png` into the workdir.
"""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.data import sources
from jaxpapers.papers.stompp import experiment
from jaxpapers.papers.stompp import model as model_lib
from jaxpapers.papers.stompp import train_lib

# (label, rule, order, binary activations)
VARIANTS = (
    ("STE (vanilla)", "ste", "forward", True),
    ("StoMPP forward", "stompp", "forward", True),
    ("StoMPP reverse", "stompp", "reverse", True),
    ("StoMPP all-at-once", "stompp", "all", True),
    ("StoMPP+STE-on-frozen forward", "stompp_ste", "forward", True),
    ("BW StoMPP forward", "stompp", "forward", False),
    ("BW StoMPP reverse", "stompp", "reverse", False),
    ("full precision", "fp", "forward", True),
)

PAPER_CLAIMS = """Paper's claims (ResNet-18/34/50 on CIFAR/ImageNet): StoMPP (STE-free) beats vanilla
STE with a gap that grows with depth; STE on frozen entries adds more; forward order
beats reverse (reverse collapses to near chance); binary-weight (BW) networks are
insensitive to order."""


def train_cell(config, ds, images, labels, seeds, mesh=None):
  """One (rule, order, depth) cell: every seed trained at once, the seeds split over the
  devices of `mesh` (default: all; `core.sharding.spread`). Returns per-seed test
  accuracy [S], loss [S, T] and per-layer gradient norms [S, T, L]."""
  model = model_lib.build(config, ds.num_classes)
  optimizer = train_lib.make_optimizer(config)
  train_step, _ = train_lib.bind(config, model, optimizer)
  steps, bs = config.train.steps, config.train.batch_size
  idx = np.stack([np.stack([sources.batch_indices(s, t, bs, len(labels))
                            for s in seeds]) for t in range(steps)])  # [T, S, B]
  keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds))

  # The data are arguments (replicated on every device), not closed-over constants.
  def train_one(key, idx_TxB, images, labels):
    init_key, step_key = jax.random.split(key)
    state = train_lib.init_state(config, model, optimizer, ds.input_shape, init_key)

    def body(state, inputs):
      t, ix = inputs
      batch = {"image": images[ix], "label": labels[ix]}
      state, m = train_step(state, batch, jax.random.fold_in(step_key, t), t)
      return state, (m["loss"], m["layer_grad_norm"])

    state, (loss, gnorm) = jax.lax.scan(
        body, state, (jnp.arange(steps, dtype=jnp.int32), idx_TxB))
    return state, loss, gnorm

  run = sharding.spread(train_one, mesh, in_axes=(0, 0, None, None))
  states, loss, gnorm = run(keys, jnp.asarray(idx.transpose(1, 0, 2)), images, labels)

  # The test set padded to whole chunks; `valid` masks the padding out of the count.
  n, chunk = len(ds.test), 500
  pad = -n % chunk
  test_x = jnp.asarray(np.concatenate(
      [ds.test.images, np.zeros((pad, *ds.test.images.shape[1:]), np.float32)]))
  test_y = jnp.asarray(np.concatenate([ds.test.labels, np.zeros(pad, np.int32)]))
  valid = jnp.arange(n + pad) < n

  def accuracy(state, test_x, test_y, valid):
    def body(carry, xyv):
      x, y, v = xyv
      logits = train_lib.logits_hard(model, state, x)
      return carry + ((logits.argmax(-1) == y) & v).sum(), None
    xs = test_x.reshape(-1, chunk, *test_x.shape[1:])
    correct, _ = jax.lax.scan(body, jnp.zeros((), jnp.int32),
                              (xs, test_y.reshape(-1, chunk), valid.reshape(-1, chunk)))
    return correct / n

  accuracy = sharding.spread(accuracy, mesh, in_axes=(0, None, None, None))
  return (np.asarray(accuracy(states, test_x, test_y, valid)), np.asarray(loss),
          np.asarray(gnorm))


def run(config, workdir: str):
  # Stamped before running: the code that produced the table, not what is there later.
  commit = study_lib.git_commit(['jaxpapers/papers/stompp', 'configs/stompp.py',
                                 'jaxpapers/core', 'jaxpapers/data'])
  s = config.study
  if s.name != "depth":
    raise ValueError(f"unknown stompp study {s.name!r}; available: depth, resnet")
  data_cfg = config_lib.override(config, {"data.name": s.data})
  ds = experiment.load_data(data_cfg)
  images, labels = jnp.asarray(ds.train.images), jnp.asarray(ds.train.labels)
  seeds = list(range(config.seed, config.seed + s.seeds))
  # Finished cells are kept in the workdir, so a killed study resumes where it stopped.
  done_path = os.path.join(workdir, "depth_cells.json")
  done = json.load(open(done_path)) if os.path.exists(done_path) else {}
  rows, curves = [], {}
  for depth in s.depths:
    for label, rule, order, acts in VARIANTS:
      key = f"{depth}|{label}"
      curve_path = os.path.join(workdir, "curves", f"{depth}_{rule}_{order}_{int(acts)}.npy")
      if key not in done:
        cfg = config_lib.override(config, {
            "model.name": "mlp", "model.depth": depth, "model.width": s.width,
            "binarize.rule": rule, "binarize.order": order,
            "binarize.binary_acts": acts, "train.steps": s.steps})
        t0 = time.perf_counter()
        acc, loss, gnorm = train_cell(cfg, ds, images, labels, seeds)
        os.makedirs(os.path.dirname(curve_path), exist_ok=True)
        np.save(curve_path, gnorm.mean(0))  # [T, L]
        done[key] = {"acc": acc.tolist(), "final loss": float(loss[:, -1].mean()),
                     "seconds": time.perf_counter() - t0}
        with open(done_path + ".tmp", "w") as f:
          json.dump(done, f)
        os.replace(done_path + ".tmp", done_path)
      cell = done[key]
      acc = np.asarray(cell["acc"])
      rows.append({"depth": depth, "variant": label, "mean acc": float(acc.mean()),
                   "std": float(acc.std()), "min": float(acc.min()),
                   "seeds": len(acc), "final loss": cell["final loss"],
                   "seconds": cell["seconds"]})
      curves[(depth, label)] = np.load(curve_path)
      print(f"[study] depth={depth} {label}: acc {acc.mean():.4f} +- {acc.std():.4f} "
            f"({cell['seconds']:.1f}s)", flush=True)
  header = (f"StoMPP depth study on {ds.name}: binary MLP width {s.width}, "
            f"{s.steps} steps, batch {config.train.batch_size}, {len(seeds)} seeds; "
            f"test accuracy of the fully committed (hard-sign) network.\n"
            f"commit {commit} (stamped when the study started)\n\n"
            + PAPER_CLAIMS)
  md = study_lib.write_table(workdir, "depth", rows,
                             ["depth", "variant", "mean acc", "std", "min", "seeds",
                              "final loss", "seconds"], header=header, digits=4)
  _plot(workdir, rows, curves, s.depths)
  print(md, flush=True)
  return rows


def _plot(workdir, rows, curves, depths):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
  for label, *_ in VARIANTS:
    accs = [next(r["mean acc"] for r in rows if r["depth"] == d and r["variant"] == label)
            for d in depths]
    axes[0].plot(depths, accs, marker="o", label=label)
  axes[0].set(xlabel="binary hidden layers", ylabel="test accuracy (committed)",
              title="accuracy vs depth", xticks=list(depths))
  axes[0].legend(fontsize=7)
  deep = max(depths)
  for ax, label in zip(axes[1:], ("StoMPP forward", "StoMPP reverse")):
    g = curves[(deep, label)]
    for l in range(g.shape[1]):
      ax.plot(g[:, l], lw=0.8, label=f"layer {l}")
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set(xlabel="step", ylabel="weight-gradient norm",
           title=f"gradient blockade: {label}, depth {deep}")
    ax.legend(fontsize=6, ncol=2)
  fig.tight_layout()
  fig.savefig(f"{workdir}/depth.png", dpi=110)
  plt.close(fig)
