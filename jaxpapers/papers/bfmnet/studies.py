"""BFMNet: truthful budget-feasible procurement menus -- the follow-up studies.

* `classical`: every classical baseline (Singer, CGL with an affordable i*, GREEDY-SM(B/2),
  tuned sequential posted prices, Singer's rule on submodular markets as an unproven
  reference) on the held-out instances of the main study (same keys), without training.
* `singer_gap`: why BFMNet loses to Singer on additive markets (n = 10). Measures whether
  Singer's threshold prices lie in BFMNet's class (self-bid-independent: yes by
  construction; non-decreasing in the other bids: counted), checks that Singer's prices
  pass the budget transformation unchanged, and trains BFMNet variants: the main study's
  budget, 4x the steps, a 2x wider network, and an initialisation distilled from Singer's
  prices (regression of the raw menus onto Singer's thresholds), before and after value
  training.
* `neural`: BFMNet and the RegretNet baseline with its inner gradient-ascent misreport
  search and ex-post budget penalty, each with its learning rate chosen per cell on
  validation markets (a key disjoint from training and test); the test audit adds a
  gradient-ascent regret search and ex-post budget draws for RegretNet's lotteries.
* `scale`: n = 50 and 100 (submodular and additive, uniform costs), BFMNet with the
  default initial price scale, a lower one (`offset`) and a raw-overspend hinge in
  training, against the classical baselines; training trajectories and measured
  inference time.
"""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.bfmnet import classical
from jaxpapers.papers.bfmnet import evaluate
from jaxpapers.papers.bfmnet import experiment
from jaxpapers.papers.bfmnet import markets as markets_lib
from jaxpapers.papers.bfmnet import mechanism
from jaxpapers.papers.bfmnet import menus
from jaxpapers.papers.bfmnet import train_lib


def run(config, workdir: str) -> str:
  from jaxpapers.papers.bfmnet import grid_study
  fn = {"classical": classical_study, "singer_gap": singer_gap_study,
        "scale": scale_study, "neural": neural_study,
        "grid": grid_study.grid_study, "relax": relax_study}.get(config.study.name)
  if fn is None:
    raise ValueError(f"unknown study {config.study.name!r}; known: main, classical, "
                     "singer_gap, scale, neural, grid, relax")
  metrics_lib.write_config(workdir, config)
  return fn(config, workdir)


def _header(name, config, t0, commit):
  return (f"BFMNet study `{name}` (`python launch/study.py --config=configs/bfmnet.py:"
          f"study={name} --workdir=DIR`), commit {commit}, "
          f"{time.perf_counter() - t0:.0f} s wall. Value = buyer value / optimum.")


def classical_study(config, workdir):
  commit = study_lib.git_commit(paths=experiment.PAPER_PATHS)
  t0 = time.perf_counter()
  cells = [(v, d) for v in config.study.valuations for d in config.study.cost_dists]
  rows = []
  for k, n in enumerate(config.study.ns):
    cfg = experiment._variant(config, n, k)
    # This study *is* the classical baselines: evaluate them whatever `classical` says
    # (the smoke config turns them off for the main study, which left nothing to rank).
    cfg.eval.classical = True
    res = experiment.run_cells(cfg, cells, os.path.join(workdir, f"n{n}"), kinds=[])
    for (valuation, dist), r in zip(cells, res):
      truthful = experiment.proven_truthful(r, valuation)
      best = max(truthful, key=truthful.get)
      row = {"n": n, "valuation": valuation, "costs": dist}
      row.update(experiment.classical_columns(r, valuation))
      row.update({"best_truthful": best, "best_value": truthful[best],
                  "milp_timeouts": r["milp_timeouts"]})
      rows.append(row)
      print(f"[classical] {row}", flush=True)
  return study_lib.write_table(workdir, "bfmnet_classical", rows,
                               header=_header("classical", config, t0, commit))


def singer_raw_fn(market):
  """Singer's threshold prices as raw menus: t_i(b_{-i}) for every seller and profile
  (the closed form, tested equal to the greedy-trace thresholds)."""
  return lambda bids_PxN: classical.singer_prices_additive(market, bids_PxN)


