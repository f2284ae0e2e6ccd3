"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

Binary networks whose binary layers are numbered 0..L-1 from input to output, so the
layerwise schedule can address them: a binary MLP, a binary VGG-style CNN, a binary
ResNet (basic or bottleneck blocks, ResNet-18/34/50 stage layouts at reduced width) and a
binary MobileNetV2 (inverted residuals: binary 1x1 expand, binary 3x3 depthwise, binary
1x1 project; real shortcut when shapes match).

Image stems (`stem`): `cifar` is a 3x3 stride-1 conv (for 28x28/32x32 inputs), `imagenet`
is a 7x7 stride-2 conv followed by a 3x3 stride-2 max-pool (ResNet's ImageNet stem),
`cifar_s2` a 3x3 stride-2 conv (28x28 -> 14x14 maps: a quarter of `cifar`'s conv work,
the CPU-sized architecture study's stem).

The rule enters every call as numbers (`knobs`, see binarize.knobs) so that networks
trained with different rules can share one compiled, vmapped program; by default the
knobs come from the module's static `rule` and `binary_acts`.

A binary layer binarizes its latent weights and, unless it reads the image, its input
activation (the activation that feeds it). Each has its own mask ranks, stored in the
`ranks` variable collection, and reads its committed fraction from `progress[index]`.
The stem (first layer) and the classifier (last layer) are real-valued by default, as in
XNOR-Net, Bi-Real Net and ReActNet; `first_real=False` / `last_real=False` binarize
their weights too (the stem's input is the image and is never binarized). BatchNorm follows
every binary layer and carries the scale that sign() removes. ResNet shortcuts are real;
downsampling shortcuts are average pooling + a real 1x1 convolution (Bi-Real Net).
"""
from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxpapers.papers.stompp import binarize as bz

RESNET_LAYOUTS = {  # name -> (block, blocks per stage)
    "resnet10": ("basic", (1, 1, 1, 1)),  # the smallest layout, for tests
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
}


def _identity_ranks(shape):
  return jnp.arange(math.prod(shape), dtype=jnp.int32).reshape(shape)


class _Binary(nn.Module):
  """Shared behaviour: masks from ranks, binarize weights and the input activation."""
  index: int
  binarize_input: bool = True

  def _masks(self, w_shape, x_shape, progress):
    p = progress[self.index]
    # Identity ranks as placeholders: train_lib.init_state draws every tensor's random
    # permutation in one sort (bz.init_ranks_tree), which compiles far faster than one
    # sort per tensor in a 50-layer network.
    w_ranks = self.variable("ranks", "w", lambda: _identity_ranks(w_shape)).value
    w_mask = bz.mask_from_ranks(w_ranks, p)
    a_mask = None
    if self.binarize_input:
      a_ranks = self.variable("ranks", "a", lambda: _identity_ranks(x_shape[1:])).value
      a_mask = bz.mask_from_ranks(a_ranks, p)
    return w_mask, a_mask

  def _inputs(self, x, kernel, progress, knobs):
    w_mask, a_mask = self._masks(kernel.shape, x.shape, progress)
    wb = bz.binarize_k(kernel, w_mask, knobs, is_weight=True)
    if not self.binarize_input:
      return x, wb
    # Binary-weight networks (knobs['binary_acts'] = 0) keep real hardtanh activations.
    return bz.binarize_k(x, a_mask[None], knobs, is_weight=False), wb


class BinaryDense(_Binary):
  features: int = 0

  @nn.compact
  def __call__(self, x, progress, knobs):
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (x.shape[-1], self.features))
    xb, wb = self._inputs(x, kernel, progress, knobs)
    return xb @ wb


class BinaryConv(_Binary):
  features: int = 0
  kernel_size: int = 3
  stride: int = 1
  depthwise: bool = False  # one filter per input channel (features = input channels)

  @nn.compact
  def __call__(self, x, progress, knobs):
    k = self.kernel_size
    c_in = 1 if self.depthwise else x.shape[-1]
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (k, k, c_in, self.features))
    xb, wb = self._inputs(x, kernel, progress, knobs)
    if self.depthwise:
      return depthwise_conv(xb, wb[:, :, 0, :], self.stride)
    return jax.lax.conv_general_dilated(
        xb, wb, (self.stride, self.stride), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def depthwise_conv(x, w, stride: int):
  """Depthwise k x k correlation with SAME padding (as lax.conv_general_dilated with
  feature_group_count = channels) written as k^2 shifted multiply-adds.

  Elementwise, so it stays cheap under vmap over networks: a vmapped grouped conv turns
  into (rows x channels) groups, whose weight gradient XLA's CPU backend expands into a
  dense convolution, hundreds of times the work. x: [N, H, W, C], w: [k, k, C].
  """
  k = w.shape[0]
  _, h, wd, _ = x.shape
  pads = []
  for size in (h, wd):
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    pads.append((total // 2, total - total // 2, out))
  xp = jnp.pad(x, ((0, 0), pads[0][:2], pads[1][:2], (0, 0)))
  oh, ow = pads[0][2], pads[1][2]
  out = 0.0
  for i in range(k):
    for j in range(k):
      patch = jax.lax.slice(xp, (0, i, j, 0),
                            (xp.shape[0], i + (oh - 1) * stride + 1,
                             j + (ow - 1) * stride + 1, xp.shape[3]),
                            (1, stride, stride, 1))
      out = out + patch * w[i, j][None, None, None, :]
  return out


def _bn(train):
  return nn.BatchNorm(use_running_average=not train, momentum=0.9)


STEMS = ("cifar", "imagenet", "cifar_s2")


def _stem(m, x, progress, knobs, train, conv: bool, width=None):
  """Real stem (default) or a binary one with real (image) input; returns (x, next index).

  conv stems: `cifar` 3x3 stride 1; `imagenet` 7x7 stride 2 then 3x3 stride-2 max-pool;
  `cifar_s2` 3x3 stride 2.
  """
  width = width or m.width
  if conv and m.stem not in STEMS:
    raise ValueError(f"unknown stem {m.stem!r}; use one of {STEMS}")
  k, stride = {"imagenet": (7, 2), "cifar_s2": (3, 2)}.get(m.stem, (3, 1)) if conv else (3, 1)
  if m.first_real:
    layer = (nn.Conv(width, (k, k), (stride, stride), padding="SAME", use_bias=False,
                     name="stem") if conv
             else nn.Dense(width, use_bias=False, name="stem"))
    x, i = _bn(train)(layer(x)), 0
  else:
    if conv:
      layer = BinaryConv(index=0, features=width, kernel_size=k, stride=stride,
                         binarize_input=False, name="bin0")
    else:
      layer = BinaryDense(index=0, features=width, binarize_input=False, name="bin0")
    x, i = _bn(train)(layer(x, progress, knobs)), 1
  if conv and m.stem == "imagenet":
    x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
  return x, i


def _extra_binary(m) -> int:
  """Binary layers beyond the body: a binarized stem and/or classifier."""
  return (not m.first_real) + (not m.last_real)


class _BinaryNet(nn.Module):
  """Fields every binary network shares; subclasses add their depth or layout."""
  num_classes: int
  width: int = 16
  rule: str = "stompp"
  binary_acts: bool = True
  first_real: bool = True
  last_real: bool = True
  stem: str = "cifar"

  def _knobs(self, knobs):
    return bz.knobs(self.rule, self.binary_acts) if knobs is None else knobs


class _Stack(_BinaryNet):
  """A plain stack of `depth` binary layers between stem and classifier."""
  depth: int = 4

  @property
  def num_binary(self) -> int:
    return self.depth + _extra_binary(self)


class BinaryMLP(_Stack):
  """Input -> stem Dense -> `depth` binary Dense layers -> classifier."""
  width: int = 256

  @nn.compact
  def __call__(self, x, progress, train: bool = False, knobs=None):
    knobs = self._knobs(knobs)
    x, i = _stem(self, x.reshape(x.shape[0], -1), progress, knobs, train, conv=False)
    for _ in range(self.depth):
      x = BinaryDense(index=i, features=self.width, name=f"bin{i}")(x, progress, knobs)
      x = _bn(train)(x)
      i += 1
    return _classifier(self, x, progress, knobs, i, train)


def _classifier(m, x, progress, knobs, i, train):
  if m.last_real:
    x = jnp.clip(x, -1.0, 1.0)  # hardtanh, as every activation here
    return nn.Dense(m.num_classes, name="head")(x)
  x = BinaryDense(index=i, features=m.num_classes, name=f"bin{i}")(x, progress, knobs)
  return nn.BatchNorm(use_running_average=not train, momentum=0.9, use_scale=False)(x)


class BinaryCNN(_Stack):
  """VGG-style: stem conv, `depth` binary 3x3 convs (width doubling at two poolings)."""
  depth: int = 6
  width: int = 32

  @nn.compact
  def __call__(self, x, progress, train: bool = False, knobs=None):
    knobs = self._knobs(knobs)
    x, i = _stem(self, x, progress, knobs, train, conv=True)
    pools = {self.depth // 3, 2 * self.depth // 3}
    width = self.width
    for d in range(self.depth):
      if d in pools and d > 0 and x.shape[1] >= 4:
        x = nn.max_pool(x, (2, 2), (2, 2))
        width *= 2
      x = BinaryConv(index=i, features=width, name=f"bin{i}")(x, progress, knobs)
      x = _bn(train)(x)
      i += 1
    x = x.mean(axis=(1, 2))
    return _classifier(self, x, progress, knobs, i, train)


class BinaryResNet(_BinaryNet):
  """Binary ResNet with the stage layout of ResNet-18/34/50 and base width `width`."""
  arch: str = "resnet18"

  @property
  def num_binary(self) -> int:
    block, stages = RESNET_LAYOUTS[self.arch]
    per_block = 2 if block == "basic" else 3
    return per_block * sum(stages) + _extra_binary(self)

  @nn.compact
  def __call__(self, x, progress, train: bool = False, knobs=None):
    knobs = self._knobs(knobs)
    block, stages = RESNET_LAYOUTS[self.arch]
    x, i = _stem(self, x, progress, knobs, train, conv=True)
    for s, n_blocks in enumerate(stages):
      width = self.width * 2**s
      for b in range(n_blocks):
        stride = 2 if (s > 0 and b == 0 and x.shape[1] > 1) else 1
        if block == "basic":
          convs = [(width, 3, stride), (width, 3, 1)]
          out_ch = width
        else:
          convs = [(width, 1, 1), (width, 3, stride), (4 * width, 1, 1)]
          out_ch = 4 * width
        shortcut = x
        if stride != 1 or x.shape[-1] != out_ch:
          if stride != 1:
            shortcut = nn.avg_pool(shortcut, (2, 2), (2, 2), padding="SAME")
          shortcut = nn.Conv(out_ch, (1, 1), use_bias=False)(shortcut)
          shortcut = _bn(train)(shortcut)
        for feats, k, st in convs:
          x = BinaryConv(index=i, features=feats, kernel_size=k, stride=st,
                         name=f"bin{i}")(x, progress, knobs)
          x = _bn(train)(x)
          i += 1
        x = x + shortcut
    x = x.mean(axis=(1, 2))
    return _classifier(self, x, progress, knobs, i, train)


# MobileNetV2 (Sandler et al. 2018): (expansion t, channels c, blocks n, stride s) at
# width multiplier 1 with a 32-channel stem. `width` is the stem's channels, so the
# multiplier is width / 32. For 28x28/32x32 inputs (cifar stem) the second stage keeps
# stride 1, the usual CIFAR adaptation, so the 4x4 final map matches the ResNets here.
MOBILENETV2_LAYOUT = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                      (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _round_ch(c: float) -> int:
  return max(8, int(c + 4) // 8 * 8)  # multiples of 8, as MobileNet's width multiplier


class BinaryMobileNetV2(_BinaryNet):
  """Binary MobileNetV2: inverted residual blocks, every conv binary, final binary 1x1."""
  width: int = 32

  @property
  def num_binary(self) -> int:
    convs = sum((2 if t == 1 else 3) * n for t, _, n, _ in MOBILENETV2_LAYOUT)
    return convs + 1 + _extra_binary(self)

  @nn.compact
  def __call__(self, x, progress, train: bool = False, knobs=None):
    knobs = self._knobs(knobs)
    mult = self.width / 32
    x, i = _stem(self, x, progress, knobs, train, conv=True, width=_round_ch(32 * mult))
    for stage, (t, c, n, s) in enumerate(MOBILENETV2_LAYOUT):
      out_ch = _round_ch(c * mult)
      # CIFAR adaptation (stride 1 in the second stage) for both small-image stems, so
      # the last map is 4x4 (cifar) or 2x2 (cifar_s2) on 28x28, as in the ResNets here.
      if stage == 1 and self.stem in ("cifar", "cifar_s2"):
        s = 1
      for b in range(n):
        stride = s if b == 0 else 1
        shortcut = x
        c_in = x.shape[-1]
        if t != 1:  # 1x1 expansion
          x = BinaryConv(index=i, features=c_in * t, kernel_size=1,
                         name=f"bin{i}")(x, progress, knobs)
          x, i = _bn(train)(x), i + 1
        x = BinaryConv(index=i, features=x.shape[-1], kernel_size=3, stride=stride,
                       depthwise=True, name=f"bin{i}")(x, progress, knobs)
        x, i = _bn(train)(x), i + 1
        x = BinaryConv(index=i, features=out_ch, kernel_size=1,
                       name=f"bin{i}")(x, progress, knobs)
        x, i = _bn(train)(x), i + 1
        if stride == 1 and c_in == out_ch:
          x = x + shortcut
    x = BinaryConv(index=i, features=_round_ch(1280 * mult), kernel_size=1,
                   name=f"bin{i}")(x, progress, knobs)
    x, i = _bn(train)(x), i + 1
    x = x.mean(axis=(1, 2))
    return _classifier(self, x, progress, knobs, i, train)


def build(config, num_classes: int) -> nn.Module:
  m = config.model
  kw = dict(num_classes=num_classes, rule=config.binarize.rule,
            binary_acts=config.binarize.binary_acts, first_real=m.first_real,
            last_real=m.last_real, stem=m.get("stem", "cifar"))
  if m.name == "mlp":
    return BinaryMLP(depth=m.depth, width=m.width, **kw)
  if m.name == "cnn":
    return BinaryCNN(depth=m.depth, width=m.width, **kw)
  if m.name in RESNET_LAYOUTS:
    return BinaryResNet(arch=m.name, width=m.width, **kw)
  if m.name == "mobilenetv2":
    return BinaryMobileNetV2(width=m.width, **kw)
  raise ValueError(f"unknown model {m.name!r}; use mlp, cnn, mobilenetv2 or one of "
                   f"{list(RESNET_LAYOUTS)}")


def binary_layer_names(num_binary: int) -> Sequence[str]:
  return [f"bin{i}" for i in range(num_binary)]
