"""LGS (issue 41): a plain textbook U-Net, written apart from models.UNet / train.py.

Ronneberger et al. 2015 in plain JAX (no flax, no shared trainer, no normalization
layers): per level two 3x3 convolutions with ReLU, 2x2 max-pooling down; up the path a
2x2 transposed convolution (stride 2) to the skip's width, concatenation with the skip,
two 3x3 convolutions with ReLU; a 1x1 convolution out. He-normal weights (the paper's
sqrt(2 / fan-in)). Padding wraps around (every family is periodic; the paper's unpadded
convolutions and crops do not fit a 16x16 field). It predicts the next frame itself
and is trained by textbook_fno's loop (relative L2, Adam with weight decay 1e-4, the lr
halved every fifth of the steps) on the study's data, steps, batch and U-Net widths,
3 seeds and an lr grid chosen on validation. If it beats the study's U-Net, ours is
handicapped.

  python -m jaxpapers.papers.lgs.textbook_unet --config=configs/lgs.py:setting=close \\
      --workdir=/tmp/lgs_close --lrs=3e-4,1e-3,3e-3 --out=/tmp/lgs_close/textbook_unet.json
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def init(key, cin, cout, widths=(8, 16, 32)):
  ks = iter(jax.random.split(key, 4 * len(widths) + 1))
  conv = lambda k, i, o, s=3: dict(
      w=jax.random.normal(k, (s, s, i, o)) * np.sqrt(2 / (s * s * i)), b=jnp.zeros((o,)))
  down, c = [], cin
  for w in widths:
    down.append([conv(next(ks), c, w), conv(next(ks), w, w)])
    c = w
  up = []
  for w in reversed(widths[:-1]):
    up.append(dict(t=conv(next(ks), c, w, 2), c=[conv(next(ks), 2 * w, w), conv(next(ks), w, w)]))
    c = w
  return dict(down=down, up=up, out=conv(next(ks), c, cout, 1))


def conv(p, x):
  """'same' convolution with periodic wrap-around padding; x [B, H, W, C]."""
  r = p["w"].shape[0] // 2
  x = jnp.pad(x, ((0, 0), (r, r), (r, r), (0, 0)), mode="wrap")
  y = jax.lax.conv_general_dilated(x, p["w"], (1, 1), "VALID",
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
  return y + p["b"][None, None, None]


def up(p, x):
  """2x2 transposed convolution, stride 2: each input cell writes its own 2x2 block."""
  b, h, w, _ = x.shape
  return (jnp.einsum("bhwi,klio->bhkwlo", x, p["w"]).reshape(b, 2 * h, 2 * w, -1)
          + p["b"][None, None, None])


def apply(p, ctx):
  """ctx [B, K, H, W, C] -> next frame [B, H, W, out]."""
  b, k, h, w, c = ctx.shape
  x = jnp.moveaxis(ctx, 1, -2).reshape(b, h, w, k * c)
  skips = []
  for i, (c1, c2) in enumerate(p["down"]):
    if i:  # 2x2 max-pooling
      x = x.reshape(b, x.shape[1] // 2, 2, x.shape[2] // 2, 2, x.shape[3]).max(axis=(2, 4))
    x = jax.nn.relu(conv(c2, jax.nn.relu(conv(c1, x))))
    skips.append(x)
  for u, s in zip(p["up"], reversed(skips[:-1])):
    x = jnp.concatenate([up(u["t"], x), s], axis=-1)
    x = jax.nn.relu(conv(u["c"][1], jax.nn.relu(conv(u["c"][0], x))))
  return conv(p["out"], x)


if __name__ == "__main__":
  from jaxpapers.papers.lgs import textbook_fno  # pylint: disable=g-import-not-at-top
  textbook_fno.main("unet")
