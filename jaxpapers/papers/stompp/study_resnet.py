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

Protocol: the last `val_size` training images are a validation split; every variant is
trained at each learning rate of `lrs`, the learning rate with the best mean validation
accuracy (committed network) is selected per variant, and the table reports the TEST
accuracy of that learning rate (mean, std, min over seeds). Writes resnet.md, resnet.json
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

from jaxpapers.core import config as config_lib
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


def _stack(trees):
  return jax.tree.map(lambda *x: jnp.stack(x), *trees)


def rows_for(arch_index: int, lrs, seeds, variants=()):
  """(variant key, lr, seed) of every vmapped row; the ablation rides on the first arch."""
  keys = list(variants) or (MAIN + ABLATION if arch_index == 0 else MAIN)
  for k in keys:
    if k not in VARIANTS:
      raise ValueError(f"unknown study variant {k!r}; use {'+'.join(VARIANTS)}")
  return [(k, lr, s) for k in keys for lr in lrs for s in seeds]


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
               keep_states: bool = False, evaluate: bool = True):
  """Trains every row of one architecture in one vmapped program; returns results."""
  return run_arch(build_arch(config, arch, width, rows, data, num_classes, evaluate), log,
                  keep_states)


def build_arch(config, arch: str, width: int, rows, data, num_classes,
               evaluate: bool = True):
  """Builds and compiles (ahead of time) the init, chunk and evaluation programs of one
  architecture. Thread-safe and GIL-free while XLA compiles, so the study compiles every
  architecture concurrently and then trains them one after another."""
  s = config.study
  steps, bs, chunk = config.train.steps, config.train.batch_size, min(s.chunk, config.train.steps)
  if steps % chunk:
    raise ValueError(f"study steps={steps} must be a multiple of study.chunk={chunk}")
  cfg = config_lib.override(config, {"model.name": arch, "model.width": width,
                                     "binarize.rule": "stompp"})
  (tr_x, tr_y), (va_x, va_y), (te_x, te_y) = data
  model = model_lib.build(cfg, num_classes)
  optimizer = train_lib.make_optimizer(cfg)
  seeds = sorted({r[2] for r in rows})
  seed_of_row = jnp.asarray([seeds.index(r[2]) for r in rows])
  var = _stack([train_lib.variant(*VARIANTS[v][1:5], lr=lr,
                                  refresh_frac=cfg.binarize.refresh_frac,
                                  binary_acts=VARIANTS[v][5]) for v, lr, _ in rows])
  keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray([r[2] for r in rows]))
  init_keys, step_keys = jax.vmap(jax.random.split, out_axes=1)(keys)
  input_shape = tr_x.shape[1:]
  images, labels = jnp.asarray(tr_x), jnp.asarray(tr_y)

  # opt_level >= 0 lowers XLA's backend optimization (CPU tests: compiles in a fraction
  # of the time); -1 keeps the default.
  opts = {} if s.opt_level < 0 else {"xla_backend_optimization_level": s.opt_level}
  compile_ = lambda f, *a, **kw: jax.jit(f, **kw).lower(*a).compile(compiler_options=opts)
  t0 = time.perf_counter()
  init = lambda k: train_lib.init_state(cfg, model, optimizer, input_shape, k)
  states = compile_(jax.vmap(init), init_keys)(init_keys)
  jax.block_until_ready(states)

  # The data are arguments, never closed over: a closed-over array would be embedded in
  # the program as a constant (172 MB for Fashion-MNIST).
  def chunk_fn(states, idx, t_start, images, labels):  # idx: [C, S, B] per seed
    def body(states, inputs):
      t, ix = inputs
      x, y = images[ix][seed_of_row], labels[ix][seed_of_row]  # [R, B, ...]

      def one(state, x, y, key, v):
        return train_lib.train_step(cfg, model, optimizer, state,
                                    {"image": x, "label": y},
                                    jax.random.fold_in(key, t), t, v)
      states, m = jax.vmap(one)(states, x, y, step_keys, var)
      return states, (m["loss"], m["layer_grad_norm"], m["committed"])
    ts = t_start + jnp.arange(idx.shape[0], dtype=jnp.int32)
    return jax.lax.scan(body, states, (ts, idx))

  n_train = len(tr_y)
  idx_all = np.stack([np.stack([sources.batch_indices(sd, t, bs, n_train) for sd in seeds])
                      for t in range(steps)]).astype(np.int32)  # [T, S, B]
  # Compiled ahead of time once: the same executable gives XLA's FLOP count and runs
  # every chunk (no second compile for the cost analysis).
  chunk_exe = compile_(chunk_fn, states, jnp.asarray(idx_all[:chunk]), jnp.int32(0),
                       images, labels, donate_argnums=0)
  cost = chunk_exe.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
  flops = float(cost["flops"]) if cost and "flops" in cost else None
  b = {"arch": arch, "width": width, "rows": rows, "model": model, "steps": steps,
       "chunk": chunk, "states": states, "idx_all": idx_all, "chunk_exe": chunk_exe,
       "images": images, "labels": labels, "flops": flops}
  b["eval"] = _build_eval(model, var, rows, states, data, compile_) if evaluate else None
  b["compile_s"] = time.perf_counter() - t0
  return b


