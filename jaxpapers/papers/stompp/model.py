"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

Binary networks whose binary layers are numbered 0..L-1 from input to output, so the
layerwise schedule can address them: a binary MLP, a binary VGG-style CNN and a binary
ResNet (basic or bottleneck blocks, ResNet-18/34/50 stage layouts at reduced width).

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

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxpapers.papers.stompp import binarize as bz

RESNET_LAYOUTS = {  # name -> (block, blocks per stage)
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
}


class _Binary(nn.Module):
  """Shared behaviour: masks from ranks, binarize weights and the input activation."""
  index: int
  rule: str
  binary_acts: bool = True
  binarize_input: bool = True

  def _masks(self, w_shape, x_shape, progress):
    p = progress[self.index]
    w_ranks = self.variable("ranks", "w", lambda: bz.init_ranks(
        self.make_rng("ranks"), w_shape)).value
    w_mask = bz.mask_from_ranks(w_ranks, p)
    a_mask = None
    if self.binarize_input and self.binary_acts:
      a_ranks = self.variable("ranks", "a", lambda: bz.init_ranks(
          self.make_rng("ranks"), x_shape[1:])).value
      a_mask = bz.mask_from_ranks(a_ranks, p)
    return w_mask, a_mask

  def _inputs(self, x, kernel, progress):
    w_mask, a_mask = self._masks(kernel.shape, x.shape, progress)
    wb = bz.binarize(kernel, w_mask, self.rule, is_weight=True)
    if not self.binarize_input:
      return x, wb
    if self.binary_acts:
      return bz.binarize(x, a_mask[None], self.rule, is_weight=False), wb
    # Binary-weight networks keep real (hardtanh) activations.
    return bz.binarize(x, None, "fp", is_weight=False), wb


class BinaryDense(_Binary):
  features: int = 0

  @nn.compact
  def __call__(self, x, progress):
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (x.shape[-1], self.features))
    xb, wb = self._inputs(x, kernel, progress)
    return xb @ wb


class BinaryConv(_Binary):
  features: int = 0
  kernel_size: int = 3
  stride: int = 1

  @nn.compact
  def __call__(self, x, progress):
    k = self.kernel_size
    kernel = self.param("kernel", nn.initializers.lecun_normal(),
                        (k, k, x.shape[-1], self.features))
    xb, wb = self._inputs(x, kernel, progress)
    return jax.lax.conv_general_dilated(
        xb, wb, (self.stride, self.stride), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _bn(train):
  return nn.BatchNorm(use_running_average=not train, momentum=0.9)


def _stem(m, x, progress, train, conv: bool):
  """Real stem (default) or a binary one with real (image) input; returns (x, next index)."""
  kw = dict(rule=m.rule, binary_acts=m.binary_acts)
  if m.first_real:
    layer = (nn.Conv(m.width, (3, 3), padding="SAME", use_bias=False, name="stem") if conv
             else nn.Dense(m.width, use_bias=False, name="stem"))
    return _bn(train)(layer(x)), 0
  cls = BinaryConv if conv else BinaryDense
  x = cls(index=0, features=m.width, binarize_input=False, **kw, name="bin0")(x, progress)
  return _bn(train)(x), 1


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
  def __call__(self, x, progress, train: bool = False):
    kw = dict(rule=self.rule, binary_acts=self.binary_acts)
    x, i = _stem(self, x.reshape(x.shape[0], -1), progress, train, conv=False)
    for _ in range(self.depth):
      x = BinaryDense(index=i, features=self.width, **kw, name=f"bin{i}")(x, progress)
      x = _bn(train)(x)
      i += 1
    return _classifier(self, x, progress, i, train)


def _classifier(m, x, progress, i, train):
  if m.last_real:
    x = bz.binarize(x, None, "fp", is_weight=False)
    return nn.Dense(m.num_classes, name="head")(x)
  x = BinaryDense(index=i, features=m.num_classes, rule=m.rule,
                  binary_acts=m.binary_acts, name=f"bin{i}")(x, progress)
  return nn.BatchNorm(use_running_average=not train, momentum=0.9, use_scale=False)(x)


class BinaryCNN(_Stack):
  """VGG-style: stem conv, `depth` binary 3x3 convs (width doubling at two poolings)."""
  depth: int = 6
  width: int = 32

  @nn.compact
  def __call__(self, x, progress, train: bool = False):
    kw = dict(rule=self.rule, binary_acts=self.binary_acts)
    x, i = _stem(self, x, progress, train, conv=True)
    pools = {self.depth // 3, 2 * self.depth // 3}
    width = self.width
    for d in range(self.depth):
      if d in pools and d > 0 and x.shape[1] >= 4:
        x = nn.max_pool(x, (2, 2), (2, 2))
        width *= 2
      x = BinaryConv(index=i, features=width, **kw, name=f"bin{i}")(x, progress)
      x = _bn(train)(x)
      i += 1
    x = x.mean(axis=(1, 2))
    return _classifier(self, x, progress, i, train)


class BinaryResNet(_BinaryNet):
  """Binary ResNet with the stage layout of ResNet-18/34/50 and base width `width`."""
  arch: str = "resnet18"

  @property
  def num_binary(self) -> int:
    block, stages = RESNET_LAYOUTS[self.arch]
    per_block = 2 if block == "basic" else 3
    return per_block * sum(stages) + _extra_binary(self)

  @nn.compact
  def __call__(self, x, progress, train: bool = False):
    block, stages = RESNET_LAYOUTS[self.arch]
    kw = dict(rule=self.rule, binary_acts=self.binary_acts)
    x, i = _stem(self, x, progress, train, conv=True)
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
          x = BinaryConv(index=i, features=feats, kernel_size=k, stride=st, **kw,
                         name=f"bin{i}")(x, progress)
          x = _bn(train)(x)
          i += 1
        x = x + shortcut
    x = x.mean(axis=(1, 2))
    return _classifier(self, x, progress, i, train)


def build(config, num_classes: int) -> nn.Module:
  m = config.model
  kw = dict(num_classes=num_classes, rule=config.binarize.rule,
            binary_acts=config.binarize.binary_acts, first_real=m.first_real,
            last_real=m.last_real)
  if m.name == "mlp":
    return BinaryMLP(depth=m.depth, width=m.width, **kw)
  if m.name == "cnn":
    return BinaryCNN(depth=m.depth, width=m.width, **kw)
  if m.name in RESNET_LAYOUTS:
    return BinaryResNet(arch=m.name, width=m.width, **kw)
  raise ValueError(f"unknown model {m.name!r}; use mlp, cnn or one of {list(RESNET_LAYOUTS)}")


def binary_layer_names(num_binary: int) -> Sequence[str]:
  return [f"bin{i}" for i in range(num_binary)]
