"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

The architecture study, where the paper makes its claims: binary ResNet-18 / ResNet-34
layouts (and ResNet-50 / MobileNetV2 when listed) on Fashion-MNIST 28x28, rules STE,
StoMPP (STE-free), StoMPP+STE-on-frozen and full precision, orders forward / reverse,
plus an ablation of the STE gap (binarization window) on the first architecture.

Built for an accelerator: per architecture ONE compiled program trains every
(variant x learning rate x seed) row at once (`vmap` over rows; a variant is a pytree of
numbers, see train_lib.variant), `lax.scan` over a chunk of steps, the training set on
device and batch indices precomputed on the host from (seed, step) exactly as the
launcher draws them. The host only touches the device between chunks (progress lines).
Randomness of a row (init, batches, augmentation, refresh) comes from its seed alone, so
a row alone equals the same row beside others, and variants of one seed are paired.

Protocol: `val_size` training images (a fixed random permutation) are held out as a
validation split; every variant is trained at each learning rate of `lrs`, the learning
rate with the best mean validation accuracy (committed network) over the seeds trained
at every rate is selected per variant (`select_lr`), and the table reports the TEST
accuracy at that learning rate (mean, std, min over its seeds). Writes resnet.md, resnet.json
(raw rows: every lr and seed), resnet.png and per-architecture partial results into the
workdir as it goes, so a run cut short keeps its finished architectures.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxpapers.core import config as config_lib
from jaxpapers.core import population
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.data import sources
from jaxpapers.papers.stompp import experiment
from jaxpapers.papers.stompp import model as model_lib
from jaxpapers.papers.stompp import train_lib

# key -> (label, rule, order, window start, window end, binary activations)
VARIANTS = {
    "ste": ("STE (vanilla)", "ste", "forward", 0.0, 0.8, True),
    "stompp_fwd": ("StoMPP forward", "stompp", "forward", 0.0, 0.8, True),
    "stompp_rev": ("StoMPP reverse", "stompp", "reverse", 0.0, 0.8, True),
    "stompp_ste_fwd": ("StoMPP+STE-on-frozen forward", "stompp_ste", "forward", 0.0, 0.8, True),
    "stompp_ste_rev": ("StoMPP+STE-on-frozen reverse", "stompp_ste", "reverse", 0.0, 0.8, True),
    "fp": ("full precision", "fp", "forward", 0.0, 0.8, True),
    # Ablation of the STE gap (first architecture only): a late window, so every layer
    # first trains relaxed (clipped reals) for 40% of training (slots 5/8 as long); and a
    # short early window, so each slot halves and committed layers get 60% of training after.
    "late_window": ("ablation: StoMPP forward, late window [0.4, 0.9]", "stompp", "forward",
                    0.4, 0.9, True),
    "early_window": ("ablation: StoMPP forward, early window [0, 0.4]", "stompp", "forward",
                     0.0, 0.4, True),
}
MAIN = ["ste", "stompp_fwd", "stompp_rev", "stompp_ste_fwd", "stompp_ste_rev", "fp"]
ABLATION = ["late_window", "early_window"]

PAPER_CLAIMS = """Paper's claims (binary ResNet-18/34/50 and MobileNetV2 on CIFAR/ImageNet): StoMPP
(STE-free) beats vanilla STE with gains that grow with depth; STE on frozen entries adds
more; forward order beats reverse, which collapses to near chance."""


def rows_for(arch_index: int, lrs, seeds, variants=(), ablation=()):
  """(variant key, lr, seed) of every row. `variants` (default: MAIN) run on every
  architecture; the ablation rows (default: ABLATION when `variants` is empty, else
  none) ride on the first architecture only."""
  keys = list(variants) or list(MAIN)
  if arch_index == 0:
    keys += list(ablation) or ([] if variants else ABLATION)
  for k in keys:
    if k not in VARIANTS:
      raise ValueError(f"unknown study variant {k!r}; use {'+'.join(VARIANTS)}")
  # seed-major: a part cut by a time limit leaves every variant with the same seeds
  return [(k, lr, s) for s in seeds for k in keys for lr in lrs]


