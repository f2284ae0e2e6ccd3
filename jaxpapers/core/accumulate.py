"""Gradient accumulation: a step's batch in sequential slices, for a step that does not fit.

Used by the LM workbench (`nn/lm.py`) and lgs: a paper-size step holds its activations for
batch / micro rows at a time and applies the update of the whole batch (up to float
rounding, for a deterministic loss)."""

import jax
import jax.numpy as jnp


def check(micro: int, batch: int, what: str) -> int:
  """micro as an int, or one ValueError line naming the key and the batch it must divide."""
  micro = int(micro)
  if micro < 1 or batch % micro:
    raise ValueError(f"train.microbatches={micro} must be >= 1 and divide {what}={batch}")
  return micro


def strided_slices(batch, micro: int):
  """Every leaf [B, ...] -> [micro, B / micro, ...], row j * micro + i in slice i.

  Strided rather than contiguous: when micro divides a device's row count, a device's
  contiguous rows stay on that device, so no slice moves data between devices."""
  return jax.tree.map(
      lambda a: jnp.moveaxis(a.reshape((a.shape[0] // micro, micro) + a.shape[1:]), 1, 0),
      batch)


def value_and_grad(loss, params, batch, rng, micro: int):
  """Mean of loss(params, slice, fold_in(rng, i)) over `micro` slices, and its gradient.

  The slices run in a `lax.scan`, so one slice's activations are live at a time. A
  stochastic loss draws slice i's noise from fold_in(rng, i): the same estimator as the
  whole batch, other draws. The summed loss and gradients stay float32."""
  value_grad = jax.value_and_grad(lambda p, b, r: jnp.asarray(loss(p, b, r), jnp.float32))

  def body(acc, xs):
    i, b = xs
    return jax.tree.map(jnp.add, acc, value_grad(params, b, jax.random.fold_in(rng, i))), None
  zero = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
  (total, grads), _ = jax.lax.scan(body, zero, (jnp.arange(micro), strided_slices(batch, micro)))
  return total / micro, jax.tree.map(lambda g: g / micro, grads)
