"""FlowGDA (abstract 10): one benchmark, every method, all seeds and learning rates.

Each method is one jitted program vmapped over seeds (outer, split over every device by
`core.sharding.spread`) and its learning-rate grid (inner); FlowGDA's ablations are extra
lanes of the same program (their switches are traced weights). Randomness is drawn from
(benchmark, seed, method) only, so a method's numbers do not depend on which other methods
or seeds run beside it.

Model selection (identical for every method), two rules reported side by side: per seed,
the hyper-parameters (learning rate; and weight decay for the fresh-student methods) with
the best score under
- `proxy`: accuracy on a labeled held-out sample of the last intermediate domain;
- `rv` (source labels only): reverse validation (Zhong et al. 2010): a fresh classifier
  trained on the method's target pseudo-labels, scored on a held-out source split.
Neither reads target labels. The source model that every other method starts from is
chosen on the held-out source split (its only labeled data).
"""
from __future__ import annotations

import functools
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import sharding
from jaxpapers.papers.flowgda import baselines
from jaxpapers.papers.flowgda import data as data_lib
from jaxpapers.papers.flowgda import flow
from jaxpapers.papers.flowgda import nets

METHODS = ("source_only", "oracle", "target_st", "gst", "gst_fresh", "gst_linear", "dann",
           "goat", "goat_fresh", "ggf", "flowgda")
LABELS = {"source_only": "source-only", "oracle": "target oracle (target labels; upper bound)",
          "target_st": "direct target self-training",
          "gst": "GST, continued teacher, unregularised",
          "gst_fresh": "GST, fresh regularised student", "gst_linear": "linear GST",
          "dann": "DANN", "goat": "GOAT, continued head", "goat_fresh": "GOAT on fresh GST",
          "ggf": "GGF", "flowgda": "FlowGDA"}
FRESH = ("gst_fresh", "gst_linear", "goat_fresh")  # tuned over lr x weight decay
RULES = {"proxy": "intermediate-domain proxy (labels of 100 held-out points of domain D-2)",
         "rv": "source only: reverse validation on a held-out source split"}
# FlowGDA and its ablations: (w_cons, w_anchor, w_sem, use_ot, two_stage, anchor_flow)
VARIANTS = {
    "flowgda": (1.0, 1.0, 1.0, 1.0, True, 0.0),
    "no_cons": (0.0, 1.0, 1.0, 1.0, True, 0.0),
    "no_anchor": (1.0, 0.0, 1.0, 1.0, True, 0.0),
    "no_sem": (1.0, 1.0, 0.0, 1.0, True, 0.0),
    "no_stage2": (1.0, 1.0, 1.0, 1.0, False, 0.0),
    "no_ot": (1.0, 1.0, 1.0, 0.0, True, 0.0),
    "anchor_flow": (1.0, 1.0, 1.0, 1.0, True, 1.0),
}
MIN_CLASSES = 10  # logits padded to this many classes so benchmarks share shapes


def method_key(seed: int, bench: str, method: str):
  k = jax.random.fold_in(jax.random.key(seed), zlib.crc32(bench.encode()) % (2**31))
  return jax.random.fold_in(k, zlib.crc32(method.encode()) % (2**31))


@functools.lru_cache(maxsize=64)
def _gradual(name, n_inter, n, seed, path):
  return data_lib.make(name, n_inter, n, seed=seed, path=path)


def load(cfg, name, seeds, n_inter):
  gs = [_gradual(name, n_inter, cfg.data.n, s, cfg.data.path) for s in seeds]
  arrays = {k: jnp.asarray(v) for k, v in data_lib.stack(gs).items()}
  classes = max(MIN_CLASSES, gs[0].num_classes)
  mask = jnp.arange(classes) < gs[0].num_classes
  return gs, arrays, mask


def _preds(logit_fn):
  """Class predictions of every (seed, lane) model on validation, test and target inputs."""
  f = lambda p, xv, xs, xt, xu: tuple(  # noqa: E731
      logit_fn(p, x).argmax(-1) for x in (xv, xs, xt, xu))
  return jax.jit(jax.vmap(jax.vmap(f, (0, None, None, None, None)), (0, 0, 0, 0, 0)))


