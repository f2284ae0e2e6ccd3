"""Latent debate (arXiv 2512.01909): a quantitative bipolar argumentation framework (QBAF)
over an LLM's latent arguments, evaluated with DF-QuAD and quadratic energy.

A QBAF has arguments with base scores w in [0, 1] and two relations, attack and support.
A gradual semantics gives each argument a final strength. Both semantics here are
modular (aggregate the children, then combine with the base score):

  DF-QuAD (Rago et al. 2016): v_att = 1 - prod_{attackers}(1 - s), v_sup likewise;
    s = w - w |v_sup - v_att| if v_att >= v_sup, else w + (1 - w) |v_sup - v_att|.
  Quadratic energy (Potyka 2018): E = sum_{supporters} s - sum_{attackers} s,
    h(e) = max(e, 0)^2 / (1 + max(e, 0)^2),  s = w - w h(-E) + (1 - w) h(E).

On an acyclic graph the strengths are computed children-first; `evaluate` does it with
synchronous sweeps over all arguments (`sweeps` >= the graph's depth gives that exact
result, since an argument's strength is final once its children's are).

The debate graph (our reconstruction; the paper's exact construction is not public):
the topic argument "the statement is True" (base 0.5) has one child per layer (the
embedding is layer 0), whose value is the layer's direct logit attribution d_l =
d_attn_l + d_mlp_l: it supports the topic when d_l > 0 and attacks it when d_l < 0.
Each layer argument has two children, its attention and MLP sublayers, which support
the layer argument when their own DLA has the layer's sign and attack it otherwise (a
sublayer pushing against its own layer's verdict). Base scores are tanh(|d| / temp),
so an argument's weight grows with how hard it pushes the logit difference; `temp` is
chosen on the validation split. The surrogate's verdict is True iff the topic's final
strength exceeds its base score 0.5, False iff below, none on a tie.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def dfquad_combine(w, v_att, v_sup):
  diff = v_sup - v_att
  return jnp.where(diff <= 0, w + w * diff, w + (1 - w) * diff)


def qe_h(e):
  e = jnp.maximum(e, 0.0)
  return e * e / (1 + e * e)


def evaluate(base_xN, att_xNxN, sup_xNxN, semantics: str = "dfquad", sweeps: int = 3):
  """Final strengths (..., N); att[i, j] = 1 when argument j attacks argument i."""
  att = att_xNxN.astype(base_xN.dtype)
  sup = sup_xNxN.astype(base_xN.dtype)

  def sweep(s, _):
    if semantics == "dfquad":
      # 1 - prod_j (1 - s_j)^{A_ij}: the probabilistic sum over the children only.
      v_att = 1 - jnp.prod(jnp.where(att > 0, 1 - s[..., None, :], 1.0), -1)
      v_sup = 1 - jnp.prod(jnp.where(sup > 0, 1 - s[..., None, :], 1.0), -1)
      return dfquad_combine(base_xN, v_att, v_sup), None
    if semantics == "qe":
      energy = jnp.einsum("...ij,...j->...i", sup - att, s)
      return base_xN - base_xN * qe_h(-energy) + (1 - base_xN) * qe_h(energy), None
    raise ValueError(f"unknown semantics {semantics!r}; expected 'dfquad' or 'qe'")

  s, _ = jax.lax.scan(sweep, base_xN, None, length=sweeps)
  return s


def n_arguments(n_layers: int, children: int = 2) -> int:
  """topic + (L + 1) layer arguments + `children` sublayer arguments per layer (2: the
  attention and MLP sublayers; H + 1 with per-head arguments)."""
  return 1 + (n_layers + 1) + children * n_layers


def layer_values(dla_xA):
  """(..., 1 + 2L) [embed, attn_1, mlp_1, ...] -> (..., L + 1) per-layer DLA."""
  comp = dla_xA[..., 1:].reshape(dla_xA.shape[:-1] + (-1, 2))
  return jnp.concatenate([dla_xA[..., :1], comp.sum(-1)], -1)


def build(dla_xA, temp: float, layer_mask=None, heads_xLxH=None):
  """(base, att, sup) of the debate graph of one or more statements.

  Argument order: 0 topic, 1..L+1 layer arguments (layer 0 = embedding), then the
  sublayers (attn_1, mlp_1, ..., attn_L, mlp_L). `layer_mask` (L + 1,) of 0/1 keeps only
  some layers' arguments (a removed layer's argument and its sublayers get base 0 and
  no edges), for the layer-subset faithfulness test. With `heads_xLxH` (..., L, H), the
  per-head DLA (which adds up to each layer's attention DLA), each layer's children are
  its H heads and its MLP (in that order) instead of its two sublayers.
  """
  dla_xA = jnp.asarray(dla_xA, jnp.float32)
  lead = dla_xA.shape[:-1]
  L = (dla_xA.shape[-1] - 1) // 2
  N = n_arguments(L)
  d_layer = layer_values(dla_xA)                                # (..., L + 1)
  if heads_xLxH is None:
    children = dla_xA[..., 1:].reshape(lead + (L, 2))           # attn, mlp
  else:
    heads = jnp.asarray(heads_xLxH, jnp.float32)
    children = jnp.concatenate([heads, dla_xA[..., 2::2, None]], -1)   # heads, mlp
  C = children.shape[-1]
  N = n_arguments(L, C)
  d_comp = children.reshape(lead + (L * C,))                    # (..., C L)
  mask = jnp.ones(L + 1) if layer_mask is None else jnp.asarray(layer_mask, jnp.float32)
  mask = jnp.broadcast_to(mask, d_layer.shape)
  comp_mask = jnp.repeat(mask[..., 1:], C, axis=-1)
  base = jnp.concatenate([jnp.full(lead + (1,), 0.5),
                          jnp.tanh(jnp.abs(d_layer) / temp) * mask,
                          jnp.tanh(jnp.abs(d_comp) / temp) * comp_mask], -1)
  layer_idx = 1 + np.arange(L + 1)
  comp_idx = 2 + L + np.arange(C * L)
  comp_parent = 2 + np.arange(C * L) // C                        # layer argument of l >= 1
  att = jnp.zeros(lead + (N, N))
  sup = jnp.zeros(lead + (N, N))
  pos = (d_layer > 0) * mask
  neg = (d_layer < 0) * mask
  sup = sup.at[..., 0, layer_idx].set(pos)
  att = att.at[..., 0, layer_idx].set(neg)
  agree = jnp.sign(d_comp) == jnp.sign(d_layer[..., 1:].repeat(C, -1))
  nz = (d_comp != 0) * comp_mask
  sup = sup.at[..., comp_parent, comp_idx].set(agree * nz)
  att = att.at[..., comp_parent, comp_idx].set((~agree) * nz)
  return base, att, sup


@functools.partial(jax.jit, static_argnames=("semantics",))
def _surrogate(dla_xA, temp, semantics, layer_mask, heads):
  base, att, sup = build(dla_xA, temp, layer_mask, heads)
  s = evaluate(base, att, sup, semantics, sweeps=3)
  return s[..., 0], s


def surrogate(dla_xA, temp: float, semantics: str = "dfquad", layer_mask=None,
              heads_xLxH=None):
  """(topic strength, all strengths) of the debate over `dla_xA` (..., 1 + 2L), with
  per-head arguments when `heads_xLxH` is given (`build`).

  One compiled program per semantics and input shape (temp and mask are traced).
  """
  dla_xA = jnp.asarray(dla_xA, jnp.float32)
  L = (dla_xA.shape[-1] - 1) // 2
  mask = jnp.ones(L + 1) if layer_mask is None else jnp.asarray(layer_mask, jnp.float32)
  heads = None if heads_xLxH is None else jnp.asarray(heads_xLxH, jnp.float32)
  return _surrogate(dla_xA, jnp.float32(temp), semantics, mask, heads)


def verdict(topic_strength, tol: float = 1e-6):
  """1 (True) if the topic ends above its neutral base score 0.5, 0 (False) if below,
  -1 (no verdict) on a tie: a saturated debate, where supporters and attackers both
  aggregate to 1, decides nothing and never counts as agreeing with the model."""
  t = jnp.asarray(topic_strength)
  return jnp.where(t > 0.5 + tol, 1, jnp.where(t < 0.5 - tol, 0, -1)).astype(jnp.int32)


def depth_bins(n_layers: int, n_bins: int = 3):
  """Layers 1..L split into `n_bins` contiguous bins (early / middle / late)."""
  return np.array_split(np.arange(1, n_layers + 1), n_bins)


def features(dla_NxA, lens_NxL1, strengths_NxN, answer_N, n_bins: int = 3) -> dict:
  """Debate-pattern features of each statement, relative to the model's own answer.

  Per depth bin: the disagreement (share of the layer arguments' final strength that
  sits on the side opposite to the model's answer), the fraction of layers whose
  argument opposes the answer, and the logit-lens disagreement (fraction of layers whose
  lens reading has the opposite sign); plus sublayer conflict (fraction of sublayer
  arguments that attack their layer) and the topic's distance from 0.5.
  """
  dla = np.asarray(dla_NxA)
  L = (dla.shape[1] - 1) // 2
  d_layer = np.asarray(layer_values(jnp.asarray(dla)))
  sign_ans = np.where(np.asarray(answer_N) > 0, 1.0, -1.0)[:, None]
  s_layer = np.asarray(strengths_NxN)[:, 1:L + 2]
  oppose = (np.sign(d_layer) * sign_ans) < 0                      # (N, L + 1)
  lens_opp = (np.sign(np.asarray(lens_NxL1)) * sign_ans) < 0
  comp = dla[:, 1:].reshape(len(dla), L, 2)
  conflict = np.sign(comp) != np.sign(comp.sum(-1, keepdims=True))
  out = {}
  names = ["early", "middle", "late"] if n_bins == 3 else [f"bin{i}" for i in range(n_bins)]
  for name, layers in zip(names, depth_bins(L, n_bins)):
    st = s_layer[:, layers]
    out[f"disagree_{name}"] = (st * oppose[:, layers]).sum(1) / np.maximum(st.sum(1), 1e-9)
    out[f"oppose_frac_{name}"] = oppose[:, layers].mean(1)
    out[f"lens_disagree_{name}"] = lens_opp[:, layers].mean(1)
    out[f"conflict_{name}"] = conflict[:, layers - 1].mean((1, 2))
  out["topic_margin"] = np.abs(np.asarray(strengths_NxN)[:, 0] - 0.5)
  return out


def per_layer_disagreement(dla_NxA, strengths_NxN, answer_N) -> np.ndarray:
  """(N, L + 1): final strength of each layer argument when it opposes the answer, else 0."""
  dla = np.asarray(dla_NxA)
  L = (dla.shape[1] - 1) // 2
  d_layer = np.asarray(layer_values(jnp.asarray(dla)))
  sign_ans = np.where(np.asarray(answer_N) > 0, 1.0, -1.0)[:, None]
  return np.asarray(strengths_NxN)[:, 1:L + 2] * ((np.sign(d_layer) * sign_ans) < 0)


def head_features(head_dla_NxLxH, answer_N, n_bins: int = 3) -> dict:
  """Per depth bin: the share of the attention heads' |DLA| that pushes against the
  model's answer (head-level disagreement), and the fraction of opposing heads."""
  h = np.asarray(head_dla_NxLxH)
  L = h.shape[1]
  sign_ans = np.where(np.asarray(answer_N) > 0, 1.0, -1.0)[:, None, None]
  opp = (np.sign(h) * sign_ans) < 0
  out = {}
  names = ["early", "middle", "late"] if n_bins == 3 else [f"bin{i}" for i in range(n_bins)]
  for name, layers in zip(names, depth_bins(L, n_bins)):
    hb, ob = np.abs(h[:, layers - 1]), opp[:, layers - 1]
    out[f"head_disagree_{name}"] = (hb * ob).sum((1, 2)) / np.maximum(hb.sum((1, 2)), 1e-9)
    out[f"head_oppose_frac_{name}"] = ob.mean((1, 2))
  return out