def run_arch(b, log=print, keep_states: bool = False):
  """Runs the compiled chunks of `build_arch` over all steps, then evaluates."""
  steps, chunk, states, arch = b["steps"], b["chunk"], b["states"], b["arch"]
  idx_all, chunk_exe, images, labels = b["idx_all"], b["chunk_exe"], b["images"], b["labels"]
  rows, width, model, flops = b["rows"], b["width"], b["model"], b["flops"]
  t0 = time.perf_counter()
  losses, gnorms, prog, chunk_times = [], [], [], []
  for c0 in range(0, steps, chunk):
    tc = time.perf_counter()
    states, (loss, gn, pm) = chunk_exe(states, jnp.asarray(idx_all[c0:c0 + chunk]),
                                       jnp.int32(c0), images, labels)
    loss = np.asarray(loss)  # the only host sync: once per chunk
    losses.append(loss), gnorms.append(np.asarray(gn)), prog.append(np.asarray(pm))
    dt = time.perf_counter() - tc
    chunk_times.append(dt)
    done = c0 + chunk
    log(f"[study] {arch} w{width}: step {done}/{steps}  mean loss {loss[-1].mean():.4f}  "
        f"{chunk / dt:.1f} steps/s x {len(rows)} rows  elapsed "
        f"{time.perf_counter() - t0:.0f}s", flush=True)
  train_s = time.perf_counter() - t0

  te = time.perf_counter()
  val_acc, test_acc = b["eval"](states) if b["eval"] else (None, None)
  eval_s = time.perf_counter() - te
  loss_all = np.concatenate(losses)  # [T, R]
  # Fraction of all binarizable entries committed at the last step, per row (counted
  # from the masks; an entry-weighted mean over layers would hide a lagging layer).
  final_prog = np.concatenate(prog)[-1].min(-1)  # [R]
  return {"val": val_acc, "test": test_acc, "final_loss": loss_all[-20:].mean(0),
          "first_loss": loss_all[:20].mean(0), "final_progress": final_prog,
          "loss": loss_all, "committed": np.concatenate(prog),
          "states": jax.device_get(states) if keep_states else None,
          "gnorm": np.concatenate(gnorms), "num_binary": model.num_binary,
          "train_s": train_s, "compile_s": b["compile_s"], "first_chunk_s": chunk_times[0],
          "chunk_s": float(np.median(chunk_times)), "eval_s": eval_s,
          "xla_gflop_per_chunk": None if flops is None else flops / 1e9}


