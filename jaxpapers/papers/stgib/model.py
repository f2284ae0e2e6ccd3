"""The spatio-temporal GNN forecaster, STGIB's mask trajectory and the trained-in baselines.

One forecaster (`kind`) per method, all on the same backbone, a graph-convolutional GRU
in the spirit of T-GCN / DCRNN: at every input step t

    fm_t  feature mask [N, C]         u_t = x_t * fm_t,  e_t = relu(u_t W_in)
    z_t = [e_t, s_{t-1}]              (input embedding and the temporal state)
    m_t  edge mask [E]                msg_e = m_t[e] * (z_t W_msg)[src_e]
    agg = segment_sum(msg, dst) / in-degree    (`jax.ops.segment_sum` over the edge list)
    s_t = GRU(relu(z_t W_self + agg), s_{t-1})
  and y_hat = last masked value + s_T W_out (12 horizons at once; residual=False: s_T W_out).

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
gib      GIB (Yu et al. 2021, subgraph recognition), per step: a soft node assignment
         S_t = softmax(W2 tanh(W1 z_t)) [N, 2]; the subgraph is S_t[:, 0], an edge carries
         its message iff both ends are in it (m_t[e] = S_t[src, 0] S_t[dst, 0]); the
         subgraph embedding S_t[:, 0]^T z_t, the graph embedding mean_i z_t[i]; a
         Donsker-Varadhan estimate of I(G; G_sub) from a discriminator trained in an inner
         loop (train.py), and the connectivity loss ||diag(rownorm(S^T A S)) - 1||^2
gwnet    Graph WaveNet (Wu et al. 2019): gated dilated causal TCN (kernel 2, dilations
         1 2 1 2 1 2 1 2, receptive field 13), diffusion graph convolution of order 2 over
         the forward / backward transition matrices and the self-adaptive adjacency
         softmax(relu(E1 E2^T)), residual and skip connections; no per-step edge mask
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("stgnn", "stgib", "gsat", "decoupled", "attention", "stid", "gib", "gwnet")
NO_MASK = ("stid", "gwnet")  # forecasters without a per-step edge mask
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
  # False: every message removed in training and at test (the no-graph forecaster, the
  # trivial model a graph forecaster must beat).
  graph: bool = True
  # GIB's weights (its code's defaults: mi_weight 0.1, pp_weight 0.3, inner_loop 50):
  # loss = (1 - pp) (MAE + mi * I_DV) + pp * connectivity.
  gib_mi: float = 0.1
  gib_pp: float = 0.3
  gib_inner: int = 50
  # The discriminator's output ReLU: GIB's graph-classification code has it (under its
  # chi-square-like estimator); its DV code (model/layers.py) does not. Under the DV bound
  # the ReLU'd output dies (pre-activation < 0 on every pair, zero gradient, DV = 0 while
  # the embeddings still carry ~3 nats: README, "GIB's DV estimate"), so off by default.
  gib_out_relu: bool = False
  # The forecast's residual shortcut y = last masked value + s_T W_out (True, every study
  # up to the sixth); False: y = s_T W_out, so the last reading is not handed to every
  # horizon for free and the model must carry what it forecasts in its state (one of the
  # levers of the `coupled` setting, review rev40 B1).
  residual: bool = True

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
  if spec.kind == "gwnet":
    return _gwnet_init(spec, k)
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
  if spec.kind == "gib":
    p["asg1"] = _dense(next(k), 2 * H, H)
    p["asg2"] = _dense(next(k), H, 2)
    # The discriminator T(g, g_sub) of the DV bound (GIB's: Linear-ReLU-Linear on the
    # concatenated embeddings); trained only by its own inner loop in train.py.
    p["disc"] = dict(l1=_dense(next(k), 4 * H, 2 * H), l2=_dense(next(k), 2 * H, 1))
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
  if spec.kind in NO_MASK:
    y = _stid(spec, params, x) if spec.kind == "stid" else _gwnet(spec, params, x, key, train)
    return y, dict(edge=jnp.ones((spec.t_in, spec.e)), feat=jnp.ones(x.shape),
                   kl=jnp.float32(0.0))
  src = jnp.asarray(spec.src, jnp.int32)
  dst = jnp.asarray(spec.dst, jnp.int32)
  N, E, H, C = spec.n, spec.e, spec.hidden, spec.channels
  T = spec.t_in
  ones_e = jnp.ones((T, E)) if override is None else override
  ones_f = jnp.ones((T, N, C)) if foverride is None else foverride
  keys = jax.random.split(key, T * 3).reshape(T, 3, -1)

  adj = None
  if spec.kind == "gib":
    adj = jnp.zeros((N, N)).at[src, dst].set(1.0)
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
    gib = (jnp.zeros((z.shape[-1],)),) * 2 + (jnp.float32(0.0),)
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
    elif spec.kind == "gib":
      S = jax.nn.softmax(_ap(params["asg2"], jnp.tanh(_ap(params["asg1"], z))), -1)
      m = S[src, 0] * S[dst, 0]
      escore = m
      gib = (z.mean(0), S[:, 0] @ z, gib_connectivity(S, adj))
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
    m = m * ov if spec.graph else jnp.zeros_like(m)
    agg = segment_message(z, m, params["msg"], src, dst, N,
                          *((params["msg_dst"], params["msg_b"]) if spec.edge_msg else ()))
    g = jax.nn.relu(_ap(params["self"], z) + agg)
    s_new = _gru(params, g, s)
    m_next = m if spec.kind == "stgib" else m_prev
    return ((s_new, m_next, fm if spec.kind == "stgib" else fm_prev),
            (escore, fscore, kl, fm, gib))

  # The chain starts at its stationary marginal: p(m_1 = 1) = r.
  init_c = (jnp.zeros((N, H)), jnp.full((E,), r), jnp.full((N, C), r))
  (s, _, _), (esc, fsc, kls, fms, gib) = jax.lax.scan(step, init_c,
                                                      (x, keys, ones_e, ones_f))
  kl = kls.sum() / T
  if spatial is not None:
    kl = kl + kl_bernoulli(spatial[0], r).mean()
  y = _ap(params["out"], s).T
  if spec.residual:
    y = (x[-1, :, 0] * fms[-1, :, 0])[None, :] + y
  aux = dict(edge=esc, feat=fsc, kl=kl)
  if spec.kind == "gib":
    aux.update(gib_g=gib[0], gib_sub=gib[1], con=gib[2].mean())
  return y, aux


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
  if spec.kind == "gib":  # the discriminator is fixed here (its own loop trains it)
    emb = (aux["gib_g"], aux["gib_sub"])
    dv = dv_bound(jax.lax.stop_gradient(params["disc"]), *emb, jax.random.fold_in(key, 7),
                  spec.gib_out_relu)
    con = aux["con"].mean()
    loss = (1 - spec.gib_pp) * (mae + spec.gib_mi * dv) + spec.gib_pp * con
    return loss, (mae, dv, jax.lax.stop_gradient(emb))
  beta = spec.beta if spec.kind in MASKED else 0.0
  return mae + beta * kl, (mae, kl, None)


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


# ------------------------------------------------------------------ GIB

def gib_connectivity(S, adj):
  """GIB's connectivity loss: MSE of diag(rownorm_L1(S^T A S)) against (1, 1).

  It is 0 when no edge joins the subgraph to its complement (both row-normalised
  diagonals are 1), so it pushes the selected nodes to form a connected block.
  """
  a = S.T @ adj @ S
  a = a / jnp.maximum(jnp.abs(a).sum(1, keepdims=True), 1e-12)
  return jnp.mean((jnp.diag(a) - 1.0) ** 2)


def gib_disc_pre(disc, g, sub):
  """The discriminator's pre-activations: hidden [..., 2H] and output [...]."""
  hp = _ap(disc["l1"], jnp.concatenate([g, sub], -1))
  return hp, _ap(disc["l2"], jax.nn.relu(hp))[..., 0]


