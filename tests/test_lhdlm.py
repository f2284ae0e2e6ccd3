"""lhdlm: the hierarchical CTMC, its closed-form CT-ELBO and its limits, against NumPy
references built from the generator matrix alone (matrix exponentials, reverse rates by
Bayes, a discrete-time ELBO, a jump-time simulation)."""
import numpy as np
import pytest
import jax
import jax.numpy as jnp
from scipy.linalg import expm

from jaxpapers.core import config as config_lib
from jaxpapers.core import sharding
from jaxpapers.nn import lm
from jaxpapers.papers.lhdlm import data as data_lib
from jaxpapers.papers.lhdlm import diffusion as dif
from jaxpapers.papers.lhdlm import experiment
from jaxpapers.papers.lhdlm import model as model_lib
from jaxpapers.papers.lhdlm import sampler as sampler_lib

V, C = 3, 2
S = V + C + 1  # tokens, clusters, mask


def smoke(extra=""):
  return config_lib.load(f"configs/lhdlm.py:smoke=true{',' + extra if extra else ''}")


# --- NumPy reference: the CTMC from its generator ------------------------------------------

def hier_generator(G_CxV):
  """Rates (per unit of lam(t)) token v -> cluster c: Gamma[c, v]; cluster -> mask: 1."""
  Q = np.zeros((S, S))
  for v in range(V):
    Q[v, V:V + C] = G_CxV[:, v]
  Q[V:V + C, V + C] = 1.0
  np.fill_diagonal(Q, -Q.sum(1))
  return Q


def uniform_generator(n):
  return (np.ones((n, n)) - n * np.eye(n)) / n


def Lam(s, t, gamma=1.0):
  """int_s^t gamma / (1 - u) du."""
  return gamma * (np.log1p(-s) - np.log1p(-t))


def marginals(Q, t, gamma=1.0):
  """q_t(z | x) as (S, n_x): column x is row x of expm(Lambda(0,t) Q)."""
  n_x = V if Q.shape[0] == S else Q.shape[0]
  return expm(Lam(0.0, t, gamma) * Q)[:n_x].T


def rate_kl_loss(Q, t, x, z, xhat_V, gamma=1.0):
  """sum_{y != z} D(R(z->y|x) || R_hat(z->y)) with R(z->y|x) = lam Q[y,z] q(y|x)/q(z|x) and
  R_hat the same rates averaged over p(x'|z) ~ xhat_x' q(z|x')."""
  lam = gamma / (1 - t)
  M = marginals(Q, t, gamma)
  n_x = M.shape[1]

  def rates(xx):
    return np.array([lam * Q[y, z] * M[y, xx] / M[z, xx] if y != z else 0.0
                     for y in range(Q.shape[0])])

  post = xhat_V * M[z]
  post = post / post.sum()
  r_hat = sum(post[k] * rates(k) for k in range(n_x))
  r = rates(x)
  d = np.where(r > 0, r * np.log(np.maximum(r, 1e-300) / np.maximum(r_hat, 1e-300)), 0.0)
  return float(np.sum(d - r + r_hat))


def rand_gamma(rng):
  g = rng.random((C, V)) + 0.1
  return g / g.sum(0, keepdims=True)


# --- closed forms against the generator ------------------------------------------------------

@pytest.mark.parametrize("gamma", [1.0, 2.0])
def test_hier_closed_form_matches_generator_rates(gamma):
  rng = np.random.default_rng(0)
  G = rand_gamma(rng)
  Q = hier_generator(G)
  for t in (0.1, 0.5, 0.9):
    a, c, m, _ = [float(v) for v in dif.hier_schedule(jnp.float32(t), gamma)]
    np.testing.assert_allclose(marginals(Q, t, gamma)[:, 0],
                               [a, 0, 0, c * G[0, 0], c * G[1, 0], m], rtol=1e-4, atol=1e-6)
    for x in range(V):
      for z in range(V, S):  # the non-clean states (clean ones carry no loss)
        logits = rng.normal(size=V)
        xhat = np.exp(logits) / np.exp(logits).sum()
        want = rate_kl_loss(Q, t, x, z, xhat, gamma)
        mt, ct = dif.hier_terms(jnp.asarray(logits, jnp.float32)[None, None],
                                jnp.array([[x]]), jnp.array([[z]]), jnp.array([t]),
                                jnp.log(jnp.asarray(G, jnp.float32)), gamma)
        np.testing.assert_allclose(float(mt[0, 0] + ct[0, 0]), want, rtol=2e-4, atol=1e-6)


