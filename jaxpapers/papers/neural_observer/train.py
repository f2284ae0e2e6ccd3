"""Two-stage training of LMI-certified neural network observers (abstract 4): training.

Methods on one (plant, seed) problem, sharing data, gain L, network and optimiser:
- two_stage: stage 1, point-guided Lyapunov pre-training (estimation loss + hinge on
  V' + alpha V <= -margin V at fresh uniform samples of (state, error) over the prescribed
  boxes, V = e^T P e with P learned); stage 2, LMI fine-tuning: alternate the certificate
  SDP (lmi.CertificateSDP: P, multipliers for the current weights) and network updates on
  estimation loss + rho * relu(lambda_max(F(theta; P, mu, lam)) + margin), until a
  certificate verified by lmi.verify holds (and the validation target is met).
- direct: the same SDP-in-the-loop alternation from the first step (no pre-training), as
  in direct LMI-constrained observer training (arXiv 2208.13006).
- unconstrained: estimation loss only (no Lyapunov term, no certificate).
- two_stage_nohinge: ablation, stage 1 without the hinge.
Updates run as jitted `lax.scan` chunks of `sdp_every` steps; the SDP and the NumPy check
run on the host between chunks. Wall-clock starts before the first update and excludes
XLA compilation (ahead-of-time compiled before the clock starts).
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import population
from jaxpapers.core import sharding
from jaxpapers.papers.neural_observer import baselines
from jaxpapers.papers.neural_observer import lmi
from jaxpapers.papers.neural_observer import observer
from jaxpapers.papers.neural_observer import plants as plants_lib

SPLITS = {"train": 0, "val": 1, "test": 2}
# Jitted functions keyed by (what, plant, noise, shapes): seeds reuse one compilation.
_JIT = {}


def _cached(key, make):
  if key not in _JIT:
    _JIT[key] = make()
  return _JIT[key]


@dataclasses.dataclass
class Problem:
  plant: plants_lib.Plant
  L: np.ndarray
  s_z: jnp.ndarray
  s_y: jnp.ndarray
  z_box: np.ndarray
  err_box: np.ndarray
  data: dict
  dt: float
  alpha: float
  gain_alpha: float  # decay rate of the LMI design of L (tuned on validation)


def build_problem(cfg, plant_name: str, seed: int, noise_scale: float = 1.0,
                  data: dict | None = None, gain_alpha: float | None = None,
                  mismatch: float = 0.0, friction: float = 0.0) -> Problem:
  """Data of (plant, seed) from PRNGKey(seed) folded with the split (method-independent);
  L from the Lipschitz-observer LMI at decay gain_alpha (default cfg.alpha_gain).
  mismatch / friction > 0: the data come from plants.true_plant (physical parameters off
  by +-mismatch, an unmodelled Coulomb friction of level `friction`) while the problem's
  plant, hence every observer, its gain and its certificate, stays nominal."""
  gain_alpha = float(cfg.alpha_gain if gain_alpha is None else gain_alpha)
  plant = plants_lib.make_plant(plant_name, noise_scale)
  true = (plants_lib.true_plant(plant_name, noise_scale, mismatch, friction)
          if (mismatch or friction) else plant)
  z_box = np.concatenate([plant.x_box, 1.5 * plant.d_amp * np.ones(plant.nd)])
  err_box = cfg.err_scale * z_box
  if data is None:
    key = jax.random.PRNGKey(seed)
    data = {}
    for split, sid in SPLITS.items():
      n = cfg.n_train if split == "train" else cfg.n_eval
      make = _cached(("data", true.name, plant.noise, n, cfg.steps, cfg.dt,
                      cfg.err_scale),
                     lambda n=n: jax.jit(lambda k: plants_lib.make_dataset(
                         true, k, n, cfg.steps, cfg.dt, err_box)))
      data[split] = make(jax.random.fold_in(key, sid))
  L = _design_gain(plant, gain_alpha)
  s_y = jnp.asarray(np.abs(plant.C) @ plant.x_box + 1e-6)
  return Problem(plant, L, jnp.asarray(z_box), s_y, z_box, err_box, data, cfg.dt,
                 cfg.alpha, gain_alpha)


def _design_gain(plant, gain_alpha):
  """The LMI gain of (plant, decay), cached: the SDP is deterministic."""
  return _cached(("gain", plant.name, gain_alpha), lambda: lmi.design_gain(
      plant.Abar, plant.Cbar, plant.Gbar, plant.Qbar, gain_alpha)[0])


def evaluate(prob: Problem, zhat, split: str) -> dict:
  m = observer.errors(zhat, prob.data[split], prob.plant.nx, prob.s_z)
  return {k: float(v) for k, v in m.items()}


def linear_part_metrics(prob: Problem, split: str) -> dict:
  """The observer with the neural term off (Luenberger with the gain L of the method)."""
  run = _linear_obs_eval(prob, True)
  return evaluate(prob, run(jnp.asarray(prob.L, jnp.float32), prob.data[split]), split)


def estimation_loss(prob: Problem, params, train):
  """Normalised MSE of the observer's rollouts on the training trajectories."""
  f = observer.field(prob.plant, prob.L, params, prob.s_z, prob.s_y)
  zhat = observer.rollout_batch(f, train, prob.dt)
  return observer.errors(zhat, train, prob.plant.nx, prob.s_z)["nmse"]