def singer_monotonicity(markets, deltas=(0.05, 0.2)):
  """Share of (instance, i, j != i, delta) where raising b_j by delta LOWERS i's Singer
  threshold (by more than 1e-6), and share of instances with at least one such case."""
  def one(market):
    raw = singer_raw_fn(market)
    b = market["costs"]
    n = b.shape[0]
    base = raw(b[None])[0]
    out = []
    for d in deltas:
      prof = jnp.minimum(b[None, :] + d * jnp.eye(n), markets_lib.COST_MAX)  # row j: b_j up
      t = raw(prof)                                                    # (j, i)
      drop = (t < base[None, :] - 1e-6) & ~jnp.eye(n, dtype=bool)
      out.append(drop)
    return jnp.stack(out)
  drops = np.asarray(jax.jit(jax.vmap(one))(markets))                  # (B, D, n, n)
  n = drops.shape[-1]
  pairs = drops.shape[0] * drops.shape[1] * n * (n - 1)
  return float(drops.sum() / pairs), float(drops.reshape(drops.shape[0], -1).any(1).mean())


def singer_through_transformation(markets, shrink=0.0):
  """Singer's prices fed through the budget transformation as raw menus: (fraction of
  instances with exactly Singer's winners and payments, transformed value / Singer value).

  The transformation evaluates the others' raw spending at b^(i), i.e. with seller i
  bidding exactly its price; for Singer that is a tie profile (i's ratio ties with the
  seller that sets its threshold), where the others' independent threshold acceptances
  can overspend, so the cap can bind even though Singer itself is budget feasible.
  """
  def one(market):
    win, pay = mechanism.outcome(singer_raw_fn(market), market["budget"], market["costs"],
                                 shrink)
    w0, p0 = classical.singer(market, market["costs"])
    same = jnp.all(win == w0) & jnp.all(jnp.abs(pay - p0) <= 1e-6)
    return same, markets_lib.value(market, win), markets_lib.value(market, w0)
  same, v, v0 = map(np.asarray, jax.jit(jax.vmap(one))(markets))
  return float(np.mean(same)), float(v.sum() / v0.sum())


def distill(cfg, ids_Cx2, steps: int):
  """Raw menus regressed onto Singer's thresholds at truthful profiles (per cell, vmapped).

  Stays inside the architecture (monotone, self-bid-independent), so every guarantee of
  the transformed mechanism holds for the distilled and the fine-tuned networks.
  Returns (stacked params, final relative RMSE of the fit).
  """
  cells = ids_Cx2.shape[0]
  model, opt, states = train_lib.init_states(cfg, "bfmnet", jax.random.PRNGKey(cfg.seed),
                                             cells)
  base = jax.random.PRNGKey(cfg.seed + 31_337)

  def loss_fn(params, mk):
    def one(market):
      b = market["costs"]
      target = jax.lax.stop_gradient(singer_raw_fn(market)(b[None])[0])
      pred = menus.raw_price_fn(model, params, market)(b[None])[0]
      return jnp.mean((pred - target) ** 2), jnp.mean(target ** 2)
    err, scale = jax.vmap(one)(mk)
    return jnp.mean(err), jnp.sqrt(jnp.mean(err) / jnp.mean(scale))

  def step(state, i, ids):
    mk = markets_lib.sample_markets(jax.random.fold_in(base, i), cfg.optim.batch,
                                    cfg.market.n, ids, cfg.market.budget_per_seller)
    (loss, rel), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"], mk)
    updates, opt_state = opt.update(grads, state["opt"], state["params"])
    updates = jax.tree.map(lambda u: state["lr"] * u, updates)
    return ({"params": optax.apply_updates(state["params"], updates), "opt": opt_state,
             "lam": state["lam"], "lr": state["lr"]}, {"loss": loss, "rel_rmse": rel})

  length = min(cfg.optim.log_every, steps)
  chunk = train_lib.make_chunk(step, length)
  m = None
  for s in range(0, steps, length):
    states, m = chunk(states, jnp.asarray(s), ids_Cx2)
  return model, states["params"], np.asarray(m["rel_rmse"])


def _gap_row(name, cfg, res_c, steps, wall, extra=None):
  bfm = res_c["bfmnet"]
  row = {"variant": name, "cell": None, "steps": steps, "hidden": cfg.model.hidden,
         "BFMNet": bfm["value_ratio"], "regret_max": bfm.get("regret_max", float("nan")),
         "budget/IR_viol": f"{bfm['budget_viol']}/{bfm['ir_viol']}",
         "raw_budget_viol": res_c["raw_menus"]["budget_viol"], "wall_s": wall}
  row.update(extra or {})
  return row


