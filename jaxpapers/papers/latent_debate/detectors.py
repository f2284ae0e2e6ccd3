"""Latent debate (arXiv 2512.01909): hallucination detectors and their baselines.

A detector scores each statement with the risk that the model's True/False answer is
wrong; it is judged by AUROC against the model's actual errors. Scores:

  probability   1 - max(p_T, p_F), p over {True, False} (the output confidence)
  margin        -|logit_T - logit_F|
  entropy       entropy of the full next-token distribution at the answer position
  probes        truth probes on the last token's hidden state, each predicting the
                statement's truth p(true | h); the risk of an answer is the probe's
                probability of the opposite: linear (L2 logistic regression), MLP
                (SAPLMA, Azaria & Mitchell 2023: 256-128-64 ReLU, Adam), mass-mean
                (Marks & Tegmark 2023: direction mu_true - mu_false, and its IID form
                Sigma^-1 (mu_true - mu_false), a 1-d logistic fit on the projection),
                CCS (Burns et al. 2022: unsupervised, on the contrast pair)
  error probe   logistic regression on h predicting the model's error directly
  resampling    SelfCheck-style (Manakul et al. 2023): answers resampled at temperature 1
                from the model under a uniformly drawn prompt template; risk = the
                expected share that disagrees with the main answer (exact over the
                templates: `expected_disagreement`; or estimated from K samples)
  debate        debate-pattern features (debate.features) -> logistic regression; and
                the untrained middle-layer disagreement score on its own
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score


def auroc(y_true, score) -> float:
  y = np.asarray(y_true).astype(int)
  if y.min() == y.max():
    return float("nan")
  return float(roc_auc_score(y, np.asarray(score, np.float64)))


def standardize(train, *others):
  mu, sd = train.mean(0), train.std(0) + 1e-6
  return [(x - mu) / sd for x in (train,) + others]


def risk_from_truth(p_true, answer):
  """Probability that the answer is wrong, from a probe's p(statement is true)."""
  return np.where(np.asarray(answer) == 1, 1 - p_true, p_true)


def logreg(x_tr, y_tr, c: float, seed: int = 0):
  model = LogisticRegression(C=c, max_iter=2000, random_state=seed)
  model.fit(x_tr, y_tr)
  return model


# ----------------------------------------------------------------------------- MLP probe

def _mlp_init(rng, dims):
  params = []
  for din, dout in zip(dims[:-1], dims[1:]):
    rng, k = jax.random.split(rng)
    params.append((jax.random.normal(k, (din, dout)) * jnp.sqrt(2.0 / din), jnp.zeros(dout)))
  return params


def _mlp_apply(params, x):
  lift = lambda b, h: b.reshape((1,) * (h.ndim - 1) + (-1,))  # noqa: E731
  for w, b in params[:-1]:
    h = x @ w
    x = jax.nn.relu(h + lift(b, h))
  w, b = params[-1]
  h = x @ w
  return (h + lift(b, h))[..., 0]


@functools.partial(jax.jit, static_argnames=("steps", "dims"))
def _mlp_train(x, y, lrs, key, steps: int, dims: tuple):
  def train(lr):
    params = _mlp_init(key, dims)
    opt = optax.adam(lr)
    state = opt.init(params)

    def loss_fn(p):
      return optax.sigmoid_binary_cross_entropy(_mlp_apply(p, x), y).mean()

    def step(carry, _):
      p, s = carry
      g = jax.grad(loss_fn)(p)
      upd, s = opt.update(g, s, p)
      return (optax.apply_updates(p, upd), s), None

    (params, _), _ = jax.lax.scan(step, (params, state), None, length=steps)
    return params

  return jax.vmap(train)(lrs)


@jax.jit
def _mlp_predict(params, x):
  return jax.nn.sigmoid(jax.vmap(_mlp_apply, (0, None))(params, x))


def mlp_probe(x_tr, y_tr, x_eval_list, lrs, steps: int = 300, seed: int = 0,
              hidden=(256, 128, 64)):
  """SAPLMA probe trained full-batch with Adam, one per learning rate (vmapped).

  Returns p(true) of each eval set per lr: list over eval sets of (n_lrs, n) arrays.
  """
  dims = (x_tr.shape[1],) + tuple(hidden) + (1,)
  params = _mlp_train(jnp.asarray(x_tr, jnp.float32), jnp.asarray(y_tr, jnp.float32),
                      jnp.asarray(lrs, jnp.float32), jax.random.key(seed), steps, dims)
  return [np.asarray(_mlp_predict(params, jnp.asarray(xe, jnp.float32))) for xe in x_eval_list]


