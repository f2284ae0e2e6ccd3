"""STGIB (abstract 13): launcher entry points.

`train_and_evaluate` trains one method (config.model.kind, STGIB by default) for
config.train.seeds seeds vmapped, keeps each seed's best-validation parameters, and
reports test MAE / RMSE / MAPE at 15 / 30 / 60 minutes and, on simulated data, the
explanation AUROC / fidelity / consistency. `run_study` is the README's study (study.py);
`plan` hands one training step at METR-LA's sizes to launch/plan.py.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import population
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.stgib import data as data_lib
from jaxpapers.papers.stgib import explain
from jaxpapers.papers.stgib import model as model_lib
from jaxpapers.papers.stgib import simulator as sim_lib
from jaxpapers.papers.stgib import train as train_lib

PATHS = ["jaxpapers/papers/stgib", "configs/stgib.py", "tests/test_stgib.py",
         "colabs/stgib.ipynb"]
HORIZONS = ((3, "15min"), (6, "30min"), (12, "60min"))
POSTHOC = ("gnnexplainer", "saliency", "ig", "occlusion")


def validate(config):
  d = config.data
  if d.source not in data_lib.SOURCES:
    raise ValueError(f"config data.source={d.source!r}; known: {', '.join(data_lib.SOURCES)}")
  if d.source != "sim" and not (d.path and d.adj):
    raise ValueError(f"config data.source={d.source!r} needs path= and adj= files")
  if d.source == "sim" and (d.path or d.adj):
    raise ValueError("config path=/adj= are read only with source=metr|pems|csv "
                     "(source=sim simulates the data)")
  if d.generator not in sim_lib.GENERATORS:
    raise ValueError(f"config generator={d.generator!r}; known: "
                     f"{', '.join(sim_lib.GENERATORS)}")
  if config.model.kind not in model_lib.KINDS:
    raise ValueError(f"config kind={config.model.kind!r}; known: {', '.join(model_lib.KINDS)}")
  if not 0 < config.eval.sparsity < 1:
    raise ValueError(f"config sparsity={config.eval.sparsity} must be in (0, 1)")
  if config.train.steps % config.train.eval_every:
    raise ValueError(f"config steps={config.train.steps} must be a multiple of "
                     f"eval_every={config.train.eval_every}")
  if config.train.ckpt_every % config.train.eval_every:
    raise ValueError("config ckpt_every must be a multiple of eval_every")
  if not 0 <= config.model.kappa < 1:
    raise ValueError(f"config kappa={config.model.kappa} must be in [0, 1)")
  if not 0 <= config.model.edge_drop < 1:
    raise ValueError(f"config edge_drop={config.model.edge_drop} must be in [0, 1)")
  for mi, pp in [(config.model.gib_mi, config.model.gib_pp)] + [
      (a, b) for a in config.study.gib_mi for b in config.study.gib_pp]:
    if not (mi >= 0 and 0 <= pp < 1):
      raise ValueError(f"config gib mi={mi} pp={pp}: need mi >= 0 and 0 <= pp < 1")
  if config.model.gib_inner < 1:
    raise ValueError(f"config gib_inner={config.model.gib_inner} must be >= 1")
  if not (d.rho >= 0 and d.coupling >= 0 and d.rho + d.coupling < 1):
    raise ValueError(f"config rho={d.rho} coupling={d.coupling}: need both >= 0 and "
                     "rho + coupling < 1 (a stable gated VAR)")
  if not (d.sigma >= 0 and d.incident_rate >= 0):
    raise ValueError(f"config sigma={d.sigma} incident_rate={d.incident_rate} must be >= 0")
  for name in ("delays", "incident_len"):
    v = tuple(d[name])
    if len(v) != 2 or not 1 <= v[0] <= v[1]:
      raise ValueError(f"config {name}={'+'.join(map(str, v))} must be min+max with "
                       "1 <= min <= max")


def spec_of(config, tr, kind=None, **over):
  m = config.model
  kw = dict(kind=kind or m.kind, n=tr.n, src=tuple(int(v) for v in tr.src),
            dst=tuple(int(v) for v in tr.dst), hidden=m.hidden, t_in=config.data.t_in,
            t_out=config.data.t_out, channels=len(data_lib.CHANNELS), temp=m.temp,
            kappa=m.kappa, beta=m.beta, feature_masks=m.feature_masks,
            recursive=m.recursive, final_r=m.final_r, edge_msg=m.edge_msg,
            edge_drop=m.edge_drop, gib_mi=m.gib_mi, gib_pp=m.gib_pp, gib_inner=m.gib_inner,
            gib_out_relu=m.gib_out_relu, residual=m.residual)
  kw.update(over)
  return model_lib.Spec(**kw)


def even(idx, n):
  return idx[:: max(1, len(idx) // n)][:n]


# ------------------------------------------------------------------ evaluation

def forecast_metrics(yhat, y):
  """{mae, rmse, mape}_{15,30,60min} in data units, zeros in y masked (DCRNN)."""
  out = {}
  for h, name in HORIZONS:
    p, t = yhat[:, h - 1], y[:, h - 1]
    v = t != 0
    err = (p - t)[v]
    out[f"mae_{name}"] = float(np.mean(np.abs(err)))
    out[f"rmse_{name}"] = float(np.sqrt(np.mean(err ** 2)))
    out[f"mape_{name}"] = float(np.mean(np.abs(err) / np.abs(t[v])) * 100)
  return out


def masked_mae(yhat, y):
  v = y != 0
  return float(np.mean(np.abs(yhat - y)[v]))


def historical_average(w, last, t_out):
  """Per node and 5-minute slot of the day, the mean of the training split's readings."""
  tr = w.split["train"]
  T = len(w.target)
  slot = np.arange(T) % sim_lib.STEPS_PER_DAY
  end = int(tr.max()) + t_out + 1
  vals, sl = w.target[:end], slot[:end]
  ha = np.zeros((sim_lib.STEPS_PER_DAY, w.target.shape[1]))
  for s in range(sim_lib.STEPS_PER_DAY):
    v = vals[sl == s]
    cnt = (v != 0).sum(0)
    ha[s] = np.where(cnt > 0, v.sum(0) / np.maximum(cnt, 1), w.mean)
  yi = last[:, None] + 1 + np.arange(t_out)[None]
  return ha[slot[yi]]


