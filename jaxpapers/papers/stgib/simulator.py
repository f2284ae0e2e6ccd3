"""A road-network traffic simulator whose causal dependencies are known at every step.

Nodes are sensors on a grid of roads; every road segment between neighbours is a pair of
directed edges j -> i with a delay d_e (steps a disturbance needs to travel; 3-6 by
default, so that what an edge carries at the end of an input window arrives inside the
forecast horizon and is not yet in the destination's own history) and a weight w_e. The speed deviation from the node's daily profile follows a gated graph VAR

    r_t[i] = rho r_{t-1}[i] + sum_{e = j->i} g_e(t) w_e(t) r_{t-d_e}[j] + shock_t[i] + sigma eps

and speed_t[i] = free_i - dip_i * rush(t) + scale * r_t[i]. The gate g_e(t) in {0, 1} is
the ground truth: node j's value at t - d_e reaches i at t only while g_e(t) = 1, so an
intervention on what edge e carries at a step with g_e = 0 changes nothing (tested).

Gates switch with the regime of the day (`markov` generator): at night only a few edges
couple, in the morning rush the inbound edges (towards the centre), in the evening the
outbound ones, at midday a random third; closures cut an edge for hours; incidents are
shocks at one node that propagate along the open, active edges with their delays.
The `flicker` generator keeps each edge's marginal activity but redraws every gate
independently at every step: it breaks the persistence that STGIB's Markov prior over
masks assumes, so the study can say what the simulator decided and what the method did.
The `switch` generator keeps each edge's marginal activity too, but every gate is its own
two-state Markov chain whose open spells last `dwell` steps on average (8 by default,
40 min): gates change inside a one-hour window yet persist over the 5-30 min a value
travels, the setting where a recursive mask prior could help (the markov generator's
gates hardly change inside a window; flicker's cannot be forecast).

Steps are 5 minutes (288 a day), as in METR-LA / PEMS-BAY.
"""
from __future__ import annotations

import dataclasses

import numpy as np

STEPS_PER_DAY = 288
GENERATORS = ("markov", "flicker", "switch")


@dataclasses.dataclass(frozen=True)
class Graph:
  n: int
  src: np.ndarray  # [E] int32
  dst: np.ndarray  # [E] int32
  coords: np.ndarray  # [N, 2] for plots


def grid_graph(rows: int, cols: int) -> Graph:
  """Both directions of every road segment between grid neighbours."""
  src, dst = [], []
  idx = lambda r, c: r * cols + c
  for r in range(rows):
    for c in range(cols):
      for dr, dc in ((0, 1), (1, 0)):
        rr, cc = r + dr, c + dc
        if rr < rows and cc < cols:
          src += [idx(r, c), idx(rr, cc)]
          dst += [idx(rr, cc), idx(r, c)]
  coords = np.array([(c, -r) for r in range(rows) for c in range(cols)], np.float32)
  return Graph(rows * cols, np.array(src, np.int32), np.array(dst, np.int32), coords)


def regime_of(t: np.ndarray) -> np.ndarray:
  """0 night, 1 morning rush, 2 midday, 3 evening rush, from the 5-minute step index."""
  h = (t % STEPS_PER_DAY) * 24.0 / STEPS_PER_DAY
  return np.select([(h >= 6.5) & (h < 9.5), (h >= 9.5) & (h < 15.5), (h >= 15.5) & (h < 19)],
                   [1, 2, 3], 0)


def rush(t: np.ndarray) -> np.ndarray:
  """The daily congestion profile in [0, 1]: two smooth peaks (8:00, 17:15)."""
  h = (t % STEPS_PER_DAY) * 24.0 / STEPS_PER_DAY
  return np.exp(-0.5 * ((h - 8.0) / 1.0) ** 2) + np.exp(-0.5 * ((h - 17.25) / 1.2) ** 2)


@dataclasses.dataclass
class Sim:
  graph: Graph
  speed: np.ndarray  # [T, N] mph
  r: np.ndarray  # [T, N] deviation
  gate: np.ndarray  # [T, E] ground-truth causal gates (after closures)
  delay: np.ndarray  # [E]
  weight: np.ndarray  # [E] relative weights (normalized over the active in-edges)
  closed: np.ndarray  # [T, E] bool
  incidents: list  # (t, node, length)
  distractor: np.ndarray  # [T, N] a non-causal sensor channel
  t0: int = 0
  rho: float = 0.3
  coupling: float = 0.65


def _regime_sets(graph: Graph, rng) -> np.ndarray:
  """[4, E] bool: the edges each regime activates."""
  centre = graph.coords.mean(0)
  d = np.linalg.norm(graph.coords - centre, axis=1)
  inbound = d[graph.dst] < d[graph.src]  # towards the centre
  outbound = d[graph.dst] > d[graph.src]
  e = len(graph.src)
  night = rng.random(e) < 0.1
  am = inbound & (rng.random(e) < 0.85)
  mid = rng.random(e) < 0.33
  pm = outbound & (rng.random(e) < 0.85)
  return np.stack([night, am, mid, pm])