def gib_disc(disc, g, sub, out_relu=False):
  """GIB's discriminator T(g, g_sub) = l2(relu(l1([g, g_sub]))) (its DV code); with
  out_relu the relu of its output as its graph-classification code has it."""
  t = gib_disc_pre(disc, g, sub)[1]
  return jax.nn.relu(t) if out_relu else t


def dv_bound(disc, g, sub, key, out_relu=False):
  """Donsker-Varadhan bound I(G; G_sub) >= E_joint[T] - log E_marginal[e^T].

  g, sub [..., D]: pairs from the same window and step are joint samples; the marginal
  pairs the subgraph embeddings with the graph embeddings shuffled (GIB's randperm).
  """
  g = g.reshape(-1, g.shape[-1])
  sub = sub.reshape(-1, sub.shape[-1])
  perm = jax.random.permutation(key, g.shape[0])
  joint = gib_disc(disc, g, sub, out_relu)
  margin = gib_disc(disc, g[perm], sub, out_relu)
  return joint.mean() - (jax.nn.logsumexp(margin) - jnp.log(margin.shape[0]))


# ------------------------------------------------------------------ Graph WaveNet

GWN_BLOCKS = 4  # 4 blocks of 2 layers, dilations 1 and 2: receptive field 1 + 4 * 3 = 13
GWN_DILATIONS = (1, 2)
GWN_EMB = 10  # node-embedding size of the adaptive adjacency (Graph WaveNet's)