def split_validation(ds, val_size: int):
  """Train minus the last `val_size` images (fixed permutation) / validation / test."""
  n = len(ds.train)
  if not 0 < val_size < n:
    raise ValueError(f"study.val_size={val_size} must be in (0, {n})")
  perm = np.random.default_rng(1234).permutation(n)
  tr, va = perm[:-val_size], perm[-val_size:]
  x, y = np.asarray(ds.train.images), np.asarray(ds.train.labels)
  return (x[tr], y[tr]), (x[va], y[va]), (np.asarray(ds.test.images),
                                          np.asarray(ds.test.labels))


def train_arch(config, arch: str, width: int, rows, data, num_classes, log=print,
               keep_states: bool = False, evaluate: bool = True, sequential: bool = False):
  """Trains every row of one architecture (all at once under vmap, or one after another
  with one compiled program); returns results in row order."""
  return run_arch(build_arch(config, arch, width, rows, data, num_classes, evaluate,
                             sequential), log, keep_states)


def build_arch(config, arch: str, width: int, rows, data, num_classes,
               evaluate: bool = True, sequential: bool = False):
  """Builds and compiles (ahead of time) the init, chunk and evaluation programs of one
  architecture. Thread-safe and GIL-free while XLA compiles, so the study compiles every
  architecture concurrently and then trains them one after another.

  The programs take the rows' variants, keys and seed indices as ARGUMENTS, so one
  executable serves any group of rows of its size. `sequential=False` compiles for all
  rows at once (vmap: an accelerator's way). `sequential=True` compiles for ONE row and
  `run_arch` trains the rows one after another: on a CPU, vmapping convolutions over
  networks with different weights turns them into grouped convolutions, which XLA's CPU
  backend runs about 3.5x slower than the same convolutions one network at a time
  (measured: 6 networks, 14x14x8 maps, batch 64: 92 ms vmapped, 27 ms unrolled).
  """
  s = config.study
  steps, bs, chunk = config.train.steps, config.train.batch_size, min(s.chunk, config.train.steps)
  if steps % chunk:
    raise ValueError(f"study steps={steps} must be a multiple of study.chunk={chunk}")
  cfg = config_lib.override(config, {"model.name": arch, "model.width": width,
                                     "binarize.rule": "stompp"})
  (tr_x, tr_y), _, _ = data
  model = model_lib.build(cfg, num_classes)
  optimizer = train_lib.make_optimizer(cfg)
  seeds = sorted({r[2] for r in rows})
  seed_of_row = np.asarray([seeds.index(r[2]) for r in rows], np.int32)
  var = population.stack([train_lib.variant(*VARIANTS[v][1:5], lr=lr,
                                           refresh_frac=cfg.binarize.refresh_frac,
                                           binary_acts=VARIANTS[v][5]) for v, lr, _ in rows])
  keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray([r[2] for r in rows]))
  init_keys, step_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
  groups = [[i] for i in range(len(rows))] if sequential else [list(range(len(rows)))]
  g0 = np.asarray(groups[0])
  input_shape = tr_x.shape[1:]
  images, labels = jnp.asarray(tr_x), jnp.asarray(tr_y)

  # opt_level >= 0 lowers XLA's backend optimization (CPU tests: compiles in a fraction
  # of the time); -1 keeps the default.
  opts = {} if s.opt_level < 0 else {"xla_backend_optimization_level": s.opt_level}
  compile_ = lambda f, *a, **kw: jax.jit(f, **kw).lower(*a).compile(compiler_options=opts)
  t0 = time.perf_counter()
  init = lambda k: train_lib.init_state(cfg, model, optimizer, input_shape, k)
  init_exe = compile_(jax.vmap(init), init_keys[g0])
  states = init_exe(init_keys[g0])
  jax.block_until_ready(states)

  # The data are arguments, never closed over: a closed-over array would be embedded in
  # the program as a constant (172 MB for Fashion-MNIST). One row's chunk of steps,
  # vmapped over the rows by `core.sharding.spread`: the rows are split over every
  # device (vmap mode) or run on one device (sequential mode: a group is one row).
  def row_chunk(state, idx_CxB, key, v, t_start, images, labels):
    def body(state, inputs):
      t, ix = inputs
      state, m = train_lib.train_step(cfg, model, optimizer, state,
                                      {"image": images[ix], "label": labels[ix]},
                                      jax.random.fold_in(key, t), t, v)
      return state, (m["loss"], m["layer_grad_norm"], m["committed"])
    ts = t_start + jnp.arange(idx_CxB.shape[0], dtype=jnp.int32)
    return jax.lax.scan(body, state, (ts, idx_CxB))

  n_train = len(tr_y)
  idx_all = np.stack([np.stack([sources.batch_indices(sd, t, bs, n_train) for sd in seeds])
                      for t in range(steps)]).astype(np.int32)  # [T, S, B]
  # Compiled ahead of time once: the same executable gives XLA's FLOP count and runs
  # every chunk of every group (no second compile for the cost analysis).
  take = lambda tree, g: jax.tree.map(lambda a: a[np.asarray(g)], tree)
  # Fewer rows than devices run on that many devices, as core.sharding.spread does.
  mesh = sharding.spread_mesh(rows_mesh(sequential), len(g0))
  repl = NamedSharding(mesh, P())
  images, labels = jax.device_put(images, repl), jax.device_put(labels, repl)
  row_idx = lambda c0, g: jnp.asarray(idx_all[c0:c0 + chunk][:, seed_of_row[np.asarray(g)]]
                                      .transpose(1, 0, 2))  # [R, C, B] per row
  # The abstract arguments as core.sharding.spread pads and places them; the program is
  # `rows_program` (per-device vmap), not spread's own jit (see there).
  _, abstract = sharding.spread_plan(
      row_chunk, states, row_idx(0, g0), step_keys[g0], take(var, g0), jnp.int32(0),
      images, labels, mesh=mesh, in_axes=ROW_AXES)
  chunk_exe = rows_program(row_chunk, mesh, donate_argnums=(0,)).lower(*abstract).compile(
      compiler_options=opts)
  cost = chunk_exe.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
  # XLA counts one device's share: times the mesh, the whole chunk (padded rows too).
  flops = float(cost["flops"]) * mesh.size if cost and "flops" in cost else None
  b = {"arch": arch, "width": width, "rows": rows, "model": model, "steps": steps,
       "chunk": chunk, "states": states, "idx_all": idx_all, "chunk_exe": chunk_exe,
       "images": images, "labels": labels, "flops": flops, "groups": groups, "mesh": mesh,
       "row_idx": row_idx,
       "init": lambda g: init_exe(init_keys[np.asarray(g)]),
       "args": lambda g: (take(var, g), step_keys[np.asarray(g)])}
  b["eval"] = (_build_eval(model, take(var, g0), states, data, compile_) if evaluate
               else None)
  b["compile_s"] = time.perf_counter() - t0
  return b