def persistence(w, last, t_out):
  return np.repeat(w.target[last][:, None], t_out, axis=1)


_CACHE = {}


def _member_fns(spec, r, mean, std):
  key = (spec, r, mean, std)
  if key not in _CACHE:
    def pred(params, x, override):
      y, aux = jax.vmap(lambda xi, oi: model_lib.forward(spec, params, xi, jax.random.PRNGKey(0),
                                                        r, False, override=oi))(x, override)
      return y * std + mean, aux["edge"]
    _CACHE[key] = sharding.spread(pred, in_axes=(0, None, 0))
  return _CACHE[key]


def predict_members(spec, params, x, r, w, override=None, chunk=64):
  """y_hat [M, W, t_out, N] (data units) and edge scores [M, W, t_in, E]."""
  M = jax.tree.leaves(params)[0].shape[0]
  fn = _member_fns(spec, r, w.mean, w.std)
  ys, es = [], []
  for a in range(0, len(x), chunk):
    xa = jnp.asarray(x[a:a + chunk])
    if override is None:
      ov = jnp.ones((M,) + xa.shape[:2] + (spec.e,))
    else:
      ov = jnp.asarray(override[:, a:a + chunk])
    n = xa.shape[0]
    pad = chunk - n  # one compiled shape whatever the window count
    if pad:
      xa = jnp.concatenate([xa, jnp.repeat(xa[-1:], pad, 0)])
      ov = jnp.concatenate([ov, jnp.repeat(ov[:, -1:], pad, 1)], 1)
    y, e = fn(params, xa, ov)
    ys.append(np.asarray(y)[:, :n])
    es.append(np.asarray(e)[:, :n])
  return np.concatenate(ys, 1), np.concatenate(es, 1)


def posthoc_scores(spec, params, x, r, name, cfg, gnnexp_lr=None):
  """[M, W, t_in, E] post-hoc explanation of each member's backbone."""
  ev = cfg.eval
  lr = ev.gnnexp_lr if gnnexp_lr is None else gnnexp_lr
  if name == "gnnexplainer":
    one = lambda p, xi, k: explain.gnnexplainer(spec, p, xi, r, steps=ev.gnnexp_steps, key=k,
                                                lr=lr)
  elif name == "occlusion":
    one = lambda p, xi, k: explain.occlusion(spec, p, xi, r)
  elif name == "saliency":
    one = lambda p, xi, k: explain.saliency(spec, p, xi, r)
  elif name == "ig":
    one = lambda p, xi, k: explain.integrated_gradients(spec, p, xi, r, steps=ev.ig_steps)
  else:
    raise ValueError(name)
  keys = jax.random.split(jax.random.PRNGKey(3), len(x))
  fn = sharding.spread(lambda p: jax.vmap(lambda xi, k: one(p, xi, k))(jnp.asarray(x), keys))
  return np.asarray(fn(params))


