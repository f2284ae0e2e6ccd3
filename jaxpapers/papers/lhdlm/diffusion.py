"""The forward processes and closed-form continuous-time ELBOs of lhdlm's models.

State ids of one position (the denoiser's input vocabulary, V data tokens, C clusters):
  0..V-1 clean tokens, V..V+C-1 clusters, V+C the mask.

Hierarchical process (HDLM, arXiv 2510.08632; LHDLM's many-to-many version): a CTMC
token -> cluster -> mask whose two jumps both have rate lam(t) = gamma / (1 - t); the jump
out of token x lands in cluster c with probability Gamma[c, x] (Gamma column-stochastic,
C x V; HDLM's hard clusters are a one-hot Gamma). Its marginals are
  q(z_t = x) = alpha_t = (1-t)^gamma,   q(z_t = c) = c_t Gamma[c, x],
  c_t = -gamma (1-t)^gamma ln(1-t),     q(z_t = mask) = m_t = 1 - alpha_t - c_t,
(gamma = 1: c_t = -(1-t) ln(1-t), m_t = t + (1-t) ln(1-t), as in HDLM).

The model's reverse process is the true reverse CTMC with x replaced by the denoiser's
posterior p(x | z_t) proportional to xhat_x q(z_t | x) (for masks: xhat; inside cluster c:
xhat restricted to c, xhat_v Gamma[c, v] / (Gamma xhat)_c). The CT-ELBO (Campbell et al.
2022) is the integral over t of the generalized KL between true and model reverse rates,
which here has the closed form (per position, nats)
  mask:        w_m(t) KL(Gamma[:, x] || Gamma xhat),            w_m = m'_t / m_t = lam c_t / m_t
  cluster c:   w_c(t) [-log xhat_x - log Gamma[c,x] + log (Gamma xhat)_c],  w_c = -alpha'_t / c_t
  clean:       0.
With a one-hot Gamma the mask term is HDLM's w_m [-log P(c(x))], P(c) = sum_{v in c} xhat_v,
and the cluster term HDLM's w_c [-log xhat_x + log P(c(x))].

MDLM (Sahoo et al. 2024): absorbing masks with alpha_t = (1-t)^gamma (gamma = 1: the
log-linear schedule), NELBO = E_t w(t) sum over masked positions -log xhat_x,
w = -alpha'_t / (1 - alpha_t) (= 1/t for gamma = 1).

Uniform-noise diffusion (UDLM, Schiff et al. 2024 / SEDD-uniform): q(z_t | x) = alpha_t e_x
+ (1 - alpha_t) / V, forward rates beta/V between every pair (beta = -alpha'/alpha); the same
construction of the model's reverse rates gives R_hat(z -> y) = beta/V q_t(y|xhat)/q_t(z|xhat)
and the loss sum_{y != z} D(R(z->y|x) || R_hat(z->y)), D(a||b) = a log(a/b) - a + b.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

T_EPS = 1e-4  # t is drawn from [T_EPS, 1 - T_EPS]: the weights are singular at both ends


# --- schedules -------------------------------------------------------------------------

def alpha(t, gamma=1.0):
  return jnp.exp(gamma * jnp.log1p(-t))


def hier_schedule(t, gamma=1.0):
  """(alpha_t, c_t, m_t, lam_t) of the hierarchical process."""
  a = alpha(t, gamma)
  c = -gamma * a * jnp.log1p(-t)
  m = -jnp.expm1(gamma * jnp.log1p(-t)) - c
  return a, c, m, gamma / (1.0 - t)


def sample_times(rng, batch: int):
  """Low-discrepancy times (MDLM): (u + i/B) mod 1, mapped into [T_EPS, 1 - T_EPS]."""
  u = jax.random.uniform(rng, ())
  t = jnp.mod(u + jnp.arange(batch) / batch, 1.0)
  return T_EPS + (1 - 2 * T_EPS) * t


def time_features(t_B, dim: int = 32):
  """Sinusoidal features of t (B, dim): the denoiser's conditioning input."""
  freqs = jnp.exp(-jnp.log(1000.0) * jnp.arange(dim // 2) / (dim // 2))
  ang = 1000.0 * t_B[:, None] * freqs[None, :]
  return jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)


# --- Gamma ------------------------------------------------------------------------------

def log_gamma(logits_CxV):
  """Column-stochastic Gamma as logs: a softmax over clusters of each token's column."""
  return jax.nn.log_softmax(logits_CxV, axis=0)


def hard_gamma_logits(assign_V, n_clusters: int, scale: float = 30.0):
  """Logits whose Gamma is (numerically) the one-hot map of a hard assignment."""
  onehot = jax.nn.one_hot(jnp.asarray(assign_V), n_clusters).T
  return scale * (onehot - 1.0)


def mutual_information(log_gamma_CxV, p_V):
  """I(X; C) in nats when X ~ p_V and C | X ~ Gamma[:, X] (the retention regularizer)."""
  g = jnp.exp(log_gamma_CxV)
  pc = g @ p_V
  joint = g * p_V[None, :]
  return jnp.sum(joint * (log_gamma_CxV - jnp.log(pc + 1e-30)[:, None]))


def column_entropy(log_gamma_CxV):
  """H(Gamma[:, x]) per token (V,), nats."""
  return -jnp.sum(jnp.exp(log_gamma_CxV) * log_gamma_CxV, axis=0)


# --- forward sampling --------------------------------------------------------------------

def hier_forward(rng, x_BxT, t_B, log_gamma_CxV, gamma=1.0):
  """z_t of the hierarchical process: ids in [0, V + C] (see the module docstring)."""
  C, V = log_gamma_CxV.shape
  a, c, _, _ = hier_schedule(t_B, gamma)
  k1, k2 = jax.random.split(rng)
  u = jax.random.uniform(k1, x_BxT.shape)
  cl = jax.random.categorical(k2, log_gamma_CxV.T[x_BxT], axis=-1)  # c ~ Gamma[:, x]
  z = jnp.where(u < a[:, None], x_BxT,
                jnp.where(u < (a + c)[:, None], V + cl, V + C))
  return z


def mask_forward(rng, x_BxT, t_B, mask_id: int, gamma=1.0):
  a = alpha(t_B, gamma)
  u = jax.random.uniform(rng, x_BxT.shape)
  return jnp.where(u < a[:, None], x_BxT, mask_id)


def uniform_forward(rng, x_BxT, t_B, V: int, gamma=1.0):
  a = alpha(t_B, gamma)
  k1, k2 = jax.random.split(rng)
  u = jax.random.uniform(k1, x_BxT.shape)
  noise = jax.random.randint(k2, x_BxT.shape, 0, V)
  return jnp.where(u < a[:, None], x_BxT, noise)


# --- closed-form per-position losses ------------------------------------------------------

def hier_terms(logits_BxTxV, x_BxT, z_BxT, t_B, log_gamma_CxV, gamma=1.0):
  """(mask-state nats, cluster-state nats), each (B, T), zero where the state differs."""
  C, V = log_gamma_CxV.shape
  logp = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32), axis=-1)
  a, c, m, lam = hier_schedule(t_B, gamma)
  w_m = (lam * c / m)[:, None]
  w_c = (lam * a / c)[:, None]
  # log (Gamma xhat)_c for every position: (B, T, C). A max-shifted matmul, not a
  # logsumexp over a (B, T, C, V) broadcast, which at the paper's size (V = 50257, C = 64)
  # needs ~1 TB per device; the shift keeps it exact to float32 rounding.
  shift = jax.lax.stop_gradient(jnp.max(logp, axis=-1, keepdims=True))
  gmax = jax.lax.stop_gradient(jnp.max(log_gamma_CxV, axis=-1, keepdims=True))  # (C, 1)
  gx = jnp.exp(logp - shift) @ jnp.exp(log_gamma_CxV - gmax).T
  log_gx = jnp.log(jnp.maximum(gx, 1e-37)) + shift + gmax.T[None]
  lg_x = log_gamma_CxV.T[x_BxT]                                      # (B, T, C) log Gamma[:, x]
  kl = jnp.sum(jnp.exp(lg_x) * (lg_x - log_gx), axis=-1)
  is_mask = z_BxT == V + C
  is_cl = (z_BxT >= V) & ~is_mask
  cidx = jnp.clip(z_BxT - V, 0, C - 1)
  logp_x = jnp.take_along_axis(logp, x_BxT[..., None], -1)[..., 0]
  lgc = jnp.take_along_axis(lg_x, cidx[..., None], -1)[..., 0]
  lgxc = jnp.take_along_axis(log_gx, cidx[..., None], -1)[..., 0]
  mask_term = jnp.where(is_mask, w_m * kl, 0.0)
  cl_term = jnp.where(is_cl, w_c * (-logp_x - lgc + lgxc), 0.0)
  return mask_term, cl_term


