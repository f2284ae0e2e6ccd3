"""llops study: (2) downstream LMs on Shakespeare, then (1) kernel approximation on the
q/k of SmolLM2-135M and of our own softmax LM, MQAR, long-range recall, and (3)
conversion of a trained LM to each map (convert.py). Tables, rows and plots into the
workdir.

Part 2 runs first because its trained softmax LM supplies the "own LM" q/k of part 1.
"""
from __future__ import annotations

import json
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import config as config_lib
from jaxpapers.core import loop
from jaxpapers.core import population
from jaxpapers.core import study as study_lib
from jaxpapers.core import workdir as workdir_lib
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm
from jaxpapers.nn import lm_experiment
from jaxpapers.papers.llops import approx
from jaxpapers.papers.llops import features
from jaxpapers.papers.llops import model as model_lib
from jaxpapers.papers.llops import mqar as mqar_lib

# Only this paper's paths: other helpers' work in progress under jaxpapers/nn must not
# mark this table dirty (the study uses nn/attention, stack, lm at the stamped commit).
PATHS = ("jaxpapers/papers/llops", "configs/llops.py")


def bigram_bpb(train: np.ndarray, val_w: np.ndarray, test_w: np.ndarray, vocab: int,
               token_bytes: np.ndarray, alphas=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)):
  """The trivial model: add-alpha bigram counts from the train split, alpha on validation."""
  counts = np.zeros((vocab, vocab))
  np.add.at(counts, (train[:-1], train[1:]), 1.0)

  def score(w, a):
    p = (counts + a) / (counts + a).sum(1, keepdims=True)
    nll = -np.log(p[w[:, :-1], w[:, 1:]]).sum()
    return nll / (math.log(2) * token_bytes[w[:, 1:]].sum())

  best = min(alphas, key=lambda a: score(val_w, a))
  return {"alpha": best, "alphas": list(alphas), "val_bpb": score(val_w, best),
          "test_bpb": score(test_w, best)}


def staged(run, lrs, seeds, loss, *, stage1: bool = True, max_ext: int = 2):
  """Rows of `run(members)` for an LR picked on validation at a CPU's budget.

  stage1=False: one population of every seed x LR. stage1=True: the grid with the first
  seed; while the lowest `loss(rows_of_one_lr)` sits on an edge of the grid, the grid is
  extended past that edge by its own spacing (at most `max_ext` times); then the other
  seeds at the chosen LR. Non-finite losses (diverged members) never win."""
  def score(rows, lr):
    v = loss([r for r in rows if r["lr"] == lr])
    return v if np.isfinite(v) else np.inf

  if not stage1:
    return run(population.grid(seeds, lr=lrs))
  grid = sorted(lrs)
  rows = run(population.grid(seeds[:1], lr=grid))
  for _ in range(max_ext):
    best = min(grid, key=lambda lr: score(rows, lr))
    if len(grid) < 2 or best not in (grid[0], grid[-1]):
      break
    new = grid[0] ** 2 / grid[1] if best == grid[0] else grid[-1] ** 2 / grid[-2]
    rows += run(population.grid(seeds[:1], lr=[new]))
    grid = sorted(grid + [new])
  best = min(grid, key=lambda lr: score(rows, lr))
  if len(seeds) > 1:
    rows += run(population.grid(seeds[1:], lr=[best]))
  return rows


def _member_dir(workdir, pop):
  lrs = "+".join(f"{x:.3g}" for x in sorted({m["lr"] for m in pop}))
  seeds = "+".join(str(x) for x in sorted({m["seed"] for m in pop}))
  return os.path.join(workdir, f"s{seeds}_lr{lrs}")


def _cached(wd, fn, config):
  """fn() -> rows, stored as wd/rows.json once done (a resumed study skips the run).

  Stored rows are reused only for the computation that made them: the population's
  config is checked against wd/config.json (written by the training loop) first, so a
  changed model/data/optimizer field in the same workdir is refused naming the field,
  as a resumed training run would be, instead of silently returning the old rows."""
  path = os.path.join(wd, "rows.json")
  if os.path.exists(path):
    workdir_lib.check_resume(wd, config.to_dict())
    with open(path) as f:
      return json.load(f)
  rows = fn()
  os.makedirs(wd, exist_ok=True)
  with open(path, "w") as f:
    json.dump(rows, f, default=float)
  return rows