def feature_scores(spec, params, x, r, name=None, gnnexp_steps=100):
  """[M, W, t_in, N, C]: the method's own feature masks, or (name = saliency / ig /
  gnnexplainer) a post-hoc attribution of each member's input."""
  xx = jnp.asarray(x)
  keys = jax.random.split(jax.random.PRNGKey(4), len(x))
  if name is None:
    one = lambda p, xi, k: model_lib.forward(spec, p, xi, jax.random.PRNGKey(0), r,
                                             False)[1]["feat"]
  elif name == "saliency":
    one = lambda p, xi, k: explain.feature_saliency(spec, p, xi, r)
  elif name == "ig":
    one = lambda p, xi, k: explain.feature_ig(spec, p, xi, r)
  elif name == "gnnexplainer":
    one = lambda p, xi, k: explain.gnnexplainer_features(spec, p, xi, r, steps=gnnexp_steps,
                                                         key=k)
  else:
    raise ValueError(name)
  fn = sharding.spread(lambda p: jax.vmap(lambda xi, k: one(p, xi, k))(xx, keys))
  return np.asarray(fn(params))


def feature_auroc(fscores):
  """Per member: the mean per-window AUROC of feature scores against the feature truth."""
  truth = explain.feature_truth(fscores.shape[1:], data_lib.CHANNELS)
  return [explain.mean_auroc(f, truth) for f in fscores]


def explanation_metrics(spec, params, r, w, x, y, scores, truth, frac, pending=None,
                        former=None):
  """Per member: auroc (against truth, the pending-arrival labels), auroc_pending (among
  the entries of `pending` only, per window), auroc_within_edge (among them, per edge over
  the windows: explain.within_edge_auroc), auroc_former (against `former`, the former labels),
  fid_plus, fid_minus, consistency and its flicker control (scores [M, W, t_in, E])."""
  M = scores.shape[0]
  full, _ = predict_members(spec, params, x, r, w)
  top = np.stack([explain.topk_mask(s, frac) for s in scores])
  keep, _ = predict_members(spec, params, x, r, w, override=top)
  drop, _ = predict_members(spec, params, x, r, w, override=1.0 - top)
  rows = []
  for m in range(M):
    base = masked_mae(full[m], y)
    nan = float("nan")
    rows.append(dict(auroc=explain.mean_auroc(scores[m], truth) if truth is not None
                     else nan,
                     auroc_pending=nan if pending is None else float(np.nanmean(
                         [explain.auroc(s_[p_], t_[p_]) for s_, t_, p_ in
                          zip(scores[m], truth, pending)] + [nan])),
                     auroc_within_edge=nan if pending is None else explain.within_edge_auroc(
                         scores[m], truth, pending),
                     auroc_former=nan if former is None else explain.mean_auroc(scores[m],
                                                                                former),
                     fid_plus=masked_mae(drop[m], y) - base,
                     fid_minus=masked_mae(keep[m], y) - base,
                     consistency=explain.consistency(scores[m], frac),
                     consistency_flicker=explain.consistency(
                         # its own seed stream: the random reference explanation is
                         # drawn from default_rng(0), and permuting it by the order of the
                         # same numbers would sort it in time
                         explain.flicker_control(scores[m], np.random.default_rng([7, m])),
                         frac)))
  return rows


def select_lr(out, n_seeds):
  """The learning rate with the lowest mean validation MAE over seeds, and its members."""
  val = out["val"].reshape(-1, n_seeds)
  lrs = out["lrs"].reshape(-1, n_seeds)[:, 0]
  j = int(np.argmin(val.mean(1)))
  idx = np.arange(j * n_seeds, (j + 1) * n_seeds)
  return float(lrs[j]), idx, val.mean(1)


def take(tree, idx):
  return jax.tree.map(lambda v: v[np.asarray(idx)], tree)


