"""Learned autoscaling of PD-disaggregated LLM serving (abstract 12): workloads.

Arrival-rate, prompt-length and output-length processes that change over time, fitted to
the published statistics of the Azure LLM inference trace 2023 (Splitwise, Patel et al.,
ISCA 2024), as quoted in issue 39:

  conversation: ~5.5 requests/s, interarrival CV ~1.1, prompt tokens mean 1155 / median
                1020 / p99 4142, output tokens mean 211 / median 129 / p99 601
  code:         very bursty (CV ~13), prompt median ~1470, output median ~13

Arrivals: a gamma renewal process with the trace's CV (shape 1 / CV^2) run in operational
time and mapped through the inverse cumulative intensity of a time-varying rate lambda(t),
so the rate follows lambda(t) and the burstiness the CV.
Lengths: a piecewise log-linear quantile function through knots at q = 0, 0.5, 0.9, 0.99,
1: the published median and p99, a lower end of median / 8, the context cap at q = 1, and
the q = 0.9 knot solved so that the mean matches the published mean (a lognormal cannot
match mean, median and p99 together: it misses the p99 or the mean by 25-40%). For code
only medians are published: its mean and p99 are ASSUMED to scale with the median as in
conversation (README, Choices).

Families (`FAMILIES`): conversation (stationary), code (stationary, CV 13), diurnal (a
day's cycle compressed into the episode, rate x0.4..x1.6), bursts (rate x3 bursts of
30-90 s, ~1 per 5 min, and prompt-length drift x0.7 -> x1.4 over the episode).
"""
from __future__ import annotations

import math

import numpy as np

AZURE = {
    "conversation": dict(rate=5.5, cv=1.1, prompt=(1155.0, 1020.0, 4142.0),
                         output=(211.0, 129.0, 601.0)),
    # Only medians (1470 / 13) and the CV are published; mean and p99 assumed (see above).
    "code": dict(rate=5.5, cv=13.0, prompt=(1470 * 1155 / 1020, 1470.0, 1470 * 4142 / 1020),
                 output=(13 * 211 / 129, 13.0, 13 * 601 / 129)),
}
FAMILIES = ("conversation", "code", "diurnal", "bursts")
MAX_CONTEXT = 8192
Q = np.array([0.0, 0.5, 0.9, 0.99, 1.0])


def _seg_mean(q0, q1, x0, x1):
  """Integral of the log-linear quantile between (q0, x0) and (q1, x1)."""
  if abs(x1 - x0) < 1e-9 * max(x0, 1.0):
    return (q1 - q0) * x0
  return (q1 - q0) * (x1 - x0) / math.log(x1 / x0)


def quantile_knots(mean, median, p99, top):
  """Knot values at Q whose log-linear quantile function has this median, p99 and mean."""
  lo = median / 8.0

  def mean_of(x90):
    xs = [lo, median, x90, p99, top]
    return sum(_seg_mean(Q[i], Q[i + 1], xs[i], xs[i + 1]) for i in range(4))

  a, b = median, p99
  if not mean_of(a) <= mean <= mean_of(b):
    raise ValueError(f"no monotone quantile function has median {median}, p99 {p99} and "
                     f"mean {mean} (means span {mean_of(a):.0f}..{mean_of(b):.0f})")
  for _ in range(80):
    m = 0.5 * (a + b)
    a, b = (m, b) if mean_of(m) < mean else (a, m)
  return np.array([lo, median, 0.5 * (a + b), p99, top])


def sample_lengths(rng, n, stats, top, scale=None):
  """n lengths from the fitted quantile function; `scale` multiplies each (drift)."""
  knots = quantile_knots(*stats, top=top)
  u = rng.uniform(size=n)
  x = np.exp(np.interp(u, Q, np.log(knots)))
  if scale is not None:
    x = x * scale
  return np.clip(np.round(x), 1, top)


def _bursts(rng, t, duration):
  """Rate multiplier with x3 bursts of 30-90 s, about one per 300 s."""
  mult = np.ones_like(t)
  for _ in range(rng.poisson(duration / 300.0)):
    s = rng.uniform(0, duration)
    mult = np.where((t >= s) & (t < s + rng.uniform(30, 90)), 3.0, mult)
  return mult