def test_mdlm_and_uniform_closed_forms_match_generator_rates():
  rng = np.random.default_rng(1)
  n = 4
  Qm = np.zeros((n + 1, n + 1))
  Qm[:n, n] = 1.0
  np.fill_diagonal(Qm, -Qm.sum(1))
  Qu = uniform_generator(n)
  for t in (0.2, 0.7):
    for x in range(n):
      logits = rng.normal(size=n)
      xhat = np.exp(logits) / np.exp(logits).sum()
      lg = jnp.asarray(logits, jnp.float32)[None, None]
      # MDLM, masked state (the reference's state space has n tokens + the mask)
      M = expm(Lam(0, t) * Qm)[:n].T
      lam = 1 / (1 - t)
      post = xhat * M[n] / (xhat * M[n]).sum()
      r = np.array([lam * Qm[y, n] * M[y, x] / M[n, x] for y in range(n)])
      r_hat = sum(post[k] * np.array([lam * Qm[y, n] * M[y, k] / M[n, k] for y in range(n)])
                  for k in range(n))
      ok = r > 0
      want = float(np.sum(r[ok] * np.log(r[ok] / r_hat[ok]) - r[ok] + r_hat[ok]) +
                   np.sum(r_hat[~ok]))
      got = dif.mdlm_nats(lg, jnp.array([[x]]), jnp.array([[n]]), jnp.array([t]), n)
      np.testing.assert_allclose(float(got[0, 0]), want, rtol=2e-4)
      np.testing.assert_allclose(want, -np.log(xhat[x]) / t, rtol=1e-4)  # MDLM's 1/t weight
      for z in range(n):
        want_u = rate_kl_loss(Qu, t, x, z, xhat)
        got_u = dif.uniform_nats(lg, jnp.array([[x]]), jnp.array([[z]]), jnp.array([t]))
        np.testing.assert_allclose(float(got_u[0, 0]), want_u, rtol=2e-4, atol=1e-6)


def _xhat_table(rng):
  W = rng.normal(size=(S, V))
  u = rng.normal(size=V)

  def fn(z, t):
    lg = W[z] + 2.0 * t * u
    return lg - np.log(np.exp(lg).sum())
  return fn


