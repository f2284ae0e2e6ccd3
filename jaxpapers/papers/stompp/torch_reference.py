"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

PyTorch eager version of the same StoMPP train step (binary MLP or binary ResNet with
basic/bottleneck blocks, masks from ranks, STE-free rule, AdamW, latent clip), used only
by the benchmark to compare speed with the jitted JAX step. Not used for training.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from jaxpapers.papers.stompp.model import RESNET_LAYOUTS


def _binarize(x, mask):
  hard = torch.where(x >= 0, 1.0, -1.0).detach()
  return torch.where(mask, hard, x.clamp(-1, 1))


class _Bin(nn.Module):
  def __init__(self, weight_shape, act_shape):
    super().__init__()
    self.weight = nn.Parameter(torch.randn(weight_shape) * 0.05)
    self.register_buffer("w_rank", torch.randperm(self.weight.numel()).view(weight_shape))
    self.register_buffer("a_rank", torch.randperm(int(torch.tensor(act_shape).prod()))
                         .view(act_shape))
    self.p = 0.5

  def masks(self):
    kw = int(self.p * self.w_rank.numel())
    ka = int(self.p * self.a_rank.numel())
    return self.w_rank < kw, self.a_rank < ka


class BinLinear(_Bin):
  def __init__(self, d_in, d_out):
    super().__init__((d_out, d_in), (d_in,))

  def forward(self, x):
    wm, am = self.masks()
    return F.linear(_binarize(x, am), _binarize(self.weight, wm))


class BinConv(_Bin):
  def __init__(self, c_in, c_out, k, stride, hw):
    super().__init__((c_out, c_in, k, k), (c_in, hw, hw))
    self.stride, self.pad = stride, k // 2

  def forward(self, x):
    wm, am = self.masks()
    return F.conv2d(_binarize(x, am), _binarize(self.weight, wm), stride=self.stride,
                    padding=self.pad)


class MLP(nn.Module):
  def __init__(self, d_in, width, depth, classes):
    super().__init__()
    self.stem = nn.Linear(d_in, width, bias=False)
    self.bn0 = nn.BatchNorm1d(width, momentum=0.1)
    self.layers = nn.ModuleList(BinLinear(width, width) for _ in range(depth))
    self.bns = nn.ModuleList(nn.BatchNorm1d(width, momentum=0.1) for _ in range(depth))
    self.head = nn.Linear(width, classes)

  def forward(self, x):
    x = self.bn0(self.stem(x.flatten(1)))
    for layer, bn in zip(self.layers, self.bns):
      x = bn(layer(x))
    return self.head(x.clamp(-1, 1))


class ResNet(nn.Module):
  def __init__(self, arch, width, in_ch, hw, classes, stem="cifar"):
    super().__init__()
    block, stages = RESNET_LAYOUTS[arch]
    if stem not in ("cifar", "cifar_s2"):
      raise ValueError(f"torch reference has the cifar and cifar_s2 stems, not {stem!r}")
    st0 = 2 if stem == "cifar_s2" else 1  # 3x3 stride 2: 28x28 -> 14x14 maps
    self.stem = nn.Conv2d(in_ch, width, 3, stride=st0, padding=1, bias=False)
    hw = (hw + st0 - 1) // st0
    self.bn0 = nn.BatchNorm2d(width)
    self.blocks = nn.ModuleList()
    c = width
    for s, n in enumerate(stages):
      w = width * 2**s
      for b in range(n):
        stride = 2 if (s > 0 and b == 0 and hw > 1) else 1
        if block == "basic":
          specs, out = [(w, 3, stride), (w, 3, 1)], w
        else:
          specs, out = [(w, 1, 1), (w, 3, stride), (4 * w, 1, 1)], 4 * w
        convs, bns, cin, h = nn.ModuleList(), nn.ModuleList(), c, hw
        for f, k, st in specs:
          convs.append(BinConv(cin, f, k, st, h))
          bns.append(nn.BatchNorm2d(f))
          h = (h + st - 1) // st
          cin = f
        short = None
        if stride != 1 or c != out:
          short = nn.Sequential(nn.AvgPool2d(2, ceil_mode=True) if stride != 1
                                else nn.Identity(), nn.Conv2d(c, out, 1, bias=False),
                                nn.BatchNorm2d(out))
        self.blocks.append(nn.ModuleDict({"convs": convs, "bns": bns,
                                          "short": short or nn.Identity()}))
        c, hw = out, h
    self.head = nn.Linear(c, classes)

  def forward(self, x):
    x = self.bn0(self.stem(x))
    for blk in self.blocks:
      sc = blk["short"](x)
      for conv, bn in zip(blk["convs"], blk["bns"]):
        x = bn(conv(x))
      x = x + sc
    return self.head(x.mean((2, 3)).clamp(-1, 1))


def make_step(config, input_shape, classes):
  """Returns (step(images, labels) -> loss, model) for the configured network."""
  torch.manual_seed(0)
  m = config.model
  h, w, c = input_shape
  if m.name == "mlp":
    model = MLP(h * w * c, m.width, m.depth, classes)
  else:
    model = ResNet(m.name, m.width, c, h, classes, m.get("stem", "cifar"))
  opt = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=0.0)
  bins = [mod for mod in model.modules() if isinstance(mod, _Bin)]

  def step(images, labels):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    opt.step()
    with torch.no_grad():
      for b in bins:
        b.weight.clamp_(-1, 1)
    return loss

  return step, model