# row_chunk's arguments: state, indices, key and variant per row; step and data shared.
ROW_AXES = (0, 0, 0, 0, None, None, None)


def rows_mesh(sequential: bool):
  """Every device (vmap mode: the rows are split over them) or the first one alone
  (sequential mode: one row per group, which padding to every device would copy)."""
  devices = jax.devices()[:1] if sequential else jax.devices()
  return Mesh(np.asarray(devices), ("data",))


def rows_program(fn, mesh, donate_argnums=()):
  """jit of `fn` vmapped over rows, each device running the vmap over its own rows.
  `donate_argnums` as in `jax.jit` (the study donates the row states: each chunk's
  output states are the next chunk's input).

  The same placement as `core.sharding.spread` (rows split over the mesh, data
  replicated), written with `shard_map` because spread's jit leaves the partitioning to
  XLA's SPMD partitioner, which rejects the vmapped (grouped) convolutions of these
  networks when it splits their group axis over devices (jaxlib 0.10.2, CPU: "output
  feature dimension (value 4) to be divisible by feature_group_count (value 8)"). Rows
  are independent, so per-device code is exact: no communication at all.
  """
  split = sharding.spread_spec(mesh)
  specs = tuple(split if ax == 0 else P() for ax in ROW_AXES)
  return jax.jit(jax.shard_map(jax.vmap(fn, in_axes=ROW_AXES), mesh=mesh, in_specs=specs,
                               out_specs=split, check_vma=False),
                 donate_argnums=donate_argnums)


def spread_args(mesh, *trees):
  """Row-mapped arguments padded to a multiple of the mesh and split over it, as
  `core.sharding.spread` places them (the chunk program is its `spread_plan`)."""
  n_pad = sharding.padded_size(jax.tree.leaves(trees[0])[0].shape[0], mesh.size)
  split = NamedSharding(mesh, sharding.spread_spec(mesh))
  return tuple(jax.device_put(sharding.pad_leading(t, n_pad), split) for t in trees)


