"""llops: the small LMs of the study, built on jaxpapers.nn's stack (no second LM stack).

BASED (Arora et al. 2024) mixes sliding-window softmax layers with global linear
attention layers; LLoPS replaces the global linear attention. Two block letters are
registered here (through `stack.build(cfg, blocks=...)`, nothing central edited):

  'W'  a Transformer layer whose attention is causal softmax over the last `window` keys
  'L'  a Transformer layer whose attention is linear attention with a feature map
       (features.py) on the LayerNorm-ed post-RoPE q and k, block-causal in linear time;
       the map's parameters live in the layer as `fm_*` leaves (class 'vector': no weight
       decay), random ones (sketch matrices, Performer's W) held fixed by stop_gradient
  'A'  the stack's Transformer layer, with the global kernel `softmax` or the exact
       degree-p `poly` (quadratic reference)

so a method is a pattern ('WL' = window layer + global linear layer) and a map name.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.nn import lm
from jaxpapers.nn import params as params_lib
from jaxpapers.nn import stack
from jaxpapers.nn.params import ParamSpec
from jaxpapers.papers.llops import features
from jaxpapers.papers.llops import linear


def wrap_phi(mp: features.Map, fm: dict):
  """x -> phi(LN x) with the map's random (frozen) parameters behind stop_gradient."""
  fm = {k: (jax.lax.stop_gradient(v) if k in mp.frozen else v) for k, v in fm.items()}
  return lambda x: mp.phi(fm, features.layer_norm(x))


def blocks_for(mp: features.Map | None, window: int, block: int):
  def map_specs(cfg, n):
    shapes = jax.eval_shape(lambda: mp.init(jax.random.PRNGKey(0), cfg.hd))
    return {f"fm_{k}": ParamSpec(tuple(v.shape), "vector", init="zeros")
            for k, v in shapes.items()}

  def lin_apply(cfg, p, x, ctx):
    fm = {k[3:]: v for k, v in p.items() if k.startswith("fm_")}
    ctx = ctx._replace(kernel=linear.feature_kernel(wrap_phi(mp, fm), mp.family, block),
                       mask=None)
    return stack.mlp_sublayer(cfg, p, stack.attention_sublayer(cfg, p, x, ctx), ctx)

  def win_apply(cfg, p, x, ctx):
    ctx = ctx._replace(kernel=linear.sliding_window_softmax(window), mask=None)
    return stack.mlp_sublayer(cfg, p, stack.attention_sublayer(cfg, p, x, ctx), ctx)

  base = stack.TRANSFORMER
  table = {**stack.DEFAULT_BLOCKS,
           "W": stack.BlockType(base.specs, win_apply, residuals=2)}
  if mp is not None:
    table["L"] = stack.BlockType(lambda c, n: {**base.specs(c, n), **map_specs(c, n)},
                                 lin_apply, residuals=2)
  return table


def global_kernel(name: str, degree: int):
  if name == "softmax":
    return "softmax"
  if name == "poly":
    key = f"llops_poly{degree}"
    from jaxpapers.nn import attention as attn_lib  # pylint: disable=g-import-not-at-top
    attn_lib.KERNELS.setdefault(
        key, lambda q, k, v, mask=None, scale=None: features.polynomial_attention(
            q, k, v, mask, scale, degree=degree))
    return key
  return "softmax"


def build(config, vocab_size: int, method: str, *, unroll: bool = False):
  """(stack.Model, lm.LMModel, Map | None) of `method` at config.model's sizes.

  Methods: 'softmax' / 'poly' (pattern with 'A' as the global layer), 'window' (every
  layer sliding-window: the no-global-attention control), or a map name of features.py
  (the global layer is 'L')."""
  m = config.model
  mp = None
  n_global = m.n_layers // 2
  if method in ("softmax", "poly"):
    pattern = "WA" * n_global
  elif method == "window":
    pattern = "WW" * n_global
  else:
    mp = features.make_map(method, m.state, m.degree, m.dim // m.n_heads)
    pattern = "WL" * n_global
  cfg = stack.StackConfig(vocab_size=vocab_size, dim=m.dim, pattern=pattern,
                          n_heads=m.n_heads, kernel=global_kernel(method, m.degree),
                          max_len=max(1024, config.data.seq_len))
  model = stack.build(cfg, blocks_for(mp, m.window, m.block))
  par = params_lib.standard(m.init_std)

  def init(rng):
    p = model.init(rng, par)
    if mp is None or "L" not in model.unit:
      return p
    layers = list(p["layers"])
    for i, c in enumerate(model.unit):
      if c != "L":
        continue
      keys = jax.random.split(jax.random.fold_in(rng, 7919 + i), model.repeats)
      fm = jax.vmap(lambda k: mp.init(k, cfg.hd))(keys)
      layers[i] = {**layers[i], **{f"fm_{k}": v for k, v in fm.items()}}
    return {**p, "layers": tuple(layers)}

  lm_model = lm.LMModel(init=init,
                        apply=lambda p, t, **kw: model.apply(p, t, unroll=unroll, **kw),
                        lr_mults=params_lib.lr_multipliers(model.specs, par),
                        decay_mask=params_lib.decay_mask(model.specs),
                        sharding_rules=stack.TENSOR_PARALLEL_RULES)
  return model, lm_model, mp


def n_params(model: stack.Model, mp=None) -> int:
  """Trainable parameters (random feature matrices excluded)."""
  total = 0
  for path, s in jax.tree_util.tree_flatten_with_path(model.specs, is_leaf=params_lib.is_spec)[0]:
    name = str(path[-1].key) if hasattr(path[-1], "key") else ""
    if mp is not None and name.startswith("fm_") and name[3:] in mp.frozen:
      continue
    total += int(np.prod(s.shape))
  return total


def collect_qkv(model: stack.Model, params, tokens_BxT, keep=None):
  """Post-RoPE (q, k, v) of the stack's global-kernel attention sublayers.

  A recording kernel replaces the model's global kernel (the 'W' layers keep their own)
  and hands its inputs out of the same jitted trace (layers unrolled). Returns
  {i: (q (B,T,H,D), k (B,T,K,D), v (B,T,K,D))} as NumPy for the i-th such sublayer
  (i in `keep`, or all)."""
  from jaxpapers.nn import attention as attn_lib  # pylint: disable=g-import-not-at-top

  def run(p, tokens):
    seen = []

    def recorder(q, k, v, mask=None, scale=None):
      seen.append((q, k, v))
      return attn_lib.softmax_attention(q, k, v, mask, scale=scale)

    model.hidden(p, tokens, kernel=recorder, unroll=True)
    return {i: x for i, x in enumerate(seen) if keep is None or i in keep}

  key = (id(model), None if keep is None else tuple(sorted(keep)))
  if key not in _COLLECT:
    _COLLECT[key] = jax.jit(run)
  return jax.tree.map(np.asarray, _COLLECT[key](params, jnp.asarray(tokens_BxT)))


_COLLECT = {}