def _population_rows(config, wd, make_task, pop, row):
  """Trains the population `pop` in wd (resumable; cached once done) and returns
  [row(member, diverged, params, train-loss curve)] for its members."""
  def train():
    st, _ = loop.train(config, wd, population.population_task(make_task, pop))
    st = jax.device_get(st)
    return [row(m, bool(st["diverged"][i]), population.member(st, i)["params"], _curve(wd, i))
            for i, m in enumerate(pop)]
  return _cached(wd, train, config)


def lm_part(config, workdir: str):
  s = config.study
  data = lm_experiment.load_data(config)
  windows = text_lib.eval_windows(data.val, config.data.seq_len, config.eval.max_windows or None)
  n_val = max(1, len(windows) // 2)
  val_w, test_w = windows[:n_val], windows[n_val:]
  rows, curves, trained = [], {}, {}
  seeds = [config.seed + i for i in range(s.seeds)]
  for method in s.lm_methods:
    t0 = time.time()
    model, lm_model, mp = model_lib.build(config, data.vocab_size, method)
    fn = lm_experiment.nats_fn(model)

    def row(m, div, p, curve, method=method, model=model, mp=mp, fn=fn):
      if method == "softmax" and s.own_lm:
        trained.setdefault(m["lr"], {})[m["seed"]] = (model, p)
      nan = float("nan")
      return {"method": method, "state": mp.state if mp else 0, "seed": m["seed"],
              "lr": m["lr"], "diverged": div,
              "val_bpb": nan if div else lm_experiment.bpb(fn, p, val_w, data.token_bytes),
              "test_bpb": nan if div else lm_experiment.bpb(fn, p, test_w, data.token_bytes),
              "params": model_lib.n_params(model, mp), "curve": curve}

    def run(pop, method=method, lm_model=lm_model, row=row):
      return _population_rows(
          config, _member_dir(os.path.join(workdir, "lm", method), pop),
          lambda seed, hp: lm.make_task(config, data, lm_model, seed=seed, hparams=hp),
          pop, row)

    rows += staged(run, s.lm_lrs, seeds, lambda rs: np.mean([r["val_bpb"] for r in rs]),
                   stage1=s.lm_stage1, max_ext=s.lm_max_ext)
    print(f"[llops] LM {method}: {time.time() - t0:.0f}s", flush=True)
  chosen, log = _select(rows, "method", "val_bpb",
                        seed=seeds[0] if s.lm_stage1 else None)
  for method in s.lm_methods:  # mean train-loss curve of the chosen LR's seeds
    curves[method] = _mean_curve([r for r in chosen if r["method"] == method])
  rows = [{k: v for k, v in r.items() if k != "curve"} for r in rows]
  chosen = [{k: v for k, v in r.items() if k != "curve"} for r in chosen]
  table = []
  for method in s.lm_methods:
    rs = [r for r in chosen if r["method"] == method]
    v = np.array([r["test_bpb"] for r in rs])
    table.append({"method": method, "state": rs[0]["state"], "params": rs[0]["params"],
                  "lr": rs[0]["lr"], "test_bpb": float(np.mean(v)), "std": float(np.std(v)),
                  "val_bpb": float(np.mean([r["val_bpb"] for r in rs])), "seeds": len(rs)})
  bigram = bigram_bpb(np.asarray(data.train), val_w, test_w, data.vocab_size, data.token_bytes)
  table.append({"method": "bigram (add-alpha)", "state": 0, "params": data.vocab_size ** 2,
                "lr": bigram["alpha"], "test_bpb": bigram["test_bpb"], "std": 0.0,
                "val_bpb": bigram["val_bpb"], "seeds": 1})
  # The own-LM q/k of part 1 come from the best-LR softmax LM, when softmax was run.
  best_lr = next((r["lr"] for r in table if r["method"] == "softmax"), None)
  return table, rows, log, curves, trained.get(best_lr, {})


def _curve(wd, i=None):
  """[(step, train loss)] of member i (None: the mean over members) from metrics.jsonl."""
  path = os.path.join(wd, "metrics.jsonl")
  out = []
  if os.path.exists(path):
    for line in open(path):
      r = json.loads(line)
      if "loss" in r and "step" in r and r.get("split", "train") == "train":
        loss = r["loss"]
        if isinstance(loss, list):
          loss = np.mean(loss) if i is None else loss[i]
        out.append((r["step"], float(loss)))
  return out


def _mean_curve(rows):
  """Mean train-loss curve of the chosen-LR members... of every member given (rows)."""
  cs = [r["curve"] for r in rows if r.get("curve")]
  if not cs:
    return []
  n = min(len(c) for c in cs)
  return [(cs[0][j][0], float(np.mean([c[j][1] for c in cs]))) for j in range(n)]


def _select(rows, key, metric, sign=1.0, seed=None):
  """Per `key`: the LR of the lowest sign * mean `metric` over the seeds at that LR (only
  `seed`'s rows when given: stage 1 of `staged` chose on them), and every seed's row there."""
  chosen, log = [], []
  for name in dict.fromkeys(r[key] for r in rows):
    rs = [r for r in rows if r[key] == name]
    grid = sorted({r["lr"] for r in rs})
    sel = [r for r in rs if seed is None or r["seed"] == seed]
    score = {lr: np.mean([r[metric] for r in sel if r["lr"] == lr]) for lr in grid}
    best = min(grid, key=lambda lr: sign * score[lr] if np.isfinite(score[lr]) else np.inf)
    log.append({key: name, "grid": grid, metric: [round(float(score[lr]), 4) for lr in grid],
                "chosen_lr": best, "edge": len(grid) > 1 and best in (grid[0], grid[-1])})
    chosen += [r for r in rs if r["lr"] == best]
  return chosen, log


def mqar_config(config, state: int, part: str = "mqar"):
  """config with the model and training fields of a recall part ('mqar' or 'longrange')."""
  q = config[part]
  return config_lib.override(config, {
      "model.dim": q.dim, "model.n_heads": q.n_heads, "model.n_layers": 2,
      "model.window": q.window, "model.block": q.block, "model.state": state,
      "data.seq_len": q.seq_len, "train.steps": q.steps, "train.batch_size": q.batch_size,
      "train.log_every": max(1, q.steps // 12), "train.eval_every": q.steps,
      "train.checkpoint_every": max(1, q.steps // 4)})


def parse_run(run: str):
  """'map@state' -> (map, state); 'softmax' / 'window' -> (name, 0)."""
  name, _, state = run.partition("@")
  return name, int(state or 0)


def mqar_sets(config, part: str = "mqar"):
  """{kv: ((val inputs, labels), (test inputs, labels))}: held-out draws per kv count."""
  q, gen = config[part], mqar_lib.GENERATORS[part]
  out = {}
  for kv in q.kv:
    out[kv] = tuple(gen(np.random.default_rng([10 ** 6, split, kv]),
                        q.eval_examples, q.seq_len, q.vocab, kv)
                    for split in (2, 3))  # the task's own progress-line set uses [1e6, 1]
  return out


def mqar_part(config, workdir: str, part: str = "mqar"):
  """Recall accuracy per kv count for each run (method, state); LR chosen on validation.
  part: 'mqar' (Zoology's MQAR) or 'longrange' (mqar.generate_far, pairs > L/2 back)."""
  q, s = config[part], config.study
  gen = mqar_lib.GENERATORS[part]
  sets = mqar_sets(config, part)
  seeds = [config.seed + i for i in range(s.seeds)]
  rows = []
  for run_name in q.runs:
    t0 = time.time()
    method, state = parse_run(run_name)
    cfg = mqar_config(config, state or config.model.state, part)
    model, lm_model, mp = model_lib.build(cfg, q.vocab, method)
    acc = mqar_lib.accuracy_fn(model.apply)

    def row(m, div, p, curve, run_name=run_name, method=method, model=model, mp=mp, acc=acc):
      r = {"run": run_name, "method": method, "state": mp.state if mp else 0,
           "seed": m["seed"], "lr": m["lr"], "diverged": div,
           "params": model_lib.n_params(model, mp), "curve": curve}
      for kv, ((vx, vy), (tx, ty)) in sets.items():
        r[f"val_acc_kv{kv}"] = float("nan") if div else float(acc(p, vx, vy))
        r[f"test_acc_kv{kv}"] = float("nan") if div else float(acc(p, tx, ty))
      r["val_acc"] = float(np.mean([r[f"val_acc_kv{kv}"] for kv in q.kv]))
      r["test_acc"] = float(np.mean([r[f"test_acc_kv{kv}"] for kv in q.kv]))
      return r

    def run(pop, run_name=run_name, cfg=cfg, lm_model=lm_model, row=row):
      return _population_rows(
          cfg, _member_dir(os.path.join(workdir, part, run_name.replace("@", "_")), pop),
          lambda seed, hp: mqar_lib.task(cfg, lm_model, tuple(q.kv), q.seq_len, q.vocab,
                                         q.eval_examples, seed=seed, hparams=hp, gen=gen),
          pop, row)

    rows += staged(run, q.lrs, seeds, lambda rs: -np.mean([r["val_acc"] for r in rs]),
                   stage1=s.lm_stage1, max_ext=s.lm_max_ext)
    print(f"[llops] {part} {run_name}: {time.time() - t0:.0f}s", flush=True)
  chosen, log = _select(rows, "run", "val_acc", sign=-1.0,
                        seed=seeds[0] if s.lm_stage1 else None)
  table = []
  for run_name in q.runs:
    rs = [r for r in chosen if r["run"] == run_name]
    row = {"run": run_name, "state": rs[0]["state"], "params": rs[0]["params"],
           "lr": rs[0]["lr"]}
    for kv in q.kv:
      v = np.array([r[f"test_acc_kv{kv}"] for r in rs])
      row[f"acc_kv{kv}"], row[f"std_kv{kv}"] = float(np.mean(v)), float(np.std(v))
    row["acc_mean"] = float(np.mean([r["test_acc"] for r in rs]))
    row["val_acc"] = float(np.mean([r["val_acc"] for r in rs]))
    row["final_loss"] = float(np.mean([r["curve"][-1][1] for r in rs if r["curve"]]))
    row["seeds"] = len(rs)
    table.append(row)
  if part == "longrange":
    # Two exact baselines: no memory of the far half (chance over the values), and a
    # memory of which values occurred but not of their keys (uniform over the row's n_kv
    # values: the pairing is a uniformly random bijection, so nothing better without it).
    (_, _), (_, _), (v0, v1) = mqar_lib.far_layout(q.seq_len, q.vocab, max(q.kv))
    for name, acc in (("chance (no memory)", {kv: 1 / (v1 - v0) for kv in q.kv}),
                      ("value set, no pairing (1/kv)", {kv: 1 / kv for kv in q.kv})):
      table.append({"run": name, "state": 0, "params": 0, "lr": 0.0,
                    **{f"{a}_kv{kv}": b for kv in q.kv
                       for a, b in (("acc", acc[kv]), ("std", 0.0))},
                    "acc_mean": float(np.mean(list(acc.values()))),
                    "val_acc": float(np.mean(list(acc.values()))),
                    "final_loss": float(np.mean([-math.log(a) for a in acc.values()])),
                    "seeds": 0})
  curves = {n: _mean_curve([r for r in chosen if r["run"] == n]) for n in q.runs}
  rows = [{k: v for k, v in r.items() if k != "curve"} for r in rows]
  return table, rows, log, curves


def smollm2_qkv(config):
  """Post-RoPE q/k/v of SmolLM2-135M (GGUF, llama.cpp's interleaved Q/K rows undone by
  gguf_loader.unpermute_qk) on Shakespeare windows: {layer: (q, k, v)}, heads per kv."""
  from jaxpapers.nn import gguf_loader, stack, tokenizer  # pylint: disable=g-import-not-at-top
  s = config.study
  path = config.study.gguf_path or gguf_loader.require_smollm2()
  lcfg, params, reader = gguf_loader.load(path)
  model, sp = stack.from_llama(jax.tree.map(jnp.asarray, params), lcfg)
  tok = tokenizer.gguf_bpe(reader)
  n = s.qk_windows
  text = text_lib.shakespeare(max_chars=400 * n * s.qk_seq)
  ids = np.asarray(tok.encode(text), np.int32)
  # Windows spread over the whole text (train at the start, test at the end: held out).
  starts = np.linspace(0, len(ids) - s.qk_seq - 1, n).astype(int)
  windows = np.stack([ids[a:a + s.qk_seq] for a in starts])
  got = {}
  for i in range(0, n, 8):
    rec = model_lib.collect_qkv(model, sp, windows[i:i + 8], keep=set(s.qk_layers))
    for layer, qkv in rec.items():
      got.setdefault(layer, []).append(qkv)
  out = {l: tuple(np.concatenate([x[j] for x in v]) for j in range(3)) for l, v in got.items()}
  return out, lcfg.n_heads // lcfg.n_kv_heads, f"SmolLM2-135M ({os.path.basename(path)})"


def own_qkv(config, trained, data_windows):
  """q/k/v of the global softmax layers of our trained LM (the study's best-LR softmax)."""
  seed = sorted(trained)[0]
  model, p = trained[seed]
  rec = model_lib.collect_qkv(model, p, data_windows)
  return rec, 1, f"own softmax LM (seed {seed})"


def approx_part(config, qkv, heads_per_kv, label, layers=None):
  s = config.study
  layers = sorted(qkv) if layers is None else layers
  N = next(iter(qkv.values()))[0].shape[0]
  n_train, n_val = int(N * 0.6), int(N * 0.2)
  problems, names = approx.split_windows(qkv, layers, heads_per_kv, n_train, n_val)
  d = problems["q_train"].shape[-1]
  seeds = [config.seed + i for i in range(s.seeds)]
  rows = []
  for state in s.states:
    for name in s.maps:
      mp = features.make_map(name, state, s.degree, d)
      if name == "elu" and state != s.states[0]:
        continue  # elu's state is fixed at d: one row
      t0 = time.time()
      rows += approx.run_map(mp, s.degree, problems, seeds, s.approx_lrs, s.approx_steps,
                             s.approx_batch)
      print(f"[llops] approx {label[:12]} {name} state={mp.state}: {time.time() - t0:.0f}s",
            flush=True)
  chosen, log = approx.select(rows, s.approx_lrs)
  return approx.summarize(chosen), rows, log, names


def run(config, workdir: str):
  os.makedirs(workdir, exist_ok=True)
  commit = study_lib.git_commit(paths=PATHS)
  s = config.study
  t0 = time.time()
  out = {"commit": commit}
  parts = set(s.parts.split("+"))
  out["approx"] = {}

  def do_approx(qkv, hpk, label):
    table, rows, log, names = approx_part(config, qkv, hpk, label)
    for r in log:
      print(f"[llops] approx selection {label[:12]} {r}", flush=True)
    key = "smollm2" if label.startswith("SmolLM2") else "own"
    hdr = (f"Part 1, kernel approximation on {label}: problems {names}; degree "
           f"{s.degree}; {qkv[sorted(qkv)[0]][0].shape[0]} windows of {s.qk_seq} tokens "
           f"(60% train / 20% val / 20% test, test = end of the text); learned maps "
           f"{s.approx_steps} Adam steps, LR on validation from {list(s.approx_lrs)}; "
           f"{s.seeds} seeds. Relative errors on test. Commit {commit}.")
    print(study_lib.write_table(workdir, f"approx_{key}", table, header=hdr, digits=4), flush=True)
    study_lib.write_table(workdir, f"approx_{key}_rows", rows, digits=5)
    out["approx"][key] = {"table": table, "selection": log, "problems": names}

  if "approx" in parts and s.smollm2:
    do_approx(*smollm2_qkv(config))
  out["lm"] = {"table": [], "selection": [], "curves": {}}
  if "lm" in parts:
    lm_table, lm_rows, lm_log, curves, trained = lm_part(config, workdir)
    hdr = (f"Part 2, Shakespeare byte-level LM: pattern 'W'+global x "
           f"{config.model.n_layers // 2}, d={config.model.dim}, {config.model.n_heads} heads,"
           f" window {config.model.window}, state {config.model.state}, degree "
           f"{config.model.degree}; {config.train.steps} steps of {config.train.batch_size} x "
           f"{config.data.seq_len}; {s.seeds} seeds; LR per method on validation from "
           f"{list(s.lm_lrs)}. Test bpb. Commit {commit}.")
    out["lm"] = {"table": lm_table, "selection": lm_log, "curves": curves}
    _report(workdir, "lm", lm_table, lm_rows, lm_log, hdr)
    if "approx" in parts and s.own_lm and trained:
      data = lm_experiment.load_data(config)
      own_w = text_lib.eval_windows(data.train, s.qk_seq, s.qk_windows)[:, :-1]
      do_approx(*own_qkv(config, trained, own_w))
  if "mqar" in parts:
    table, rows, log, curves = mqar_part(config, workdir)
    q = config.mqar
    hdr = (f"MQAR (Zoology): vocab {q.vocab}, length {q.seq_len}, kv pairs {list(q.kv)} "
           f"(one model per run on their mixture); 'W' (window {q.window}) + global layer, "
           f"d={q.dim}, {q.n_heads} head(s), degree {config.model.degree}; {q.steps} steps "
           f"of {q.batch_size}; LR on validation accuracy from {list(q.lrs)} (stage 1: "
           f"seed {config.seed}, extended past an edge); {s.seeds} seeds; test accuracy "
           f"on {q.eval_examples} held-out draws per kv count. Commit {commit}.")
    out["mqar"] = {"table": table, "selection": log, "curves": curves}
    _report(workdir, "mqar", table, rows, log, hdr)
  if "longrange" in parts:
    table, rows, log, curves = mqar_part(config, workdir, "longrange")
    q = config.longrange
    hdr = (f"Long-range recall (mqar.generate_far): length {q.seq_len}, vocab {q.vocab}, kv "
           f"pairs {list(q.kv)} (one model per run on their mixture) in the first quarter, "
           f"queries in the last quarter, noise between (every answer > {q.seq_len // 2} "
           f"tokens back); 'W' (window {q.window}) + global layer, d={q.dim}, {q.n_heads} "
           f"head(s), degree {config.model.degree}; {q.steps} steps of {q.batch_size}; LR "
           f"on validation accuracy from {list(q.lrs)} (stage 1: seed {config.seed}, "
           f"extended past an edge); {s.seeds} seeds; test accuracy on {q.eval_examples} "
           f"held-out draws per kv count. Commit {commit}.")
    out["longrange"] = {"table": table, "selection": log, "curves": curves}
    _report(workdir, "longrange", table, rows, log, hdr)
  if "convert" in parts:
    out["convert"] = _convert(config, workdir, commit)
  out["seconds"] = time.time() - t0
  with open(os.path.join(workdir, "study.json"), "w") as f:
    json.dump(out, f, indent=1, default=float)
  _plots(workdir, out)
  print(f"[llops] study done in {out['seconds']:.0f}s, commit {commit}", flush=True)
  return out


def _convert(config, workdir, commit):
  """Part 3 (convert.py): source LM -> each map, continued; held-out windows as part 2a."""
  from jaxpapers.papers.llops import convert  # pylint: disable=g-import-not-at-top
  data = lm_experiment.load_data(config)
  windows = text_lib.eval_windows(data.val, config.data.seq_len, config.eval.max_windows or None)
  n_val = max(1, len(windows) // 2)
  table, rows, log, curves = convert.convert_part(config, workdir, data, windows[:n_val],
                                                  windows[n_val:])
  c = config.convert
  hdr = (f"Part 3, conversion: {c.source} LM ({config.model.n_layers // 2} 'W'+global "
         f"pairs, d={config.model.dim}, state {config.model.state}, degree "
         f"{config.model.degree}) trained {c.source_steps} steps at LR {c.source_lr}, its "
         f"global map swapped (shared parameters copied), continued {c.steps} steps on the "
         f"next batches of the same stream (AdamW restarted); LR per map on validation from "
         f"{list(c.lrs)} (staged); {config.study.seeds} seeds; test bpb right after the "
         f"swap (swap_test_bpb) and after the continuation. Commit {commit}.")
  _report(workdir, "convert", table, rows, log, hdr)
  return {"table": table, "selection": log, "curves": curves}


def _report(workdir, name, table, rows, log, hdr):
  """Prints the LR selections and the table; writes <name>.md/json and <name>_rows.json."""
  for r in log:
    print(f"[llops] {name} selection {r}", flush=True)
  print(study_lib.write_table(workdir, name, table, header=hdr, digits=4), flush=True)
  study_lib.write_table(workdir, f"{name}_rows", rows, digits=5)


def _mqar_plot(workdir, out, part="mqar"):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  tab = out[part]["table"]
  kvs = sorted(int(k[6:]) for k in tab[0] if k.startswith("acc_kv"))
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  for ax in axes:  # up to 14 lines: the default cycle's 10 colours would repeat
    ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
  for r in tab:
    axes[0].errorbar(kvs, [r[f"acc_kv{k}"] for k in kvs], yerr=[r[f"std_kv{k}"] for k in kvs],
                     marker="o", label=f"{r['run']} (lr {r['lr']:.2g})")
  axes[0].set_xscale("log", base=2)
  axes[0].set_xlabel("key-value pairs")
  axes[0].set_ylabel("test accuracy")
  axes[0].legend(fontsize=6)
  axes[1].set_yscale("log")
  _curves_panel(axes[1], out[part]["curves"], "step",
                "train loss at the queries (chosen LR, seed mean)")
  _save(fig, plt, os.path.join(workdir, f"{part}.png"))


def _curves_panel(ax, curves, xlabel, ylabel):
  """One line per run of its (step, value) points."""
  for name, c in curves.items():
    if c:
      ax.plot([p[0] for p in c], [p[1] for p in c], label=name)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.legend(fontsize=6)


def _save(fig, plt, path):
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _convert_plot(workdir, out):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  tab = out["convert"]["table"]
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
  rs = tab[1:]
  x = np.arange(len(rs))
  axes[0].bar(x - 0.2, [r["swap_test_bpb"] for r in rs], 0.4, label="right after the swap")
  axes[0].bar(x + 0.2, [r["test_bpb"] for r in rs], 0.4, yerr=[r["std"] for r in rs],
              label="after the continuation")
  axes[0].axhline(tab[0]["test_bpb"], color="k", ls="--", lw=1, label=tab[0]["map"])
  axes[0].set_xticks(x, [r["map"].split("-> ")[-1] for r in rs], rotation=45, fontsize=7)
  axes[0].set_yscale("log")
  axes[0].set_ylabel("test bits per byte")
  axes[0].legend(fontsize=6)
  _curves_panel(axes[1], out["convert"]["curves"], "continuation step",
                "train loss (nats; chosen LR, seed mean)")
  _save(fig, plt, os.path.join(workdir, "convert.png"))


def _plots(workdir, out):
  for part in ("mqar", "longrange"):
    if part in out:
      _mqar_plot(workdir, out, part)
  if "convert" in out:
    _convert_plot(workdir, out)
  if not out["approx"] and not out["lm"]["table"]:
    return
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  srcs = list(out["approx"])
  fig, axes = plt.subplots(1, len(srcs) + 1, figsize=(4.5 * (len(srcs) + 1), 3.5), squeeze=False)
  axes = list(axes[0])
  for ax, key in zip(axes, srcs):
    tab = out["approx"][key]["table"]
    for name in dict.fromkeys(r["map"] for r in tab):
      rs = sorted([r for r in tab if r["map"] == name], key=lambda r: r["state"])
      ax.errorbar([r["state"] for r in rs], [r["out_err"] for r in rs],
                  yerr=[r["out_err_std"] for r in rs], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("state size")
    ax.set_ylabel("rel. error of attention output")
    ax.set_title(key)
  axes[0].legend(fontsize=6)
  ax = axes[-1]
  for method, c in out["lm"]["curves"].items():
    if c:
      ax.plot([x[0] for x in c], [x[1] for x in c], label=method)
  ax.set_xlabel("step")
  ax.set_ylabel("train loss (nats; chosen LR, seed mean)")
  ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "llops_study.png"), dpi=110)
  plt.close(fig)