def test_ct_elbo_equals_discrete_elbo_limit_and_monte_carlo():
  """One position, V=3, C=2: the closed-form CT-ELBO (quadrature of the state expectation)
  against (a) the exact discrete-time ELBO with N steps built from expm(Q) (N -> inf) and
  (b) the Monte-Carlo mean of the sampled estimator the training uses."""
  rng = np.random.default_rng(2)
  G = rand_gamma(rng)
  Q = hier_generator(G)
  logx = _xhat_table(rng)
  lg = jnp.log(jnp.asarray(G, jnp.float32))
  x = 1
  # closed form, midpoint rule in u = -ln(1 - t) (smooth integrand), t in [0, 1 - 1e-6],
  # every (t, state) pair in one call
  n_q = 1000
  u_max = -np.log(1e-6)
  us = (np.arange(n_q) + 0.5) * u_max / n_q
  ts = -np.expm1(-us)
  zs = np.arange(V, S)
  tt, zz = np.repeat(ts, len(zs)), np.tile(zs, n_q)
  logits = np.stack([logx(z, t) for z, t in zip(zz, tt)])
  mt, cl = jax.jit(dif.hier_terms)(jnp.asarray(logits, jnp.float32)[:, None],
                                   jnp.full((len(tt), 1), x), jnp.asarray(zz)[:, None],
                                   jnp.asarray(tt, jnp.float32), lg)
  qz = np.stack([marginals(Q, t)[zs, x] for t in ts]).reshape(-1)
  ct = float(np.sum(qz * np.asarray(mt + cl, np.float64)[:, 0] * (1 - tt))) * u_max / n_q
  # (a) discrete-time ELBO, N steps on a grid uniform in u
  def discrete(n):
    grid = -np.expm1(-np.linspace(u_max, 0.0, n + 1))
    total = 0.0
    for t, s in zip(grid[:-1], grid[1:]):
      P = expm(Lam(s, t) * Q)                      # P[a, b] = q(z_t = b | z_s = a)
      qs, qt = marginals(Q, s), marginals(Q, t)
      for z in range(S):
        if qt[z, x] < 1e-14 or z < V:
          continue                                 # a clean z_t stays clean: no loss
        post_true = qs[:, x] * P[:, z] / qt[z, x]
        xh = np.exp(logx(z, t)) * qt[z] / np.sum(np.exp(logx(z, t)) * qt[z])
        post_model = sum(xh[k] * qs[:, k] * P[:, z] / qt[z, k] for k in range(V))
        ok = post_true > 0
        total += qt[z, x] * np.sum(post_true[ok] * np.log(post_true[ok] / post_model[ok]))
    return total
  d1, d2 = discrete(40), discrete(160)
  assert abs(d2 - ct) < abs(d1 - ct) + 1e-6   # converging towards the closed form
  np.testing.assert_allclose(d2, ct, rtol=2e-2)
  # (b) the sampled estimator: t ~ U, z_t ~ the forward process, closed-form term
  n_mc = 20_000
  key = jax.random.PRNGKey(0)
  t = dif.sample_times(key, n_mc)
  z = dif.hier_forward(jax.random.PRNGKey(1), jnp.full((n_mc, 1), x), t, lg)[:, 0]
  # the table is smooth in t: evaluate it on the sampled (z, t) pairs in numpy
  tn, zn = np.asarray(t), np.asarray(z)
  lgt = np.stack([logx(zz, tt) for zz, tt in zip(zn[:20000], tn[:20000])])
  mt, cl = jax.jit(dif.hier_terms)(jnp.asarray(lgt, jnp.float32)[:, None], jnp.full((20000, 1), x),
                          jnp.asarray(zn[:20000])[:, None], jnp.asarray(tn[:20000]), lg)
  vals = np.asarray(mt + cl)[:, 0]
  se = vals.std() / np.sqrt(len(vals))
  assert abs(vals.mean() - ct) < 4 * se + 1e-3, (vals.mean(), ct, se)


def test_forward_marginals_match_a_jump_time_simulation():
  """Jump times of the CTMC from its hazard Lambda(t) = -gamma ln(1-t): the first jump at
  1 - exp(-E1/gamma), the second at 1 - exp(-(E1+E2)/gamma); the cluster ~ Gamma[:, x]."""
  rng = np.random.default_rng(3)
  G = rand_gamma(rng)
  gamma, t, n, x = 1.5, 0.6, 200_000, 2
  e1, e2 = rng.exponential(size=n), rng.exponential(size=n)
  t1, t2 = -np.expm1(-e1 / gamma), -np.expm1(-(e1 + e2) / gamma)
  cl = (rng.random(n)[:, None] > np.cumsum(G[:, x])[None]).sum(1)
  sim = np.where(t < t1, x, np.where(t < t2, V + cl, V + C))
  want = np.bincount(sim, minlength=S) / n
  z = dif.hier_forward(jax.random.PRNGKey(0), jnp.full((n, 1), x), jnp.full((n,), t),
                       jnp.log(jnp.asarray(G, jnp.float32)), gamma)
  got = np.bincount(np.asarray(z[:, 0]), minlength=S) / n
  np.testing.assert_allclose(got, want, atol=5e-3)
  a, c, m, _ = [float(v) for v in dif.hier_schedule(jnp.float32(t), gamma)]
  np.testing.assert_allclose(want[[x, V + C]], [a, m], atol=5e-3)
  np.testing.assert_allclose(want[V:V + C], c * G[:, x], atol=5e-3)


# --- the two limits ------------------------------------------------------------------------