def _build_eval(model, var, rows, states, data, compile_, batch=500):
  """Compiled committed-network accuracy of every row on validation and test, in ONE
  pass over both splits concatenated (one compile instead of one per split size)."""
  splits = data[1:]
  x_all = np.concatenate([x for x, _ in splits])
  y_all = np.concatenate([y for _, y in splits])
  seg = np.concatenate([np.full(len(y), i) for i, (_, y) in enumerate(splits)])
  pad = -len(y_all) % batch
  xs = jnp.asarray(np.concatenate([x_all, np.zeros((pad, *x_all.shape[1:]), x_all.dtype)]))
  ys = jnp.asarray(np.concatenate([y_all, np.zeros(pad, y_all.dtype)]))
  segs = jnp.asarray(np.concatenate([seg, np.full(pad, -1)]))
  onehot = segs[:, None] == jnp.arange(len(splits))  # [N, splits]; padding matches none

  def run(states, xs, ys, onehot):
    def body(correct, xyo):
      x, y, o = xyo
      logits = jax.vmap(lambda st, vv: train_lib.logits_hard(model, st, x, vv))(states, var)
      hit = (logits.argmax(-1) == y).astype(jnp.float32)  # [R, batch]
      return correct + hit @ o.astype(jnp.float32), None
    c, _ = jax.lax.scan(body, jnp.zeros((len(rows), len(splits)), jnp.float32),
                        (xs.reshape(-1, batch, *xs.shape[1:]), ys.reshape(-1, batch),
                         onehot.reshape(-1, batch, len(splits))))
    return c
  exe = compile_(run, states, xs, ys, onehot)

  def evaluate(states):
    counts = np.asarray(exe(states, xs, ys, onehot))
    return [counts[:, i] / len(y) for i, (_, y) in enumerate(splits)]
  return evaluate


def load_fashion_mnist(config):
  """Fashion-MNIST from data.path (e.g. .fmnist/ carried to a device) or the default
  install (never a silent fallback: a missing directory raises naming it), standardized
  per channel with the training split's statistics."""
  name = "fashion_mnist" if config.study.data == "auto" else config.study.data
  ds = experiment.load_data(config_lib.override(config, {"data.name": name}))
  return sources.normalize(ds)


def run(config, workdir: str):
  # Stamped before anything runs: the code that produced the table.
  commit = study_lib.git_commit(['jaxpapers/papers/stompp', 'configs/stompp.py',
                                 'jaxpapers/core', 'jaxpapers/data'])
  if commit == "unknown" and os.environ.get("JAXPAPERS_COMMIT"):
    # A copy of the tree without .git (e.g. on a device machine): the launcher's stamp.
    commit = os.environ["JAXPAPERS_COMMIT"] + " (from JAXPAPERS_COMMIT; no git here)"
  s = config.study
  started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
  t_start = time.perf_counter()
  print(f"[study] resnet study at commit {commit}, {jax.device_count()} "
        f"{jax.default_backend()} device(s) ({jax.devices()[0].device_kind})", flush=True)
  ds = load_fashion_mnist(config)
  data = split_validation(ds, s.val_size)
  seeds = list(range(config.seed, config.seed + s.seeds))
  cfg = config_lib.override(config, {"train.steps": s.resnet_steps})
  os.makedirs(workdir, exist_ok=True)
  done_path = os.path.join(workdir, "resnet_cells.json")
  done = json.load(open(done_path)) if os.path.exists(done_path) else {}
  raw, timing = [], []
  gnorm_curves = {}
  plan = []
  for a, arch in enumerate(s.archs):
    width = s.mobilenet_width if arch == "mobilenetv2" else s.resnet_width
    rows = rows_for(a, s.lrs, seeds, s.variants)
    plan.append((arch, width, rows, f"{arch}|{width}|{s.resnet_steps}|{len(rows)}"))
  # Every architecture still to run compiles at once (XLA compiles without the GIL), so
  # the wall time pays the longest compile, not their sum; training runs one at a time.
  pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(len(plan), 1))
  builds = {key: pool.submit(build_arch, cfg, arch, width, rows, data, ds.num_classes)
            for arch, width, rows, key in plan if key not in done}
  for arch, width, rows, key in plan:
    if key not in done:
      res = run_arch(builds.pop(key).result())
      done[key] = {
          "rows": [{"arch": arch, "width": width, "variant": VARIANTS[v][0], "key": v,
                    "lr": lr, "seed": sd,
                    "val acc": float(res["val"][i]), "test acc": float(res["test"][i]),
                    "first loss": float(res["first_loss"][i]),
                    "final loss": float(res["final_loss"][i]),
                    "committed at last step": float(res["final_progress"][i])}
                   for i, (v, lr, sd) in enumerate(rows)],
          "timing": {"arch": arch, "width": width, "binary layers": res["num_binary"],
                     "rows": len(rows), "steps": s.resnet_steps,
                     "train s": res["train_s"],
                     "build+compile s (concurrent)": res["compile_s"],
                     "first chunk s": res["first_chunk_s"],
                     "eval s": res["eval_s"],
                     "achieved TFLOP/s": (None if res["xla_gflop_per_chunk"] is None else
                                          res["xla_gflop_per_chunk"] / 1e3 / res["chunk_s"])},
      }
      # Mean per-layer gradient norm (over seeds, at the first lr) of forward/reverse.
      for v in ("stompp_fwd", "stompp_rev"):
        sel = [i for i, r in enumerate(rows) if r[0] == v and r[1] == s.lrs[0]]
        if sel:
          np.save(os.path.join(workdir, f"gnorm_{arch}_{VARIANTS[v][2]}.npy"),
                  res["gnorm"][:, sel].mean(1))
      with open(done_path + ".tmp", "w") as f:
        json.dump(done, f, indent=1)
      os.replace(done_path + ".tmp", done_path)
    raw += done[key]["rows"]
    timing.append(done[key]["timing"])
    for v in ("forward", "reverse"):
      p = os.path.join(workdir, f"gnorm_{arch}_{v}.npy")
      if os.path.exists(p):
        gnorm_curves[(arch, v)] = np.load(p)
    table = summarize(raw)
    _write(workdir, cfg, commit, started, seeds, table, raw, timing, gnorm_curves, ds.name)
  pool.shutdown()
  print(f"[study] total wall {time.perf_counter() - t_start:.0f}s", flush=True)
  return table