def train_and_evaluate(config, workdir):
  validate(config)
  tr = data_lib.load(config.data)
  w = data_lib.windows(tr, config.data.t_in, config.data.t_out)
  metrics_lib.write_config(workdir, config)
  spec = spec_of(config, tr)
  seeds = list(range(config.train.seeds))
  out = train_lib.train_members(spec, config, w, seeds, [config.train.lr], workdir,
                                config.model.kind, halt_after=config.train.halt_after)
  r = out["r_final"]
  test = even(w.split["test"], config.eval.test_windows)
  x, y = data_lib.gather(w, test, config.data.t_in, config.data.t_out)
  yhat, _ = predict_members(spec, out["best"], x, r, w)
  rows = [dict(method=spec.kind, seed=s, **forecast_metrics(yhat[i], y))
          for i, s in enumerate(seeds)]
  rows.append(dict(method="historical_average", seed="-",
                   **forecast_metrics(historical_average(w, test, config.data.t_out), y)))
  final = {f"test/{k}": float(np.mean([r_[k] for r_ in rows[:-1]])) for k in rows[0]
           if k not in ("method", "seed")}
  if tr.sim is not None and spec.kind not in model_lib.NO_MASK:
    ex = even(test, config.eval.explain_windows)
    xe, ye = data_lib.gather(w, ex, config.data.t_in, config.data.t_out)
    truth = sim_lib.window_truth(tr.sim, ex, config.data.t_in)
    pending = sim_lib.pending_mask(tr.sim, ex, config.data.t_in)
    if spec.kind == "stgnn":
      scores = posthoc_scores(spec, out["best"], xe, r, "saliency", config)
    else:
      _, scores = predict_members(spec, out["best"], xe, r, w)
    er = explanation_metrics(spec, out["best"], r, w, xe, ye, scores, truth,
                             config.eval.sparsity, pending=pending)
    for k in er[0]:
      final[f"test/{k}"] = float(np.mean([e[k] for e in er]))
  metrics_lib.MetricsWriter(workdir, verbose=False).write(config.train.steps, final,
                                                          split="eval")
  md = study_lib.write_table(workdir, "test", rows, header=(
      f"### {spec.kind} on {tr.name} (commit {study_lib.git_commit(PATHS)})"))
  print(md, flush=True)
  print(" ".join(f"{k}={v:.4f}" for k, v in final.items()), flush=True)
  return final


def run_study(config, workdir):
  from jaxpapers.papers.stgib import study  # pylint: disable=g-import-not-at-top
  validate(config)
  metrics_lib.write_config(workdir, config)
  return study.run(config, workdir, commit=study_lib.git_commit(PATHS))


def plan(config):
  """One STGIB training step (all seeds, spread) at the config's sizes."""
  from jaxpapers.core import planner  # pylint: disable=g-import-not-at-top
  d = config.data
  if d.source == "sim":
    g = sim_lib.grid_graph(d.rows, d.cols)
    src, dst, n = g.src, g.dst, g.n
  else:
    tr = data_lib.load(d)
    src, dst, n = tr.src, tr.dst, tr.n
  if d.plan_edges:  # METR-LA's graph size without its file: a ring with chords
    n = d.plan_nodes
    k = d.plan_edges // n
    src = np.repeat(np.arange(n), k)
    dst = (src + np.tile(np.arange(1, k + 1), n)) % n
  fake = data_lib.Traffic(np.zeros((2, n), np.float32), np.zeros(2, np.float32),
                          np.asarray(src), np.asarray(dst), np.zeros((2, n), np.float32), "p")
  spec = spec_of(config, fake)
  t = config.train
  M = t.seeds
  members = jax.eval_shape(lambda: population.stack(
      [train_lib.member_init(spec, s, t.steps) for s in range(M)]))
  T = d.plan_steps
  f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
  one = _plan_one(spec, t.batch, t.steps)
  fn, args = sharding.spread_plan(
      one, members, f32(M), jax.ShapeDtypeStruct((), jnp.int32),
      f32(T, n, len(data_lib.CHANNELS)), f32(T, n),
      jax.ShapeDtypeStruct((int(T * 0.7),), jnp.int32),
      in_axes=(0, 0, None, None, None, None))
  return planner.Plan(fn=fn, args=args, steps=t.steps,
                      label=f"stgib training step: {M} seeds x batch {t.batch} x "
                            f"{spec.t_in}->{spec.t_out} steps, {n} sensors, {spec.e} edges, "
                            f"hidden {spec.hidden}, {T} time steps on device")


def _plan_one(spec, batch, steps):
  """The unspread body of train.make_chunk for a single step (what spread_plan maps)."""
  opt = train_lib._opt()  # pylint: disable=protected-access

  def one(state, lr, step0, feats, target, train_last):
    kd, km = jax.random.split(jax.random.fold_in(state["key"], step0))
    idx = jax.random.randint(kd, (batch,), 0, train_last.shape[0])
    x, y = train_lib._gather(feats, target, train_last[idx], spec.t_in, spec.t_out)  # pylint: disable=protected-access
    valid = (y != 0).astype(jnp.float32)
    r = model_lib.gsat_r(step0, steps, spec.final_r)
    (loss, _), g = jax.value_and_grad(
        lambda p: model_lib.loss_fn(spec, p, x, y, valid, km, r), has_aux=True)(state["params"])
    upd, o = opt.update(g, state["opt"], state["params"])
    params = jax.tree.map(lambda p, u: p - lr * u, state["params"], upd)
    return dict(params=params, opt=o, key=state["key"]), loss

  return one
