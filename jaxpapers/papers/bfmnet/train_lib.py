"""BFMNet: truthful budget-feasible procurement menus -- training of BFMNet and RegretNet.

Both learners maximise the buyer's expected value over instances drawn from the market
distribution (markets.py), with truthful bids (BFMNet is exactly DSIC, and RegretNet is
trained towards it). The discrete allocation is relaxed for gradients:
  * BFMNet: acceptance 1[b <= t] -> sigmoid((t - b) / tau), both inside the budget
    transformation and for the final sale, and v(S) -> its multilinear extension F(q).
  * RegretNet: allocations are already lotteries; value F(x), and an augmented
    Lagrangian on regret (misreports from an inner gradient ascent plus a coarse grid)
    and the ex-post budget violation (relaxed draws of the winner set), multipliers
    updated every step.
The learning rate lives in the state (`lr`, one per vmapped cell), so one compiled
program trains several learning rates side by side for validation-based selection; with
`init_states(..., seeds=, penalties=)` the training seed (initialisation and data
stream) and the raw-overspend hinge weight are per-run state too, so one program also
trains several seeds and hinge weights (the tuned grid study). A run with state seed s
draws the same initialisation and data as a run with cfg.seed = s.
A training step is a pure function (state, step) -> (state, metrics) with instances
drawn from fold_in(rng, step) and vmapped over the batch; `run_chunk` scans it.
"""
from __future__ import annotations

import jax
import jax.flatten_util
import jax.numpy as jnp
import optax

from jaxpapers.core import mesh as mesh_lib
from jaxpapers.core import sharding
from jaxpapers.papers.bfmnet import markets as markets_lib
from jaxpapers.papers.bfmnet import mechanism
from jaxpapers.papers.bfmnet import menus
from jaxpapers.papers.bfmnet import regretnet as regretnet_lib
from jaxpapers.papers.bfmnet import rochetnet as rochetnet_lib


def make_optimizer(cfg):
  # Unit peak: the state's per-cell `lr` multiplies the update (Adam's direction does not
  # depend on the step size, so this equals an optimizer built with that lr).
  sched = optax.cosine_decay_schedule(1.0, cfg.optim.steps, alpha=0.1)
  # flatten: one update for the whole parameter vector keeps the compiled step small.
  return optax.flatten(optax.chain(optax.clip_by_global_norm(cfg.optim.clip),
                                   optax.adam(sched)))


def _sample(cfg, rng, ids):
  return markets_lib.sample_markets(rng, cfg.optim.batch, cfg.market.n, ids,
                                    cfg.market.budget_per_seller)


def bfm_instance(model, params, market, tau):
  """Relaxed value and diagnostics of BFMNet on one instance with truthful bids."""
  raw = menus.raw_price_fn(model, params, market)
  costs = market["costs"]
  t, t0, cap = mechanism.prices(raw, market["budget"], costs, tau, model.shrink)
  q = jax.nn.sigmoid((t - costs) / tau)
  q0 = jax.nn.sigmoid((t0 - costs) / tau)
  return {"value": markets_lib.multilinear(market, q) / jnp.sum(market["weights"]),
          "binding": jnp.mean((cap < t0).astype(jnp.float32)),
          "negative_cap": jnp.mean((cap < 0).astype(jnp.float32)),
          "soft_spend": jnp.sum(q * t) / market["budget"],
          # relaxed spend of the raw menus (before the transformation), in budgets
          "raw_soft_spend": jnp.sum(q0 * t0) / market["budget"]}


def bfm_loss(params, model, markets, tau, raw_penalty=0.0):
  """-(mean relaxed value); with raw_penalty > 0 also raw_penalty * E[max(raw relaxed
  spend / B - 1, 0)], a training-only hinge that keeps the raw menus near budget
  feasibility (the mechanism and its guarantees are unchanged: the transformation still
  enforces the budget exactly)."""
  out = jax.vmap(lambda m: bfm_instance(model, params, m, tau))(markets)
  over = jnp.mean(jnp.maximum(out["raw_soft_spend"] - 1.0, 0.0))
  out = jax.tree.map(jnp.mean, out)
  loss = -out["value"]
  if raw_penalty:  # Python-level: the default program is the one the earlier tables ran
    loss = loss + raw_penalty * over
  return loss, dict(out, raw_overspend=over)