def _reverse(key, x_tgt_NxP, yhat_LxN, x_sv, y_sv, mask, arch, steps, lr, batch):
  """Reverse validation scores of L pseudo-labelings of one seed's target: a fresh
  classifier per labeling (same key, so lanes differ in their labels only), trained on
  (target inputs, pseudo-labels), accuracy on the held-out labeled source."""
  def one(yhat):
    p, _ = baselines.train_source(key, x_tgt_NxP, yhat, mask, lr, arch, steps, batch)
    return nets.accuracy(nets.logits(p, x_sv, mask), y_sv)
  return jax.vmap(one)(yhat_LxN)


def _hp(cfg):
  a = cfg.adapt
  return {"steps_per_round": a.steps_per_round, "batch": a.batch, "drop": a.drop,
          "goat_n_gen": a.goat_n_gen, "goat_epsilon": a.goat_epsilon,
          "ggf_alpha": a.ggf_alpha, "ggf_eta_langevin": a.ggf_eta_langevin,
          "ggf_eta_classifier": a.ggf_eta_classifier,
          "ggf_score_sigma": a.ggf_score_sigma, "dann_lambda": a.dann_lambda,
          "dann_disc_hidden": a.dann_disc_hidden, "dann_init": a.dann_init,
          "dann_domains": a.dann_domains,
          "hidden": tuple(cfg.flow.hidden), "lr": cfg.flow.lr, "steps": cfg.flow.steps,
          "holdout": a.holdout, "eval_every": a.eval_every, "retrain_steps": a.retrain_steps,
          "goat_retrain_steps": a.goat_retrain_steps}


def arch_of(cfg):
  m = cfg.model
  if m.encoder == "identity":  # no encoder: the head (and every flow) reads the inputs
    return {"hidden": (), "feat": 0, "head_hidden": m.head_hidden, "conv": ()}
  return {"hidden": tuple(m.hidden), "feat": m.feat, "head_hidden": m.head_hidden,
          "conv": tuple(m.conv) if m.encoder == "cnn" else ()}


_PROGRAMS = {}


def _program(key, build):
  """One jitted program per (kind, static settings): reused across benchmarks, seeds,
  sensitivity runs and resumed runs whose shapes agree (no recompilation)."""
  if key not in _PROGRAMS:
    _PROGRAMS[key] = build()
  return _PROGRAMS[key]


def _static(d):
  return tuple(sorted(d.items()))