def run_arch(b, log=print, keep_states: bool = False, on_row=None):
  """Runs the compiled chunks of `build_arch` over all steps for every group of rows,
  then evaluates; `on_row(i, result)` is called as soon as row i is finished (the study
  saves it, so a cut run resumes at row granularity)."""
  steps, chunk, arch = b["steps"], b["chunk"], b["arch"]
  chunk_exe, images, labels = b["chunk_exe"], b["images"], b["labels"]
  rows, width, model, flops = b["rows"], b["width"], b["model"], b["flops"]
  mesh = b["mesh"]
  t0 = time.perf_counter()
  per_row = [None] * len(rows)
  chunk_times, eval_s = [], 0.0
  for gi, g in enumerate(b["groups"]):
    # The chunks donate their input states: the first group's start is copied so that
    # b["states"] (which placement may hand over as is) stays valid for another run.
    states = jax.tree.map(jnp.copy, b["states"]) if gi == 0 else b["init"](g)
    var, keys = b["args"](g)
    # Padded to the mesh once; the padded rows ride along and are dropped below.
    states, var, keys = spread_args(mesh, states, var, keys)
    losses, gnorms, prog = [], [], []
    tg = time.perf_counter()
    for c0 in range(0, steps, chunk):
      tc = time.perf_counter()
      (idx,) = spread_args(mesh, b["row_idx"](c0, g))
      states, (loss, gn, pm) = chunk_exe(states, idx, keys, var, jnp.int32(c0), images,
                                         labels)
      # [R, C, ...] per row -> [C, R, ...]; the only host sync: once per chunk
      loss, gn, pm = (np.asarray(a)[:len(g)].swapaxes(0, 1) for a in (loss, gn, pm))
      losses.append(loss), gnorms.append(gn), prog.append(pm)
      dt = time.perf_counter() - tc
      chunk_times.append(dt)
      who = (f"row {g[0] + 1}/{len(rows)} {rows[g[0]]}" if len(g) == 1
             else f"{len(g)} rows")
      log(f"[study] {arch} w{width} {who}: step {c0 + chunk}/{steps}  mean loss "
          f"{loss[-1].mean():.4f}  {chunk / dt:.2f} steps/s  elapsed "
          f"{time.perf_counter() - t0:.0f}s", flush=True)
    te = time.perf_counter()
    # The evaluation program was compiled for the init's placement (the default device).
    states, var = jax.device_put(jax.tree.map(lambda a: a[:len(g)], (states, var)),
                                 jax.devices()[0])
    val_acc, test_acc = b["eval"](states, var) if b["eval"] else (None, None)
    eval_s += time.perf_counter() - te
    loss_all, gn_all, pm_all = (np.concatenate(a) for a in (losses, gnorms, prog))
    host = jax.device_get(states) if keep_states else None
    for j, i in enumerate(g):
      per_row[i] = {
          "val": None if val_acc is None else float(val_acc[j]),
          "test": None if test_acc is None else float(test_acc[j]),
          "loss": loss_all[:, j], "gnorm": gn_all[:, j], "committed": pm_all[:, j],
          "states": None if host is None else jax.tree.map(lambda a: a[j], host),
          "train_s": time.perf_counter() - tg}
      if on_row is not None:
        on_row(i, per_row[i])
  train_s = time.perf_counter() - t0 - eval_s
  stack = lambda k: np.stack([r[k] for r in per_row], -1)
  loss_all = stack("loss")  # [T, R]
  committed = np.stack([r["committed"] for r in per_row], 1)  # [T, R, L]
  # Fraction of all binarizable entries committed at the last step, per row (counted
  # from the masks; an entry-weighted mean over layers would hide a lagging layer).
  final_prog = committed[-1].min(-1)  # [R]
  return {"val": None if per_row[0]["val"] is None else stack("val"),
          "test": None if per_row[0]["test"] is None else stack("test"),
          "final_loss": loss_all[-20:].mean(0),
          "first_loss": loss_all[:20].mean(0), "final_progress": final_prog,
          "loss": loss_all, "committed": committed,
          "states": (jax.tree.map(lambda *a: np.stack(a), *[r["states"] for r in per_row])
                     if keep_states else None),
          "gnorm": np.stack([r["gnorm"] for r in per_row], 1),
          "num_binary": model.num_binary,
          "train_s": train_s, "compile_s": b["compile_s"], "first_chunk_s": chunk_times[0],
          "chunk_s": float(np.median(chunk_times)), "eval_s": eval_s,
          "xla_gflop_per_chunk": None if flops is None else flops / 1e9}


