"""Two-stage training of LMI-certified neural network observers: a direct-LMI baseline
whose SDP carries the network's weights (issue 46 item 4).

`train.py`'s `direct` method alternates the certificate SDP (weights FIXED, only P and the
multipliers are variables) with penalty updates: the same SDP two-stage solves. Direct LMI
methods in the literature instead put the weights inside the SDP. Here the two weight
blocks that enter the certificate become SDP variables through changes of variables that
keep the LMI linear:

  Y  = P W2            (nz x h):  the -P W2 block
  Zy = Lam W1y         (h x ny):  K^T Lam / 2 = (Zy M)^T / 2, with K = W1y M,
                                  M = diag(1 / s_y) Cbar (observer.lmi_weights)

so F(P, mu, lam, Y, Zy) =
  [[A_L^T P + P A_L + alpha P + sum_j mu_j Q_j, P G,        -Y + (Zy M)^T / 2],
   [G^T P,                                      -diag(mu),  0                ],
   [(-Y + (Zy M)^T / 2)^T,                       0,          -Lam             ]]
is affine in all variables, and W2 = P^-1 Y, W1y = Lam^-1 Zy recover weights for which
lmi.py's certificate matrix at the returned (P, mu, lam) is exactly this F (lam >=
lam_min > 0 keeps Lam invertible). W1x and b do not enter the certificate (the tanh slope
bound holds for every pre-activation), so they stay free. Training (`run`): Adam on the
estimation loss alone, and every `sdp_every` updates (and at the start and the end) a
projection of the network's (W2, W1y) onto the certified set,
  min ||Y - P W2_t||_F + ||Zy - Lam W1y_t||_F  s.t.  F + eps I <= 0, I <= P,
      tr P <= kappa nz, 0 <= mu <= kappa, lam_min <= lam <= kappa
(the distance weighted by P and Lam, which is what keeps it convex); the projected
weights are certified by construction and re-checked by `lmi.verify` (NumPy) at float32.
The SDP has (nz + ny) h more variables than the certificate SDP (whose only
width-sized variable is lam), the same (nz + n_phi + h)-square LMI and two second-order
cones of sizes nz h + 1 and ny h + 1; both are host-side cvxpy + Clarabel (SCS on a
solver error).

  python -m jaxpapers.papers.neural_observer.direct_sdp --widths=16,32,64,128,256,512
times one solve of each SDP per width (README "Direct LMI with the weights in the SDP").
"""
from __future__ import annotations

import argparse
import json
import time

import cvxpy as cp
import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.neural_observer import lmi
from jaxpapers.papers.neural_observer import observer


class WeightSDP:
  """The projection SDP above, written with cvxpy parameters (A_L, W2_t, W1y_t) so one
  compiled problem is re-solved as the network changes (DPP)."""

  def __init__(self, nz, npp, h, ny, G, Q, M, alpha, eps=1e-2, kappa=1e3, lam_min=1e-3,
               solver="CLARABEL"):
    self.solver, self.M = solver, np.asarray(M, np.float64)
    self.A_L = cp.Parameter((nz, nz))
    self.W2t = cp.Parameter((nz, h))
    self.W1yt = cp.Parameter((h, ny))
    self.P = cp.Variable((nz, nz), symmetric=True)
    self.mu = cp.Variable(npp)
    self.lam = cp.Variable(h)
    self.Y = cp.Variable((nz, h))
    self.Zy = cp.Variable((h, ny))
    P = self.P
    ee = self.A_L.T @ P + P @ self.A_L + alpha * P
    for j in range(npp):
      ee = ee + self.mu[j] * Q[j]
    ep = P @ G
    ew = -self.Y + 0.5 * (self.Zy @ self.M).T
    F = cp.bmat([[ee, ep, ew],
                 [ep.T, -cp.diag(self.mu), np.zeros((npp, h))],
                 [ew.T, np.zeros((h, npp)), -cp.diag(self.lam)]])
    n = nz + npp + h
    cons = [0.5 * (F + F.T) + eps * np.eye(n) << 0, P >> np.eye(nz),
            cp.trace(P) <= kappa * nz, self.mu >= 0, self.mu <= kappa,
            self.lam >= lam_min, self.lam <= kappa]
    obj = (cp.norm(self.Y - P @ self.W2t, "fro")
           + cp.norm(self.Zy - cp.diag(self.lam) @ self.W1yt, "fro"))
    self.problem = cp.Problem(cp.Minimize(obj), cons)
    self.n_vars = sum(v.size for v in self.problem.variables())

  def solve(self, A_L, W2t, W1yt, time_limit: float | None = None) -> dict:
    """Projected weights (W2, W1y), the certificate (P, mu, lam) and the solve time.
    time_limit: Clarabel's wall-clock limit [s] (the width timing); a solve that hits
    it returns status "time_limit" and no weights."""
    self.A_L.value = np.asarray(A_L, np.float64)
    self.W2t.value = np.asarray(W2t, np.float64)
    self.W1yt.value = np.asarray(W1yt, np.float64)
    opts = {} if time_limit is None else dict(time_limit=float(time_limit))
    t0 = time.perf_counter()
    try:
      self.problem.solve(solver=self.solver, **opts)
    except cp.error.SolverError:
      if opts:
        return dict(status="time_limit", solve_s=time.perf_counter() - t0)
      self.problem.solve(solver="SCS")  # fallback; the NumPy check still decides
    solve_s = time.perf_counter() - t0
    if self.P.value is None:
      if opts:
        return dict(status=self.problem.status, solve_s=solve_s)
      raise RuntimeError(f"weight SDP failed: status {self.problem.status}")
    P, lam = np.array(self.P.value), np.array(self.lam.value)
    return dict(W2=np.linalg.solve(P, np.array(self.Y.value)),
                W1y=np.array(self.Zy.value) / lam[:, None], P=P,
                mu=np.maximum(np.array(self.mu.value), 0.0), lam=np.maximum(lam, 0.0),
                dist=float(self.problem.value), status=self.problem.status,
                solve_s=solve_s)