def test_one_hot_gamma_gives_hdlm_elbo_per_sample():
  """HDLM's own formula (P(c) = sum_{v in c} xhat_v), per position, in NumPy."""
  rng = np.random.default_rng(4)
  Vb, Cb, B, T = 7, 3, 4, 5
  assign = np.array([0, 0, 1, 1, 1, 2, 2])
  lg = dif.log_gamma(dif.hard_gamma_logits(assign, Cb))
  x = rng.integers(0, Vb, (B, T))
  t = rng.uniform(0.05, 0.95, B)
  z = np.where(rng.random((B, T)) < 0.5, Vb + Cb, Vb + assign[x])
  z[0, 0] = x[0, 0]
  logits = rng.normal(size=(B, T, Vb))
  mt, ct = dif.hier_terms(jnp.asarray(logits, jnp.float32), jnp.asarray(x), jnp.asarray(z),
                          jnp.asarray(t, jnp.float32), lg)
  xhat = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  P = np.stack([xhat[..., assign == c].sum(-1) for c in range(Cb)], -1)
  Pcx = np.take_along_axis(P, assign[x][..., None], -1)[..., 0]
  xx = np.take_along_axis(xhat, x[..., None], -1)[..., 0]
  c = -(1 - t) * np.log1p(-t)
  m = t + (1 - t) * np.log1p(-t)
  w_m = (c / (1 - t) / m)[:, None]    # m'_t / m_t, m' = -ln(1-t)
  w_c = (1 / c)[:, None]              # -alpha'_t / c_t
  want = np.where(z == Vb + Cb, w_m * -np.log(Pcx),
                  np.where(z >= Vb, w_c * (-np.log(xx) + np.log(Pcx)), 0.0))
  np.testing.assert_allclose(np.asarray(mt + ct), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("gamma", [1.0, 2.0])
def test_one_cluster_gives_mdlm_in_expectation(gamma):
  """C=1: the cluster state says nothing; with a denoiser that sees cluster and mask alike,
  E_z[hier NELBO] = E_z[MDLM NELBO] at alpha_t = (1-t)^gamma (Monte Carlo over z_t and the
  closed-form expectation: c_t w_c = -alpha' = (1 - alpha_t) w_MDLM)."""
  rng = np.random.default_rng(5)
  Vb, B = 5, 20_000
  logits = jnp.asarray(np.broadcast_to(rng.normal(size=Vb), (B, 1, Vb)), jnp.float32)
  x = jnp.asarray(rng.integers(0, Vb, (B, 1)))
  t = dif.sample_times(jax.random.PRNGKey(0), B)
  lg = jnp.zeros((1, Vb))
  z = dif.hier_forward(jax.random.PRNGKey(1), x, t, lg, gamma)
  h = sum(jax.jit(dif.hier_terms, static_argnums=5)(logits, x, z, t, lg, gamma))
  zm = dif.mask_forward(jax.random.PRNGKey(2), x, t, Vb, gamma)
  mm = jax.jit(dif.mdlm_nats, static_argnums=(4, 5))(logits, x, zm, t, Vb, gamma)
  se = float(jnp.std(h) + jnp.std(mm)) / np.sqrt(B)
  assert abs(float(jnp.mean(h) - jnp.mean(mm))) < 4 * se
  a, c, _, lam = dif.hier_schedule(t, gamma)
  nll = -jax.nn.log_softmax(logits, -1)[..., 0, :][jnp.arange(B), x[:, 0]]
  np.testing.assert_allclose(np.asarray(c * lam * a / c * nll),
                             np.asarray((1 - a) * gamma * a / (1 - t) / (1 - a) * nll),
                             rtol=1e-4)


# --- Gamma and its regularizer -----------------------------------------------------------------

def test_mutual_information_on_hand_built_maps():
  p = np.array([0.4, 0.3, 0.2, 0.1], np.float32)
  ident = jnp.log(jnp.eye(4) + 1e-30)
  np.testing.assert_allclose(float(dif.mutual_information(ident, p)),
                             -np.sum(p * np.log(p)), rtol=1e-5)
  same = jnp.log(jnp.full((3, 4), 1 / 3))
  assert abs(float(dif.mutual_information(same, p))) < 1e-6
  one_cl = jnp.log(jnp.asarray([[1, 1, 0, 0], [0, 0, 1, 1]], jnp.float32) + 1e-30)
  pc = np.array([0.7, 0.3])
  np.testing.assert_allclose(float(dif.mutual_information(one_cl, p)),
                             -np.sum(pc * np.log(pc)), rtol=1e-5)
  # identical columns make the mask-state term vanish for any denoiser output
  logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 4))
  mt, _ = dif.hier_terms(logits, jnp.zeros((2, 3), int), jnp.full((2, 3), 7),
                         jnp.array([0.3, 0.8]), same)
  np.testing.assert_allclose(np.asarray(mt), 0.0, atol=1e-6)