def tau_at(cfg, i):
  """The relaxation temperature at step i: cfg.model.tau, or with model.tau_end > 0 a
  geometric anneal from tau to tau_end over the run (issue 17: does the relaxation's
  bias, which vanishes as tau -> 0, explain the gap to Singer?)."""
  tau, end = cfg.model.tau, cfg.model.get("tau_end", 0.0)
  if not end:
    return tau
  return tau * (end / tau) ** (jnp.asarray(i, jnp.float32) / cfg.optim.steps)


def bfm_hard_value(params, model, markets):
  """Mean value / total weight of the *hard* mechanism (no relaxation) with truthful bids."""
  def one(market):
    raw = menus.raw_price_fn(model, params, market)
    win, _ = mechanism.outcome(raw, market["budget"], market["costs"], model.shrink)
    return markets_lib.value(market, win) / jnp.sum(market["weights"])
  return jnp.mean(jax.vmap(one)(markets))


def es_grad(value_fn, params, rng, pairs: int, sigma: float):
  """Score-function (Gaussian-smoothing) estimate of the gradient of -value_fn (the hard
  mechanism's value, `bfm_hard_value`, in training) and the mean perturbed value.

  With theta' = theta + sigma eps, eps ~ N(0, I), the score of the search distribution
  gives grad E[V(theta')] = E[V(theta') eps] / sigma; antithetic pairs and common
  markets (every perturbation sees the same batch) cancel most of the variance. Every
  perturbed theta' is itself a menu network, so each evaluated mechanism is the exact
  hard one: no sigmoid acceptance, no softplus floor.
  """
  flat, unravel = jax.flatten_util.ravel_pytree(params)
  eps = jax.random.normal(rng, (pairs, flat.shape[0]), flat.dtype)
  hv = jax.vmap(lambda f: value_fn(unravel(f)))
  v_plus, v_minus = hv(flat[None] + sigma * eps), hv(flat[None] - sigma * eps)
  g = jnp.mean((v_plus - v_minus)[:, None] * eps, axis=0) / (2.0 * sigma)
  return unravel(-g), jnp.mean(0.5 * (v_plus + v_minus))


def rochet_loss(params, model, markets, tau):
  """-(mean relaxed value) of the RochetNet-style menus: softmax choice per seller."""
  def one(market):
    z, pair = markets_lib.features(market)
    x, pi = model.apply({"params": params}, z, pair, market["budget"])
    q = rochetnet_lib.soft_choice(x, pi, market["costs"], tau)
    return {"value": markets_lib.multilinear(market, q) / jnp.sum(market["weights"]),
            "soft_spend": jnp.sum(q * rochetnet_lib.choose(x, pi, market["costs"])[1])
                          / market["budget"]}
  out = jax.tree.map(jnp.mean, jax.vmap(one)(markets))
  return -out["value"], out


def regretnet_instance(model, params, market, rng, grid_G, bcfg):
  z, pair = markets_lib.features(market)
  n = market["costs"].shape[0]
  out_fn = lambda bids: model.apply({"params": params}, z, pair, bids)
  r_init, r_spend = jax.random.split(rng)
  init = jax.random.uniform(r_init, (n, bcfg.ascent_inits)) * markets_lib.COST_MAX
  # Inner maximisation (Duetting et al.): gradient ascent on the misreports against the
  # current network; the outer step then sees them as fixed points.
  frozen = jax.lax.stop_gradient(params)
  found = regretnet_lib.ascend_misreports(
      lambda b: model.apply({"params": frozen}, z, pair, b), market["costs"], init,
      bcfg.ascent_steps, bcfg.ascent_lr, markets_lib.COST_MAX)
  mis = jnp.concatenate([jnp.broadcast_to(grid_G[None], (n, grid_G.shape[0])), found], 1)
  rgt, (x, p) = regretnet_lib.regret(out_fn, market["costs"], mis)
  _, _, pi = model.clone(with_win_price=True).apply({"params": params}, z, pair,
                                                    market["costs"][None])
  spend = regretnet_lib.relaxed_spend(x, pi[0], r_spend, bcfg.expost_samples,
                                      bcfg.expost_temp)
  return {"value": markets_lib.multilinear(market, x) / jnp.sum(market["weights"]),
          "regret": jnp.mean(rgt),
          "budget_violation": jnp.mean(jnp.maximum(spend - market["budget"], 0.0))
                              / market["budget"],
          "expected_overspend": jnp.maximum(jnp.sum(p) - market["budget"], 0.0)
                                / market["budget"]}