def _switching_gates(rate, steps, dwell, rng):
  """[steps, E] bool: per edge a two-state Markov chain with stationary P(open) = rate and
  mean open spell `dwell` steps (leave 1 -> 0 with b = 1 / dwell, enter with
  a = b rate / (1 - rate), capped at 1); started from its stationary law."""
  rate = np.clip(rate, 1e-3, 1 - 1e-3)
  b = np.full_like(rate, 1.0 / dwell)
  a = np.minimum(b * rate / (1 - rate), 1.0)
  u = rng.random((steps, len(rate)))
  g = np.zeros((steps, len(rate)), bool)
  g[0] = u[0] < rate
  for t in range(1, steps):
    g[t] = np.where(g[t - 1], u[t] >= b, u[t] < a)
  return g


def simulate(graph: Graph, steps: int, seed: int, generator: str = "markov",
             rho: float = 0.3, coupling: float = 0.65, sigma: float = 0.15,
             incident_rate: float = 0.06, closure_rate: float = 0.5,
             delays: tuple = (3, 6), incident_len: tuple = (3, 12),
             override: np.ndarray | None = None, dwell: float = 8.0) -> Sim:
  """Simulates `steps` 5-minute steps.

  override: optional [steps, E] array; where finite, it replaces the value edge e carries
  at step t (node src's deviation d_e steps earlier). All randomness is drawn before the
  dynamics run, so an override changes the trajectory only through the dynamics.
  """
  if generator not in GENERATORS:
    raise ValueError(f"generator {generator!r}; known: {', '.join(GENERATORS)}")
  rng = np.random.default_rng(seed)
  n, e = graph.n, len(graph.src)
  delay = rng.integers(delays[0], delays[1] + 1, size=e)  # travel time in 5-minute steps
  raw = rng.uniform(0.5, 1.0, size=e)
  weight = raw  # relative weights; normalized per step over the active in-edges below
  sets = _regime_sets(graph, rng)
  t = np.arange(steps)
  reg = regime_of(t)
  gate = sets[reg]  # [T, E]
  if generator == "flicker":
    gate = rng.random((steps, e)) < gate.mean(0, keepdims=True)  # each edge's own rate
  elif generator == "switch":
    gate = _switching_gates(gate.mean(0), steps, dwell, rng)
  # Closures: about closure_rate per day, each cuts one edge (both directions) for 2-6 h.
  closed = np.zeros((steps, e), bool)
  for _ in range(rng.poisson(closure_rate * steps / STEPS_PER_DAY)):
    k = rng.integers(e)
    a = rng.integers(steps)
    ln = rng.integers(24, 73)
    both = (graph.src == graph.dst[k]) & (graph.dst == graph.src[k])
    closed[a:a + ln, k] = True
    closed[a:a + ln, both] = True
  gate = gate & ~closed
  shock = np.zeros((steps, n))
  incidents = []
  for _ in range(rng.poisson(incident_rate * steps)):
    a, node = rng.integers(steps), rng.integers(n)
    ln = rng.integers(incident_len[0], incident_len[1] + 1)
    shock[a:a + ln, node] -= rng.uniform(3.0, 6.0)
    incidents.append((int(a), int(node), int(ln)))
  eps = sigma * rng.standard_normal((steps, n))
  distractor = np.zeros((steps, n))
  dnoise = rng.standard_normal((steps, n))
  r = np.zeros((steps, n))
  for s in range(steps):
    carried = np.where(s - delay >= 0, r[np.maximum(s - delay, 0), graph.src], 0.0)
    if override is not None:
      o = override[s]
      carried = np.where(np.isfinite(o), o, carried)
    # Normalized over the in-edges active now, so that rho + sum of incoming weights =
    # rho + coupling < 1 (a contraction whatever the gates: a stable process) and one open
    # edge carries the whole coupling: the causal edges matter for the forecast.
    act = np.zeros(n)
    np.add.at(act, graph.dst, np.where(gate[s], weight, 0.0))
    w_t = coupling * weight / np.maximum(act[graph.dst], 1e-9)
    msg = np.where(gate[s], w_t * carried, 0.0)
    inflow = np.zeros(n)
    np.add.at(inflow, graph.dst, msg)
    prev = r[s - 1] if s else np.zeros(n)
    r[s] = rho * prev + inflow + shock[s] + eps[s]
    distractor[s] = (0.9 * distractor[s - 1] if s else 0.0) + 0.45 * dnoise[s]
  free = rng.uniform(60.0, 70.0, size=n)
  dip = rng.uniform(10.0, 25.0, size=n)
  speed = free[None] - dip[None] * rush(t)[:, None] + 4.0 * r
  return Sim(graph, speed.astype(np.float32), r, gate, delay, weight, closed, incidents,
             distractor.astype(np.float32), rho=rho, coupling=coupling)


