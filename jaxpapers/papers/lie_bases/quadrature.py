"""Neural orthonormal bases as paths on the orthogonal group (arXiv 2605.19959): quadrature.

A function on the domain is stored by its values at quadrature nodes; with weights w the
discrete inner product sum_j w_j f(x_j) g(x_j) is the continuous L2 one up to the
quadrature error (Gauss-Legendre: exact for polynomials of degree < 2N). We work in the
weighted coordinates f~ = W^{1/2} f, in which that inner product is the Euclidean one and
an orthonormal family of m functions is a matrix with U~^T U~ = I.

Domains: an interval [lo, hi] (Gauss-Legendre) and the square [lo, hi]^2 (tensor product
of Gauss-Legendre rules, nodes flattened row-major). Reference bases: the periodic
Fourier basis and normalized Legendre polynomials, ordered by frequency / degree (on the
square: products ordered by total frequency). `legendre_interp` maps values at nodes to
values (and derivatives) anywhere: the spectral interpolant, which the Stiefel baseline
needs to be evaluated off its grid and the operator targets need for u'.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Grid:
  """Quadrature nodes x (N, d), weights w (N,), the domain [lo, hi]^d and n per axis."""
  x: np.ndarray
  w: np.ndarray
  lo: float
  hi: float
  n: int  # nodes per axis

  @property
  def dim(self) -> int:
    return self.x.shape[1]

  @property
  def size(self) -> int:
    return self.x.shape[0]

  @property
  def sqrt_w(self) -> np.ndarray:
    return np.sqrt(self.w)


def gauss_legendre(n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
  if n < 2:
    raise ValueError(f"need at least 2 quadrature nodes per axis, got {n}")
  if not hi > lo:
    raise ValueError(f"empty interval [{lo}, {hi}]")
  s, w = np.polynomial.legendre.leggauss(n)
  half = 0.5 * (hi - lo)
  return lo + (s + 1.0) * half, w * half


def make_grid(n: int, lo: float, hi: float, dim: int = 1) -> Grid:
  """Gauss-Legendre rule on [lo, hi] (dim 1) or its tensor product on the square (dim 2)."""
  x1, w1 = gauss_legendre(n, lo, hi)
  if dim == 1:
    return Grid(x1[:, None], w1, lo, hi, n)
  if dim == 2:
    xa, xb = np.meshgrid(x1, x1, indexing="ij")
    return Grid(np.stack([xa.ravel(), xb.ravel()], -1), np.outer(w1, w1).ravel(), lo, hi, n)
  raise ValueError(f"domain dimension must be 1 (interval) or 2 (square), got {dim}")


def _fourier_1d(x: np.ndarray, k: int, lo: float, hi: float) -> np.ndarray:
  """k-th periodic Fourier function on [lo, hi]: 1, cos 1, sin 1, cos 2, ... (L2-normalized)."""
  length = hi - lo
  if k == 0:
    return np.full_like(x, 1.0 / np.sqrt(length))
  freq = (k + 1) // 2
  arg = 2 * np.pi * freq * (x - lo) / length
  return np.sqrt(2.0 / length) * (np.cos(arg) if k % 2 == 1 else np.sin(arg))


def legendre_1d(x: np.ndarray, degree: int, lo: float, hi: float,
                derivative: bool = False) -> np.ndarray:
  """Normalized Legendre polynomials p_0..p_{degree-1} on [lo, hi] at x: (len(x), degree).

  Three-term recurrence in float64 (stable for the degrees used here); with
  `derivative` the x-derivatives from P'_{n+1} = P'_{n-1} + (2n+1) P_n.
  """
  length = hi - lo
  s = 2.0 * (np.asarray(x, np.float64) - lo) / length - 1.0
  p = np.zeros((s.size, degree))
  dp = np.zeros((s.size, degree))
  p[:, 0] = 1.0
  if degree > 1:
    p[:, 1] = s
    dp[:, 1] = 1.0
  for k in range(1, degree - 1):
    p[:, k + 1] = ((2 * k + 1) * s * p[:, k] - k * p[:, k - 1]) / (k + 1)
    dp[:, k + 1] = dp[:, k - 1] + (2 * k + 1) * p[:, k]
  norm = np.sqrt((2 * np.arange(degree) + 1) / length)
  return (dp * norm * (2.0 / length)) if derivative else p * norm


def _order_2d(m: int) -> list[tuple[int, int]]:
  """The m lowest (i, j) index pairs by total frequency, ties by (max, i)."""
  freq = lambda k: (k + 1) // 2  # noqa: E731
  pairs = [(i, j) for i in range(2 * m + 2) for j in range(2 * m + 2)]
  pairs.sort(key=lambda p: (freq(p[0]) + freq(p[1]), max(p), p[0]))
  return pairs[:m]


def reference_basis(grid: Grid, kind: str, m: int) -> np.ndarray:
  """Values (N, m) of the first m reference functions ('fourier' or 'legendre')."""
  if kind not in ("fourier", "legendre"):
    raise ValueError(f"unknown reference basis {kind!r}; known: fourier, legendre")
  if m > grid.size:
    raise ValueError(f"{m} basis functions need at least {m} nodes, got {grid.size}")

  def one_d(x, count):
    if kind == "fourier":
      return np.stack([_fourier_1d(x, k, grid.lo, grid.hi) for k in range(count)], -1)
    return legendre_1d(x, count, grid.lo, grid.hi)

  if grid.dim == 1:
    return one_d(grid.x[:, 0], m)
  pairs = _order_2d(m)
  top = max(max(p) for p in pairs) + 1
  fa, fb = one_d(grid.x[:, 0], top), one_d(grid.x[:, 1], top)
  if kind == "legendre":  # order Legendre products by total degree, not Fourier frequency
    pairs = sorted(((i, j) for i in range(m) for j in range(m)),
                   key=lambda p: (p[0] + p[1], p[0]))[:m]
    top = m
    fa, fb = one_d(grid.x[:, 0], top), one_d(grid.x[:, 1], top)
  return np.stack([fa[:, i] * fb[:, j] for i, j in pairs], -1)


def legendre_interp(grid: Grid, points: np.ndarray, derivative: int | None = None
                    ) -> np.ndarray:
  """Matrix M (P, N): values at `points` (P, d) of the degree-(n-1) interpolant of node values.

  Coefficients come from the discrete Legendre transform c = P^T W u (exact for degree
  < n); `derivative` = axis index to differentiate along instead of evaluating.
  """
  n = grid.n
  x1, w1 = gauss_legendre(n, grid.lo, grid.hi)
  p_nodes = legendre_1d(x1, n, grid.lo, grid.hi)
  analysis = p_nodes.T * w1[None, :]  # (n coeffs, n nodes)
  mats = []
  for axis in range(grid.dim):
    deriv = derivative == axis
    mats.append(legendre_1d(points[:, axis], n, grid.lo, grid.hi, derivative=deriv)
                @ analysis)  # (P, n)
  if grid.dim == 1:
    return mats[0]
  # Tensor product: value at point p = sum_{ij} A_pi B_pj u_ij (nodes flattened row-major).
  return np.einsum("pi,pj->pij", mats[0], mats[1]).reshape(points.shape[0], n * n)