def singer_gap_study(config, workdir):
  commit = study_lib.git_commit(paths=experiment.PAPER_PATHS)
  t0 = time.perf_counter()
  n = 10
  cells = [("additive", d) for d in config.study.cost_dists]
  names = [d for _, d in cells]
  ids = jnp.stack([markets_lib.cell_ids(v, d) for v, d in cells])
  steps = config.study.gap_steps
  base = config_lib.override(config, {
      "market.n": n, "optim.steps": steps, "optim.batch": 32, "eval.instances": 128,
      "eval.regret_instances": 2, "eval.classical": False, "eval.timing": False,
      "baseline.train": False})
  base.optim.log_every = min(base.optim.log_every, steps)
  rows, facts = [], []
  # 1. Is Singer inside the class?  Self-bid-independent by construction; monotone?
  n_facts = 128  # the test instances of the grid (64 before issue 17's follow-up)
  mk, _, _ = experiment.eval_sets(config_lib.override(base, {"eval.instances": n_facts}),
                                  ids)
  for c, name in enumerate(names):
    cell = jax.tree.map(lambda x: x[c], mk)
    pair_share, inst_share = singer_monotonicity(cell)
    same, rel = singer_through_transformation(cell)
    same_s, rel_s = singer_through_transformation(cell, 1e-4)
    facts.append({"cell": name, "instances": n_facts,
                  "pairs_where_raising_b_j_lowers_t_i": pair_share,
                  "instances_with_such_a_pair": inst_share,
                  "singer_through_transformation_identical": same,
                  "transformed_singer_value / singer_value": rel,
                  "shrink=1e-4: identical winners, payments within 1e-6": same_s,
                  "shrink=1e-4: value / singer_value": rel_s})
    print(f"[singer_gap] {facts[-1]}", flush=True)
  # Singer and the other classical values on these very instances are in the
  # `classical` study (same key and count as the main study's n = 10 cells).
  cl = None
  _gap_tables(workdir, config, t0, commit, rows, facts, cl, names)
  variants = {"base": ("main-study budget", {}),
              "long": ("4x steps", {"optim.steps": 4 * steps}),
              "wide": ("2x wider", {"model.hidden": 2 * config.model.hidden,
                                    "model.channels": 2 * config.model.channels,
                                    "model.monotone": 2 * config.model.monotone})}
  unknown = set(config.study.gap_variants) - set(variants) - {"distill", "facts"}
  if unknown:
    raise ValueError(f"gap_variants: unknown {sorted(unknown)}; known: base, long, wide, "
                     "distill, facts (no training)")
  for vname, over in (variants[v] for v in config.study.gap_variants if v in variants):
    cfg = config_lib.override(base, over)
    t1 = time.perf_counter()
    res = experiment.run_cells(cfg, cells, os.path.join(workdir, vname.replace(" ", "_")),
                               kinds=["bfmnet"])
    for c, name in enumerate(names):
      rows.append(_gap_row(vname, cfg, res[c], cfg.optim.steps, time.perf_counter() - t1))
      rows[-1]["cell"] = name
      print(f"[singer_gap] {rows[-1]}", flush=True)
    _gap_tables(workdir, config, t0, commit, rows, facts, cl, names)  # partial results
  # Distillation onto Singer's prices, then value training from there.
  if "distill" not in config.study.gap_variants:
    return _gap_tables(workdir, config, t0, commit, rows, facts, cl, names)
  t1 = time.perf_counter()
  model, params, rel = distill(base, ids, config.study.distill_steps)
  res = experiment.run_cells(base, cells, os.path.join(workdir, "distilled"), kinds=[],
                             trained={"bfmnet": (model, params)})
  for c, name in enumerate(names):
    rows.append(_gap_row("distilled from Singer (no value training)", base, res[c], 0,
                         time.perf_counter() - t1, {"distill_rel_rmse": float(rel[c])}))
    rows[-1]["cell"] = name
    print(f"[singer_gap] {rows[-1]}", flush=True)
  _gap_tables(workdir, config, t0, commit, rows, facts, cl, names)  # partial results
  t1 = time.perf_counter()
  _, params_ft, _ = experiment.train(base, "bfmnet", ids, os.path.join(workdir, "ft"),
                                     init_params=params)
  res = experiment.run_cells(base, cells, os.path.join(workdir, "distilled_ft"), kinds=[],
                             trained={"bfmnet": (model, params_ft)})
  for c, name in enumerate(names):
    rows.append(_gap_row("distilled, then value training", base, res[c], steps,
                         time.perf_counter() - t1))
    rows[-1]["cell"] = name
    print(f"[singer_gap] {rows[-1]}", flush=True)
  return _gap_tables(workdir, config, t0, commit, rows, facts, cl, names)


