"""lhdlm's models on the workbench stack: a time-conditioned bidirectional denoiser
('D' blocks) for the diffusion models and the plain causal stack for the AR baseline.

'D' is the stack's pre-norm Transformer layer with adaptive RMSNorm (DiT's adaLN, as in
MDLM's DiT denoiser): the time features in ctx.cond give a per-sublayer scale, shift and
output gate through a zero-initialised linear map, so at init every 'D' layer is the
plain 'A' layer. Kinds:

  ar      causal 'A' stack, next-token nats (the workbench's objective)
  mdlm    masked diffusion, input vocab V + 1
  udlm    uniform-noise diffusion, input vocab V
  hdlm    hierarchical, fixed one-hot Gamma from size-constrained cosine k-means
  lhdlm   hierarchical, learnable Gamma (softmax over clusters of C x V logits, trained
          jointly with the denoiser by the same AdamW), + reg * I(X; C) retention term
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.nn import attention as attn_lib
from jaxpapers.nn import blocks as nn_blocks
from jaxpapers.nn import lm
from jaxpapers.nn import params as params_lib
from jaxpapers.nn import stack
from jaxpapers.nn.params import ParamSpec
from jaxpapers.papers.lhdlm import diffusion as dif

KINDS = ("ar", "mdlm", "udlm", "hdlm", "lhdlm")
COND_DIM = 32


def _d_specs(cfg: stack.StackConfig, n_residual: int) -> dict:
  s = stack.TRANSFORMER.specs(cfg, n_residual)
  # 6 modulation vectors (scale, shift, gate) x (attention, MLP) from the time features
  s["ada"] = ParamSpec((COND_DIM, 6 * cfg.dim), "hidden", COND_DIM, init="zeros")
  s["ada_b"] = ParamSpec((6 * cfg.dim,), "vector", init="zeros")
  return s


def _d_apply(cfg, p, x, ctx):
  mod = ctx.cond @ p["ada"] + p["ada_b"][None]                            # (B, 6D)
  sa, ba, ga, sm, bm, gm = [m[:, None, :] for m in jnp.split(mod, 6, axis=-1)]
  h = nn_blocks.rms_norm(x, p["attn_norm"], cfg.norm_eps) * (1 + sa) + ba
  x = x + (1 + ga) * attn_lib.multi_head(
      p, h, n_heads=cfg.n_heads, n_kv_heads=cfg.kv_heads, head_dim=cfg.hd,
      positions_BxT=ctx.positions_BxT, mask=ctx.mask, kernel=ctx.kernel,
      rope_theta=cfg.rope_theta if cfg.positions == "rope" else None,
      mask_kind=ctx.mask_kind, lengths_B=ctx.lengths_B)
  h = nn_blocks.rms_norm(x, p["mlp_norm"], cfg.norm_eps) * (1 + sm) + bm
  return x + (1 + gm) * nn_blocks.swiglu(h, p["gate"], p["up"], p["down"])


TIME_BLOCK = stack.BlockType(_d_specs, _d_apply, residuals=2)


@dataclasses.dataclass(frozen=True)
class Diffusion:
  """One model of the study: its stack, LMModel (for core.loop) and objective."""
  kind: str
  V: int
  C: int
  net: stack.Model
  lm_model: lm.LMModel
  gamma: float = 1.0
  reg: float = 0.0
  fixed_log_gamma: np.ndarray | None = None   # hdlm's one-hot map (logs)
  p_V: np.ndarray | None = None               # unigram marginal for I(X; C)
  probe: np.ndarray | None = None             # fixed windows: the two terms over training
  reg_target: float = 0.0                     # > 0: hinge reg * max(0, target - I(X; C))

  @property
  def mask_id(self) -> int:
    return self.V + self.C if self.kind in ("hdlm", "lhdlm") else self.V

  def log_gamma(self, params):
    if self.kind == "lhdlm":
      return dif.log_gamma(params["gamma"])
    return jnp.asarray(self.fixed_log_gamma)

  def logits(self, apply, params, z_BxT, t_B):
    return apply(params, z_BxT, cond=dif.time_features(t_B, COND_DIM))[..., :self.V]

  def objective(self, apply, params, tokens_BxT1, rng):
    """Per-position NELBO nats (B, T) of the last T tokens (the AR model's targets)."""
    x = tokens_BxT1[:, 1:]
    if self.kind == "ar":
      return lm.next_token_nats(apply, params, tokens_BxT1, rng)
    k_t, k_z = jax.random.split(rng)
    t = dif.sample_times(k_t, x.shape[0])
    if self.kind == "mdlm":
      z = dif.mask_forward(k_z, x, t, self.mask_id, self.gamma)
      return dif.mdlm_nats(self.logits(apply, params, z, t), x, z, t, self.mask_id, self.gamma)
    if self.kind == "udlm":
      z = dif.uniform_forward(k_z, x, t, self.V, self.gamma)
      return dif.uniform_nats(self.logits(apply, params, z, t), x, z, t, self.gamma)
    lg = self.log_gamma(params)
    z = dif.hier_forward(k_z, x, t, jax.lax.stop_gradient(lg), self.gamma)
    mt, ct = dif.hier_terms(self.logits(apply, params, z, t), x, z, t, lg, self.gamma)
    return mt + ct

  def regularizer(self, params):
    """-reg * I(X; C): the information-retention term (LHDLM only). With reg_target > 0,
    reg * max(0, target - I(X; C)): the same push away from collapse below the target and
    none above it, so that the term does not reward a hard map (I(X; C) is largest when
    every column is one-hot); the ablation of "Soft structure where a hard map cannot fit"."""
    mi = dif.mutual_information(self.log_gamma(params), jnp.asarray(self.p_V))
    if self.reg_target > 0:
      return self.reg * jax.nn.relu(self.reg_target - mi)
    return -self.reg * mi

  def train_metrics(self, params):
    if self.kind != "lhdlm":
      return {}
    lg = self.log_gamma(params)
    out = {"mi": dif.mutual_information(lg, jnp.asarray(self.p_V)),
           "col_entropy": jnp.sum(dif.column_entropy(lg) * jnp.asarray(self.p_V))}
    if self.probe is not None:  # the mask- and cluster-state terms on fixed windows and key
      x = jnp.asarray(self.probe)
      t = dif.sample_times(jax.random.PRNGKey(7), x.shape[0])
      z = dif.hier_forward(jax.random.PRNGKey(8), x, t, jax.lax.stop_gradient(lg), self.gamma)
      mt, ct = dif.hier_terms(self.logits(self.lm_model.apply, params, z, t), x, z, t, lg,
                              self.gamma)
      out["mask_term"], out["cluster_term"] = jnp.mean(mt), jnp.mean(ct)
    return jax.lax.stop_gradient(out)


def build(config, V: int, train_tokens: np.ndarray, kind: str | None = None,
          reg: float | None = None, assign: np.ndarray | None = None, probe: int = 0,
          **apply_kw) -> Diffusion:
  """The model of `kind` (default config.model.kind) for data vocabulary V.

  `assign` (hdlm): a given hard partition (token -> cluster) instead of k-means (the
  study's planted-partition HDLM). `probe` > 0 (lhdlm): log the mask- and cluster-state
  terms on that many fixed training windows each step (train_metrics)."""
  m = config.model
  kind = kind or m.kind
  reg = m.reg if reg is None else reg
  if kind not in KINDS:
    raise ValueError(f"model.kind={kind!r}; expected one of {KINDS}")
  C = m.clusters if kind in ("hdlm", "lhdlm") else 0
  vocab = V if kind in ("ar", "udlm") else V + C + 1
  cfg = stack.StackConfig(
      vocab_size=vocab, dim=m.dim, pattern=("A" if kind == "ar" else "D") * m.layers,
      n_heads=m.n_heads, positions="rope", max_len=max(1024, config.data.seq_len),
      mask="causal" if kind == "ar" else "bidirectional")
  net = stack.build(cfg, {**stack.DEFAULT_BLOCKS, "D": TIME_BLOCK})
  par = params_lib.standard(m.init_std)
  base = lm.from_stack(net, par, **apply_kw)
  counts = np.bincount(np.asarray(train_tokens), minlength=V)[:V].astype(np.float64) + 1.0
  p_V = (counts / counts.sum()).astype(np.float32)
  fixed = None
  if kind == "hdlm":
    if assign is None:
      assign = dif.hdlm_assign(train_tokens, V, C, m.kmeans_tokens, config.seed)
    fixed = np.asarray(dif.log_gamma(dif.hard_gamma_logits(assign, C)))
  if kind == "lhdlm":
    init_std = m.gamma_init_std

    def init(rng):
      k1, k2 = jax.random.split(rng)
      return {"net": base.init(k1), "gamma": init_std * jax.random.normal(k2, (C, V))}

    def apply(p, t, **kw):
      return base.apply(p["net"], t, **kw)

    lm_model = lm.LMModel(
        init=init, apply=apply,
        lr_mults={"net": base.lr_mults, "gamma": m.gamma_lr_mult},
        decay_mask={"net": base.decay_mask, "gamma": False})
  else:
    lm_model = base
  T1 = config.data.seq_len + 1
  win = (np.asarray(train_tokens[:probe * T1], np.int32).reshape(probe, T1)[:, 1:]
         if probe and kind == "lhdlm" else None)
  return Diffusion(kind, V, C, net, lm_model, m.gamma, reg if kind == "lhdlm" else 0.0,
                   fixed, p_V, win, m.reg_target)


def make_task(config, data, model: Diffusion, **kw):
  """The workbench's LM task with this model's objective (and LHDLM's regularizer)."""
  return lm.make_task(config, data, model.lm_model, objective=model.objective,
                      eval_samples=config.eval.samples,
                      regularizer=model.regularizer if model.kind == "lhdlm" else None,
                      train_metrics=model.train_metrics if model.kind == "lhdlm" else None,
                      **kw)


def n_params(model: Diffusion) -> int:
  return sum(int(np.prod(s.shape)) for s in jax.tree.leaves(
      model.net.specs, is_leaf=params_lib.is_spec)) + (
      model.C * model.V if model.kind == "lhdlm" else 0)


def net_params(model: Diffusion, params):
  return params["net"] if model.kind == "lhdlm" else params