def summarize(raw):
  """Per (arch, variant): the lr with the best mean validation accuracy, and the test
  accuracy at that lr over seeds."""
  out = []
  keys = list(dict.fromkeys((r["arch"], r["variant"]) for r in raw))
  for arch, v in keys:
    mine = [r for r in raw if r["arch"] == arch and r["variant"] == v]
    lrs = sorted({r["lr"] for r in mine})
    best = max(lrs, key=lambda lr: np.mean([r["val acc"] for r in mine if r["lr"] == lr]))
    sel = [r for r in mine if r["lr"] == best]
    test = np.asarray([r["test acc"] for r in sel])
    out.append({"arch": arch, "variant": v, "lr (val-selected)": best,
                "val acc": float(np.mean([r["val acc"] for r in sel])),
                "test acc": float(test.mean()), "std": float(test.std()),
                "min": float(test.min()), "seeds": len(sel),
                "final loss": float(np.mean([r["final loss"] for r in sel])),
                "committed at last step": float(np.min([r["committed at last step"]
                                                         for r in sel]))})
  return out


def _write(workdir, cfg, commit, started, seeds, table, raw, timing, curves, ds_name):
  s = cfg.study
  header = (f"StoMPP architecture study on {ds_name} ({len(raw)} trained "
            f"networks): {s.resnet_steps} steps of batch {cfg.train.batch_size}, AdamW "
            f"(warmup+cosine), lr grid {list(s.lrs)} selected per variant on a "
            f"{s.val_size}-image validation split, {len(seeds)} seeds, crop_pad "
            f"{cfg.data.crop_pad} flip {cfg.data.flip}, per-channel standardization, "
            f"width {s.resnet_width} (ResNets) / {s.mobilenet_width} (MobileNetV2 stem); "
            f"test accuracy of the fully committed (hard-sign) network; 'committed at last "
            f"step' is the smallest per-layer committed fraction of the masks at the last "
            f"training step (1: the schedule finished).\n"
            f"commit {commit} (stamped when the study started, {started}); device "
            f"{jax.devices()[0].device_kind} x{jax.device_count()}\n\n" + PAPER_CLAIMS)
  md = study_lib.write_table(
      workdir, "resnet", table,
      ["arch", "variant", "lr (val-selected)", "val acc", "test acc", "std", "min",
       "seeds", "final loss", "committed at last step"], header=header, digits=4)
  md += "\n" + study_lib.markdown_table(timing, digits=1)
  with open(os.path.join(workdir, "resnet.md"), "w") as f:
    f.write(md)
  with open(os.path.join(workdir, "resnet_raw.json"), "w") as f:
    json.dump({"commit": commit, "started": started, "rows": raw, "timing": timing,
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