def _build_eval(model, var, states, data, compile_, batch=500):
  """Compiled committed-network accuracy of a group of rows on validation and test, in
  ONE pass over both splits concatenated (one compile instead of one per split size)."""
  splits = data[1:]
  x_all = np.concatenate([x for x, _ in splits])
  y_all = np.concatenate([y for _, y in splits])
  seg = np.concatenate([np.full(len(y), i) for i, (_, y) in enumerate(splits)])
  pad = -len(y_all) % batch
  xs = jnp.asarray(np.concatenate([x_all, np.zeros((pad, *x_all.shape[1:]), x_all.dtype)]))
  ys = jnp.asarray(np.concatenate([y_all, np.zeros(pad, y_all.dtype)]))
  segs = jnp.asarray(np.concatenate([seg, np.full(pad, -1)]))
  onehot = segs[:, None] == jnp.arange(len(splits))[None, :]  # [N, splits]; padding matches none
  n_rows = len(jax.tree.leaves(var)[0])

  def run(states, var, xs, ys, onehot):
    def body(correct, xyo):
      x, y, o = xyo
      logits = jax.vmap(lambda st, vv: train_lib.logits_hard(model, st, x, vv))(states, var)
      hit = (logits.argmax(-1) == y[None]).astype(jnp.float32)  # [R, batch]
      return correct + hit @ o.astype(jnp.float32), None
    c, _ = jax.lax.scan(body, jnp.zeros((n_rows, len(splits)), jnp.float32),
                        (xs.reshape(-1, batch, *xs.shape[1:]), ys.reshape(-1, batch),
                         onehot.reshape(-1, batch, len(splits))))
    return c
  exe = compile_(run, states, var, xs, ys, onehot)

  def evaluate(states, var):
    counts = np.asarray(exe(states, var, xs, ys, onehot))
    return [counts[:, i] / len(y) for i, (_, y) in enumerate(splits)]
  return evaluate


def load_fashion_mnist(config):
  """Fashion-MNIST from data.path (e.g. .fmnist/ carried to a device) or the default
  install (never a silent fallback: a missing directory raises naming it), standardized
  per channel with the training split's statistics."""
  name = "fashion_mnist" if config.study.data == "auto" else config.study.data
  ds = experiment.load_data(config_lib.override(config, {"data.name": name}))
  return sources.normalize(ds)


def _row_key(arch, width, cfg, v, lr, seed):
  """Everything that makes a trained row what it is (resume matches on it)."""
  return (f"{arch}|w{width}|{cfg.model.stem}|b{cfg.train.batch_size}|T{cfg.train.steps}|"
          f"{v}|lr{lr}|s{seed}")


def table_rows(rows: dict, width_of: dict, cfg):
  """The rows (key -> row) that enter the table: those of the table's architectures at
  their width. A row of one of them trained with another stem, batch size or step count
  is a different protocol; mixing it into the table would average across protocols, so
  it is refused with an error naming it (run it in its own workdir)."""
  want = {"stem": cfg.model.stem, "batch": cfg.train.batch_size, "steps": cfg.train.steps}
  out, wrong = [], []
  for key, r in rows.items():
    if r["arch"] not in width_of or r["width"] != width_of[r["arch"]]:
      continue
    _, _, stem, b, t = key.split("|")[:5]
    got = {"stem": stem, "batch": int(b[1:]), "steps": int(t[1:])}
    if got != want:
      wrong.append(f"{key} ({', '.join(f'{k} {got[k]}' for k in want if got[k] != want[k])})")
    else:
      out.append(r)
  if wrong:
    raise ValueError(
        f"{len(wrong)} row(s) in the workdir differ from this table's protocol (stem "
        f"{want['stem']}, batch {want['batch']}, {want['steps']} steps): "
        f"{'; '.join(wrong[:3])}{' ...' if len(wrong) > 3 else ''}; keep each protocol "
        f"in its own workdir")
  return out


