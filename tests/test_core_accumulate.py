"""core.accumulate: sliced gradient accumulation equals the whole-batch gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import accumulate


def _loss(params, batch, rng):
  del rng  # deterministic
  pred = jnp.tanh(batch["x"] @ params["w"]) + params["b"][None, :]
  return jnp.mean((pred - batch["y"]) ** 2)


def test_slices_are_strided_and_cover_every_row_once():
  x = jnp.arange(12 * 2).reshape(12, 2)
  s = accumulate.strided_slices({"x": x}, 3)["x"]
  assert s.shape == (3, 4, 2)
  np.testing.assert_array_equal(s[1, :, 0], x[1::3, 0])  # row j*3 + 1 is in slice 1
  np.testing.assert_array_equal(np.sort(s.reshape(-1, 2)[:, 0]), x[:, 0])


def test_accumulated_loss_and_gradient_equal_the_whole_batch():
  k = jax.random.split(jax.random.PRNGKey(0), 3)
  params = {"w": jax.random.normal(k[0], (5, 3)), "b": jnp.zeros(3)}
  batch = {"x": jax.random.normal(k[1], (16, 5)), "y": jax.random.normal(k[2], (16, 3))}
  whole_loss, whole_grad = jax.value_and_grad(_loss)(params, batch, None)
  for micro in (1, 2, 4, 16):
    loss, grad = jax.jit(accumulate.value_and_grad, static_argnums=(0, 4))(
        _loss, params, batch, jax.random.PRNGKey(1), micro)
    np.testing.assert_allclose(loss, whole_loss, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 grad, whole_grad)


def test_each_slice_draws_its_own_noise():
  seen = accumulate.value_and_grad(
      lambda p, b, r: p * jax.random.normal(r, ()), jnp.float32(1.0), {"x": jnp.zeros(4)},
      jax.random.PRNGKey(0), 4)[1]
  want = np.mean([jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(0), i), ())
                  for i in range(4)])
  np.testing.assert_allclose(seen, want, rtol=1e-6)


def test_a_count_that_does_not_divide_the_batch_is_one_line():
  assert accumulate.check(4, 16, "train.batch_size") == 4
  for bad in (0, 3):
    with pytest.raises(ValueError, match=f"train.microbatches={bad} must be >= 1 and "
                                         "divide train.batch_size=16"):
      accumulate.check(bad, 16, "train.batch_size")