def rate_profile(family, t, duration, rng):
  if family in ("conversation", "code"):
    return np.ones_like(t)
  if family == "diurnal":  # trough at the start, peak half-way: a compressed day
    return 1.0 - 0.6 * np.cos(2 * np.pi * t / duration)
  if family == "bursts":
    return _bursts(rng, t, duration)
  raise ValueError(f"unknown workload family {family!r}; known: {', '.join(FAMILIES)}")


def renewal_arrivals(rng, rate_fn_grid, grid, cv):
  """Gamma-renewal arrivals (CV `cv`) with intensity rate_fn_grid on `grid` (seconds)."""
  dtg = np.diff(grid)
  lam_cum = np.concatenate([[0.0], np.cumsum(0.5 * (rate_fn_grid[1:] + rate_fn_grid[:-1]) * dtg)])
  total = lam_cum[-1]
  shape = 1.0 / cv ** 2
  n_guess = int(total * 1.5 + 20 * cv * math.sqrt(total) + 100)
  u = np.cumsum(rng.gamma(shape, 1.0 / shape, size=n_guess))
  while u[-1] < total:  # rare: draw more
    u = np.concatenate([u, u[-1] + np.cumsum(rng.gamma(shape, 1.0 / shape, size=n_guess))])
  # The first point at a uniformly random phase of a renewal interval (stationary start).
  u = u - rng.uniform() * u[0]
  u = u[(u >= 0) & (u < total)]
  return np.interp(u, lam_cum, grid)


def generate(family: str, duration: float, seed: int, rate_scale: float = 1.0):
  """(arrival s, prompt tokens, output tokens) of one synthetic trace, NumPy float64."""
  if family not in FAMILIES:
    raise ValueError(f"unknown workload family {family!r}; known: {', '.join(FAMILIES)}")
  rng = np.random.default_rng([seed, FAMILIES.index(family)])
  base = AZURE["code" if family == "code" else "conversation"]
  grid = np.linspace(0.0, duration, int(duration) + 1)
  lam = base["rate"] * rate_scale * rate_profile(family, grid, duration, rng)
  arr = renewal_arrivals(rng, lam, grid, base["cv"])
  n = len(arr)
  drift = None
  if family == "bursts":
    drift = 0.7 + 0.7 * arr / duration
  prompt = sample_lengths(rng, n, base["prompt"], MAX_CONTEXT - 1024, scale=drift)
  output = sample_lengths(rng, n, base["output"], 1024)
  prompt = np.minimum(prompt, MAX_CONTEXT - output)
  return arr, prompt, output


def stack(traces, window: int, n_max: int | None = None):
  """Pads a list of (arr, prompt, output) to one length and stacks them: [B, N + window]."""
  n_max = n_max or max(len(t[0]) for t in traces)
  out = []
  for arr, p, o in traces:
    if len(arr) > n_max:
      raise ValueError(f"trace has {len(arr)} requests, more than n_max={n_max}")
    pad = n_max + window - len(arr)
    out.append((np.concatenate([arr, np.full(pad, 1e9)]),
                np.concatenate([p, np.ones(pad)]), np.concatenate([o, np.full(pad, 2.0)])))
  return tuple(np.stack([t[i] for t in out]).astype(np.float32) for i in range(3))


def describe(arr, prompt, output):
  """The published statistics of a trace, for the README's fit table."""
  gaps = np.diff(arr)
  return dict(requests=len(arr), rate=len(arr) / max(arr[-1] - arr[0], 1e-9),
              cv=float(gaps.std() / gaps.mean()) if len(gaps) > 1 else float("nan"),
              prompt_mean=float(prompt.mean()), prompt_median=float(np.median(prompt)),
              prompt_p99=float(np.percentile(prompt, 99)), output_mean=float(output.mean()),
              output_median=float(np.median(output)),
              output_p99=float(np.percentile(output, 99)))
