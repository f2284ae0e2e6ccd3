"""llops: feature maps, block-causal linear attention and exact polynomial attention
against independent references (Monte Carlo, float64 NumPy, brute-force loops)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.papers.llops import features, linear


def _normal(seed, *shape):
  return np.random.default_rng(seed).standard_normal(shape)


def test_degree2_gaussian_sketch_is_unbiased_for_squared_dot_product():
  # S(x) = (G1 x) * (G2 x) / sqrt(r): each of the r coordinates' products r S_i(x) S_i(y)
  # is an independent unbiased draw of (x.y)^2 (the 1/r scale), so a sketch with many
  # rows is a Monte Carlo mean that must hit the closed form within a few standard errors.
  d, r = 8, 40000
  x, y = _normal(0, d), _normal(1, d)
  x, y = x / np.linalg.norm(x) * 2, y / np.linalg.norm(y) * 2
  target = float(x @ y) ** 2
  for make in (features._gaussian_sketch_params, features._hadamard_params):
    p = make(jax.random.PRNGKey(0), d, r, 2)
    sx, sy = (np.asarray(features.low_rank_sketch(p, jnp.asarray(z, jnp.float32), 2, r),
                         np.float64) for z in (x, y))
    draws = r * sx * sy
    se = draws.std() / math.sqrt(r)
    assert abs(draws.mean() - target) < 4 * se, (make.__name__, draws.mean(), target, se)
    assert abs(float(sx @ sy) - target) < 4 * se  # the sketch's own inner product


def test_degree4_self_tensored_sketch_is_biased_but_consistent():
  # phi = S (x) S gives (S(x).S(y))^2, whose mean is (x.y)^4 + Var[S(x).S(y)] > (x.y)^4:
  # biased for small r, the relative bias shrinking as r grows.
  d, n = 8, 3000
  x, y = _normal(2, d), _normal(3, d)
  x, y = x / np.linalg.norm(x) * 2, y / np.linalg.norm(y) * 2
  target = float(x @ y) ** 4
  bias = {}
  for r in (2, 32):
    mp = features.polysketch_gaussian(r, 4)
    keys = jax.random.split(jax.random.PRNGKey(r), n)
    est = jax.vmap(lambda k: jnp.dot(mp.phi(mp.init(k, d), jnp.asarray(x, jnp.float32)),
                                     mp.phi(mp.init(k, d), jnp.asarray(y, jnp.float32))))(keys)
    est = np.asarray(est, np.float64)
    bias[r] = (est.mean() - target) / target
    assert est.mean() - target > 3 * est.std() / math.sqrt(n)  # a real positive bias
  assert bias[32] < 0.25 * bias[2], bias


def test_every_map_at_its_stated_state_size():
  d, state = 16, 64
  x = jnp.asarray(_normal(4, 3, d), jnp.float32)
  for name in features.MAP_NAMES:
    mp = features.make_map(name, state, 4, d)
    shape = jax.eval_shape(lambda mp=mp: mp.phi(mp.init(jax.random.PRNGKey(0), d), x)).shape
    assert shape == (3, mp.state), (name, shape, mp.state)
    assert mp.state <= max(state, d)
  # The counting rules.
  assert features.make_map("polysketch_gauss", 64, 4, d).state == 64       # r^2, r = 8
  assert features.make_map("taylor", 64, 4, d).state == 1 + 7 + 49         # d' = 7
  assert features.make_map("hedgehog", 64, 4, d).state == 64               # 2m, m = 32
  assert features.make_map("performer", 64, 4, d).state == 64              # m
  assert features.make_map("llops_lin", 64, 4, d).state == 64              # (r+1)^2, r = 7
  assert features.make_map("elu", 64, 4, d).state == d


def test_llops_initialised_at_random_sketch_reproduces_it_exactly():
  # Family inclusion: LLoPS's parameters set to the Gaussian sketch's matrices (and the
  # linear-term weight b = 0) give bit-for-bit the same features, and the same kernel up to
  # float32 rounding (the linear variant's features carry extra zero columns, so numpy's
  # matmul may sum in another order: one run differed by 2e-6 relative).
  d, r = 16, 5
  x = jnp.asarray(_normal(5, 7, d), jnp.float32)
  rnd = features.polysketch_gaussian(r, 4)
  p = rnd.init(jax.random.PRNGKey(3), d)
  np.testing.assert_array_equal(np.asarray(features.llops(r, 2).phi(p, x)),
                                np.asarray(rnd.phi(p, x)))
  lin = features.llops(r, 2, linear=True)
  f_lin = np.asarray(lin.phi({**p, "b": jnp.zeros(())}, x))
  k_rnd = np.asarray(rnd.phi(p, x) @ rnd.phi(p, x).T)
  np.testing.assert_allclose(f_lin @ f_lin.T, k_rnd, rtol=1e-5)
  # llops_lin's kernel is (b^2 + S.S)^2 (closed form).
  b = 0.7
  s = np.asarray(features.low_rank_sketch(p, x, 2, r), np.float64)
  f = np.asarray(lin.phi({**p, "b": jnp.asarray(b)}, x), np.float64)
  np.testing.assert_allclose(f @ f.T, (b * b + s @ s.T) ** 2, rtol=1e-4)


def test_taylor_and_performer_match_their_closed_forms():
  d, dp = 8, 8
  x = _normal(6, 5, d) * 0.5
  y = _normal(7, 5, d) * 0.5
  tay = features.taylor(dp)
  p = {"P": jnp.eye(d)}
  k = np.asarray(tay.phi(p, jnp.asarray(x, jnp.float32)) @ tay.phi(p, jnp.asarray(y, jnp.float32)).T)
  u = x @ y.T / math.sqrt(dp)
  np.testing.assert_allclose(k, 1 + u + u * u / 2, rtol=1e-4)
  # FAVOR+ is unbiased for exp(x.y / sqrt(d)): average many independent draws.
  per = features.performer(64)
  keys = jax.random.split(jax.random.PRNGKey(1), 400)
  xs, ys = jnp.asarray(x[:1], jnp.float32), jnp.asarray(y[:1], jnp.float32)
  est = jax.vmap(lambda kk: (per.phi(per.init(kk, d), xs) @ per.phi(per.init(kk, d), ys).T)[0, 0])(keys)
  target = math.exp(float(x[0] @ y[0]) / math.sqrt(d))
  assert abs(float(est.mean()) - target) < 0.03 * target


def _poly_loop(q, k, v, degree, causal):
  """Brute force, float64, one query at a time, LayerNorm written out."""
  ln = lambda z: (z - z.mean()) / np.sqrt(z.var() + 1e-5)
  T, H, D = q.shape
  K = k.shape[1]
  out = np.zeros_like(q)
  for h in range(H):
    kh = h // (H // K)
    for t in range(T):
      num, den = np.zeros(D), 1.0
      for s in range(k.shape[0]):
        if causal and s > t:
          continue
        w = float(ln(q[t, h]) @ ln(k[s, kh])) ** degree
        num += w * v[s, kh]
        den += w
      out[t, h] = num / den
  return out


def test_exact_polynomial_attention_equals_brute_force_loop():
  T, H, K, D = 6, 4, 2, 8
  q, k, v = _normal(8, 1, T, H, D), _normal(9, 1, T, K, D), _normal(10, 1, T, K, D)
  from jaxpapers.nn import attention
  mask = attention.causal_mask(T)
  with jax.enable_x64(True):
    out = features.polynomial_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                        mask, degree=4)
    np.testing.assert_allclose(np.asarray(out)[0], _poly_loop(q[0], k[0], v[0], 4, True),
                               rtol=1e-9)
    out2 = features.polynomial_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                         None, degree=2)
    np.testing.assert_allclose(np.asarray(out2)[0], _poly_loop(q[0], k[0], v[0], 2, False),
                               rtol=1e-9)


@pytest.mark.parametrize("T,block", [(13, 4), (16, 16), (9, 64)])
def test_block_causal_equals_quadratic_form_float64(T, block):
  B, H, K, F, D = 2, 4, 2, 5, 3
  rng = np.random.default_rng(T)
  fq = np.abs(rng.standard_normal((B, T, H, F)))
  fk = np.abs(rng.standard_normal((B, T, K, F)))
  v = rng.standard_normal((B, T, K, D))
  # NumPy float64 reference: masked quadratic form with normalizer 1 + sum.
  ref = np.zeros((B, T, H, D))
  for b in range(B):
    for h in range(H):
      a = np.tril(fq[b, :, h] @ fk[b, :, h // 2].T)
      ref[b, :, h] = a @ v[b, :, h // 2] / (1 + a.sum(1, keepdims=True))
  with jax.enable_x64(True):
    bc = jax.jit(linear.block_causal, static_argnums=(3, 4))
    out = bc(jnp.asarray(fq), jnp.asarray(fk), jnp.asarray(v), 1.0, block)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-12, atol=1e-12)
    nc = jax.jit(linear.noncausal, static_argnums=3)(jnp.asarray(fq), jnp.asarray(fk),
                                                     jnp.asarray(v), 1.0)
    ref_nc = np.zeros((B, T, H, D))
    for b in range(B):
      for h in range(H):
        a = fq[b, :, h] @ fk[b, :, h // 2].T
        ref_nc[b, :, h] = a @ v[b, :, h // 2] / (1 + a.sum(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(nc), ref_nc, rtol=1e-12, atol=1e-12)


def test_structured_kernel_in_the_stack_matches_dense_reference_with_padding():
  # The kernel gets mask kind + lengths (no dense T x T mask) and must equal the quadratic
  # form under the same causal + key-padding mask.
  from jaxpapers.nn import attention
  B, T, H, D = 2, 10, 2, 8
  mp = features.llops(3, 2)
  p = mp.init(jax.random.PRNGKey(0), D)
  phi = lambda x: mp.phi(p, features.layer_norm(x))
  kern = linear.feature_kernel(phi, "poly", block=4)
  assert getattr(kern, "structured_mask", False)
  q, k, v = (jnp.asarray(_normal(i, B, T, H, D), jnp.float32) for i in (11, 12, 13))
  lengths = jnp.asarray([10, 6])
  call = jax.jit(lambda q, k, v, kind: attention.call_kernel(
      kern, q, k, v, mask=None, mask_kind=kind, lengths_B=lengths, scale=None), static_argnums=3)
  quad = jax.jit(lambda q, k, v, m: linear.quadratic(phi(q), phi(k), v, 1.0, m))
  out = call(q, k, v, "causal")
  ref = quad(q, k, v, attention.make_mask("causal", T, lengths))
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=2e-4, atol=2e-5)
  out_bi = call(q, k, v, "bidirectional")
  ref_bi = quad(q, k, v, attention.make_mask("bidirectional", T, lengths))
  np.testing.assert_allclose(np.asarray(out_bi), np.asarray(ref_bi), rtol=2e-4, atol=2e-5)


def _problem(seed, N=6, T=12, d=8):
  """Anisotropic q/k (a few dominant directions, as real heads have) and values."""
  rng = np.random.default_rng(seed)
  mix = rng.standard_normal((d, d)) * np.linspace(2.0, 0.2, d)[:, None]
  q, k = (rng.standard_normal((N, T, d)) @ mix for _ in range(2))
  return q.astype(np.float32), k.astype(np.float32), rng.standard_normal((N, T, d)).astype(np.float32)


def test_approx_metrics_against_numpy_and_a_perfect_map():
  from jaxpapers.papers.llops import approx
  q, k, v = _problem(0)
  # A map that IS the exact degree-2 kernel (the full tensor square, state d^2) has zero
  # error; the NumPy reference of the kernel error for a random sketch matches ours.
  exact = features.Map("exact", 64, "poly", lambda rng, d: {},
                       lambda p, x: features.self_tensor(x))
  m = approx.metrics(exact, {}, jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), 2)
  assert float(m["kernel_err"]) < 1e-5 and float(m["out_err"]) < 1e-5
  mp = features.polysketch_gaussian(3, 2)
  p = mp.init(jax.random.PRNGKey(0), 8)
  m = approx.metrics(mp, p, jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), 2)
  ln = lambda z: (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-5)
  K = np.tril(np.einsum("ntd,nsd->nts", ln(q), ln(k)) ** 2)
  G = np.asarray(p["G0"], np.float64)
  Kh = np.tril(np.einsum("ntd,nsd->nts", ln(q) @ G, ln(k) @ G) ** 2 / 9)
  c = (Kh * K).sum() / (Kh * Kh).sum()
  ref = np.linalg.norm(c * Kh - K) / np.linalg.norm(K)
  np.testing.assert_allclose(float(m["kernel_err"]), ref, rtol=1e-3)


def test_distilled_llops_beats_the_random_sketch_it_starts_from():
  # The numerical check of the README's statement: LLoPS's family contains the random
  # sketch (its init), and distillation on train windows lowers the held-out error.
  from jaxpapers.papers.llops import approx
  q, k, v = _problem(1, N=10)
  tr, te = slice(0, 7), slice(7, 10)
  mp = features.llops(3, 2)
  args = [jnp.asarray(a[s]) for s in (tr, te, te) for a in (q, k, v)]
  start = jax.jit(approx.member_fn(mp, 4, 0, 4))(0, 0, 0.0, *args)
  trained = jax.jit(approx.member_fn(mp, 4, 60, 4))(0, 0, 3e-2, *args)
  assert float(trained["test"]["kernel_err"]) < float(start["test"]["kernel_err"]) - 0.05
  rnd = jax.jit(approx.member_fn(features.polysketch_gaussian(3, 4), 4, 60, 4))(0, 0, 3e-2, *args)
  np.testing.assert_allclose(float(rnd["test"]["kernel_err"]), float(start["test"]["kernel_err"]),
                             rtol=1e-5)  # same seed: LLoPS's start IS the random sketch


def test_eight_devices_give_the_one_device_numbers():
  from jaxpapers.core import sharding
  from jaxpapers.papers.llops import approx
  assert jax.device_count() == 8
  q, k, v = _problem(2, N=3, T=6, d=4)
  mp = features.llops(2, 1, linear=True)
  n = 5  # 5 members over 8 devices: the padding path
  data = [jnp.asarray(np.stack([a[:3]] * n)) for a in (q, k, v)] * 3
  pi, si = jnp.arange(n), jnp.arange(n)
  li = jnp.linspace(1e-2, 5e-2, n)
  fn = approx.member_fn(mp, 2, 3, 2)
  out8 = sharding.spread(fn)(pi, si, li, *data)
  out1 = jax.jit(jax.vmap(fn))(*jax.device_put((pi, si, li, *data), jax.devices()[0]))
  for part in ("val", "test"):
    for m in out1[part]:
      # Three Adam steps carry float32 rounding of differently fused programs (2e-5 seen).
      np.testing.assert_allclose(np.asarray(out8[part][m]), np.asarray(out1[part][m]), rtol=2e-4)


def test_lm_with_llops_layer_trains_a_step_and_bad_config_is_one_line():
  from jaxpapers.core import config as config_lib
  from jaxpapers.papers.llops import experiment, model as model_lib
  cfg = config_lib.load("configs/llops.py:smoke")
  model, lm_model, mp = model_lib.build(cfg, 256, "llops")
  assert model.cfg.pattern == "WL" and mp.state == 16
  p = lm_model.init(jax.random.PRNGKey(0))
  # The layer's sketch starts at the Gaussian sketch of its seed (family inclusion in the LM).
  fm = p["layers"][1]["fm_G0"]
  assert fm.shape == (1, 8, 4) and abs(float(jnp.std(fm)) - 1.0) < 0.3
  toks = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 17)))
  apply = jax.jit(lm_model.apply)
  logits = apply(p, toks[:, :-1])
  assert logits.shape == (2, 16, 256) and bool(jnp.all(jnp.isfinite(logits)))
  # Causality of the whole LM: changing a later token leaves earlier logits unchanged.
  toks2 = toks.at[:, 10].set((toks[:, 10] + 1) % 256)
  l2 = apply(p, toks2[:, :-1])
  np.testing.assert_allclose(np.asarray(l2[:, :10]), np.asarray(logits[:, :10]), atol=1e-5)
  for bad, msg in (("method=nope", "model.method"), ("n_layers=3", "even"),
                   ("degree=3", "even")):
    with pytest.raises(ValueError, match=msg):
      experiment.validate(config_lib.load(f"configs/llops.py:smoke,{bad}"))