def mdlm_nats(logits_BxTxV, x_BxT, z_BxT, t_B, mask_id: int, gamma=1.0):
  logp = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32), axis=-1)
  a = alpha(t_B, gamma)
  w = (gamma * a / (1 - t_B) / (1 - a))[:, None]                   # -alpha' / (1 - alpha)
  nll = -jnp.take_along_axis(logp, x_BxT[..., None], -1)[..., 0]
  return jnp.where(z_BxT == mask_id, w * nll, 0.0)


def uniform_nats(logits_BxTxV, x_BxT, z_BxT, t_B, gamma=1.0):
  V = logits_BxTxV.shape[-1]
  xhat = jax.nn.softmax(logits_BxTxV.astype(jnp.float32), axis=-1)
  a = alpha(t_B, gamma)[:, None, None]
  b = (1 - a) / V
  beta = (gamma / (1 - t_B))[:, None]
  qm = a * xhat + b                                                  # q_t(. | xhat)
  qx = a * jax.nn.one_hot(x_BxT, V) + b                              # q_t(. | x)
  qm_z = jnp.take_along_axis(qm, z_BxT[..., None], -1)
  qx_z = jnp.take_along_axis(qx, z_BxT[..., None], -1)
  r_hat = qm / qm_z
  r = qx / qx_z
  d = r * (jnp.log(r) - jnp.log(r_hat)) - r + r_hat
  d = jnp.where(jax.nn.one_hot(z_BxT, V, dtype=bool), 0.0, d)
  return beta / V * jnp.sum(d, axis=-1)


