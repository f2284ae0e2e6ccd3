"""The spatio-temporal GNN forecaster, STGIB's mask trajectory and the trained-in baselines.

One forecaster (`kind`) per method, all on the same backbone, a graph-convolutional GRU
in the spirit of T-GCN / DCRNN: at every input step t

    fm_t  feature mask [N, C]         u_t = x_t * fm_t,  e_t = relu(u_t W_in)
    z_t = [e_t, s_{t-1}]              (input embedding and the temporal state)
    m_t  edge mask [E]                msg_e = m_t[e] * (z_t W_msg)[src_e]
    agg = segment_sum(msg, dst) / in-degree    (`jax.ops.segment_sum` over the edge list)
    s_t = GRU(relu(z_t W_self + agg), s_{t-1})
  and y_hat = last masked value + s_T W_out (12 horizons at once).

kind     where m_t and fm_t come from
stgnn    1 (the backbone without a bottleneck; post-hoc explainers run on it)
stgib    a recursive stochastic trajectory: q(m_t | m_{t-1}, z_t) = Bernoulli(sigmoid(
         MLP[z_t[src], z_t[dst], m_{t-1}])) and q(fm_t | fm_{t-1}, x_t, s_{t-1}), relaxed
         Bernoulli samples in training, probabilities at test; KL to a Markov prior
         p(m_t = 1 | m_{t-1}) = r (1 - kappa) + kappa m_{t-1}, summed step by step
gsat     GSAT: Bernoulli(sigmoid(MLP[z[src], z[dst]])) per step, no recursion, KL to
         Bernoulli(r) with GSAT's r schedule; edges only
decoupled STExplainer-style: a static spatial mask from time-pooled inputs times a per-node
         temporal mask, each with its own KL to Bernoulli(r)
attention GAT-style softmax attention over each node's in-edges (times the in-degree, so
         uniform attention is the backbone); the weights are the explanation
stid     STID (Shao et al. 2022): spatial / time-of-day identity embeddings + MLP; no graph
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("stgnn", "stgib", "gsat", "decoupled", "attention", "stid")
MASKED = ("stgib", "gsat", "decoupled")  # kinds with a KL term
EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class Spec:
  kind: str
  n: int
  src: tuple
  dst: tuple
  hidden: int = 32
  t_in: int = 12
  t_out: int = 12
  channels: int = 4
  temp: float = 1.0  # relaxed-Bernoulli temperature (GSAT's default)
  kappa: float = 0.8  # persistence of STGIB's Markov prior
  beta: float = 1.0  # weight of the compression (KL) term
  feature_masks: bool = True  # STGIB's feature-mask chain
  recursive: bool = True  # STGIB's q(m_t | m_{t-1}); False = an ablation
  final_r: float = 0.7  # the prior's keep rate after GSAT's schedule (GSAT's default 0.7)
  # Node-identity embeddings (as STID / Graph WaveNet) and an edge-conditioned message:
  # without them every out-edge of a node carries the same message and no edge can be
  # told from another, so no model can learn which edges are causal when.
  edge_msg: bool = False
  # DropEdge in training (each step-edge message dropped with this probability): removing
  # edges at test time (fidelity) is then in distribution, so fid+ measures the
  # information an edge carries rather than the shock of an unseen input.
  edge_drop: float = 0.0

  @property
  def e(self) -> int:
    return len(self.src)


# ------------------------------------------------------------------ closed forms

def kl_bernoulli(p, q):
  """KL(Bernoulli(p) || Bernoulli(q)), elementwise."""
  p = jnp.clip(p, EPS, 1 - EPS)
  q = jnp.clip(q, EPS, 1 - EPS)
  return p * jnp.log(p / q) + (1 - p) * jnp.log((1 - p) / (1 - q))


def markov_prior(m_prev, r, kappa):
  """p(m_t = 1 | m_{t-1}): a sticky chain whose stationary marginal is r."""
  return r * (1 - kappa) + kappa * m_prev


def relaxed_bernoulli(key, p, temp):
  """A Concrete / Gumbel-sigmoid sample (Maddison et al. 2017) of Bernoulli(p)."""
  u = jax.random.uniform(key, jnp.shape(p), minval=EPS, maxval=1 - EPS)
  logit = jnp.log(jnp.clip(p, EPS, 1 - EPS)) - jnp.log1p(-jnp.clip(p, EPS, 1 - EPS))
  return jax.nn.sigmoid((logit + jnp.log(u) - jnp.log1p(-u)) / temp)


def segment_message(z, m, w_msg, src, dst, n, w_dst=None, b_msg=None):
  """sum_{e: dst_e = i} m_e msg_e / indeg_i: the masked mean over in-edges.

  msg_e = (z W)[src_e] (a GCN message, the same for every out-edge of src), or with w_dst
  the edge-conditioned MPNN message relu((z W)[src_e] + (z W_dst)[dst_e] + b), which can
  weigh each edge by both endpoints' state (and so learn which edges carry when).
  """
  msg = (z @ w_msg)[src]
  if w_dst is not None:
    msg = jax.nn.relu(msg + (z @ w_dst)[dst] + b_msg[None, :])
  msg = msg * m[:, None]
  deg = jax.ops.segment_sum(jnp.ones_like(m), dst, num_segments=n)
  return jax.ops.segment_sum(msg, dst, num_segments=n) / jnp.maximum(deg, 1.0)[:, None]


# ------------------------------------------------------------------ parameters

def _dense(key, fan_in, fan_out):
  return dict(w=jax.random.normal(key, (fan_in, fan_out)) * np.sqrt(1.0 / fan_in),
              b=jnp.zeros((fan_out,)))


def _ap(p, x):
  y = x @ p["w"]
  return y + p["b"].reshape((1,) * (y.ndim - 1) + (-1,))


def init(spec: Spec, key):
  H, C = spec.hidden, spec.channels
  k = iter(jax.random.split(key, 16))
  if spec.kind == "stid":
    D = H
    return dict(ts=_dense(next(k), spec.t_in, D),
                node=jax.random.normal(next(k), (spec.n, D)) * 0.1,
                tod=jax.random.normal(next(k), (288, D)) * 0.1,
                mlp=[dict(a=_dense(next(k), 3 * D, 3 * D), b=_dense(next(k), 3 * D, 3 * D))
                     for _ in range(3)],
                out=_dense(next(k), 3 * D, spec.t_out))
  p = dict(inp=_dense(next(k), C, H), msg=jax.random.normal(next(k), (2 * H, H)) *
           np.sqrt(1.0 / (2 * H)), self=_dense(next(k), 2 * H, H),
           gru_x=_dense(next(k), H, 3 * H), gru_h=_dense(next(k), H, 3 * H),
           out=_dense(next(k), H, spec.t_out))
  p["out"]["w"] = p["out"]["w"] * 0.1
  if spec.edge_msg:
    p["node"] = jax.random.normal(next(k), (spec.n, H)) * 0.1
    p["msg_dst"] = jax.random.normal(next(k), (2 * H, H)) * np.sqrt(1.0 / (2 * H))
    p["msg_b"] = jnp.zeros((H,))
  if spec.kind in ("stgib", "gsat"):
    extra = 1 if spec.kind == "stgib" and spec.recursive else 0
    p["mask1"] = _dense(next(k), 4 * H + extra, H)
    p["mask2"] = _dense(next(k), H, 1)
  if spec.kind == "stgib" and spec.feature_masks:
    p["fmask"] = _dense(next(k), C + H + (C if spec.recursive else 0), C)
  if spec.kind == "decoupled":
    p["spat_in"] = _dense(next(k), C, H)
    p["spat1"] = _dense(next(k), 2 * H, H)
    p["spat2"] = _dense(next(k), H, 1)
    p["temp1"] = _dense(next(k), 2 * H, 1)
  if spec.kind == "attention":
    p["att_src"] = jax.random.normal(next(k), (2 * H,)) * 0.1
    p["att_dst"] = jax.random.normal(next(k), (2 * H,)) * 0.1
  return p


def _gru(p, x, h):
  gx = _ap(p["gru_x"], x)
  gh = _ap(p["gru_h"], h)
  H = h.shape[-1]
  r = jax.nn.sigmoid(gx[:, :H] + gh[:, :H])
  u = jax.nn.sigmoid(gx[:, H:2 * H] + gh[:, H:2 * H])
  c = jnp.tanh(gx[:, 2 * H:] + r * gh[:, 2 * H:])
  return u * h + (1 - u) * c


# ------------------------------------------------------------------ forward

def forward(spec: Spec, params, x, key, r, train: bool, override=None, foverride=None):
  """One window x [t_in, N, C] -> (y_hat [t_out, N] in z units, aux).

  aux: edge [t_in, E] and feat [t_in, N, C] explanation scores (the mask probabilities,
  attention weights, or ones), kl (the method's compression term, a scalar).
  override / foverride multiply the method's own masks (fidelity, post-hoc explainers).
  """
  if spec.kind == "stid":
    return _stid(spec, params, x), dict(edge=jnp.ones((spec.t_in, spec.e)),
                                        feat=jnp.ones(x.shape), kl=jnp.float32(0.0))
  src = jnp.asarray(spec.src, jnp.int32)
  dst = jnp.asarray(spec.dst, jnp.int32)
  N, E, H, C = spec.n, spec.e, spec.hidden, spec.channels
  T = spec.t_in
  ones_e = jnp.ones((T, E)) if override is None else override
  ones_f = jnp.ones((T, N, C)) if foverride is None else foverride
  keys = jax.random.split(key, T * 3).reshape(T, 3, -1)

  spatial = None
  if spec.kind == "decoupled":  # the static spatial half, from time-pooled inputs
    zbar = jax.nn.relu(_ap(params["spat_in"], x.mean(0)))
    ps = jax.nn.sigmoid(_ap(params["spat2"], jax.nn.relu(
        _ap(params["spat1"], jnp.concatenate([zbar[src], zbar[dst]], -1)))))[:, 0]
    ms = relaxed_bernoulli(keys[0, 2], ps, spec.temp) if train else ps
    spatial = (ps, ms)

  def step(carry, inp):
    s, m_prev, fm_prev = carry
    x_t, k_t, ov, fov = inp
    kl = jnp.float32(0.0)
    fm = jnp.ones((N, C))
    if spec.kind == "stgib" and spec.feature_masks:
      fin = [x_t, s] + ([fm_prev] if spec.recursive else [])
      q = jax.nn.sigmoid(_ap(params["fmask"], jnp.concatenate(fin, -1)))
      fm = relaxed_bernoulli(k_t[1], q, spec.temp) if train else q
      pri = markov_prior(fm_prev, r, spec.kappa) if spec.recursive else r
      kl = kl + kl_bernoulli(q, pri).mean()
      fscore = q
    else:
      fscore = jnp.ones((N, C))
    fm = fm * fov
    u = x_t * fm
    e_t = _ap(params["inp"], u)
    e_t = jax.nn.relu(e_t + params["node"] if spec.edge_msg else e_t)
    z = jnp.concatenate([e_t, s], -1)
    escore = jnp.ones((E,))
    m = jnp.ones((E,))
    if spec.kind in ("stgib", "gsat"):
      feats = [z[src], z[dst]]
      if spec.kind == "stgib" and spec.recursive:
        feats.append(m_prev[:, None])
      p = jax.nn.sigmoid(_ap(params["mask2"], jax.nn.relu(
          _ap(params["mask1"], jnp.concatenate(feats, -1)))))[:, 0]
      m = relaxed_bernoulli(k_t[0], p, spec.temp) if train else p
      if spec.kind == "stgib" and spec.recursive:
        pri = markov_prior(m_prev, r, spec.kappa)
      else:
        pri = r
      kl = kl + kl_bernoulli(p, pri).mean()
      escore = p
    elif spec.kind == "decoupled":
      ps, ms = spatial
      pt = jax.nn.sigmoid(_ap(params["temp1"], z))[:, 0]  # per node and step
      mt = relaxed_bernoulli(k_t[0], pt, spec.temp) if train else pt
      m = ms * mt[dst]
      kl = kl + kl_bernoulli(pt, r).mean()
      escore = ps * pt[dst]
    elif spec.kind == "attention":
      a = jax.nn.leaky_relu(z[src] @ params["att_src"] + z[dst] @ params["att_dst"], 0.2)
      amax = jax.ops.segment_max(a, dst, num_segments=N)
      ea = jnp.exp(a - amax[dst])
      alpha = ea / jax.ops.segment_sum(ea, dst, num_segments=N)[dst]
      deg = jax.ops.segment_sum(jnp.ones((E,)), dst, num_segments=N)
      m = alpha * deg[dst]
      escore = alpha
    if train and spec.edge_drop > 0:
      keep = jax.random.uniform(jax.random.fold_in(k_t[2], 1), (E,)) >= spec.edge_drop
      m = m * keep
    m = m * ov
    agg = segment_message(z, m, params["msg"], src, dst, N,
                          *((params["msg_dst"], params["msg_b"]) if spec.edge_msg else ()))
    g = jax.nn.relu(_ap(params["self"], z) + agg)
    s_new = _gru(params, g, s)
    m_next = m if spec.kind == "stgib" else m_prev
    return (s_new, m_next, fm if spec.kind == "stgib" else fm_prev), (escore, fscore, kl, fm)

  # The chain starts at its stationary marginal: p(m_1 = 1) = r.
  init_c = (jnp.zeros((N, H)), jnp.full((E,), r), jnp.full((N, C), r))
  (s, _, _), (esc, fsc, kls, fms) = jax.lax.scan(step, init_c, (x, keys, ones_e, ones_f))
  kl = kls.sum() / T
  if spatial is not None:
    kl = kl + kl_bernoulli(spatial[0], r).mean()
  last = x[-1, :, 0] * fms[-1, :, 0]
  y = last[None, :] + _ap(params["out"], s).T
  return y, dict(edge=esc, feat=fsc, kl=kl)


def _stid(spec, params, x):
  ang = jnp.arctan2(x[-1, 0, 1], x[-1, 0, 2])
  slot = jnp.mod(jnp.round(ang / (2 * jnp.pi) * 288), 288).astype(jnp.int32)
  ts = _ap(params["ts"], x[:, :, 0].T)  # [N, D]
  h = jnp.concatenate([ts, params["node"], jnp.broadcast_to(params["tod"][slot], ts.shape)], -1)
  for layer in params["mlp"]:
    h = h + _ap(layer["b"], jax.nn.relu(_ap(layer["a"], h)))
  return _ap(params["out"], h).T


def loss_fn(spec: Spec, params, x, yz, valid, key, r):
  """Masked MAE in z units (predictive sufficiency) + beta * the KL bound (compression)."""
  keys = jax.random.split(key, x.shape[0])
  y, aux = jax.vmap(lambda xi, ki: forward(spec, params, xi, ki, r, True))(x, keys)
  mae = jnp.sum(jnp.abs(y - yz) * valid) / jnp.maximum(valid.sum(), 1.0)
  kl = aux["kl"].mean()
  beta = spec.beta if spec.kind in MASKED else 0.0
  return mae + beta * kl, (mae, kl)


def gsat_r(step, steps, final_r=0.7, init_r=0.9, decay_r=0.1, intervals=10):
  """GSAT's schedule: r decays by decay_r every steps/intervals steps down to final_r."""
  interval = max(steps // intervals, 1)
  return jnp.maximum(init_r - decay_r * (step // interval), final_r)


def recursive_bound(q1, q_tab, r, kappa):
  """sum_t E_{q(m_{t-1})} KL(q(m_t | m_{t-1}) || p(m_t | m_{t-1})) for one binary chain.

  q1 = q(m_1 = 1); q_tab [T-1, 2]: q(m_t = 1 | m_{t-1} = 0 / 1). The expectation uses the
  chain's exact marginals (the training objective estimates it with the sampled m_{t-1}).
  By the chain rule of KL this equals KL(q(m_{1:T}) || p(m_{1:T})) (tested by brute force
  and Monte Carlo).
  """
  total = kl_bernoulli(q1, r)
  marg = q1
  for t in range(q_tab.shape[0]):
    k0 = kl_bernoulli(q_tab[t, 0], markov_prior(0.0, r, kappa))
    k1 = kl_bernoulli(q_tab[t, 1], markov_prior(1.0, r, kappa))
    total = total + (1 - marg) * k0 + marg * k1
    marg = (1 - marg) * q_tab[t, 0] + marg * q_tab[t, 1]
  return total
