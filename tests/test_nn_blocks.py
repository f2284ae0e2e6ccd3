"""nn block zoo: RoPE, masks, attention kernels against NumPy; the pattern-string stack."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.nn import attention, blocks, llama, stack
from jaxpapers.nn.params import ParamSpec


def rng_normal(seed, *shape):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_rope_matches_numpy_rotation_of_pairs():
  B, T, H, D, theta = 2, 5, 3, 8, 10000.0
  x = rng_normal(0, B, T, H, D)
  pos = np.array([[0, 1, 2, 3, 4], [7, 3, 11, 0, 2]])
  out = np.asarray(blocks.rope(jnp.asarray(x), jnp.asarray(pos), theta))
  # Reference: channel i and i + D/2 form the complex number x_i + j x_{i+D/2}, rotated
  # by angle pos * theta^(-2i/D).
  half = D // 2
  z = x[..., :half] + 1j * x[..., half:]
  ang = pos[:, :, None, None] * theta ** (-2.0 * np.arange(half) / D)
  zr = z * np.exp(1j * ang)
  ref = np.concatenate([zr.real, zr.imag], -1)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  # Relative positions: q.k after RoPE depends only on the offset between positions.
  q, k = rng_normal(1, 1, 1, 1, D), rng_normal(2, 1, 1, 1, D)
  def dot(pq, pk):
    rq = blocks.rope(jnp.asarray(q), jnp.array([[pq]]), theta)
    rk = blocks.rope(jnp.asarray(k), jnp.array([[pk]]), theta)
    return float(jnp.sum(rq * rk))
  assert dot(3, 1) == pytest.approx(dot(9, 7), rel=1e-5)


def test_masks():
  np.testing.assert_array_equal(attention.causal_mask(4)[0], np.tril(np.ones((4, 4), bool)))
  # Two new queries after 3 cached keys see the cache and themselves causally.
  np.testing.assert_array_equal(attention.causal_mask(2, 5, offset=3)[0],
                                [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
  assert bool(attention.bidirectional_mask(3).all())
  m = attention.make_mask("bidirectional", 4, jnp.array([2, 4]))
  np.testing.assert_array_equal(m[:, 0], [[1, 1, 0, 0], [1, 1, 1, 1]])
  m = attention.make_mask("causal", 3, jnp.array([2, 3]))
  np.testing.assert_array_equal(m[0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])
  with pytest.raises(ValueError, match="unknown attention mask"):
    attention.make_mask("sideways", 3)


def numpy_attention(q, k, v, mask, score):
  """Per (batch, head, query) loop; score(q_t, k_s) -> weight (softmax or feature map)."""
  B, T, H, D = q.shape
  K = k.shape[2]
  out = np.zeros_like(q)
  for b in range(B):
    for h in range(H):
      kv = h // (H // K)
      for t in range(T):
        vis = [s for s in range(k.shape[1]) if mask[min(b, mask.shape[0] - 1), t, s]]
        w = np.array([score(q[b, t, h], k[b, s, kv]) for s in vis])
        out[b, t, h] = (w[:, None] * v[b, vis, kv]).sum(0) / w.sum()
  return out


@pytest.mark.parametrize("n_kv", [1, 2, 4])
def test_softmax_attention_matches_numpy(n_kv):
  B, T, H, D = 2, 5, 4, 8
  q, k, v = rng_normal(0, B, T, H, D), rng_normal(1, B, T, n_kv, D), rng_normal(2, B, T, n_kv, D)
  mask = np.asarray(attention.make_mask("causal", T, jnp.array([5, 3])))
  out = attention.softmax_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                    jnp.asarray(mask))
  ref = numpy_attention(q, k, v, mask, lambda a, b: np.exp(a @ b / np.sqrt(D)))
  np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-4, atol=1e-5)
  out2 = attention.softmax_attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                     jnp.asarray(mask), scale=1.0 / D)
  ref2 = numpy_attention(q, k, v, mask, lambda a, b: np.exp(a @ b / D))
  np.testing.assert_allclose(np.asarray(out2), ref2, rtol=1e-4, atol=1e-5)


def test_linear_attention_kernel_matches_numpy():
  B, T, H, D = 1, 6, 2, 4
  q, k, v = rng_normal(3, B, T, H, D), rng_normal(4, B, T, H, D), rng_normal(5, B, T, H, D)
  phi = lambda x: np.where(x > 0, x + 1, np.exp(x))  # elu + 1
  kernel = attention.KERNELS["linear_elu"]
  for kind in ("causal", "bidirectional"):
    mask = np.asarray(attention.make_mask(kind, T))
    out = kernel(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask))
    ref = numpy_attention(q, k, v, mask, lambda a, b: phi(a) @ phi(b))
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-4, atol=1e-5)


def test_pattern_period_and_specs():
  assert stack.period("AAAA") == "A"
  assert stack.period("MM*MM*") == "MM*"
  assert stack.period("AAMAMM") == "AAMAMM"
  m = stack.build(stack.StackConfig(vocab_size=11, dim=8, pattern="A*-A*-", n_heads=2))
  assert (m.unit, m.repeats, m.n_residual) == ("A*-", 2, 8)
  s = m.specs
  assert [sorted(d) for d in s["layers"]][1] == ["attn_norm", "k", "o", "q", "v"]
  assert s["layers"][0]["q"].shape == (2, 8, 8)
  assert s["layers"][2]["down"].shape == (2, 16, 8)  # 8/3 * 8 rounded down to a multiple of 8
  assert s["unembed"].cls == "output" and s["embed"].cls == "embedding"
  # Residual output projections: std / sqrt(number of residual branches).
  assert s["layers"][0]["o"].std_mult == pytest.approx(1 / np.sqrt(8))


def test_unknown_letter_is_named_and_a_block_registers_by_dict():
  cfg = stack.StackConfig(vocab_size=11, dim=8, pattern="AMA", n_heads=2)
  with pytest.raises(ValueError, match=r"unregistered block letter\(s\) \['M'\]"):
    stack.build(cfg)

  # A toy SSM-like block: x + decay * norm(x), with an 'ssm'-class parameter.
  toy = stack.BlockType(
      specs=lambda c, n: {"decay": ParamSpec((c.dim,), "ssm", init="ones")},
      apply=lambda c, p, x, ctx: x + p["decay"].reshape(1, 1, -1) * blocks.rms_norm(
          x, jnp.ones((c.dim,)), c.norm_eps))
  m = stack.build(cfg, {**stack.DEFAULT_BLOCKS, "M": toy})
  params = m.init(jax.random.PRNGKey(0))
  assert params["layers"][1]["decay"].shape == (1, 8)
  assert m.specs["layers"][1]["decay"].cls == "ssm"
  logits = m.apply(params, jnp.zeros((2, 5), jnp.int32))
  assert logits.shape == (2, 5, 11) and bool(jnp.isfinite(logits).all())


def test_stack_equals_llama_decoder():
  cfg = llama.LlamaConfig(vocab_size=50, dim=32, n_layers=3, n_heads=4, n_kv_heads=2,
                          hidden_dim=48, tie_embeddings=False)
  p = llama.init(jax.random.PRNGKey(0), cfg)
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 9), 0, 50)
  model, sp = stack.from_llama(p, cfg)
  ref = llama.forward(p, tokens, cfg)
  np.testing.assert_array_equal(np.asarray(model.apply(sp, tokens)), np.asarray(ref))
  np.testing.assert_allclose(np.asarray(model.apply(sp, tokens, unroll=True)),
                             np.asarray(ref), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask,mlp,positions", [("causal", "gelu", "learned"),
                                                ("bidirectional", "swiglu", "rope")])
def test_mask_decides_what_a_position_sees(mask, mlp, positions):
  cfg = stack.StackConfig(vocab_size=13, dim=16, pattern="AA", n_heads=2, mask=mask,
                          mlp=mlp, positions=positions, max_len=16)
  m = stack.build(cfg)
  params = m.init(jax.random.PRNGKey(0))
  a = jnp.array([[1, 2, 3, 4, 5, 6]])
  b = a.at[0, 5].set(9)  # change only the last token
  la, lb = m.apply(params, a), m.apply(params, b)
  assert bool(jnp.isfinite(la).all())
  earlier_changed = float(jnp.abs(la[0, :5] - lb[0, :5]).max())
  if mask == "causal":
    assert earlier_changed == 0.0
  else:
    assert earlier_changed > 1e-6


def test_unknown_kernel_is_one_line_naming_the_registered_ones():
  cfg = stack.StackConfig(vocab_size=11, dim=8, pattern="A", n_heads=2, kernel="polysketchy")
  model = stack.build(cfg)
  params = model.init(jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=r"unknown attention kernel 'polysketchy'.*softmax"):
    model.apply(params, jnp.zeros((1, 4), jnp.int32))


@pytest.mark.parametrize("mask", ["causal", "bidirectional"])
def test_structured_kernel_gets_the_mask_kind_and_no_dense_mask(mask):
  """A structured kernel sees (kind, lengths) instead of a (B, T, S) array, and the dense
  reference with the mask it describes gives the same outputs."""
  seen = {}

  def masked_reference(q, k, v, dense, scale=None, mask_kind=None, lengths_B=None):
    seen.update(dense=dense, kind=mask_kind, lengths=lengths_B)
    return attention.softmax_attention(
        q, k, v, attention.make_mask(mask_kind, q.shape[1], lengths_B), scale=scale)

  cfg = stack.StackConfig(vocab_size=11, dim=8, pattern="AA", n_heads=2, mask=mask)
  model = stack.build(cfg)
  params = model.init(jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 5), 0, 11)
  lengths = jnp.array([5, 3])
  out = model.apply(params, tokens, lengths_B=lengths,
                    kernel=attention.structured(masked_reference))
  assert seen["dense"] is None and seen["kind"] == mask
  np.testing.assert_array_equal(seen["lengths"], lengths)
  ref = model.apply(params, tokens, lengths_B=lengths)
  np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_cond_reaches_every_block_and_passes_through_the_lm_model():
  from jaxpapers.nn import lm  # pylint: disable=g-import-not-at-top
  def shift_by_cond(cfg, p, x, ctx):
    del cfg, p
    return x + ctx.cond[:, None, :]

  cond_block = stack.BlockType(lambda c, n: {}, shift_by_cond, residuals=0)
  cfg = stack.StackConfig(vocab_size=7, dim=4, pattern="AC", n_heads=2)
  model = stack.build(cfg, {**stack.DEFAULT_BLOCKS, "C": cond_block})
  lm_model = lm.from_stack(model)
  params = lm_model.init(jax.random.PRNGKey(0))
  tokens = jnp.zeros((2, 3), jnp.int32)
  c = jnp.array([[0.0] * 4, [5.0, -5.0, 5.0, -5.0]])
  out = lm_model.apply(params, tokens, cond=c)
  np.testing.assert_allclose(out[0], lm_model.apply(params, tokens, cond=jnp.zeros_like(c))[0])
  assert not np.allclose(out[1], out[0])