def regretnet_loss(params, model, markets, rng, lam, rho, grid_G, bcfg):
  rngs = jax.random.split(rng, markets["costs"].shape[0])
  out = jax.vmap(lambda m, r: regretnet_instance(model, params, m, r, grid_G, bcfg))(
      markets, rngs)
  out = jax.tree.map(jnp.mean, out)
  loss = (-out["value"] + lam[0] * out["regret"] + lam[1] * out["budget_violation"]
          + 0.5 * rho * (out["regret"] ** 2 + out["budget_violation"] ** 2))
  return loss, out


def init_state(cfg, kind: str, rng):
  n = cfg.market.n
  if kind == "bfmnet":
    model = menus.MenuNet(cfg.model.hidden, cfg.model.channels, cfg.model.monotone,
                          cfg.model.get("offset", 0.0), cfg.model.get("prior", "none"),
                          cfg.model.get("shrink", 0.0),
                          cfg.model.get("gain0", 0.0))
    params = menus.init_params(rng, model, n)
  elif kind == "rochetnet":
    model = rochetnet_lib.RochetMenu(cfg.model.hidden, cfg.model.get("options", 4))
    params = rochetnet_lib.init_params(rng, model, n)
  else:
    model = regretnet_lib.RegretNet(cfg.baseline.hidden)
    params = regretnet_lib.init_params(rng, model, n)
  opt = make_optimizer(cfg)
  state = {"params": params, "opt": opt.init(params), "lam": jnp.zeros((2,)),
           "lr": jnp.asarray(cfg.optim.lr, jnp.float32)}
  return model, opt, state


def make_step(cfg, kind: str, model, opt):
  """(state, step, ids) -> (state, metrics), pure; instances from fold_in(seed, step).

  `ids` = markets.cell_ids(valuation, dist) picks the market distribution, so the same
  compiled step trains every (valuation, distribution) cell of one n under vmap.
  """
  offset = 0 if kind == "bfmnet" else 7919
  base = jax.random.PRNGKey(cfg.seed + offset)
  grid = jnp.linspace(0.0, markets_lib.COST_MAX, cfg.baseline.train_grid)

  def step(state, i, ids):
    # Per-run seed in the state (seed sweeps) -> that seed's data stream.
    key = jax.random.PRNGKey(state["seed"] + offset) if "seed" in state else base
    rng = jax.random.fold_in(key, i)
    r_data, r_mis = jax.random.split(rng)
    mk = _sample(cfg, r_data, ids)
    if kind == "bfmnet":
      tau = tau_at(cfg, i)

      def loss_fn(p):
        loss, out = bfm_loss(p, model, mk, tau,
                             cfg.optim.get("raw_overspend_penalty", 0.0))
        if "penalty" in state:  # per-run hinge weight (traced; 0 adds exactly nothing)
          loss = loss + state["penalty"] * out["raw_overspend"]
        return loss, out
      if cfg.optim.get("objective", "relaxed") == "es":
        # Relaxation-free: the gradient comes from the hard mechanism's value only; the
        # relaxed loss is computed for the logged diagnostics, its gradient is unused.
        loss, out = loss_fn(state["params"])
        grads, hard = es_grad(lambda p: bfm_hard_value(p, model, mk), state["params"],
                              jax.random.fold_in(r_mis, 1), cfg.optim.es_pairs,
                              cfg.optim.es_sigma)
        out = dict(out, hard_value=hard)
      else:
        (loss, out), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
      lam = state["lam"]
    elif kind == "rochetnet":
      (loss, out), grads = jax.value_and_grad(rochet_loss, has_aux=True)(
          state["params"], model, mk, cfg.model.tau)
      lam = state["lam"]
    else:
      (loss, out), grads = jax.value_and_grad(regretnet_loss, has_aux=True)(
          state["params"], model, mk, r_mis, state["lam"], cfg.baseline.rho, grid,
          cfg.baseline)
      lam = state["lam"] + cfg.baseline.rho * jnp.stack(
          [out["regret"], out["budget_violation"]])
    updates, opt_state = opt.update(grads, state["opt"], state["params"])
    updates = jax.tree.map(lambda u: state["lr"] * u, updates)
    params = optax.apply_updates(state["params"], updates)
    metrics = dict(out, loss=loss, grad_norm=optax.tree.norm(grads))
    return dict(state, params=params, opt=opt_state, lam=lam), metrics

  return step