# ----------------------------------------------------------------------------- mass-mean

def mass_mean_direction(x_tr, y_tr, iid: bool = False, ridge: float = 1e-2):
  """theta = mu_true - mu_false; IID version Sigma^-1 theta with the pooled within-class
  covariance (ridge-regularised relative to its mean eigenvalue)."""
  y = np.asarray(y_tr).astype(bool)
  theta = x_tr[y].mean(0) - x_tr[~y].mean(0)
  if not iid:
    return theta
  centered = np.concatenate([x_tr[y] - x_tr[y].mean(0), x_tr[~y] - x_tr[~y].mean(0)])
  cov = centered.T @ centered / len(centered)
  cov += ridge * np.trace(cov) / len(cov) * np.eye(len(cov))
  return np.linalg.solve(cov, theta)


# ----------------------------------------------------------------------------- CCS

def ccs_loss(theta_b, x_pos, x_neg):
  """Burns et al. (2022): consistency (p+ - (1 - p-))^2 + confidence min(p+, p-)^2."""
  w, b = theta_b[:-1], theta_b[-1]
  p_pos = jax.nn.sigmoid(x_pos @ w + b)
  p_neg = jax.nn.sigmoid(x_neg @ w + b)
  return jnp.mean((p_pos - (1 - p_neg)) ** 2 + jnp.minimum(p_pos, p_neg) ** 2)


def ccs_normalize(x_pos, x_neg, ref_pos=None, ref_neg=None):
  """Each side mean-centred and scaled by its own statistics (from the reference set)."""
  rp = x_pos if ref_pos is None else ref_pos
  rn = x_neg if ref_neg is None else ref_neg
  return ((x_pos - rp.mean(0)) / (rp.std(0) + 1e-6), (x_neg - rn.mean(0)) / (rn.std(0) + 1e-6))


@functools.partial(jax.jit, static_argnames=("restarts", "steps"))
def _ccs_train(xp, xn, key, lr, weight_decay, restarts: int, steps: int):
  d = xp.shape[1]

  def train(k):
    theta = jax.random.normal(k, (d + 1,)) / jnp.sqrt(d)
    opt = optax.adamw(lr, weight_decay=weight_decay)
    state = opt.init(theta)

    def step(carry, _):
      th, s = carry
      g = jax.grad(ccs_loss)(th, xp, xn)
      upd, s = opt.update(g, s, th)
      return (optax.apply_updates(th, upd), s), None

    (theta, _), _ = jax.lax.scan(step, (theta, state), None, length=steps)
    return theta, ccs_loss(theta, xp, xn)

  return jax.vmap(train)(jax.random.split(key, restarts))


def ccs_fit(x_pos, x_neg, restarts: int = 10, steps: int = 1000, lr: float = 1e-2,
            weight_decay: float = 1e-2, seed: int = 0):
  """Best-of-`restarts` CCS probe (lowest loss), AdamW; returns (theta_b, loss)."""
  thetas, losses = _ccs_train(jnp.asarray(x_pos, jnp.float32), jnp.asarray(x_neg, jnp.float32),
                              jax.random.key(seed), lr, weight_decay, restarts, steps)
  i = int(jnp.argmin(losses))
  return np.asarray(thetas[i]), float(losses[i])


def ccs_predict(theta_b, x_pos, x_neg):
  """p(true) = (p+ + 1 - p-) / 2."""
  w, b = theta_b[:-1], theta_b[-1]
  sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
  return 0.5 * (sig(x_pos @ w + b) + 1 - sig(x_neg @ w + b))


# ----------------------------------------------------------------------------- resampling

def resampling_risk(p_true_NxK, answer_N, n_samples: int = 20, seed: int = 0):
  """Share of K sampled answers (template drawn uniformly, answer ~ p_template) that
  disagree with the main answer."""
  p = np.asarray(p_true_NxK)
  rng = np.random.default_rng(seed)
  n, k = p.shape
  tmpl = rng.integers(k, size=(n, n_samples))
  draws = rng.random((n, n_samples)) < np.take_along_axis(p, tmpl, 1)
  return (draws.astype(int) != np.asarray(answer_N)[:, None]).mean(1)


def expected_disagreement(p_true_NxK, answer_N):
  """The exact expectation of `resampling_risk`: the mean over the K templates of the
  probability that a resampled answer differs from the main answer (no sampling noise)."""
  p = np.asarray(p_true_NxK, np.float64)
  a = np.asarray(answer_N)[:, None]
  return np.where(a == 1, 1 - p, p).mean(1)
