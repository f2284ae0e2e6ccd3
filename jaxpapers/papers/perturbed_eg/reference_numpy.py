"""Perturbed S-EG / S-OGDA (abstract 19): a plain NumPy loop of the same algorithm.

For the benchmark and the cross-check test (tests/test_perturbed_eg.py runs it noiseless
for 1000 steps on every problem and method against the JAX program): the iteration of
`methods.step` with constant steps (extrapolation gamma, update eta, regularisation mu),
written independently as a Python loop over steps with float64 NumPy arithmetic, for one
run at a time or vectorised over seeds. It is what one would write without JAX; the
benchmark reports seed-iterations per second against the vmapped scan.
"""
from __future__ import annotations

import time

import numpy as np

from jaxpapers.papers.perturbed_eg import schedules


def _project(kind, v, r):
  if kind == "simplex":
    u = -np.sort(-v, axis=-1)
    css = np.cumsum(u, axis=-1) - r
    k = np.arange(1, v.shape[-1] + 1)
    rho = np.sum(u - css / k > 0, axis=-1, keepdims=True)
    theta = np.take_along_axis(css, rho - 1, axis=-1) / rho
    return np.maximum(v - theta, 0.0)
  if kind == "box":
    return np.clip(v, -r, r)
  if kind == "ball":
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v * np.minimum(1.0, r / np.maximum(norm, 1e-30))
  return v


def run(spec, data, algorithm: str, eta: float, mu: float, sigma: float, steps: int,
        seeds: int | None, rng: np.random.Generator, gamma: float | None = None):
  """Runs `steps` iterations; seeds=None is one run (vectors), else a (seeds, d) batch.

  gamma is the extrapolation step (default eta: one timescale)."""
  gamma = eta if gamma is None else gamma
  A, P, Q, b, c, x0, y0 = (np.asarray(a, np.float64) for a in data[:7])
  shape = () if seeds is None else (seeds,)
  n = x0.shape[0]

  def oracle(x, y):
    gx = y @ A.T + b
    gy = c - x @ A
    if spec.quadratic:
      gx = gx + x @ P
      gy = gy + y @ Q
    xi = rng.standard_normal(shape + (n + y0.shape[0],))
    return gx + sigma * xi[..., :n] + mu * (x - x0), gy + sigma * xi[..., n:] + mu * (y - y0)

  x = np.broadcast_to(x0, shape + x0.shape).copy()
  y = np.broadcast_to(y0, shape + y0.shape).copy()
  gx, gy = oracle(x, y)
  for _ in range(steps):
    if algorithm == "eg":
      gx, gy = oracle(x, y)
    xh = _project(spec.x_set, x - gamma * gx, spec.radius)
    yh = _project(spec.y_set, y - gamma * gy, spec.radius)
    gx, gy = oracle(xh, yh)
    x = _project(spec.x_set, x - eta * gx, spec.radius)
    y = _project(spec.y_set, y - eta * gy, spec.radius)
  return x, y


def rates(spec, data, config, key: str, steps: int) -> dict:
  """Iterations/s of one run and seed-iterations/s of the seed-vectorised loop."""
  _, algorithm, perturbed, _ = schedules.lookup(key)
  eta_of, mu_of = schedules.horizon_constants(config.schedule, spec.lipschitz, perturbed)
  eta, mu = eta_of(steps), mu_of(steps)
  rng = np.random.default_rng(0)
  out = {}
  for name, seeds in (("single", None), ("batched", config.run.seeds)):
    t0 = time.perf_counter()
    run(spec, data, algorithm, eta, mu, config.noise.sigma, steps, seeds, rng)
    out[name] = steps * (seeds or 1) / (time.perf_counter() - t0)
  return out