def test_hinge_regularizer_on_hand_built_maps():
  """reg_target > 0: reg * max(0, target - I(X;C)): the plain term's value below the target
  (up to the constant), zero above it; reg_target = 0 keeps -reg * I(X;C)."""
  config = smoke("reg=2.0,reg_target=0.5")
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  C, V = mdl.C, mdl.V
  p = np.asarray(mdl.p_V, np.float64)
  same = {"gamma": jnp.zeros((C, V))}                       # identical columns: I = 0
  hard = {"gamma": 30.0 * jax.nn.one_hot(np.arange(V) % C, C).T}
  pc = np.array([p[np.arange(V) % C == c].sum() for c in range(C)])
  assert -np.sum(pc * np.log(pc)) > 0.5                     # the hard map is above the target
  np.testing.assert_allclose(float(mdl.regularizer(same)), 2.0 * 0.5, rtol=1e-5)
  assert float(mdl.regularizer(hard)) == 0.0
  plain = model_lib.build(smoke("reg=2.0"), data.vocab_size, data.train)
  np.testing.assert_allclose(float(plain.regularizer(hard)), -2.0 * -np.sum(pc * np.log(pc)),
                             rtol=1e-4)
  assert abs(float(plain.regularizer(same))) < 1e-6


def test_gamma_stays_column_stochastic_under_training_updates():
  config = smoke("steps=3,gamma_lr_mult=100.0")
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  task = model_lib.make_task(config, data, mdl)
  state = task.init(jax.random.PRNGKey(0))
  g0 = np.asarray(dif.log_gamma(state["params"]["gamma"]))
  step = jax.jit(task.train_step)
  for i in range(3):
    state, m = step(state, task.train_batch(i, slice(None)), jax.random.PRNGKey(i), i)
    G = np.exp(np.asarray(dif.log_gamma(state["params"]["gamma"])))
    assert (G >= 0).all()
    np.testing.assert_allclose(G.sum(0), 1.0, rtol=1e-5)
  assert np.abs(np.log(G) - g0).max() > 1e-3   # Gamma was updated
  assert np.isfinite(float(m["mi"])) and float(m["mi"]) >= 0


def test_constrained_kmeans_respects_sizes_and_finds_planted_classes():
  tok, labels, Vs = data_lib.synthetic(20_000, classes=4, per_class=6, functions=0,
                                       p_function=0.0)
  assign = dif.constrained_kmeans(dif.cooccurrence_embeddings(tok, Vs), 4)
  assert np.bincount(assign, minlength=4).max() <= 6
  from sklearn.metrics import adjusted_rand_score
  assert adjusted_rand_score(labels, assign) > 0.9


def test_constrained_kmeans_clusters_only_used_tokens():
  """Tokens the text never uses (a byte vocabulary's unseen values) take no room: with 40
  unused ids appended, the used ones are clustered as on their own (cap 6, the planted
  classes found) and the unused ones are dealt round the clusters."""
  tok, labels, Vs = data_lib.synthetic(20_000, classes=4, per_class=6, functions=0,
                                       p_function=0.0)
  V = Vs + 40
  used = np.bincount(tok, minlength=V) > 0
  assert used[:Vs].all() and not used[Vs:].any()
  emb = dif.cooccurrence_embeddings(tok, V)
  assign = dif.constrained_kmeans(emb, 4, used=used)
  np.testing.assert_array_equal(
      assign[:Vs], dif.constrained_kmeans(dif.cooccurrence_embeddings(tok, Vs), 4))
  assert np.bincount(assign[:Vs], minlength=4).max() <= 6
  from sklearn.metrics import adjusted_rand_score
  assert adjusted_rand_score(labels, assign[:Vs]) > 0.9
  assert np.bincount(assign[Vs:], minlength=4).tolist() == [10, 10, 10, 10]


# --- samplers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,method", [("mdlm", "ancestral"), ("udlm", "tau_leaping"),
                                         ("hdlm", "tau_leaping"), ("lhdlm", "ancestral")])
def test_samplers_return_only_clean_tokens(kind, method):
  config = smoke(f"kind={kind}")
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  params = mdl.lm_model.init(jax.random.PRNGKey(0))
  z = np.asarray(sampler_lib.sample(jax.random.PRNGKey(1), mdl, params, 3, 6, 3, method))
  assert z.shape == (3, 6) and z.min() >= 0 and z.max() < data.vocab_size