def oracle_forecast(sim: Sim, t_last: np.ndarray, t_out: int, t_in: int = 12,
                    cut: np.ndarray | None = None, graph: bool = True) -> np.ndarray:
  """[W, t_out, N] deviations r predicted by the true gated VAR from the true past.

  The oracle knows the gates, delays and weights and the deviations up to t_last; future
  noise and shocks are set to their mean 0. cut [W, t_in, E] (bool) zeroes what edge e
  carries from input step tau of the window (the fidelity protocol's removal applied to
  the data-generating process); graph=False drops every inflow (own history only). It is
  the positive control of the study: how much the causal edges can matter to a forecast.
  """
  g = sim.graph
  n, e = g.n, len(g.src)
  out = np.zeros((len(t_last), t_out, n))
  for i, t in enumerate(t_last):
    ext = np.concatenate([sim.r[:t + 1], np.zeros((t_out, n))])
    for h in range(1, t_out + 1):
      u = t + h
      frm = u - sim.delay
      carried = ext[np.maximum(frm, 0), g.src]
      if cut is not None:
        tau = frm - (t - t_in + 1)
        inwin = (tau >= 0) & (tau < t_in)
        c = np.zeros(e, bool)
        c[inwin] = cut[i][tau[inwin], np.arange(e)[inwin]]
        carried = np.where(c, 0.0, carried)
      gate = sim.gate[min(u, len(sim.gate) - 1)] & graph
      act = np.zeros(n)
      np.add.at(act, g.dst, np.where(gate, sim.weight, 0.0))
      w_t = sim.coupling * sim.weight / np.maximum(act[g.dst], 1e-9)
      inflow = np.zeros(n)
      np.add.at(inflow, g.dst, np.where(gate, w_t * carried, 0.0))
      ext[u] = sim.rho * ext[u - 1] + inflow
    out[i] = ext[t + 1:t + 1 + t_out]
  return out


def oracle_occlusion(sim: Sim, t_last: np.ndarray, t_out: int = 12,
                     t_in: int = 12) -> np.ndarray:
  """[W, t_in, E] occlusion explanation of the TRUE model: for every (input step, edge)
  entry, the mean |change| of oracle_forecast when that one entry is cut (the fidelity
  protocol's removal, one entry at a time). The positive control of the edge AUROC: a
  perfect explainer of the data-generating process."""
  e = len(sim.graph.src)
  base = oracle_forecast(sim, t_last, t_out, t_in)
  out = np.zeros((len(t_last), t_in, e))
  for tau in range(t_in):
    for k in range(e):
      cut = np.zeros((len(t_last), t_in, e), bool)
      cut[:, tau, k] = True
      out[:, tau, k] = np.abs(oracle_forecast(sim, t_last, t_out, t_in, cut=cut)
                              - base).mean((1, 2))
  return out


def pending_mask(sim: Sim, t_last: np.ndarray, t_in: int) -> np.ndarray:
  """[W, t_in, E] bool: the entries whose value arrives after the window's end
  (tau + d_e > t_last): the only ones whose gate the labels can call causal."""
  taus = t_last[:, None] - t_in + 1 + np.arange(t_in)[None]
  return (taus[..., None] + sim.delay[None, None]) > t_last[:, None, None]


def window_truth(sim: Sim, t_last: np.ndarray, t_in: int, pending: bool = True) -> np.ndarray:
  """[W, t_in, E] ground truth of the edge explanation of windows ending at t_last.

  Input step tau's value of node src reaches dst at tau + d_e, and does so only if the gate
  is open then. pending=True (the study's labels since the fifth run): the entry is causal
  iff g_e(tau + d_e) = 1 AND tau + d_e is after the window's end (tau + d_e > t_last). A
  value that arrived inside the window is already part of the destination's own observed
  history: the true model (oracle_forecast) reads r up to t_last and never needs it again,
  so cutting it changes no forecast, and labelling it causal caps even a perfect
  explainer of the true model at AUROC ~0.69 (62% of the old positives were such entries).
  pending=False: the former labels, g_e(tau + d_e) whatever the arrival time.
  """
  taus = t_last[:, None] - t_in + 1 + np.arange(t_in)[None]  # [W, t_in]
  arrive = taus[..., None] + sim.delay[None, None]  # [W, t_in, E]
  gate = sim.gate[np.minimum(arrive, len(sim.gate) - 1), np.arange(len(sim.delay))[None, None]]
  return gate & pending_mask(sim, t_last, t_in) if pending else gate