def _gap_tables(workdir, config, t0, commit, rows, facts, cl, names):
  """Writes (and rewrites after every variant, so a run cut short keeps its rows)."""
  header = _header("singer_gap", config, t0, commit) + " n = 10, additive."
  md = study_lib.write_table(workdir, "bfmnet_singer_gap", rows or [{"variant": "-"}],
                             header=header)
  md += "\n" + study_lib.write_table(workdir, "bfmnet_singer_class", facts,
                                     header="Is Singer's mechanism in BFMNet's class?")
  return md


_SCALE_VARIANTS = {
    "offset0": lambda c: {"model.offset": 0.0},
    "offset2": lambda c: {"model.offset": 2.0},
    "penalty": lambda c: {"model.offset": 0.0,
                          "optim.raw_overspend_penalty": c.study.scale_penalty},
}


def scale_study(config, workdir):
  """BFMNet at large n (uniform costs): the default initialisation, a lower initial price
  scale (offset 2) and a raw-overspend hinge in training (`penalty`), with the training
  trajectory of the relaxed value, the binding / negative-cap shares and the raw menus'
  relaxed spend logged every `scale_log_every` steps (metrics.jsonl per variant), and
  the measured inference time per instance. Classical baselines are evaluated once per n
  (with the first variant)."""
  commit = study_lib.git_commit(paths=experiment.PAPER_PATHS)
  t0 = time.perf_counter()
  cells = [(v, "uniform") for v in config.study.valuations]
  names = [f"{v}_{d}" for v, d in cells]
  unknown = set(config.study.scale_variants) - set(_SCALE_VARIANTS)
  if unknown:
    raise ValueError(f"scale_variants: unknown {sorted(unknown)}; known: "
                     f"{sorted(_SCALE_VARIANTS)}")
  rows, traj = [], []
  header = lambda: _header("scale", config, t0, commit)
  for k, n in enumerate(config.study.ns):
    for v_idx, vname in enumerate(config.study.scale_variants):
      cfg = config_lib.override(experiment._variant(config, n, k), {
          **_SCALE_VARIANTS[vname](config), "baseline.train": False,
          "eval.classical": v_idx == 0})
      cfg.optim.log_every = min(config.study.scale_log_every, cfg.optim.steps)
      wd = os.path.join(workdir, f"n{n}_{vname}")
      writer = metrics_lib.MetricsWriter(wd, cfg.optim.steps)
      t1 = time.perf_counter()
      res = experiment.run_cells(cfg, cells, wd, writer=writer, kinds=["bfmnet"])
      wall = time.perf_counter() - t1
      for r in metrics_lib.read_metrics(wd, split="train"):
        for c, name in enumerate(names):
          p = f"{name}/bfmnet/" if len(names) > 1 else "bfmnet/"
          traj.append({"n": n, "variant": vname, "cell": name, "step": r["step"],
                       **{k2: r.get(p + k2, float("nan")) for k2 in (
                           "value", "raw_soft_spend", "binding", "negative_cap",
                           "grad_norm")}})
      for (valuation, dist), r in zip(cells, res):
        bfm = r["bfmnet"]
        ips = r["inference_per_s"].get("bfmnet", float("nan"))
        row = {"n": n, "valuation": valuation, "variant": vname,
               "offset": cfg.model.offset, "penalty": cfg.optim.raw_overspend_penalty,
               "steps": cfg.optim.steps, "batch": cfg.optim.batch,
               "BFMNet": bfm["value_ratio"],
               "budget/IR_viol": f"{bfm['budget_viol']}/{bfm['ir_viol']}",
               "regret_max": bfm.get("regret_max", float("nan")),
               "raw_budget_viol": r["raw_menus"]["budget_viol"],
               "eval_instances": cfg.eval.instances,
               "train_cell_steps/s": r["train"]["bfmnet"]["steps_per_s"],
               "BFMNet_infer_inst/s": ips, "BFMNet_infer_ms/inst": 1e3 / ips,
               "wall_s_both_cells": wall}
        if "cgl" in r:
          truthful = experiment.proven_truthful(r, valuation)
          best = max(truthful, key=truthful.get)
          row.update({"best_truthful": best, "best_truthful_value": truthful[best]})
        rows.append(row)
        print(f"[scale] {row}", flush=True)
      study_lib.write_table(workdir, "bfmnet_scale_trajectory", traj,
                            header="Training trajectory (chunk means).")
      study_lib.write_table(workdir, "bfmnet_scale", rows, header=header())  # partial
  md = study_lib.write_table(workdir, "bfmnet_scale", rows, header=header())
  return md + "\n" + study_lib.write_table(workdir, "bfmnet_scale_trajectory", traj,
                                           header="Training trajectory (chunk means).")