def _gwnet_init(spec, k):
  """Residual = dilation channels = hidden, skip = 4 hidden, end = 8 hidden (Graph
  WaveNet's 32 / 32 / 256 / 512 at hidden 32, scaled with our hidden size). Layer
  parameters are stacked [blocks, 2 layers, ...]."""
  H, C = spec.hidden, spec.channels
  S, Q = 4 * H, 8 * H
  L = (GWN_BLOCKS, len(GWN_DILATIONS))
  kk = jax.random.split(next(k), 4)
  layers = dict(
      filt=jax.random.normal(kk[0], L + (2, H, H)) * np.sqrt(1.0 / (2 * H)),
      gate=jax.random.normal(kk[1], L + (2, H, H)) * np.sqrt(1.0 / (2 * H)),
      fb=jnp.zeros(L + (H,)), gb=jnp.zeros(L + (H,)),
      skip=dict(w=jax.random.normal(kk[2], L + (H, S)) * np.sqrt(1.0 / H),
                b=jnp.zeros(L + (S,))),
      gcn=dict(w=jax.random.normal(kk[3], L + (7 * H, H)) * np.sqrt(1.0 / (7 * H)),
               b=jnp.zeros(L + (H,))))  # input [x, 3 supports x order 2]
  return dict(start=_dense(next(k), C, H), layers=layers,
              e1=jax.random.normal(next(k), (spec.n, GWN_EMB)),
              e2=jax.random.normal(next(k), (GWN_EMB, spec.n)),
              end1=_dense(next(k), S, Q), end2=_dense(next(k), Q, spec.t_out))


def gwnet_supports(spec, params):
  """[3, N, N]: forward and backward transition matrices and the adaptive adjacency,
  each applied as x'[w] = sum_v x[v] P[v, w] (Graph WaveNet's nconv)."""
  n = spec.n
  src = jnp.asarray(spec.src, jnp.int32)
  dst = jnp.asarray(spec.dst, jnp.int32)
  a = jnp.zeros((n, n)).at[src, dst].set(1.0)
  fwd = a / jnp.maximum(a.sum(1, keepdims=True), 1e-12)
  bwd = a.T / jnp.maximum(a.T.sum(1, keepdims=True), 1e-12)
  adp = jax.nn.softmax(jax.nn.relu(params["e1"] @ params["e2"]), axis=1)
  return jnp.stack([fwd, bwd, adp])


def _gwnet(spec, params, x, key, train, dropout=0.3):
  """Graph WaveNet's forward: valid dilated convolutions that shrink the padded window
  13 -> 12 -> 10 -> 9 -> 7 -> 6 -> 4 -> 3 -> 1 (kernel 2), each followed by the
  diffusion convolution, dropout and the residual; skips from every layer's last step."""
  sup = gwnet_supports(spec, params)
  h = _ap(params["start"], x)  # [T, N, H]
  h = jnp.concatenate([jnp.zeros_like(h[:1]), h])  # padded to the receptive field 13
  skip = 0.0
  for b in range(GWN_BLOCKS):
    for j, d in enumerate(GWN_DILATIONS):
      lp = jax.tree.map(lambda v: v[b, j], params["layers"])  # pylint: disable=cell-var-from-loop
      res = h
      f = jnp.tanh(h[:-d] @ lp["filt"][0] + h[d:] @ lp["filt"][1] + lp["fb"][None, None])
      g = jax.nn.sigmoid(h[:-d] @ lp["gate"][0] + h[d:] @ lp["gate"][1] + lp["gb"][None, None])
      u = f * g
      skip = skip + _ap(lp["skip"], u[-1])  # only the last step reaches the output
      x1 = jnp.einsum("tvc,svw->stwc", u, sup)  # order 1 and 2 over the 3 supports
      x2 = jnp.einsum("stvc,svw->stwc", x1, sup)
      outs = jnp.concatenate([u[None], jnp.stack([x1, x2], 1).reshape((-1,) + u.shape)])
      h = _ap(lp["gcn"], jnp.moveaxis(outs, 0, -2).reshape(u.shape[:-1] + (-1,)))
      if train and dropout > 0:
        keep = jax.random.bernoulli(jax.random.fold_in(key, 2 * b + j), 1 - dropout, h.shape)
        h = jnp.where(keep, h / (1 - dropout), 0.0)
      h = h + res[-h.shape[0]:]
  out = _ap(params["end2"], jax.nn.relu(_ap(params["end1"], jax.nn.relu(skip))))
  return out.T  # [t_out, N]