# --- HDLM's clusters: size-constrained cosine k-means ------------------------------------

def constrained_kmeans(emb_VxD: np.ndarray, n_clusters: int, iters: int = 30,
                       seed: int = 0, used: np.ndarray | None = None) -> np.ndarray:
  """Cosine k-means with every cluster holding at most ceil(V / C) tokens (HDLM).

  Assignment step: tokens are placed greedily in order of decreasing similarity to their
  best centroid, each into its most similar cluster with room left (a standard balanced
  k-means heuristic); update step: normalized mean of each cluster's members.
  `used` (bool, V): cluster only these tokens (the size cap counts them alone); the others
  (a byte vocabulary's never-seen values: no co-occurrence vector) are dealt round the
  clusters. Without it, 187 unused byte values filled half of Shakespeare's 8 clusters.
  """
  if used is not None and not np.all(used):
    idx = np.flatnonzero(used)
    if len(idx) < n_clusters:
      raise ValueError(f"{len(idx)} used tokens cannot fill {n_clusters} clusters")
    out = np.empty(emb_VxD.shape[0], np.int64)
    out[idx] = constrained_kmeans(emb_VxD[idx], n_clusters, iters, seed)
    rest = np.flatnonzero(~np.asarray(used))
    out[rest] = np.arange(len(rest)) % n_clusters
    return out
  V = emb_VxD.shape[0]
  x = emb_VxD / (np.linalg.norm(emb_VxD, axis=1, keepdims=True) + 1e-12)
  cap = -(-V // n_clusters)
  rng = np.random.default_rng(seed)
  cent = x[rng.choice(V, n_clusters, replace=False)]
  assign = np.zeros(V, np.int64)
  for _ in range(iters):
    sim = x @ cent.T
    order = np.argsort(-sim.max(1))
    room = np.full(n_clusters, cap)
    new = np.empty(V, np.int64)
    for v in order:
      for c in np.argsort(-sim[v]):
        if room[c] > 0:
          new[v] = c
          room[c] -= 1
          break
    for c in range(n_clusters):
      mem = x[new == c]
      if len(mem):
        cent[c] = mem.sum(0) / (np.linalg.norm(mem.sum(0)) + 1e-12)
    if np.array_equal(new, assign):
      break
    assign = new
  return assign


def hdlm_assign(train_tokens: np.ndarray, V: int, n_clusters: int, n_tokens: int,
                seed: int) -> np.ndarray:
  """HDLM's fixed clusters (V,): k-means over the tokens the first `n_tokens` training tokens use."""
  sample = np.asarray(train_tokens[:n_tokens])
  used = np.bincount(sample, minlength=V)[:V] > 0
  return constrained_kmeans(cooccurrence_embeddings(sample, V), n_clusters, seed=seed,
                            used=used)


def cooccurrence_embeddings(tokens: np.ndarray, V: int) -> np.ndarray:
  """Distributional token vectors: log(1 + counts) of left and right neighbours (V, 2V)."""
  tokens = np.asarray(tokens, np.int64)
  left = np.zeros((V, V))
  np.add.at(left, (tokens[1:], tokens[:-1]), 1.0)
  return np.log1p(np.concatenate([left, left.T], axis=1))
