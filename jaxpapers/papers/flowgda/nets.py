"""FlowGDA (abstract 10): the small networks every method shares, as pure functions.

Parameters are plain pytrees (lists of (W, b)), so a method's whole training run can be
`vmap`ped over seeds, learning rates and ablation switches without a module system. The
classifier is split as the paper's setting needs it: an encoder `enc` (input -> feature
z; an MLP, or a small CNN for 28 x 28 images) trained on the labeled source, and a head
`head` (z -> logits) that the feature-space methods (FlowGDA, GOAT, GGF) adapt while the
encoder stays frozen. Logits carry a class
mask so that benchmarks with 2 and 10 classes share one program shape.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

NEG = -1e9  # logit of a class the benchmark does not have


def mlp_init(key, sizes):
  """He-normal weights, zero biases, for Dense layers sizes[0] -> ... -> sizes[-1]."""
  keys = jax.random.split(key, len(sizes) - 1)
  return [(jax.random.normal(k, (a, b)) * jnp.sqrt(2.0 / a), jnp.zeros((b,)))
          for k, a, b in zip(keys, sizes[:-1], sizes[1:])]


def lift(v, like):
  """v (last axis) shaped to broadcast against `like` without implicit rank promotion."""
  return v.reshape((1,) * (like.ndim - v.ndim) + v.shape)


def mlp_apply(params, x, act=jax.nn.relu):
  for i, (w, b) in enumerate(params):
    x = x @ w
    x = x + lift(b, x)
    if i < len(params) - 1:
      x = act(x)
  return x


def conv_init(key, in_dim, conv, hidden, feat_dim):
  """CNN encoder for square single-channel images flattened to `in_dim` pixels: 3x3
  convolutions of stride 2 ('SAME', ReLU) with `conv` channels, then a dense MLP
  flat -> hidden -> feat_dim. He-normal kernels, zero biases."""
  side = image_side(in_dim)
  keys = jax.random.split(key, len(conv) + 1)
  layers, c_in = [], 1
  for k, c in zip(keys[:-1], conv):
    layers.append((jax.random.normal(k, (3, 3, c_in, c)) * jnp.sqrt(2.0 / (9 * c_in)),
                   jnp.zeros((c,))))
    c_in = c
    side = -(-side // 2)  # stride 2, SAME
  return {"conv": layers, "dense": mlp_init(keys[-1], (side * side * c_in, *hidden,
                                                        feat_dim))}


def image_side(in_dim):
  side = int(round(in_dim ** 0.5))
  if side * side != in_dim:
    raise ValueError(f"a CNN encoder needs square images; {in_dim} inputs are not n x n")
  return side


def conv_apply(enc, x):
  """x (..., side*side) -> features (..., feat); leading axes are flattened and restored."""
  lead = x.shape[:-1]
  side = image_side(x.shape[-1])
  h = x.reshape((-1, side, side, 1))
  for w, b in enc["conv"]:
    h = jax.lax.conv_general_dilated(h, w, (2, 2), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    h = jax.nn.relu(h + lift(b, h))
  out = mlp_apply(enc["dense"], h.reshape((h.shape[0], -1)))
  return out.reshape(lead + out.shape[-1:])


def classifier_init(key, in_dim, hidden, feat_dim, head_hidden, num_classes, conv=()):
  """Encoder (an MLP, or a CNN when `conv` lists channels) and MLP head.

  feat_dim = 0 is the identity encoder (`encoder=identity`): no encoder layers (an empty
  list, which `encode` applies as the identity), the head reads the inputs, so the
  feature-space methods work on the inputs themselves."""
  k1, k2 = jax.random.split(key)
  if not feat_dim:
    return {"enc": [], "head": mlp_init(k2, (in_dim, head_hidden, num_classes))}
  enc = (conv_init(k1, in_dim, conv, hidden, feat_dim) if conv
         else mlp_init(k1, (in_dim, *hidden, feat_dim)))
  return {"enc": enc, "head": mlp_init(k2, (feat_dim, head_hidden, num_classes))}


def encode(params, x):
  enc = params["enc"]
  return conv_apply(enc, x) if isinstance(enc, dict) else mlp_apply(enc, x)


def head_logits(head, z, class_mask):
  out = mlp_apply(head, z)
  return out + lift(jnp.where(class_mask, 0.0, NEG), out)


def logits(params, x, class_mask):
  return head_logits(params["head"], encode(params, x), class_mask)


def xent(logits_BxC, y_B, w_B=None):
  """Mean (optionally weighted) cross-entropy with integer labels."""
  nll = -jnp.take_along_axis(jax.nn.log_softmax(logits_BxC), y_B[:, None], 1)[:, 0]
  if w_B is None:
    return nll.mean()
  return (nll * w_B).sum() / jnp.maximum(w_B.sum(), 1.0)


def accuracy(logits_NxC, y_N):
  return (logits_NxC.argmax(-1) == y_N).mean()


def pseudo_labels(logits_NxC, drop_fraction):
  """Argmax labels and a 0/1 weight that drops the `drop_fraction` least confident.

  Kumar et al. (2020) self-train on the most confident pseudo-labels only; the cut is a
  quantile of the max-probability, so it adapts to how confident the model is.
  """
  prob = jax.nn.softmax(logits_NxC)
  conf = prob.max(-1)
  cut = jnp.quantile(conf, drop_fraction)
  return logits_NxC.argmax(-1), (conf >= cut).astype(jnp.float32)


def adam(lr):
  """Adam with a traced learning rate (so one program vmaps over a learning-rate grid)."""
  return optax.inject_hyperparams(optax.adam)(learning_rate=lr)