def run(config, workdir: str):
  # Stamped before anything runs: the code that produced the table.
  commit = study_lib.git_commit(['jaxpapers/papers/stompp', 'configs/stompp.py',
                                 'jaxpapers/core', 'jaxpapers/data'])
  if commit == "unknown" and os.environ.get("JAXPAPERS_COMMIT"):
    # A copy of the tree without .git (e.g. on a device machine): the launcher's stamp.
    commit = os.environ["JAXPAPERS_COMMIT"] + " (from JAXPAPERS_COMMIT; no git here)"
  s = config.study
  if s.row_mode not in ("auto", "vmap", "sequential"):
    raise ValueError(f"study.row_mode={s.row_mode!r}; use auto, vmap or sequential")
  # auto: one row at a time on a CPU (see build_arch), all rows vmapped elsewhere
  sequential = s.row_mode == "sequential" or (s.row_mode == "auto" and
                                              jax.default_backend() == "cpu")
  started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
  t_start = time.perf_counter()
  print(f"[study] resnet study at commit {commit}, {jax.device_count()} "
        f"{jax.default_backend()} device(s) ({jax.devices()[0].device_kind}), rows "
        f"{'one at a time' if sequential else 'vmapped'}", flush=True)
  seeds = list(range(config.seed, config.seed + s.seeds))
  cfg = config_lib.override(config, {"train.steps": s.resnet_steps})
  steps = s.resnet_steps
  os.makedirs(workdir, exist_ok=True)
  # Resumable at row granularity: every finished row is written at once, and a rerun
  # (the same command, or a later part with other archs / variants / seeds) skips rows
  # already in the file and keeps them in the table. Each part's commit is kept.
  done_path = os.path.join(workdir, "resnet_rows.json")
  done = (json.load(open(done_path)) if os.path.exists(done_path)
          else {"rows": {}, "timing": {}, "parts": []})

  def save():
    with open(done_path + ".tmp", "w") as f:
      json.dump(done, f, indent=1)
    os.replace(done_path + ".tmp", done_path)

  width_of = {a: (s.mobilenet_width if a == "mobilenetv2" else s.resnet_width)
              for a in s.archs}
  table_rows(done["rows"], width_of, cfg)  # refuse a mixed workdir before training
  plan = []
  for a, arch in enumerate(s.archs):
    width = s.mobilenet_width if arch == "mobilenetv2" else s.resnet_width
    rows = [] if s.table_only else rows_for(a, s.lrs, seeds, s.variants, s.ablation)
    todo = [r for r in rows if _row_key(arch, width, cfg, *r) not in done["rows"]]
    plan.append((arch, width, todo))
  # The data are loaded only when a row is left to train: a rerun with every row done
  # just rebuilds the table and plot from the rows file (seconds).
  ds_name, num_classes = "fashion_mnist", 10
  if any(todo for _, _, todo in plan):
    done["parts"].append({"commit": commit, "started": started,
                          "archs": list(s.archs), "variants": list(s.variants),
                          "ablation": list(s.ablation), "seeds": seeds, "lrs": list(s.lrs)})
    ds = load_fashion_mnist(config)
    data = split_validation(ds, s.val_size)
    ds_name, num_classes = ds.name, ds.num_classes
  # Every architecture still to run compiles at once (XLA compiles without the GIL), so
  # the wall time pays the longest compile, not their sum; training runs one at a time.
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(len(plan), 1))
  builds = {arch: pool.submit(build_arch, cfg, arch, width, todo, data, num_classes,
                              True, sequential)
            for arch, width, todo in plan if todo}
  for arch, width, todo in plan:
    if not todo:
      continue
    b = builds.pop(arch).result()
    print(f"[study] {arch} w{width}: {len(todo)} rows to train, compiled in "
          f"{b['compile_s']:.0f}s", flush=True)

    def on_row(i, r, arch=arch, width=width, todo=todo, b=b):
      v, lr, sd = todo[i]
      key = _row_key(arch, width, cfg, v, lr, sd)
      loss = r["loss"]
      tenth = max(steps // 10, 1)
      done["rows"][key] = {
          "arch": arch, "width": width, "variant": VARIANTS[v][0], "key": v, "lr": lr,
          "seed": sd, "val acc": r["val"], "test acc": r["test"],
          "first loss": float(loss[:20].mean()), "final loss": float(loss[-20:].mean()),
          # mean training loss over each tenth of training: STE's convergence check
          "loss by tenth": [float(loss[k * tenth:(k + 1) * tenth].mean()) for k in range(10)],
          "committed at last step": float(r["committed"][-1].min()),
          "train s": r["train_s"], "commit": commit}
      np.save(os.path.join(workdir, f"gnorm_{key.replace('|', '_')}.npy"), r["gnorm"])
      save()
    res = run_arch(b, on_row=on_row)
    t = done["timing"].setdefault(f"{arch}|w{width}|{cfg.model.stem}|b{cfg.train.batch_size}",
                                  {"arch": arch, "width": width,
                                   "binary layers": res["num_binary"], "rows": 0,
                                   "steps": steps, "train s": 0.0})
    t["rows"] += len(todo)
    t["train s"] += res["train_s"]
    t["s per step per row"] = res["chunk_s"] / b["chunk"] / (1 if sequential else len(todo))
    t["compile s (last part)"] = res["compile_s"]
    # XLA's cost analysis counts a scan's body once, not per step: the chunk's FLOPs
    # are those of one step of the group (the benchmark reports GFLOP/s properly).
    t["XLA GFLOP per step per row"] = (None if res["xla_gflop_per_chunk"] is None else
                                       res["xla_gflop_per_chunk"]
                                       / (1 if sequential else len(todo)))
    save()
  pool.shutdown()
  raw = table_rows(done["rows"], width_of, cfg)
  table = summarize(raw)
  # Gradient-norm panels of the StoMPP rows at their selected lr (seeds whose file exists)
  chosen = {(t["arch"], t["variant"]): t["lr (val-selected)"] for t in table}
  curves = {}
  for arch in s.archs:
    for v in ("stompp_fwd", "stompp_rev"):
      if (arch, VARIANTS[v][0]) not in chosen:
        continue
      gs = [np.load(p) for sd in seeds for p in
            [os.path.join(workdir, "gnorm_" + _row_key(
                arch, width_of[arch], cfg, v, chosen[(arch, VARIANTS[v][0])], sd
            ).replace("|", "_") + ".npy")] if os.path.exists(p)]
      if gs:
        curves[(arch, VARIANTS[v][2])] = np.mean(gs, 0)
  _write(workdir, cfg, done, seeds, table, raw, list(done["timing"].values()), curves,
         ds_name)
  print(f"[study] total wall {time.perf_counter() - t_start:.0f}s", flush=True)
  return table


def select_lr(mine):
  """The lr with the best mean validation accuracy over the SELECTION seeds: the seeds
  trained at every lr of the grid (a grid may be run on one seed and the chosen lr then
  on more; comparing means over different seed sets would favour whichever lr has the
  luckier extra seeds). Returns (lr, selection seeds, {lr: mean val acc})."""
  lrs = sorted({r["lr"] for r in mine})
  common = sorted(set.intersection(*[{r["seed"] for r in mine if r["lr"] == lr}
                                     for lr in lrs]))
  val = {lr: float(np.mean([r["val acc"] for r in mine
                            if r["lr"] == lr and r["seed"] in common])) for lr in lrs}
  return max(lrs, key=lambda lr: val[lr]), common, val


def summarize(raw):
  """Per (arch, variant): the lr selected on validation (`select_lr`), and the test
  accuracy at that lr over every seed trained at it."""
  out = []
  keys = list(dict.fromkeys((r["arch"], r["variant"]) for r in raw))
  for arch, v in keys:
    mine = [r for r in raw if r["arch"] == arch and r["variant"] == v]
    best, common, val = select_lr(mine)
    sel = [r for r in mine if r["lr"] == best]
    test = np.asarray([r["test acc"] for r in sel])
    out.append({"arch": arch, "variant": v, "lr (val-selected)": best,
                "val acc by lr (selection seeds)": (
                    " ".join(f"{lr:g}:{a:.3f}" for lr, a in val.items())
                    + f" (seeds {','.join(map(str, common))})"),
                "val acc": float(np.mean([r["val acc"] for r in sel])),
                "test acc": float(test.mean()), "std": float(test.std()),
                "min": float(test.min()), "seeds": len(sel),
                "final loss": float(np.mean([r["final loss"] for r in sel])),
                # training loss, second-last minus last tenth of training (mean over
                # seeds): near 0 = the curve is flat at the end
                "loss drop, last tenth": float(np.mean(
                    [r["loss by tenth"][-2] - r["loss by tenth"][-1] for r in sel])),
                "committed at last step": float(np.min([r["committed at last step"]
                                                         for r in sel]))})
  return out


def _write(workdir, cfg, done, seeds, table, raw, timing, curves, ds_name):
  s = cfg.study
  parts = done["parts"]
  commits = sorted({r["commit"] for r in raw}) or [parts[-1]["commit"]]
  commit, started = ", ".join(commits), parts[0]["started"]
  header = (f"StoMPP architecture study on {ds_name} ({len(raw)} trained "
            f"networks): {s.resnet_steps} steps of batch {cfg.train.batch_size}, AdamW "
            f"(warmup+cosine), lr selected per variant on a {s.val_size}-image validation "
            f"split over the seeds trained at every lr of that variant's grid (the grid "
            f"and its validation accuracies: column 'val acc by lr'), up to {len(seeds)} "
            f"seeds, crop_pad "
            f"{cfg.data.crop_pad} flip {cfg.data.flip}, per-channel standardization, "
            f"width {s.resnet_width} (ResNets) / {s.mobilenet_width} (MobileNetV2 stem), "
            f"stem {cfg.model.stem}; "
            f"test accuracy of the fully committed (hard-sign) network; 'committed at last "
            f"step' is the smallest per-layer committed fraction of the masks at the last "
            f"training step (1: the schedule finished).\n"
            f"commit {commit} (each row stamped when its part started; first part "
            f"{started}); device "
            f"{jax.devices()[0].device_kind} x{jax.device_count()}\n\n" + PAPER_CLAIMS)
  md = study_lib.write_table(
      workdir, "resnet", table,
      ["arch", "variant", "lr (val-selected)", "val acc by lr (selection seeds)",
       "val acc", "test acc", "std", "min",
       "seeds", "final loss", "loss drop, last tenth", "committed at last step"],
      header=header, digits=4)
  md += "\n" + study_lib.markdown_table(timing, digits=1)
  with open(os.path.join(workdir, "resnet.md"), "w") as f:
    f.write(md)
  with open(os.path.join(workdir, "resnet_raw.json"), "w") as f:
    json.dump({"commit": commit, "parts": parts, "rows": raw, "timing": timing,
               "config": cfg.to_dict()}, f, indent=1, default=str)
  _plot(workdir, table, curves, ds_name)
  print(md, flush=True)


def _plot(workdir, table, curves, ds_name="Fashion-MNIST"):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  archs = list(dict.fromkeys(r["arch"] for r in table))
  n = max(len(curves), 1)
  fig = plt.figure(figsize=(max(12, 3.2 * n), 9))
  grid = fig.add_gridspec(2, n)
  ax = fig.add_subplot(grid[0, :])
  labels = list(dict.fromkeys(r["variant"] for r in table))
  w = 0.8 / max(len(archs), 1)
  for j, arch in enumerate(archs):
    vals = [next((r for r in table if r["arch"] == arch and r["variant"] == v), None)
            for v in labels]
    ax.bar(np.arange(len(labels)) + j * w, [r["test acc"] if r else 0 for r in vals], w,
           yerr=[r["std"] if r else 0 for r in vals], label=arch)
  ax.set_xticks(np.arange(len(labels)) + w * (len(archs) - 1) / 2, labels, rotation=20,
                ha="right", fontsize=7)
  ax.set(ylabel="test accuracy (committed network)", ylim=(0, 1),
         title=f"binary networks on {ds_name} (val-selected lr, mean +- std over seeds)")
  ax.legend(fontsize=8)
  for i, ((arch, order), g) in enumerate(sorted(curves.items())):
    ax = fig.add_subplot(grid[1, i])
    for l in range(g.shape[1]):
      ax.plot(g[:, l], lw=0.6, color=plt.cm.viridis(l / max(g.shape[1] - 1, 1)))
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_title(f"{arch}\nStoMPP {order}: layer grad norms", fontsize=8)
    ax.set_xlabel("step", fontsize=7)
    if i == 0:
      ax.set_ylabel("weight-gradient norm (dark: input side)", fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "resnet.png"), dpi=110)
  plt.close(fig)
