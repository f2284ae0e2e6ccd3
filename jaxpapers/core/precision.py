"""Mixed precision: float32 master weights, matmuls in a lower `compute_dtype`.

`config.compute_dtype` ('float32' default, 'bfloat16') names the dtype a step casts its
floating parameters to before the forward pass. The optimizer, its moments and the
parameters it updates stay float32 (the cast's gradient is the float32 gradient), and
the models keep their reductions in float32 where precision matters: RMSNorm statistics,
attention scores and softmax, and the logits that enter the cross-entropy.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def compute_dtype(config):
  """The config's compute dtype (a jnp dtype); an unknown name is a clear error."""
  name = config.get("compute_dtype", "float32")
  if name not in DTYPES:
    raise ValueError(f"compute_dtype={name!r}; expected one of {sorted(DTYPES)}")
  return DTYPES[name]


def cast(tree, dtype):
  """Floating leaves of `tree` in `dtype`; integer leaves (tokens, counts) unchanged."""
  if dtype == jnp.float32:
    return tree
  return jax.tree.map(
      lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)