def cell_fn(step_fn, length: int):
  """(state, start, ids) -> (state, mean metrics): `length` steps of one run, scanned."""
  def one_cell(state, start, ids):
    state, ms = jax.lax.scan(lambda s, i: step_fn(s, i, ids), state,
                             start + jnp.arange(length))
    return state, jax.tree.map(jnp.mean, ms)
  return one_cell


def make_chunk(step_fn, length: int, map_runs: bool = False, mesh=None):
  """Scan of `length` steps from `start` for every run (leading axis of the state and of
  ids_Cx2); returns the new states and each run's mean metrics.

  The runs (cells x learning rates x hinge weights x seeds) are split over every device
  of `mesh` (default: all devices) by `core.sharding.spread`, so a sweep of R runs on D
  devices costs about R / D runs' time. `map_runs` keeps one run's memory per device: the
  runs are padded to a multiple of D, each device gets a block of R / D runs and maps
  them one after another (lax.map), for large sweeps at large n.
  """
  one_cell = cell_fn(step_fn, length)
  if not map_runs:  # the states come back each chunk: their buffers are donated
    return sharding.spread(one_cell, mesh, in_axes=(0, None, 0), donate_argnums=(0,))

  def block(states_K, start, ids_Kx2):  # one device's runs, one after another
    return jax.lax.map(lambda a: one_cell(a[0], start, a[1]), (states_K, ids_Kx2))
  spread_blocks = sharding.spread(block, mesh, in_axes=(0, None, 0))
  n_dev = {}

  def chunk(states, start, ids_Cx2):
    if "d" not in n_dev:
      n_dev["d"] = (mesh or mesh_lib.make_mesh()).size
    d, runs = n_dev["d"], ids_Cx2.shape[0]
    pad = sharding.padded_size(runs, d)
    fold = lambda x: x.reshape((d, pad // d) + x.shape[1:])  # noqa: E731
    out = spread_blocks(jax.tree.map(fold, sharding.pad_leading(states, pad)), start,
                        fold(sharding.pad_leading(ids_Cx2, pad)))
    return jax.tree.map(lambda x: x.reshape((pad,) + x.shape[2:])[:runs], out)
  return chunk


def init_states(cfg, kind: str, rng, cells: int, lrs=None, seeds=None, penalties=None):
  """The same initialisation replicated for every cell (independent copies); `lrs`
  (one per cell) overrides cfg.optim.lr, e.g. for a learning-rate sweep. `seeds` (one
  per cell) gives each run the initialisation PRNGKey(seed) and that seed's data stream
  instead (rng is then unused); `penalties` (one per cell) a per-run hinge weight."""
  model, opt, state = init_state(cfg, kind, rng)
  states = jax.tree.map(lambda x: jnp.stack([x] * cells), state)
  if lrs is not None:
    states["lr"] = jnp.asarray(lrs, jnp.float32).reshape(cells)
  if seeds is not None:
    seeds = jnp.asarray(seeds, jnp.int32).reshape(cells)
    init = {"bfmnet": menus.init_params, "rochetnet": rochetnet_lib.init_params,
            "regretnet": regretnet_lib.init_params}[kind]
    params = jax.vmap(lambda s: init(jax.random.PRNGKey(s), model, cfg.market.n))(seeds)
    states.update(params=params, opt=jax.vmap(opt.init)(params), seed=seeds)
  if penalties is not None:
    if kind != "bfmnet":
      raise ValueError("penalties: the raw-overspend hinge is a BFMNet training term")
    states["penalty"] = jnp.asarray(penalties, jnp.float32).reshape(cells)
  return model, opt, states