def _select(values_CxL, feasible_CxL=None, fallback_CxL=None):
  """Per cell, the learning-rate index with the best validation value among the feasible
  ones; a cell with no feasible rate takes the smallest `fallback` (violation)."""
  v = np.asarray(values_CxL, np.float64)
  if feasible_CxL is None:
    return np.argmax(v, axis=1)
  f = np.asarray(feasible_CxL)
  best = np.argmax(np.where(f, v, -np.inf), axis=1)
  none = ~f.any(axis=1)
  return np.where(none, np.argmin(np.asarray(fallback_CxL), axis=1), best)


def neural_study(config, workdir):
  commit = study_lib.git_commit(paths=experiment.PAPER_PATHS)
  t0 = time.perf_counter()
  cells = [(v, d) for v in config.study.valuations for d in config.study.cost_dists]
  sweeps = {"bfmnet": np.asarray(config.study.lrs, np.float32),
            "regretnet": np.asarray(config.study.regretnet_lrs, np.float32)}
  if len(set(map(len, sweeps.values()))) != 1:
    raise ValueError("study.lrs and study.regretnet_lrs need the same length")
  n_c, n_l = len(cells), len(config.study.lrs)
  rows, sweep = [], []
  ev = config.eval
  grid = jnp.linspace(0.0, markets_lib.COST_MAX, ev.regret_grid)
  for k, n in enumerate(config.study.ns):
    cfg = experiment._variant(config, n, k)
    ids = jnp.stack([markets_lib.cell_ids(v, d) for v, d in cells])
    ids_rep = jnp.repeat(ids, n_l, axis=0)                   # row c * L + l
    val = jax.vmap(lambda i: markets_lib.sample_markets(
        jax.random.PRNGKey(cfg.seed + 30_011), ev.val_instances, n, i,
        cfg.market.budget_per_seller))(ids_rep)
    val_reg = jax.tree.map(lambda x: x[:, :ev.val_regret_instances], val)
    mk, opt, timeouts = experiment.eval_sets(cfg, ids)
    reg_mk = jax.tree.map(lambda x: x[:, :cfg.eval.regret_instances], mk)
    res = [dict() for _ in cells]
    for kind in ("bfmnet", "regretnet"):
      lrs = sweeps[kind]
      t1 = time.perf_counter()
      model, params, info = experiment.train(cfg, kind, ids_rep,
                                             os.path.join(workdir, f"n{n}"), lrs=np.tile(lrs, n_c))
      train_s = time.perf_counter() - t1
      if kind == "bfmnet":
        build = lambda p: evaluate.bfmnet_mechanism(model, p)
      else:
        build = lambda p: evaluate.regretnet_mechanism(model, p)
      vfn = jax.jit(jax.vmap(lambda p, m: evaluate.outcomes(build(p), m)[2]))
      v_val = np.asarray(vfn(params, val)).mean(1).reshape(n_c, n_l)
      if kind == "bfmnet":
        choice = _select(v_val)
        extra = {}
      else:
        rfn = jax.jit(jax.vmap(lambda p, m: evaluate.regrets_ascent(
            model, p, m, grid, ev.ascent_steps, ev.ascent_lr)))
        r_val = np.asarray(rfn(params, val_reg)).mean((1, 2)).reshape(n_c, n_l)
        efn = jax.jit(jax.vmap(lambda p, m: evaluate.regretnet_expost(
            model, p, m, jax.random.PRNGKey(cfg.seed + 40_009), ev.expost_samples)[0]))
        o_val = np.asarray(efn(params, val)).mean(1).reshape(n_c, n_l)
        feasible = (r_val <= ev.max_val_regret) & (o_val <= ev.max_val_overspend)
        choice = _select(v_val, feasible, r_val + o_val)
        extra = {"val_regret": r_val, "val_overspend": o_val, "feasible": feasible}
      for c in range(n_c):
        for l in range(n_l):
          row = {"n": n, "cell": f"{cells[c][0]}_{cells[c][1]}", "method": kind,
                 "lr": float(lrs[l]), "val_value": float(v_val[c, l]),
                 "chosen": bool(choice[c] == l)}
          row.update({key: (bool(a[c, l]) if a.dtype == bool else float(a[c, l]))
                      for key, a in extra.items()})
          sweep.append(row)
      pick = jnp.asarray(np.arange(n_c) * n_l + choice)
      chosen = jax.tree.map(lambda x: x[pick], params)
      fn, pargs = experiment._cell_fn(build, chosen, lambda m, a, r: evaluate.audit(
          m, a, r, grid))
      arrays, r = fn(chosen, mk, reg_mk)
      if kind == "regretnet":
        r_asc = np.asarray(jax.jit(jax.vmap(lambda p, m: evaluate.regrets_ascent(
            model, p, m, grid, ev.ascent_steps, ev.ascent_lr)))(chosen, reg_mk))
        over, peak = map(np.asarray, jax.jit(jax.vmap(lambda p, m: evaluate.regretnet_expost(
            model, p, m, jax.random.PRNGKey(cfg.seed + 50_021), ev.expost_samples)))(
                chosen, mk))
      for c in range(n_c):
        out = evaluate.summarize(jax.tree.map(lambda x: x[c], arrays), r[c],
                                 jax.tree.map(lambda x: x[c], mk), opt[c])
        out["lr"] = float(lrs[choice[c]])
        out["train_s_all_lrs_cells"] = train_s
        if kind == "regretnet":
          out["regret_ascent_mean"] = float(r_asc[c].mean())
          out["regret_ascent_max"] = float(r_asc[c].max())
          out["expost_overspend_prob"] = float(over[c].mean())
          out["instances_overspend_possible"] = int((over[c] > 0).sum())
          out["max_realised_spend/B"] = float(peak[c].max())
        res[c][kind] = out
      print(f"[neural] n={n} {kind}: trained {train_s:.0f} s, lrs chosen "
            f"{[float(lrs[i]) for i in choice]}", flush=True)
    for c, (valuation, dist) in enumerate(cells):
      b, rn = res[c]["bfmnet"], res[c]["regretnet"]
      rows.append({
          "n": n, "valuation": valuation, "costs": dist, "steps": cfg.optim.steps,
          "BFMNet": b["value_ratio"], "BFMNet_lr": b["lr"],
          "BFMNet_regret_max": b["regret_max"],
          "BFMNet_budget/IR_viol": f"{b['budget_viol']}/{b['ir_viol']}",
          "RegretNet": rn["value_ratio"], "RegretNet_lr": rn["lr"],
          "RegretNet_regret_grid_max": rn["regret_max"],
          "RegretNet_regret_ascent_mean": rn["regret_ascent_mean"],
          "RegretNet_regret_ascent_max": rn["regret_ascent_max"],
          "RegretNet_expected_budget_viol": rn["budget_viol"],
          "RegretNet_expost_overspend_prob": rn["expost_overspend_prob"],
          "RegretNet_instances_overspend_possible": rn["instances_overspend_possible"],
          "RegretNet_max_realised_spend/B": rn["max_realised_spend/B"],
          "milp_timeouts": timeouts})
      print(f"[neural] {rows[-1]}", flush=True)
    header = _header("neural", config, t0, commit)
    md = study_lib.write_table(workdir, "bfmnet_neural", rows, header=header)
    md += "\n" + study_lib.write_table(workdir, "bfmnet_neural_lr_sweep", sweep,
                                       header="Validation sweep (selection on validation "
                                              "markets only).")
  return md


