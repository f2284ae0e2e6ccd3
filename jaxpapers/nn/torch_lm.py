"""Small-LM workbench: the benchmark's reference, the same decoder step in PyTorch eager.

The same computation as `stack.build(StackConfig(pattern='A'*L, mlp='swiglu',
positions='rope'))` trained by `lm.make_task`: token embedding, L pre-norm layers
(RMSNorm, q/k/v/o projections, rotate-half RoPE, causal softmax attention, SwiGLU MLP),
final RMSNorm, untied unembedding, next-token cross-entropy, global-norm clipping and
AdamW. Written plainly (no fused kernels, no torch.compile) because the issue asks for
eager PyTorch as the reference point. Only imported when torch is installed.
"""
from __future__ import annotations

import math

import torch


def _rope(x, pos, theta):
  d = x.shape[-1]
  inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
  ang = pos[:, None].float() * inv[None, :]
  cos = torch.cat([ang, ang], -1).cos()[None, :, None, :]
  sin = torch.cat([ang, ang], -1).sin()[None, :, None, :]
  x1, x2 = x.chunk(2, dim=-1)
  return x * cos + torch.cat([-x2, x1], -1) * sin


def _rms(x, w, eps=1e-5):
  return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Decoder(torch.nn.Module):
  def __init__(self, vocab, dim, n_layers, n_heads, hidden, std=0.02):
    super().__init__()
    self.h, self.hd = n_heads, dim // n_heads
    p = lambda *s, scale=std: torch.nn.Parameter(torch.randn(*s) * scale)
    out = std / math.sqrt(2 * n_layers)
    self.embed = p(vocab, dim)
    self.layers = torch.nn.ModuleList()
    for _ in range(n_layers):
      layer = torch.nn.ParameterDict(dict(
          attn_norm=torch.nn.Parameter(torch.ones(dim)), q=p(dim, dim), k=p(dim, dim),
          v=p(dim, dim), o=p(dim, dim, scale=out), mlp_norm=torch.nn.Parameter(torch.ones(dim)),
          gate=p(dim, hidden), up=p(dim, hidden), down=p(hidden, dim, scale=out)))
      self.layers.append(layer)
    self.final_norm = torch.nn.Parameter(torch.ones(dim))
    self.unembed = p(dim, vocab)

  def forward(self, tokens):
    B, T = tokens.shape
    pos = torch.arange(T)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = self.embed[tokens]
    for p in self.layers:
      h = _rms(x, p["attn_norm"])
      q = _rope((h @ p["q"]).view(B, T, self.h, self.hd), pos, 10000.0)
      k = _rope((h @ p["k"]).view(B, T, self.h, self.hd), pos, 10000.0)
      v = (h @ p["v"]).view(B, T, self.h, self.hd)
      s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(self.hd)
      a = s.masked_fill(~mask, float("-inf")).softmax(-1)
      x = x + torch.einsum("bhts,bshd->bthd", a, v).reshape(B, T, -1) @ p["o"]
      h = _rms(x, p["mlp_norm"])
      x = x + (torch.nn.functional.silu(h @ p["gate"]) * (h @ p["up"])) @ p["down"]
    return _rms(x, self.final_norm) @ self.unembed


def make_step(vocab, dim, n_layers, n_heads, hidden, lr=3e-3):
  """A function tokens (B, T+1) int64 -> loss of one AdamW training step."""
  torch.manual_seed(0)
  model = Decoder(vocab, dim, n_layers, n_heads, hidden)
  opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)

  def step(tokens):
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                             tokens[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())

  return step
