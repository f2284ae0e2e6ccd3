"""Part (iii) of llops's theorem statement (README, "Our theorem"), checked numerically.

For power 1 (degree 2) and queries / keys in an r-dimensional subspace U, the LLoPS family
holds an exact map (A = sqrt(r) U^T, the sqrt(r) undoing the sketch's 1/sqrt(r) scale),
while a Gaussian PolySketch of the same rank r has a positive error for almost every draw.
This is also part 1's positive control: a setting in which the learned family must win."""
import numpy as np
import jax
import jax.numpy as jnp

from jaxpapers.papers.llops import features


def _relative_kernel_error(mp, params, q, k):
  phi = lambda x: np.asarray(mp.phi(params, jnp.asarray(x, jnp.float32)), np.float64)
  target = (q @ k.T) ** 2  # the exact degree-2 kernel
  return np.linalg.norm(phi(q) @ phi(k).T - target) / np.linalg.norm(target)


def test_llops_is_exact_on_a_planted_subspace_where_every_gaussian_sketch_errs():
  rng = np.random.default_rng(3)
  r, d, n = 4, 16, 100
  basis = np.linalg.qr(rng.standard_normal((d, r)))[0]  # (d, r), orthonormal columns
  q = rng.standard_normal((n, r)) @ basis.T
  k = rng.standard_normal((n, r)) @ basis.T

  exact = features.llops(r, power=1)
  err_exact = _relative_kernel_error(exact, {"G0": jnp.asarray(np.sqrt(r) * basis)}, q, k)
  assert err_exact < 1e-5, err_exact
  # Without the sqrt(r) the same subspace gives (q.k)^2 / r^2: the scale matters.
  err_unscaled = _relative_kernel_error(exact, {"G0": jnp.asarray(basis)}, q, k)
  assert abs(err_unscaled - (1 - 1 / r**2)) < 1e-4, err_unscaled

  sketch = features.polysketch_gaussian(r, degree=2)
  errs = [_relative_kernel_error(sketch, sketch.init(jax.random.PRNGKey(s), d), q, k)
          for s in range(20)]
  assert min(errs) > 0.1, errs  # JL variance ((q.k)^2 + |q|^2 |k|^2) / r per entry