def stage1_update(prob: Problem, cfg, opt):
  """One point-guided pre-training update (pure, no host work): the JAX stage.

  (((params, R), opt_state), key, w_hinge, train) -> (state, aux); the estimation loss
  plus w_hinge x the Lyapunov hinge at fresh samples drawn from `key`. Seeds, learning
  rates (in opt_state) and data are arguments, so one compilation serves every run.
  """
  plant = prob.plant

  def loss(trainable, key, w_hinge, train):
    params, R = trainable
    z, e = observer.sample_error_states(plant, key, cfg.n_points, prob.z_box,
                                        prob.err_box)
    hinge, frac = observer.lyapunov_hinge(plant, prob.L, params, R, prob.s_z, prob.s_y,
                                          z, e, prob.alpha, cfg.hinge_margin)
    est = estimation_loss(prob, params, train)
    return est + w_hinge * hinge, dict(est=est, hinge=hinge, frac_ok=frac)

  def update(state, key, w_hinge, train):
    trainable, opt_state = state
    (_, aux), g = jax.value_and_grad(loss, has_aux=True)(trainable, key, w_hinge, train)
    upd, opt_state = opt.update(g, opt_state, trainable)
    return (optax.apply_updates(trainable, upd), opt_state), aux

  return update


def _stage1_chunk(update, n_steps: int, state, key, w_hinge, train):
  """n_steps updates, step i drawing its samples from fold_in(key, i); last aux."""
  def step(st, i):
    return update(st, jax.random.fold_in(key, i), w_hinge, train)
  state, aux = jax.lax.scan(step, state, jnp.arange(n_steps))
  return state, jax.tree.map(lambda a: a[-1], aux)


def stage1_program(prob: Problem, cfg, opt, n_chunks: int):
  """The whole stage 1 of one run as one function: n_chunks chunks of sdp_every updates,
  chunk c keyed by fold_in(key, c * sdp_every) exactly as `Trainer.run` keys them."""
  update = stage1_update(prob, cfg, opt)

  def run(state, key, w_hinge, train):
    def chunk(st, c):
      return _stage1_chunk(update, cfg.sdp_every, st,
                           jax.random.fold_in(key, c * cfg.sdp_every), w_hinge, train)
    return jax.lax.scan(chunk, state, jnp.arange(n_chunks))

  return run