def test_hier_sampler_unmasks_a_cluster_only_into_its_tokens():
  Vb, Cb, B = 6, 2, 500
  assign = np.array([0, 0, 0, 1, 1, 1])
  lg = dif.log_gamma(dif.hard_gamma_logits(assign, Cb))
  z = jnp.asarray(np.repeat([[Vb, Vb + 1, Vb + Cb]], B, 0))   # cluster 0, cluster 1, mask
  logp = jax.nn.log_softmax(jax.random.normal(jax.random.PRNGKey(0), (B, 3, Vb)), -1)
  step = jax.jit(sampler_lib._hier_step, static_argnums=(5, 6, 7, 9))
  for method in ("ancestral", "tau_leaping"):
    out = np.asarray(step(jax.random.PRNGKey(1), z, logp, 0.4, 0.0, Vb, Cb,
                                            1.0, lg, method))
    assert (out < Vb).all()                       # s = 0: everything is clean
    assert set(assign[out[:, 0]]) == {0} and set(assign[out[:, 1]]) == {1}
  # a mid-way ancestral step: masks go to tokens or clusters, clusters stay or unmask inside
  out = np.asarray(step(jax.random.PRNGKey(2), z, logp, 0.6, 0.4, Vb, Cb, 1.0, lg, "ancestral"))
  c0 = out[:, 0]
  assert set(np.unique(c0)) <= {0, 1, 2, Vb}


# --- plumbing: eval samples, devices, real data, bad input -----------------------------------

def loop_eval(task, state):
  """The held-out metrics core.loop reports: eval_step summed over the batches / count."""
  tot = None
  step = jax.jit(task.eval_step)  # as the loop runs it: one program, not op by op
  for b in task.eval_batches(slice(None)):
    out = jax.device_get(step(state, b))
    tot = out if tot is None else {k: tot[k] + out[k] for k in tot}
  n = tot.pop("count")
  return {k: v / n for k, v in tot.items()}


def test_eval_samples_report_a_monte_carlo_error():
  config = smoke("samples=3")
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  task = model_lib.make_task(config, data, mdl)
  state = task.init(jax.random.PRNGKey(0))
  ev = loop_eval(task, state)
  keys = [ev[f"bpb_key/{k}"] for k in range(3)]
  np.testing.assert_allclose(ev["bpb"], np.mean(keys), rtol=1e-5)
  assert len(set(np.round(keys, 6))) == 3                       # the draws differ
  np.testing.assert_allclose(lm.mc_standard_error(ev), np.std(keys, ddof=1) / np.sqrt(3),
                             rtol=1e-6)


def test_eight_devices_give_the_one_device_numbers():
  config = smoke()
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  task = model_lib.make_task(config, data, mdl)
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  params = jax.jit(jax.vmap(lambda k: task.init(k)["params"]))(keys)
  batch = jnp.asarray(task.train_batch(0, slice(None))["tokens"])

  def nelbo(p, b):
    return jnp.sum(mdl.objective(mdl.lm_model.apply, p, b, jax.random.PRNGKey(1)))
  mesh8 = jax.sharding.Mesh(np.asarray(jax.devices()[:8]), ("data",))
  mesh1 = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
  out8 = sharding.spread(nelbo, mesh8, in_axes=(0, None))(params, batch)
  out1 = sharding.spread(nelbo, mesh1, in_axes=(0, None))(params, batch)
  assert len(jax.devices()) == 8
  np.testing.assert_allclose(np.asarray(out8), np.asarray(out1), rtol=1e-5)


def test_user_text_file_loads_and_scores(tmp_path):
  path = tmp_path / "corpus.txt"
  text = "To be, or not to be, that is the question.\n" * 300
  path.write_text(text, encoding="utf-8")
  config = smoke(f"path={path},kind=mdlm")
  experiment.validate(config)
  data, labels = data_lib.load(config)
  assert labels is None and data.vocab_size == 256 and data.name.startswith("corpus.txt")
  assert bytes(np.concatenate([data.train, data.val]).astype(np.uint8)) == text.encode()
  mdl = model_lib.build(config, data.vocab_size, data.train)
  params = mdl.lm_model.init(jax.random.PRNGKey(0))
  nats = jax.jit(lambda p, b: mdl.objective(mdl.lm_model.apply, p, b, jax.random.PRNGKey(1)))(
      params, jnp.asarray(data.train[:34].reshape(2, 17)))
  assert nats.shape == (2, 16) and np.isfinite(np.asarray(nats)).all()