def make_sdp(trainer, solver="CLARABEL") -> WeightSDP:
  prob, plant = trainer.prob, trainer.prob.plant
  M = np.asarray(plant.Cbar) / np.asarray(prob.s_y)[:, None]
  return WeightSDP(plant.nz, plant.Gbar.shape[1], trainer.width, plant.ny, plant.Gbar,
                   plant.Qbar, M, prob.alpha, eps=trainer.cfg.lmi_margin, solver=solver)


def project(sdp: WeightSDP, trainer, params):
  """params with (W2, W1y) replaced by their projection (float32, as the network runs),
  the SDP's answer and the NumPy verification of the float32 weights."""
  out = sdp.solve(trainer.A_L, params["W2"], params["W1y"])
  new = dict(params, W2=jnp.asarray(out["W2"], jnp.float32),
             W1y=jnp.asarray(out["W1y"], jnp.float32))
  W2, K = trainer.lmi_weights(new)
  check = lmi.verify(out, trainer.A_L, trainer.G, W2, K, trainer.Q, trainer.prob.alpha)
  return new, out, check


def run(trainer, seed: int, lr: float, prob=None, sdp_solver="CLARABEL",
        total_steps: int | None = None):
  """Direct LMI with the weights in the SDP: Adam on the estimation loss (the
  unconstrained network's compiled update chunk), projected onto the certified set every
  sdp_every updates, at the start and at the end: total_steps / sdp_every + 1 SDPs, the
  count of train.py's `direct`. Returns (params, trace, summary) like
  train.Trainer.run: the best-on-validation projected (certified) network, None if no
  projection verified. Wall-clock as in Trainer.run (update chunks compiled ahead of
  time; the SDP's cvxpy canonicalisation at its first solve is inside, as there)."""
  cfg, prob = trainer.cfg, trainer.problem_for(prob)  # L is compiled into the chunks
  total_steps = total_steps or cfg.total_steps
  tr, va = prob.data["train"], prob.data["val"]
  params, R = trainer.init(seed)
  key = jax.random.fold_in(jax.random.PRNGKey(seed), 7)
  s1 = ((params, R), trainer.opt_init((params, R), lr))
  t0 = time.perf_counter()
  sdp = make_sdp(trainer, sdp_solver)
  trace, keep, keep_val, t_cert, sdp_s, step = [], None, np.inf, np.nan, 0.0, 0
  keep_margin = np.nan
  while True:
    (params, R), opt_state = s1
    new, out, check = project(sdp, trainer, params)
    sdp_s += out["solve_s"]
    val = float(trainer.val_nmse(new, va))
    now = time.perf_counter() - t0
    trace.append(dict(step=step, time_s=now, valid=bool(check["valid"]),
                      margin=check["margin"], val_nmse=val, sdp_s=out["solve_s"],
                      dist=out["dist"]))
    if check["valid"]:
      t_cert = now if np.isnan(t_cert) else t_cert
      if val < keep_val:
        keep, keep_val, keep_margin = new, val, check["margin"]
    if step >= total_steps:
      break
    # Adam continues from the projected weights (the projection is the method's step)
    s1, _ = trainer.chunk1(((new, R), opt_state), jax.random.fold_in(key, step), 0.0, tr)
    step += cfg.sdp_every
  # margin_proj: -lambda_max(F) of the kept projection (>= eps by construction); not
  # the uncapped optimum the other LMI methods report as `margin`.
  summary = dict(method="direct_sdp", width=trainer.width, seed=seed,
                 total_s=time.perf_counter() - t0, certified=keep is not None,
                 time_to_cert=t_cert, sdp_solves=len(trace), sdp_s=sdp_s,
                 best_val_nmse=float(keep_val), last_val_nmse=trace[-1]["val_nmse"],
                 capped=False, steps_done=step, stage1_s=np.nan,
                 sdp_vars=sdp.n_vars, margin_proj=keep_margin)
  return keep, trace, summary