class Trainer:
  """Jitted, ahead-of-time compiled update chunks for one (problem, width, lr)."""

  def __init__(self, prob: Problem, width: int, cfg):
    # Data, learning rate and seed are arguments of the compiled chunks, so one Trainer
    # serves every seed / noise level / learning rate of a (plant, width).
    self.prob, self.width, self.cfg = prob, width, cfg
    plant = prob.plant
    self.opt = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
    A_L = jnp.asarray(plant.Abar - prob.L @ plant.Cbar)
    G, Q = jnp.asarray(plant.Gbar), jnp.asarray(plant.Qbar)
    update1 = stage1_update(prob, cfg, self.opt)

    def stage2_loss(params, cert, train):
      W2, K = observer.lmi_weights(params, plant.Cbar, prob.s_y)
      F = lmi.assemble_jax(cert["P"], cert["mu"], cert["lam"], A_L, G, W2, K, Q,
                           prob.alpha)
      lmax = jnp.linalg.eigvalsh(F)[-1]
      est = estimation_loss(prob, params, train)
      return est + cfg.rho * jax.nn.relu(lmax + cfg.lmi_margin), dict(est=est, lmax=lmax)

    def chunk1(state, key, w_hinge, train):
      return _stage1_chunk(update1, cfg.sdp_every, state, key, w_hinge, train)

    def chunk2(state, cert, train):
      def step(st, _):
        params, opt_state = st
        (_, aux), g = jax.value_and_grad(stage2_loss, has_aux=True)(params, cert,
                                                                        train)
        upd, opt_state = self.opt.update(g, opt_state, params)
        return (optax.apply_updates(params, upd), opt_state), aux
      state, aux = jax.lax.scan(step, state, None, length=cfg.sdp_every)
      return state, jax.tree.map(lambda a: a[-1], aux)

    def val_nmse(params, val):
      f = observer.field(plant, prob.L, params, prob.s_z, prob.s_y)
      return observer.errors(observer.rollout_batch(f, val, prob.dt), val, plant.nx,
                             prob.s_z)["nmse"]

    p0, r0 = self.init(0)
    s1 = ((p0, r0), self.opt.init((p0, r0)))
    s2 = (p0, self.opt.init(p0))
    tr, va = prob.data["train"], prob.data["val"]
    nz, h = plant.nz, width
    cert0 = dict(P=jnp.eye(nz), mu=jnp.ones((G.shape[1],)), lam=jnp.ones((h,)))
    key0 = jax.random.PRNGKey(0)
    self.chunk1 = jax.jit(chunk1).lower(s1, key0, 1.0, tr).compile()
    self.chunk2 = jax.jit(chunk2).lower(s2, cert0, tr).compile()
    self.val_nmse = jax.jit(val_nmse).lower(p0, va).compile()
    self.predict = jax.jit(lambda params, data: observer.rollout_batch(
        observer.field(plant, prob.L, params, prob.s_z, prob.s_y), data, prob.dt))
    self.A_L, self.G, self.Q = np.asarray(A_L), np.asarray(G), np.asarray(Q)

  def stage1_spread(self, probs, seeds, lrs, w_hinge: float | None = None):
    """Stage 1 of every (seed, lr) run at once, the runs split over every device.

    probs[i] is seed i's problem (its training data); returns the stacked final
    (params, R) and the per-chunk aux, rows in seed-major (seed, lr) order. The same
    updates, keys and data as `Trainer.run`'s stage 1 of each run; the SDP stage that
    follows is host-side (cvxpy) and runs per run.
    """
    cfg = self.cfg
    n_chunks = -(-cfg.stage1_steps // cfg.sdp_every)
    if getattr(self, "_stage1_spread_fn", None) is None:  # one jit per Trainer
      self._stage1_spread_fn = sharding.spread(
          stage1_program(self.prob, cfg, self.opt, n_chunks), in_axes=(0, 0, None, 0))
    states, keys, trains = [], [], []
    for prob, seed in zip(probs, seeds):
      for lr in lrs:
        trainable = self.init(seed)
        states.append((trainable, self.opt_init(trainable, lr)))
        keys.append(jax.random.fold_in(jax.random.PRNGKey(seed), 7))
        trains.append(prob.data["train"])
    stack = population.stack
    w = cfg.w_hinge if w_hinge is None else w_hinge
    (trainable, _), aux = self._stage1_spread_fn(stack(states), stack(keys),
                                                jnp.float32(w), stack(trains))
    return trainable, aux

  def init(self, seed: int):
    plant = self.prob.plant
    params = observer.init_params(jax.random.PRNGKey(seed), plant.nz, plant.ny,
                                  self.width, self.cfg.out_scale)
    return params, jnp.eye(plant.nz)

  def lmi_weights(self, params):
    W2, K = observer.lmi_weights(params, self.prob.plant.Cbar, self.prob.s_y)
    return np.asarray(W2, np.float64), np.asarray(K, np.float64)

  def opt_init(self, trainable, lr):
    state = self.opt.init(trainable)
    state.hyperparams["learning_rate"] = jnp.asarray(lr, jnp.float32)
    return state

  def problem_for(self, prob=None):
    """prob (default: the Trainer's own), refused when its gain L differs from the one
    compiled into this Trainer's update chunks."""
    prob = prob or self.prob
    if not np.array_equal(prob.L, self.prob.L):
      raise ValueError(f"Trainer compiled for gain decay {self.prob.gain_alpha} got a "
                       f"problem with gain decay {prob.gain_alpha}: build a new Trainer")
    return prob

  def run(self, method: str, seed: int, lr: float, prob: Problem | None = None,
          sdp_solver: str = "CLARABEL", total_steps: int | None = None,
          max_lmi_s: float = 0.0, ckpt_dir: str | None = None,
          stop_after: int | None = None):
    """Trains one method for total_steps (default cfg.total_steps) updates; returns
    (params, trace, summary).

    Neural methods keep the best-on-validation model; the LMI methods keep the best
    validation model among those holding a verified certificate (None if none did).
    trace rows (one per chunk): time, step, val nmse, and for LMI rounds the SDP's t,
    the verified flag and margin. max_lmi_s > 0 stops an LMI method at the first SDP
    round after that many seconds of wall-clock (summary["capped"]): "no certificate
    within T s" is then reported as such, not waited for.

    ckpt_dir: the whole run state (optimiser states, step, kept model and certificate,
    trace, elapsed wall-clock) is saved through core.checkpoint after every chunk of
    updates, before the next SDP, and a run started on the same directory resumes from
    the newest one. Updates draw keys from fold_in(seed key, step) and the SDP is a
    deterministic function of the weights, so a resumed run equals an uninterrupted one
    bit for bit. Checkpoint writes are excluded from the wall-clock. stop_after=k returns
    None after k chunks (as if killed there; for the resume test).
    """
    cfg, prob = self.cfg, self.problem_for(prob)
    total_steps = total_steps or cfg.total_steps
    tr, va = prob.data["train"], prob.data["val"]
    plant = prob.plant
    params, R = self.init(seed)
    key = jax.random.fold_in(jax.random.PRNGKey(seed), 7)
    summary = dict(method=method, width=self.width, seed=seed)
    pre_steps = cfg.stage1_steps if method in ("two_stage", "two_stage_nohinge") else 0
    if method == "unconstrained":
      pre_steps = total_steps
    w_hinge = cfg.w_hinge if method == "two_stage" else 0.0
    nan = np.float64(np.nan)
    st = dict(s1=((params, R), self.opt_init((params, R), lr)),
              s2=(params, self.opt_init(params, lr)),
              step=np.int64(0), elapsed=np.float64(0.0), stage1_s=nan,
              hinge=nan, frac_ok=nan,
              keep=params, keep_val=np.float64(np.inf), has_keep=np.int64(0),
              keep_P=np.zeros((plant.nz, plant.nz)),
              keep_mu=np.zeros(plant.Gbar.shape[1]), keep_lam=np.zeros(self.width),
              t_cert=nan, solves=np.int64(0), sdp_s=np.float64(0.0),
              trace=np.full((total_steps // cfg.sdp_every + 2, len(_TRACE)), np.nan),
              n_trace=np.int64(0))
    ckpt = None
    if ckpt_dir:
      from jaxpapers.core import checkpoint  # orbax only where a run checkpoints
      ckpt = checkpoint.Checkpointer(ckpt_dir, keep=1)
      st, _ = ckpt.restore_or(_saveable(st))
      st = {k: (v if k in ("s1", "s2", "keep") else np.array(v)) for k, v in st.items()}
    t0 = time.perf_counter() - float(st["elapsed"])
    chunks = [0]

    def add_trace(**row):
      st["trace"][int(st["n_trace"])] = [row.get(c, np.nan) for c in _TRACE]
      st["n_trace"] = st["n_trace"] + 1

    def after_chunk():  # save (not timed); True when the run should stop here
      nonlocal t0
      chunks[0] += 1
      if ckpt is None:
        return stop_after is not None and chunks[0] >= stop_after
      ts = time.perf_counter()
      st["elapsed"] = np.float64(ts - t0)
      ckpt.save(int(st["step"]), _saveable(st))
      ckpt.manager.wait_until_finished()
      t0 += time.perf_counter() - ts
      return stop_after is not None and chunks[0] >= stop_after

    while st["step"] < pre_steps:
      st["s1"], aux1 = self.chunk1(st["s1"], jax.random.fold_in(key, int(st["step"])),
                                   w_hinge, tr)
      st["step"] = st["step"] + cfg.sdp_every
      st["hinge"], st["frac_ok"] = (np.float64(aux1["hinge"]), np.float64(aux1["frac_ok"]))
      if method == "unconstrained":
        val = float(self.val_nmse(st["s1"][0][0], va))
        add_trace(step=int(st["step"]), time_s=time.perf_counter() - t0, val_nmse=val)
        if val < st["keep_val"]:
          st["keep_val"], st["keep"] = np.float64(val), st["s1"][0][0]
      elif st["step"] >= pre_steps:  # stage 1 ends: stage 2 starts from its network
        jax.block_until_ready(st["s1"])
        st["stage1_s"] = np.float64(time.perf_counter() - t0)
        p1 = st["s1"][0][0]
        st["s2"] = (p1, self.opt_init(p1, lr))
      if after_chunk():
        return None, None, dict(summary, stopped=True)
    self.stage1_state = st["s1"][0]
    summary["stage1_s"] = (float(st["stage1_s"]) if method != "unconstrained"
                           else time.perf_counter() - t0)
    if method == "unconstrained":
      trace = self._trace(st)
      summary.update(total_s=summary["stage1_s"], certified=False, time_to_cert=np.nan,
                     sdp_solves=0, best_val_nmse=float(st["keep_val"]),
                     last_val_nmse=trace[-1]["val_nmse"], capped=False,
                     steps_done=int(st["step"]))
      if ckpt:
        ckpt.close()
      return st["keep"], trace, summary
    if pre_steps:
      summary["stage1_hinge"] = float(st["hinge"])
      summary["stage1_frac_ok"] = float(st["frac_ok"])
    sdp = lmi.CertificateSDP(plant.nz, plant.Gbar.shape[1], self.width, plant.Gbar,
                             plant.Qbar, prob.alpha, solver=sdp_solver)
    capped = False
    while True:
      params = st["s2"][0]
      W2, K = self.lmi_weights(params)
      cert = sdp.solve(self.A_L, W2, K)
      st["solves"] = st["solves"] + 1
      st["sdp_s"] = st["sdp_s"] + cert["solve_s"]
      check = lmi.verify(cert, self.A_L, self.G, W2, K, self.Q, prob.alpha)
      val = float(self.val_nmse(params, va))
      now = time.perf_counter() - t0
      add_trace(step=int(st["step"]), time_s=now, sdp_t=cert["t"],
                valid=float(check["valid"]), margin=check["margin"], val_nmse=val,
                sdp_s=cert["solve_s"], lmi=1.0)
      if check["valid"]:
        if np.isnan(st["t_cert"]):
          st["t_cert"] = np.float64(now)
        if val < st["keep_val"]:
          st.update(keep=params, keep_val=np.float64(val), has_keep=np.int64(1),
                    keep_P=cert["P"], keep_mu=cert["mu"], keep_lam=cert["lam"])
      capped = bool(max_lmi_s) and now >= max_lmi_s and st["step"] < total_steps
      if st["step"] >= total_steps or capped:
        break
      st["s2"], _ = self.chunk2(st["s2"], {k: jnp.asarray(cert[k], jnp.float32)
                                           for k in ("P", "mu", "lam")}, tr)
      st["step"] = st["step"] + cfg.sdp_every
      if after_chunk():
        return None, None, dict(summary, stopped=True)
    if ckpt:
      ckpt.close()
    trace = self._trace(st)
    certified = bool(st["has_keep"])
    summary.update(total_s=time.perf_counter() - t0, certified=certified,
                   time_to_cert=float(st["t_cert"]), sdp_solves=int(st["solves"]),
                   sdp_s=float(st["sdp_s"]), best_val_nmse=float(st["keep_val"]),
                   last_val_nmse=trace[-1]["val_nmse"], capped=capped,
                   steps_done=int(st["step"]))
    if not certified:
      return None, trace, summary
    cert = dict(P=np.asarray(st["keep_P"]), mu=np.asarray(st["keep_mu"]),
                lam=np.asarray(st["keep_lam"]))
    W2, K = self.lmi_weights(st["keep"])
    check = lmi.verify(cert, self.A_L, self.G, W2, K, self.Q, prob.alpha)
    # The reported margin: the uncapped SDP's optimum at the kept weights, re-checked in
    # NumPy (after total_s: not part of training). The capped solve's margin depends on
    # which of many t = 1 solutions the solver returned (kept as margin_capped).
    opt = sdp.solve(self.A_L, W2, K, cap=None)
    check_opt = lmi.verify(opt, self.A_L, self.G, W2, K, self.Q, prob.alpha)
    summary.update(margin=check_opt["margin"] if check_opt["valid"] else np.nan,
                   sdp_t_opt=opt["t"], margin_capped=check["margin"],
                   min_eig_P=check["min_eig_P"], cert=cert)
    return jax.tree.map(jnp.asarray, st["keep"]), trace, summary

  @staticmethod
  def _trace(st):
    rows = []
    for r in np.asarray(st["trace"])[:int(st["n_trace"])]:
      d = dict(zip(_TRACE, (float(v) for v in r)))
      d["step"] = int(d["step"])
      if d.pop("lmi") == 1.0:
        d["valid"] = bool(d["valid"])
      else:
        d = dict(step=d["step"], time_s=d["time_s"], val_nmse=d["val_nmse"])
      rows.append(d)
    return rows


def _saveable(st):
  """The run state with NumPy scalars as 0-d arrays (what orbax stores)."""
  return {k: (v if k in ("s1", "s2", "keep") else np.asarray(v)) for k, v in st.items()}


# Columns of the trace array kept in the run state (so it is checkpointed with it).
_TRACE = ("step", "time_s", "sdp_t", "valid", "margin", "val_nmse", "sdp_s", "lmi")


def selection_score(method: str, summary: dict) -> tuple:
  """Validation criterion of a learning rate (smaller is better): the unconstrained
  network by its best validation nmse; an LMI method first by holding a verified
  certificate at all, then by its best certified validation nmse (uncertified runs by
  their last validation nmse, so a grid where nothing certifies still picks one)."""
  if method == "unconstrained" or summary["certified"]:
    return (0, float(summary["best_val_nmse"]))
  return (1, float(summary["last_val_nmse"]))


def time_to_accuracy(trace, level: float) -> float:
  """First wall-clock at which a verified certificate holds with val nmse <= level."""
  for r in trace:
    if r.get("valid") and r["val_nmse"] <= level:
      return r["time_s"]
  return float("nan")


def stage1_guarantees(prob: Problem, params, R, n_check: int, beta: float, seed: int):
  """Local radius and coverage of the stage-1 decrease condition on fresh samples."""
  z, e = observer.sample_error_states(prob.plant, jax.random.PRNGKey(10_000 + seed),
                                      n_check, prob.z_box, prob.err_box)
  P = R.T @ R + 1e-3 * jnp.eye(R.shape[0])
  q = observer.decrease_ratio(prob.plant, prob.L, params, P, prob.s_z, prob.s_y, z, e,
                              prob.alpha)
  k = int(jnp.sum(q >= 0.0))
  return dict(local_radius=observer.local_radius(q, e, prob.err_box), violation=k / n_check,
              n_violations=k, coverage_eps=observer.coverage_epsilon(n_check, beta),
              violation_ub=observer.clopper_pearson_upper(k, n_check, beta))


# ---------- classical baselines, each tuned on validation ----------

def _linear_obs_eval(prob: Problem, use_model_phi: bool):
  return _cached(("linear", prob.plant.name, prob.plant.noise, use_model_phi, prob.dt),
                 lambda: _make_linear_obs_eval(prob, use_model_phi))


def _make_linear_obs_eval(prob: Problem, use_model_phi: bool):
  plant = prob.plant

  def run(L, data):
    if use_model_phi:
      f = observer.field(plant, L, None, prob.s_z, prob.s_y)
    else:
      f = baselines.eso_field(plant, L)
    zhat = observer.rollout_batch(f, data, prob.dt)
    return zhat if use_model_phi else baselines.eso_disturbance(plant, zhat)
  return jax.jit(run)


def select_gain(prob: Problem, grid) -> tuple:
  """Decay rate of the neural observers' LMI gain L, chosen like the Luenberger baseline's:
  the linear observer (network off) with L(decay) by validation nmse. Returns (decay,
  rows of every candidate); infeasible decays are listed with nmse nan."""
  run, rows = _linear_obs_eval(prob, True), []
  for a in grid:
    try:
      L = np.asarray(_design_gain(prob.plant, float(a)), np.float32)
      v = evaluate(prob, run(L, prob.data["val"]), "val")["nmse"]
    except ValueError:
      v = float("nan")
    rows.append(dict(gain_alpha=float(a), val_nmse=v))
  ok = [r for r in rows if np.isfinite(r["val_nmse"])]
  if not ok:
    raise ValueError(f"no feasible gain decay in {list(grid)} for {prob.plant.name}")
  best = min(ok, key=lambda r: r["val_nmse"])
  for r in rows:
    r["chosen"] = r is best
  return best["gain_alpha"], rows


def tune_baselines(prob: Problem, grids) -> dict:
  """Each baseline's key hyper-parameter picked on val nmse; returns test metrics."""
  plant, out = prob.plant, {}
  model_run, eso_run = _linear_obs_eval(prob, True), _linear_obs_eval(prob, False)

  def pick(name, cands, gain_fn, runner):
    best = None
    for c in cands:
      try:
        L = np.asarray(gain_fn(c), np.float32)
      except ValueError:
        continue
      v = evaluate(prob, runner(L, prob.data["val"]), "val")["nmse"]
      if np.isfinite(v) and (best is None or v < best[0]):
        best = (v, c, L)
    if best is None:
      return
    m = evaluate(prob, runner(best[2], prob.data["test"]), "test")
    out[name] = dict(hparam=best[1], grid=[float(c) for c in cands], val_nmse=best[0], **m)

  pick("luenberger", grids.luenberger_alpha,
       lambda a: lmi.design_gain(plant.Abar, plant.Cbar, plant.Gbar, plant.Qbar, a)[0],
       model_run)
  pick("luenberger_pp", grids.luenberger_pp_w0,
       lambda w: baselines.luenberger_pp_gain(plant, w), model_run)
  out["open_loop"] = evaluate(prob, model_run(np.zeros((plant.nz, plant.ny), np.float32),
                                              prob.data["test"]), "test")
  pick("high_gain", grids.high_gain_eps, lambda e: baselines.high_gain_gain(plant, e),
       model_run)
  pick("eso", grids.eso_w0, lambda w: baselines.eso_gain(plant, w), eso_run)
  p0 = jnp.square(prob.err_box) / 3.0
  ekf_run = _cached(("ekf", plant.name, plant.noise, prob.dt), lambda: jax.jit(
      lambda q, data: baselines.ekf_batch(plant, data, prob.dt, q, 1e-4, p0, prob.s_z)))
  pick("ekf", grids.ekf_qd, lambda q: q, lambda q, d: ekf_run(float(q), d))
  return out