def _flowgda_lane(key, zn_s, y_s, head0, stats, mask, wv, lrs, fhp, n_int, steps_per_int,
                  batch):
  vp, hist = flow.train_velocity(key, zn_s, y_s, head0, stats, mask, wv, fhp)
  adapt = lambda lr: flow.adapt_head(  # noqa: E731
      jax.random.fold_in(key, 7), vp, zn_s[0], y_s, head0, stats, mask, lr,
      n_int=n_int, steps_per_int=steps_per_int, batch=batch)[0]
  last = jax.tree.map(lambda h: h[-max(1, fhp["steps"] // 10):].mean(), hist)
  return jax.vmap(adapt)(lrs), last


def seeds_program(fn, in_axes):
  """`fn` mapped over seeds (the leading axis of the in_axes=0 arguments), the seeds split
  over every device (`core.sharding.spread`); on one device it is jit(vmap(fn))."""
  return sharding.spread(fn, in_axes=in_axes)


def flowgda_program(fhp, n_int, steps_per_int, batch, spread=True):
  """FlowGDA and its ablations: seeds (spread) x variants x learning rates.

  Arguments (keys, zn, y_src, head0, stats, mask, weights, lrs): the first five per seed,
  the ablation switches per variant; every variant of a seed shares the key, so an
  ablation differs from the full method only in its switch. Returns heads and loss
  histories with rows (seeds, variants, ...). spread=False: the one-device
  jit(vmap) of the same function (tests).
  """
  one = functools.partial(_flowgda_lane, fhp=fhp, n_int=n_int,
                          steps_per_int=steps_per_int, batch=batch)
  per_seed = jax.vmap(one, (None, None, None, None, None, None, 0, None))
  axes = (0, 0, 0, 0, 0, None, None, None)
  return seeds_program(per_seed, axes) if spread else jax.jit(jax.vmap(per_seed, axes))


def _net_self_train(key, params, domains, mask, lr, hp):
  apply_fn = lambda p, x: nets.logits(p, x, mask)  # noqa: E731
  return baselines.self_train(key, params, apply_fn, domains, lr, hp["steps_per_round"],
                              hp["batch"], hp["drop"])


def _flowgda_weights(cfg, wanted):
  fc = cfg.flow
  w = np.asarray([VARIANTS[v] for v in wanted], np.float32)
  stage2 = int(fc.steps * fc.stage1_fraction)
  weights = {"cons": w[:, 0], "anchor": w[:, 1] * fc.w_anchor, "sem": w[:, 2] * fc.w_sem,
             "use_ot": w[:, 3], "anchor_flow": w[:, 5],
             "stage2_start": np.where(w[:, 4] > 0, stage2, 0).astype(np.int32)}
  return {k: jnp.asarray(v) for k, v in weights.items()}


FIELDS = ("val", "test", "lr", "wd", "rv", "test_rv", "lr_rv", "wd_rv")


def grid_of(cfg, method):
  """(lr grid, weight-decay grid or ()) of a method: `adapt.grids[method]` over the shared
  `adapt.lr_grid` / `adapt.wd_grid`; the source model's lr grid is `source.lr_grid`, the
  oracle's (same recipe) falls back to it. Weight decay is tuned for the fresh-student
  methods and for the regularised source model only."""
  own = cfg.adapt.grids.get(method) or {}
  base = cfg.source.lr_grid if method in ("source_only", "oracle") else cfg.adapt.lr_grid
  if method == "oracle" and not own:
    own = cfg.adapt.grids.get("source_only") or {}
  lr = tuple(own.get("lr") or base)
  tuned_wd = method in FRESH or (method == "source_only" and cfg.source.regularised)
  wd = tuple(own.get("wd") or cfg.adapt.wd_grid) if tuned_wd else ()
  return lr, wd


def lanes_of(cfg, method):
  """The (lr, wd) lanes of a method as two float32 arrays: every pair of its two grids
  (lr outer), or its lr grid with wd None where weight decay is not tuned."""
  lr, wd = grid_of(cfg, method)
  if not wd:
    return jnp.asarray(lr, jnp.float32), None
  return (jnp.asarray([r for r in lr for _ in wd], jnp.float32),
          jnp.asarray([w for _ in lr for w in wd], jnp.float32))


def pick(score, test, grid, wds):
  """Per seed, the lane with the best score (seeds x lanes), the first one on ties (lanes
  in `lanes_of` order, lr outer): its (score, target test accuracy, lr, weight decay)."""
  rows, idx = np.arange(score.shape[0]), score.argmax(1)
  return score[rows, idx], test[rows, idx], grid[idx], wds[idx]


def run(cfg, name, seeds, n_inter=None, methods=METHODS, variants=tuple(VARIANTS),
        log=print, resume=None, on_phase=None):
  """Returns {method or variant: {field: (S,) for field in FIELDS, "seconds"}}: per rule
  (proxy: val/test/lr/wd; reverse validation: rv/test_rv/lr_rv/wd_rv) the selected lane's
  score, target test accuracy and hyper-parameters.

  Phases run in a fixed order (METHODS; flowgda with its ablations). `resume` = {"src":
  source params, "out": finished phases} skips what is done; `on_phase(phase, src, out)`
  is called after each phase (checkpointing). A phase depends only on the data, the
  source model and its own key, so a resumed run ends with exactly the numbers of an
  uninterrupted one.
  """
  resume = resume or {"src": None, "out": {}}
  n_inter = cfg.data.n_inter if n_inter is None else n_inter
  tag = f"{name} D={n_inter + 2}"
  _, a, mask = load(cfg, name, seeds, n_inter)
  lrs = lambda m: lanes_of(cfg, m)[0]  # noqa: E731  (per-method grids: `grid_of`)
  out = dict(resume["out"])
  keys = lambda m: jnp.stack([method_key(s, name, m) for s in seeds])  # noqa: E731
  hp = _hp(cfg)
  hps = _static(hp)
  arch = arch_of(cfg)
  rv = cfg.adapt
  rev = _program(("reverse", _static(arch), rv.rv_steps, rv.rv_lr, rv.batch),
                 lambda: seeds_program(functools.partial(
                     _reverse, arch=arch, steps=rv.rv_steps, lr=rv.rv_lr, batch=rv.batch),
                     (0, 0, 0, 0, 0, None)))
  net_preds = _preds(lambda p, x: nets.logits(p, x, mask))
  head_preds = _preds(lambda h, z: nets.head_logits(h, z, mask))
  y_val, y_test = np.asarray(a["y_val"])[:, None], np.asarray(a["y_test"])[:, None]

  def record(method, preds, params, inputs, t0, grid, wds=None, src_score=None):
    """Scores every (seed, lane) model under both rules and keeps each rule's pick."""
    pv, _, pt, pu = (np.asarray(v) for v in preds(params, *inputs))  # _: source split
    # float32 like the checkpointed fields, so a resumed run reports identical numbers
    val, test = ((p == y).mean(-1).astype(np.float32) for p, y in ((pv, y_val), (pt, y_test)))
    if src_score is None:  # reverse validation from the target pseudo-labels
      rscore = np.asarray(rev(keys("reverse"), a["x"][:, -1], jnp.asarray(pu, jnp.int32),
                              a["x_src_val"], a["y_src_val"], mask))
    else:
      rscore = np.asarray(src_score, np.float32)
    grid = np.asarray(grid, np.float32)
    wds = np.zeros_like(grid) if wds is None else np.asarray(wds, np.float32)
    res = {}
    for score, sfx in ((val if src_score is None else src_score, ""), (rscore, "_rv")):
      res.update(zip(("val" if not sfx else "rv", "test" + sfx, "lr" + sfx, "wd" + sfx),
                     pick(score, test, grid, wds)))
    if src_score is not None:  # the source model's own pick: proxy accuracy reported
      res["val"] = val[np.arange(val.shape[0]), src_score.argmax(1)]
    # every lane's scores (seeds x lanes): how flat a method's curve over its grid is
    res["lanes"] = {"lr": grid, "wd": wds, "proxy": val, "rv": rscore, "test": test}
    res["seconds"] = time.perf_counter() - t0
    out[method] = res
    log(f"  {tag} {method:12s} target acc proxy {res['test'].mean():.3f} +- "
        f"{res['test'].std():.3f}, rv {res['test_rv'].mean():.3f} +- "
        f"{res['test_rv'].std():.3f} ({res['seconds']:.1f} s)")

  def todo(phase, needed=True):
    if not needed:
      return False
    if phase in out:
      log(f"  {tag} {phase:12s} restored from the checkpoint")
      return False
    return True

  x_in = (a["x_val"], a["x_src_val"], a["x_test"], a["x"][:, -1])
  acc = lambda p, x, y: nets.accuracy(nets.logits(p, x, mask), y)  # noqa: E731
  vacc = jax.vmap(jax.vmap(acc, (0, None, None)), (0, 0, 0))  # seeds x lrs

  # Source model (= source-only): lr grid (x weight decay when regularised), chosen on
  # the held-out source split.
  src = resume["src"]
  in_dim = a["x"].shape[-1]
  src_fn = _program(("source", _static(arch), cfg.source.steps, cfg.adapt.batch),
                    lambda: seeds_program(jax.vmap(functools.partial(
                        baselines.train_source, arch=arch, steps=cfg.source.steps,
                        batch=cfg.adapt.batch), (None, None, None, None, 0)),
                        (0, 0, 0, None, None)))
  if src is None or todo("source_only"):
    t0 = time.perf_counter()
    s_grid, s_wds = lanes_of(cfg, "source_only")
    if cfg.source.regularised:  # the fresh GST's recipe: L2 + early stopping
      reg_hp = dict(hp, retrain_steps=cfg.source.steps)
      f = _program(("source_reg", _static(reg_hp), _static(arch), in_dim),
                   lambda: seeds_program(jax.vmap(functools.partial(
                       _net_fit_fresh, hp=reg_hp, arch=arch, in_dim=in_dim),
                       (None, None, None, None, 0, 0)), (0, 0, 0, None, None, None)))
      src_all = f(keys("source"), a["x"][:, 0], a["y"][:, 0], mask, s_grid, s_wds)
    else:
      src_all, _ = src_fn(keys("source"), a["x"][:, 0], a["y"][:, 0], mask, s_grid)
    sval = np.asarray(vacc(src_all, a["x_src_val"], a["y_src_val"]))
    idx = jnp.asarray(sval.argmax(1))
    # Both rules keep this pick (the only labeled data is the source's).
    record("source_only", net_preds, src_all, x_in, t0, s_grid, s_wds, src_score=sval)
    src = jax.tree.map(lambda p: p[jnp.arange(len(seeds)), idx], src_all)
    _call(on_phase, "source_only", src, out)

  # Target oracle (reads the target's labels: an upper bound, not an adaptation method):
  # the source recipe on 80% of the target's training rows, lr chosen on the other 20%.
  if todo("oracle", "oracle" in methods):
    t0 = time.perf_counter()
    n_fit = int(0.8 * a["x"].shape[2])
    x_t, y_t = a["x"][:, -1], a["y"][:, -1]
    o_grid = lrs("oracle")
    o_all, _ = src_fn(keys("oracle"), x_t[:, :n_fit], y_t[:, :n_fit], mask, o_grid)
    oval = np.asarray(vacc(o_all, x_t[:, n_fit:], y_t[:, n_fit:]))
    record("oracle", net_preds, o_all, x_in, t0, o_grid, src_score=oval)
    _call(on_phase, "oracle", src, out)

  # Full-network methods start from the selected source model. Both continued-teacher
  # self-training baselines are one program (rounds over a sequence of domains).
  st = _program(("st", hps), lambda: seeds_program(jax.vmap(
      functools.partial(_net_self_train, hp=hp), (None, None, None, None, 0)),
      (0, 0, 0, None, None)))
  rounds = a["x"].shape[1] - 1
  seqs = {"target_st": jnp.repeat(a["x"][:, -1:], rounds, axis=1), "gst": a["x"][:, 1:]}
  for m in ("target_st", "gst"):
    if todo(m, m in methods):
      t0 = time.perf_counter()
      params = st(keys(m), src, seqs[m], mask, lrs(m))
      record(m, net_preds, params, x_in, t0, lrs(m))
      _call(on_phase, m, src, out)
  fresh = {  # fresh-student methods: (program key, one lane over (lr, weight decay))
      "gst_fresh": (("gst_fresh", hps, _static(arch), in_dim), functools.partial(
          _net_gst_fresh, hp=hp, arch=arch, in_dim=in_dim)),
      "gst_linear": (("gst_linear", hps), functools.partial(baselines.gst_linear, hp=hp)),
  }
  for m, (key, lane) in fresh.items():
    if todo(m, m in methods):
      t0 = time.perf_counter()
      f = _program(key, lambda lane=lane: seeds_program(
          jax.vmap(lane, (None, None, None, None, None, 0, 0)),
          (0, 0, 0, 0, None, None, None)))
      f_lrs, f_wds = lanes_of(cfg, m)
      params = f(keys(m), a["x"][:, 0], a["y"][:, 0], a["x"][:, 1:], mask, f_lrs, f_wds)
      record(m, net_preds, params, x_in, t0, f_lrs, f_wds)
      _call(on_phase, m, src, out)
  if todo("dann", "dann" in methods):
    t0 = time.perf_counter()
    f = _program(("dann", hps, _static(arch), in_dim), lambda: seeds_program(jax.vmap(
        functools.partial(_net_dann, hp=hp, arch=arch, in_dim=in_dim),
        (None, None, None, None, None, 0)), (0, 0, 0, 0, None, None)))
    params = f(keys("dann"), src, a["x"], a["y"][:, 0], mask, lrs("dann"))
    record("dann", net_preds, params, x_in, t0, lrs("dann"))
    _call(on_phase, "dann", src, out)

  # Feature-space methods: frozen source encoder, adapted head.
  enc = jax.vmap(nets.encode)
  s_, d_, n_ = a["x"].shape[:3]
  z = enc(src, a["x"].reshape(s_, d_ * n_, -1)).reshape(s_, d_, n_, -1)
  z_in = (enc(src, a["x_val"]), enc(src, a["x_src_val"]), enc(src, a["x_test"]), z[:, -1])
  mean, std = z[:, 0].mean(1), z[:, 0].std(1) + 1e-6  # (S, F) source statistics
  zn = (z - mean[:, None, None]) / std[:, None, None]

  if todo("goat", "goat" in methods):
    t0 = time.perf_counter()
    f = _program(("goat", hps), lambda: seeds_program(jax.vmap(
        functools.partial(baselines.goat, hp=hp), (None, None, None, None, 0)),
        (0, 0, 0, None, None)))
    heads = f(keys("goat"), src["head"], z, mask, lrs("goat"))
    record("goat", head_preds, heads, z_in, t0, lrs("goat"))
    _call(on_phase, "goat", src, out)
  if todo("goat_fresh", "goat_fresh" in methods):
    t0 = time.perf_counter()
    f = _program(("goat_fresh", hps), lambda: seeds_program(jax.vmap(
        functools.partial(baselines.goat_fresh, hp=hp), (None, None, None, None, None, 0, 0)),
        (0, 0, 0, 0, None, None, None)))
    f_lrs, f_wds = lanes_of(cfg, "goat_fresh")
    heads = f(keys("goat_fresh"), src["head"], z, a["y"][:, 0], mask, f_lrs, f_wds)
    record("goat_fresh", head_preds, heads, z_in, t0, f_lrs, f_wds)
    _call(on_phase, "goat_fresh", src, out)
  if todo("ggf", "ggf" in methods):
    t0 = time.perf_counter()
    f = _program(("ggf", hps), lambda: seeds_program(jax.vmap(
        functools.partial(baselines.ggf, hp=hp), (None, None, None, None, None, None, 0)),
        (0, 0, 0, 0, 0, None, None)))
    heads = f(keys("ggf"), src["head"], zn, a["y"][:, 0], (mean, std), mask, lrs("ggf"))
    record("ggf", head_preds, heads, z_in, t0, lrs("ggf"))
    _call(on_phase, "ggf", src, out)

  wanted = [v for v in VARIANTS if v in variants] if "flowgda" in methods else []
  if wanted and todo("flowgda"):
    t0 = time.perf_counter()
    fc = cfg.flow
    fhp = dict(hp, batch=fc.batch, sigma=fc.sigma, epsilon=fc.epsilon,
               anchor_substeps=fc.anchor_substeps)

    static = dict(fhp=fhp, n_int=fc.n_int_per_gap * (zn.shape[1] - 1),
                  steps_per_int=max(1, cfg.adapt.steps_per_round // fc.n_int_per_gap),
                  batch=cfg.adapt.batch)
    f = _program(("flowgda", _static(fhp), static["n_int"], static["steps_per_int"],
                  static["batch"]), lambda: flowgda_program(**static))
    heads, hist = f(keys("flowgda"), zn, a["y"][:, 0], src["head"], (mean, std), mask,
                    _flowgda_weights(cfg, wanted), lrs("flowgda"))
    for i, v in enumerate(wanted):  # rows: seeds x variants
      hv = jax.tree.map(lambda h: h[:, i], heads)  # noqa: B023
      record(v, head_preds, hv, z_in, t0, lrs("flowgda"))
      out[v]["flow_loss"] = {k: float(np.asarray(x[:, i]).mean()) for k, x in hist.items()}
    _call(on_phase, "flowgda", src, out)
  return out


def _net_fns(mask, arch, in_dim):
  init_fn = lambda k: nets.classifier_init(  # noqa: E731
      k, in_dim, arch["hidden"], arch["feat"], arch["head_hidden"], mask.shape[-1],
      arch["conv"])
  return init_fn, lambda p, x: nets.logits(p, x, mask)


def _net_gst_fresh(key, x_src, y_src, domains, mask, lr, wd, hp, arch, in_dim):
  init_fn, apply_fn = _net_fns(mask, arch, in_dim)
  return baselines.gst_from_source(key, init_fn, apply_fn, x_src, y_src, domains, lr, wd,
                                   hp)


def _net_dann(key, src, x, y_src, mask, lr, hp, arch, in_dim):
  init_fn, _ = _net_fns(mask, arch, in_dim)
  return baselines.dann(key, src, x, y_src, mask, lr, hp, init_fn)


def _net_fit_fresh(key, x, y, mask, lr, wd, hp, arch, in_dim):
  init_fn, apply_fn = _net_fns(mask, arch, in_dim)
  return baselines.fit_fresh(key, init_fn, apply_fn, x, y, jnp.ones(y.shape, jnp.float32),
                             lr, wd, hp)


def _call(on_phase, phase, src, out):
  if on_phase is not None:
    on_phase(phase, src, out)