def relax_study(config, workdir):
  """Relaxed training objective vs the hard mechanism's value, for trained grid runs.

  Restores the final sweep states of `grid` parts (n = 10, additive; one per entry of
  `relax_dirs`, trained with `relax_priors`; nothing is retrained) and Singer's prices
  (the residual prior at gain 0), and evaluates on the grid's validation markets both
  the relaxed value the networks are trained on (sigmoid acceptance, tau) and the hard
  value, each as mean of value / total weight. If a trained net scores above Singer on
  the relaxed objective but below it on the hard one, training optimises the wrong
  target; if below on both, it fails to find what the relaxation prefers.
  """
  from jaxpapers.papers.bfmnet import grid_study
  commit = study_lib.git_commit(paths=experiment.PAPER_PATHS)
  t0 = time.perf_counter()
  n, k = 10, list(config.study.ns).index(10)
  cells = [("additive", d) for d in config.study.cost_dists]
  ids = jnp.stack([markets_lib.cell_ids(v, d) for v, d in cells])
  rows = []
  variants = [("singer prices (residual, gain 0)", "residual", None)]
  variants += [(f"{p}, trained ({os.path.basename(d.rstrip('/'))})", p, d)
               for p, d in zip(config.study.relax_priors,
                                                       config.study.relax_dirs)]
  for name, prior, d in variants:
    cfg = config_lib.override(experiment._variant(config, n, k), {"model.prior": prior})
    grid = grid_study.settings(cfg, "bfmnet", n)
    h = len(grid)
    run_cell = np.repeat(np.arange(len(cells)), h)
    run_set = np.tile(np.arange(h), len(cells))
    kw = dict(lrs=[grid[s][0] for s in run_set], seeds=[cfg.seed] * len(run_cell),
              penalties=[grid[s][1] for s in run_set])
    if d is None:   # the initialisation: residual gain 0 = Singer's prices exactly
      model, _, states = train_lib.init_states(cfg, "bfmnet", jax.random.PRNGKey(cfg.seed),
                                               len(run_cell), **kw)
      params = states["params"]
    else:           # the sweep's final checkpoint (the run ended: nothing is trained)
      model, params, _ = experiment.train(cfg, "bfmnet", ids[run_cell],
                                          os.path.join(d, f"n{n}", "sweep_bfmnet"), **kw)
    val = jax.vmap(lambda i: markets_lib.sample_markets(
        jax.random.PRNGKey(cfg.seed + grid_study.VAL_KEY_OFFSET), cfg.eval.val_instances,
        n, i, cfg.market.budget_per_seller))(ids)
    val = jax.tree.map(lambda x: x[run_cell], val)

    taus = config.study.get("relax_taus", (cfg.model.tau,))

    def both(p, mk):
      # The relaxed value at every tau asked for (the nets of a smaller-tau run are
      # compared with Singer's prices on their own training objective).
      relaxed = jnp.stack([train_lib.bfm_loss(p, model, mk, t)[1]["value"] for t in taus])
      hard = evaluate.outcomes(evaluate.bfmnet_mechanism(model, p), mk)[2]
      return relaxed, jnp.mean(hard / jnp.sum(mk["weights"], axis=1))
    rel, hard = map(np.asarray, jax.jit(jax.vmap(both))(params, val))
    for r in range(len(run_cell)):
      rows.append({"variant": name, "cell": cells[run_cell[r]][1],
                   "lr": grid[run_set[r]][0] if d else "-", "relaxed_value": float(rel[r, 0]),
                   **{f"relaxed_tau{t:g}": float(rel[r, k]) for k, t in enumerate(taus)},
                   "hard_value": float(hard[r]),
                   # residual prior: the learned gain (<= 0 means exactly Singer's prices)
                   "residual_gain": (float(params["residual_gain"][r])
                                     if "residual_gain" in params else "-")})
      print(f"[relax] {rows[-1]}", flush=True)
      if d is None and run_set[r] > 0:  # untrained: every lr is the same mechanism
        rows.pop()
  header = (_header("relax", config, t0, commit) + " n = 10, additive, validation "
            "markets; values are mean value / total weight (not / optimum).")
  return study_lib.write_table(workdir, "bfmnet_relax", rows, header=header)