def test_trivial_models_on_hand_counts():
  d = data_lib.text_lib.TokenData(np.array([0, 1, 0, 1, 0]), np.array([0, 1]), 2,
                                  np.ones(2, np.int32), None, "t")
  out = data_lib.unigram_bigram_bpb(d, np.array([[0, 1]]))
  np.testing.assert_allclose(out["unigram"], -np.log2(3 / 7))     # counts 3,2 +1 each
  np.testing.assert_allclose(out["bigram"], -np.log2(3 / 4))      # 0->1 twice, +1 smoothing


@pytest.mark.parametrize("arg,msg", [("kind=gpt", "model.kind"), ("reg=-1.0", "model.reg"),
                                     ("sample_method=euler", "sample.method"),
                                     ("path=/no/such.txt", "no such file")])
def test_bad_input_is_named(arg, msg):
  with pytest.raises(ValueError, match=msg):
    experiment.validate(smoke(arg))


def test_training_resumes_exactly(tmp_path, capsys):
  """A 4-step LHDLM run, and the same run stopped after its step-2 checkpoint and resumed:
  bitwise the same parameters (Gamma included) and metric rows. The stop is the same
  4-step run killed when it asks for step 3's batch (one compiled step for all three runs;
  a separate 2-step run compiled another learning-rate schedule)."""
  import dataclasses
  from jaxpapers.core import loop
  config = smoke("steps=4,eval_every=4")
  config.train.checkpoint_every = 2
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  task = model_lib.make_task(config, data, mdl)
  full, _ = loop.train(config, str(tmp_path / "full"), task)

  class Killed(Exception):
    pass

  def batch_until_2(step, rows):
    if step >= 2:  # 0-based: step 3's batch
      raise Killed
    return task.train_batch(step, rows)
  with pytest.raises(Killed):
    loop.train(config, str(tmp_path / "cut"), dataclasses.replace(task, train_batch=batch_until_2))
  capsys.readouterr()
  resumed, _ = loop.train(config, str(tmp_path / "cut"), model_lib.make_task(config, data, mdl))
  assert "resumed from step 2" in capsys.readouterr().out  # not a rerun from scratch
  for a, b in zip(jax.tree.leaves(jax.device_get(full)), jax.tree.leaves(jax.device_get(resumed))):
    np.testing.assert_array_equal(a, b)
  from tests import _runs  # pylint: disable=g-import-not-at-top
  _runs.assert_same_metrics(tmp_path / "cut", tmp_path / "full")


def test_combine_reads_the_bigram_of_the_cells_own_corpus(tmp_path):
  """A Shakespeare cell's margin is under Shakespeare's bigram (it read the synthetic one)."""
  import json
  from jaxpapers.papers.lhdlm import combine
  trivial = {"synthetic": {"bigram": 4.49}, "shakespeare": {"bigram": 3.41}}
  (tmp_path / "study_rows.json").write_text(json.dumps({"trivial": trivial}))
  for corpus in trivial:
    assert combine._bigram(str(tmp_path / corpus / "mdlm")) == trivial[corpus]["bigram"]
  with pytest.raises(ValueError, match="no trivial rows"):
    combine._bigram(str(tmp_path / "overlap" / "mdlm"))
  a = {"seeds": [0, 1, 2], "test_bpb": 3.0, "test_std": 0.0, "mc_se": 0.03,
       "quarter_drop": 0.01, "test_by_seed": [3.0] * 3}
  b = {**a, "test_bpb": 3.1, "test_by_seed": [3.1] * 3, "quarter_drop": 0.2}
  g = combine.gaps({"a": a, "b": b})["a-b"]
  np.testing.assert_allclose([g["diff"], g["two_se"]], [-0.1, 2 * np.sqrt(2 * 0.03 ** 2 / 3)])
  assert not g["concluded"]                                  # beyond 2 s.e., inside b's drop
  assert combine.gaps({"a": a, "b": {**b, "quarter_drop": 0.05}})["a-b"]["concluded"]