def time_solves(plant_name="pendulum", widths=(16, 32, 64, 128, 256, 512), seed=0,
                max_s=300.0, out_scale=1.0, gain_alpha=2.0):
  """One solve of the certificate SDP (weights fixed: what two-stage and `direct` solve)
  and of the weight SDP at each width, on random networks (out_scale 1: large enough
  that the projection moves them). Each SDP is built and solved once (cvxpy's
  canonicalisation included: `*_first_s`) and re-solved at a second random network
  (`*_s`: what every later round of training pays). Each solve is capped at max_s
  seconds (Clarabel's time limit); widths stop after the first one where a solve hit
  it. gain_alpha: L's decay (2.0 = the pendulum's choice in the study)."""
  import ml_collections
  from jaxpapers.papers.neural_observer import train
  cfg = ml_collections.ConfigDict(dict(alpha_gain=gain_alpha, err_scale=0.5, n_train=1,
                                       n_eval=1, steps=2, dt=0.04, alpha=0.1))
  prob = train.build_problem(cfg, plant_name, seed)
  plant = prob.plant
  A_L = plant.Abar - prob.L @ plant.Cbar
  M = np.asarray(plant.Cbar) / np.asarray(prob.s_y)[:, None]
  npp, rows = plant.Gbar.shape[1], []
  for h in widths:
    nets = [observer.init_params(jax.random.PRNGKey(seed + k), plant.nz, plant.ny, h,
                                 out_scale) for k in range(2)]
    row = dict(plant=plant_name, width=h, lmi_size=plant.nz + npp + h)
    t = time.perf_counter()
    cert = lmi.CertificateSDP(plant.nz, npp, h, plant.Gbar, plant.Qbar, prob.alpha)
    row["cert_vars"] = sum(v.size for v in cert.problem.variables())
    for k, p in enumerate(nets):
      W2, K = (np.asarray(a, np.float64) for a in observer.lmi_weights(p, plant.Cbar,
                                                                        prob.s_y))
      c = cert.solve(A_L, W2, K, time_limit=max_s)
      row["cert_first_s" if k == 0 else "cert_s"] = (time.perf_counter() - t if k == 0
                                                     else c["solve_s"])
      row[f"cert_status_{k}"], row[f"cert_t_{k}"] = c["status"], c["t"]
    t = time.perf_counter()
    wsdp = WeightSDP(plant.nz, npp, h, plant.ny, plant.Gbar, plant.Qbar, M, prob.alpha)
    row["weight_vars"] = wsdp.n_vars
    for k, p in enumerate(nets):
      o = wsdp.solve(A_L, np.asarray(p["W2"]), np.asarray(p["W1y"]), time_limit=max_s)
      row["weight_first_s" if k == 0 else "weight_s"] = (time.perf_counter() - t if k == 0
                                                         else o["solve_s"])
      row[f"weight_status_{k}"] = o["status"]
      if "W2" in o:
        new = dict(p, W2=jnp.asarray(o["W2"], jnp.float32),
                   W1y=jnp.asarray(o["W1y"], jnp.float32))
        W2, K = (np.asarray(a, np.float64) for a in observer.lmi_weights(
            new, plant.Cbar, prob.s_y))
        row[f"weight_valid_{k}"] = bool(lmi.verify(o, A_L, plant.Gbar, W2, K, plant.Qbar,
                                                   prob.alpha)["valid"])
    row["ratio"] = row["weight_s"] / row["cert_s"]
    rows.append(row)
    print(json.dumps(row), flush=True)
    statuses = [row[f"{w}_status_{k}"] for w in ("cert", "weight") for k in range(2)]
    if any(s not in ("optimal", "optimal_inaccurate") for s in statuses):
      break
  return rows


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--widths", default="16,32,64,128,256,512")
  ap.add_argument("--plant", default="pendulum")
  ap.add_argument("--max_s", type=float, default=300.0, help="time limit of one solve [s]")
  ap.add_argument("--out", default="", help="write the rows as JSON here")
  a = ap.parse_args(argv)
  try:
    widths = [int(w) for w in a.widths.split(",")]
  except ValueError:
    raise SystemExit(f"--widths must be comma-separated integers, got {a.widths!r}")
  if min(widths) < 1:
    raise SystemExit(f"--widths must be positive, got {a.widths!r}")
  rows = time_solves(a.plant, widths, max_s=a.max_s)
  if a.out:
    with open(a.out, "w") as f:
      json.dump(rows, f, indent=1)


if __name__ == "__main__":
  main()
