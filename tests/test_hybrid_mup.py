"""hybrid_mup: selective scan (full and chunked) vs NumPy recurrences and their finite-
difference gradients, the chunked scan's memory, ZOH formulas vs an ODE solve, the
parametrization table, muP's first-update scaling with width, the unified optimizer vs
optax, block-by-block forward vs the workbench stack, a study cell on 8 devices vs 1,
bad inputs."""
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.core import sharding
from jaxpapers.nn import lm
from jaxpapers.papers.hybrid_mup import experiment
from jaxpapers.papers.hybrid_mup import mamba
from jaxpapers.papers.hybrid_mup import model as model_lib
from jaxpapers.papers.hybrid_mup import parametrizations as par_lib
from jaxpapers.papers.hybrid_mup import ssm
from jaxpapers.papers.hybrid_mup import study
from jaxpapers.papers.hybrid_mup import sweep


def _scan_inputs(seed=0, B=2, T=11, D=3, N=4):
  r = np.random.default_rng(seed)
  x = r.normal(size=(B, T, D)).astype(np.float32)
  delta = np.log1p(np.exp(r.normal(size=(B, T, D)))).astype(np.float32)
  a = -np.exp(r.normal(size=(D, N))).astype(np.float32)
  b = r.normal(size=(B, T, N)).astype(np.float32)
  c = r.normal(size=(B, T, N)).astype(np.float32)
  d = r.normal(size=(D,)).astype(np.float32)
  return x, delta, a, b, c, d


def _numpy_selective_scan(x, delta, a, b, c, d, method):
  """The recurrence written out per (batch, time, channel, state) in float64."""
  B, T, D = x.shape
  N = a.shape[1]
  y = np.zeros((B, T, D))
  for i in range(B):
    h = np.zeros((D, N))
    for t in range(T):
      for ch in range(D):
        for n in range(N):
          da = delta[i, t, ch] * a[ch, n]
          bbar = (delta[i, t, ch] * b[i, t, n] if method == "simplified"
                  else (math.exp(da) - 1.0) / a[ch, n] * b[i, t, n])
          h[ch, n] = math.exp(da) * h[ch, n] + bbar * x[i, t, ch]
        y[i, t, ch] = float(np.dot(c[i, t], h[ch])) + d[ch] * x[i, t, ch]
  return y


@pytest.mark.parametrize("method", ["simplified", "zoh"])
def test_associative_and_sequential_scans_equal_the_numpy_recurrence(method):
  args = _scan_inputs()
  ref = _numpy_selective_scan(*args, method)
  for scan in ("associative", "sequential"):
    y = ssm.selective_scan(*map(jnp.asarray, args), method=method, scan=scan)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=2e-5, atol=2e-5)


def _numpy_loss(x, delta, a, b, c, d, w, method):
  """sum(y * w) of the recurrence in float64, vectorized over (channel, state) only."""
  B, T, _ = x.shape
  total = 0.0
  for i in range(B):
    h = np.zeros(a.shape)
    for t in range(T):
      da = delta[i, t][:, None] * a
      bbar = (delta[i, t][:, None] * b[i, t][None] if method == "simplified"
              else np.expm1(da) / a * b[i, t][None])
      h = np.exp(da) * h + bbar * x[i, t][:, None]
      total += float(np.dot(h @ c[i, t] + d * x[i, t], w[i, t]))
  return total


def _numpy_grads(args, w, method, eps=1e-6):
  """Central finite differences of `_numpy_loss` in float64, for every input entry."""
  args = [np.asarray(z, np.float64) for z in args]
  grads = []
  for k, z in enumerate(args):
    g = np.zeros_like(z)
    for idx in np.ndindex(z.shape):
      old = z[idx]
      z[idx] = old + eps
      up = _numpy_loss(*args, w, method)
      z[idx] = old - eps
      down = _numpy_loss(*args, w, method)
      z[idx] = old
      g[idx] = (up - down) / (2 * eps)
    grads.append(g)
  return grads


@pytest.mark.parametrize("method", ["simplified", "zoh"])
def test_chunked_scan_equals_the_full_scan_and_numpy_in_outputs_and_gradients(method):
  # T=11: blocks of 4 (the last one padded), 11 (one block) and, with the sequential
  # inner scan, 5 (padded); outputs against the float64 loop, gradients of sum(y * w)
  # against float64 finite differences of the NumPy recurrence and against the full scan.
  args = _scan_inputs(seed=1)
  w = np.random.default_rng(2).normal(size=args[0].shape).astype(np.float32)
  ref_y = _numpy_selective_scan(*args, method)
  ref_g = _numpy_grads(args, w, method)

  def y_and_grads(scan, chunk):
    fn = lambda *z: ssm.selective_scan(*z, method=method, scan=scan, chunk=chunk)
    y, vjp = jax.vjp(fn, *map(jnp.asarray, args))
    return y, vjp(jnp.asarray(w))

  full = {s: jax.jit(lambda s=s: y_and_grads(s, 0))() for s in ("associative", "sequential")}
  for scan, chunk in (("associative", 4), ("associative", 11), ("sequential", 5)):
    y, g = jax.jit(lambda: y_and_grads(scan, chunk))()
    np.testing.assert_allclose(np.asarray(y), ref_y, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(y), np.asarray(full[scan][0]), rtol=1e-5, atol=1e-6)
    for name, gi, ri, fi in zip("x delta a b c d".split(), g, ref_g, full[scan][1]):
      np.testing.assert_allclose(np.asarray(gi), ri, rtol=1e-4, atol=1e-4, err_msg=name)
      np.testing.assert_allclose(np.asarray(gi), np.asarray(fi), rtol=1e-5, atol=1e-5,
                                 err_msg=name)
  with pytest.raises(ValueError, match="chunk"):
    ssm.selective_scan(*map(jnp.asarray, args), chunk=-1)
  with pytest.raises(ValueError, match="scan_chunk"):
    mamba.MambaConfig(scan_chunk=-2)


def test_chunked_scan_gradient_keeps_one_block_of_states_in_memory():
  # The full scan's backward pass holds several (B, T, D, N) arrays; in blocks of L with
  # remat it holds (B, L, D, N) ones plus the T / L carried states (here T / L = 64).
  B, T, D, N = 2, 1024, 64, 16
  S = jax.ShapeDtypeStruct
  shapes = (S((B, T, D), jnp.float32), S((B, T, D), jnp.float32), S((D, N), jnp.float32),
            S((B, T, N), jnp.float32), S((B, T, N), jnp.float32), S((D,), jnp.float32))

  def temp_bytes(chunk):
    loss = lambda *z: jnp.sum(ssm.selective_scan(*z, chunk=chunk))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4))).lower(*shapes).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  one_tensor = B * T * D * N * 4
  full, chunked = temp_bytes(0), temp_bytes(16)
  assert full >= 2 * one_tensor, (full, one_tensor)
  assert chunked < one_tensor, (chunked, one_tensor)
  print(f"scan backward temporaries: full {full / 1e6:.1f} MB, blocks of 16 "
        f"{chunked / 1e6:.1f} MB (one (B, T, D, N) tensor: {one_tensor / 1e6:.1f} MB)")


def test_zoh_is_the_exact_solution_of_the_ode_and_simplified_its_small_step_limit():
  # h' = A h + B u with u constant over [0, dt]: integrate with RK4 in float64 and compare
  # with the exact ZOH (Abar h0 + Bbar u); the Euler-in-B simplified form differs at
  # O((dt A)^2) and matches the closed form Delta*B.
  a = np.array([[-0.5, -2.0, -7.0]])
  b = np.array([[[0.3, -1.2, 0.8]]])
  u, h0 = 1.7, np.array([0.4, -0.1, 0.25])
  for dt in (0.05, 0.4, 1.3):
    h = h0.copy()
    n = 800
    f = lambda s: a[0] * s + b[0, 0] * u
    for _ in range(n):
      k1 = f(h); k2 = f(h + dt / n / 2 * k1); k3 = f(h + dt / n / 2 * k2); k4 = f(h + dt / n * k3)
      h = h + dt / n / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    abar, bbar = ssm.discretize(jnp.full((1, 1, 1), dt), jnp.asarray(a), jnp.asarray(b), "zoh")
    np.testing.assert_allclose(np.asarray(abar[0, 0, 0]) * h0 + np.asarray(bbar[0, 0, 0]) * u,
                               h, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(abar[0, 0, 0]), np.exp(dt * a[0]), rtol=1e-6)
    _, bs = ssm.discretize(jnp.full((1, 1, 1), dt), jnp.asarray(a), jnp.asarray(b), "simplified")
    np.testing.assert_allclose(np.asarray(bs[0, 0, 0]), dt * b[0, 0], rtol=1e-6)
  _, bz = ssm.discretize(jnp.full((1, 1, 1), 1e-4), jnp.asarray(a), jnp.asarray(b), "zoh")
  _, bs = ssm.discretize(jnp.full((1, 1, 1), 1e-4), jnp.asarray(a), jnp.asarray(b), "simplified")
  np.testing.assert_allclose(np.asarray(bz), np.asarray(bs), rtol=1e-3)


def test_rules_table_per_role():
  # width 4x the base: r = 1/4
  t, logit = par_lib.rules("sp", 128, 32)
  assert logit == 1.0 and all(v == (1.0, 1.0) for v in t.values())
  t, logit = par_lib.rules("mup", 128, 32)
  assert logit == 0.25
  assert t["hidden"] == (0.5, 0.25) and t["ssm_b"] == (0.5, 0.25) and t["ssm_c"] == (0.5, 0.25)
  for k in ("embedding", "output", "vector", "conv", "conv_bias", "ssm_vec"):
    assert t[k] == (1.0, 1.0)
  t, _ = par_lib.rules("mup_shape", 128, 32)
  assert t["ssm_b"] == (0.25, 0.25) and t["ssm_c"] == (0.25, 0.25) and t["hidden"] == (0.5, 0.25)
  t, _ = par_lib.rules("mup_ssm", 128, 32, d_state=64, base_state=16)
  assert t["ssm_b"] == (0.5, 0.25) and t["ssm_c"] == (0.25, 0.0625)
  assert par_lib.rules("mup_ssm", 128, 32, d_state=16)[0] == par_lib.rules("mup", 128, 32)[0]
  t, _ = par_lib.rules("mup", 128, 32, optimizer="sgd")
  assert t["hidden"] == (0.5, 1.0) and t["embedding"] == (1.0, 4.0) and t["output"] == (1.0, 4.0)
  for v in par_lib.VARIANTS:  # every variant is SP at the base width
    assert par_lib.rules(v, 32, 32)[0] == par_lib.rules("sp", 32, 32)[0]
  with pytest.raises(ValueError, match="parametrization"):
    par_lib.rules("ntk", 64, 32)


def _config(arg=""):
  return config_lib.load("configs/hybrid_mup.py:smoke" + ("," + arg if arg else ""))


def test_init_std_and_lr_multipliers_reach_every_parameter():
  c = _config("dim=64,base_width=16,pattern=MA,n_heads=2")
  h = model_lib.build(c, 256)
  params = h.init(jax.random.PRNGKey(0))
  mults = h.lr_mults()
  lay = params["layers"]
  m, a = lay[0], lay[1]
  r = 16 / 64
  assert mults["layers"][0]["in_x"] == r and mults["layers"][1]["q"] == r
  assert mults["layers"][0]["x_b"] == r and mults["layers"][0]["a_log"] == 1.0
  assert mults["unembed"] == 1.0 and mults["embed"] == 1.0
  # muP's attention: sqrt(base head_dim) / head_dim = sqrt(8) / 32
  assert h.num["logit_mult"] == r and h.num["attn_scale"] == pytest.approx(math.sqrt(8) / 32)
  np.testing.assert_allclose(np.std(np.asarray(a["q"])), 0.02 * math.sqrt(r), rtol=0.05)
  # Mamba's Linears: kaiming-uniform, 1/sqrt(3 fan_in) at every width (muP's 1/fan_in
  # variance from the base width is the same law)
  np.testing.assert_allclose(np.std(np.asarray(m["in_x"])), 1 / math.sqrt(3 * 64), rtol=0.05)
  np.testing.assert_allclose(np.std(np.asarray(params["unembed"])), 0.02, rtol=0.05)
  np.testing.assert_allclose(np.std(np.asarray(m["conv_w"])), 1 / math.sqrt(12), rtol=0.1)
  np.testing.assert_allclose(np.asarray(m["a_log"])[0], np.log(np.broadcast_to(
      np.arange(1, 5), m["a_log"].shape[1:])), rtol=1e-6)
  assert np.all(np.asarray(m["d_skip"]) == 1)


def _logit_change_after_two_adam_steps(width):
  """RMS change of the logits after two AdamW steps at LR 1e-3 (the first step of the
  workbench schedule has LR 0), for SP and muP at this width; one compile per width."""
  c = _config(f"dim={width},base_width=32,pattern=MA,n_heads=2,seq_len=16")
  h = model_lib.build(c, 256)
  toks = jnp.asarray(np.random.default_rng(0).integers(0, 256, (8, 17)), jnp.int32)

  @jax.jit
  def change(num):
    p0 = h.init(jax.random.PRNGKey(1), num)
    loss = lambda q: jnp.mean(lm.next_token_nats(lambda a, x: h.apply(a, x, num), q, toks, None))
    def step(carry, _):  # scanned: one gradient in the program, not two
      p, state = carry
      p, state, _ = sweep.unified_update(
          jax.grad(loss)(p), state, p, kind=0, lr_t=1e-3, mults=h.lr_mults(num),
          mask=h.decay_mask, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0, clip_norm=0.0)
      return (p, state), None
    (p, _), _ = jax.lax.scan(step, (p0, sweep.unified_init(p0)), None, length=2)
    d = h.apply(p, toks[:, :-1], num) - h.apply(p0, toks[:, :-1], num)
    return jnp.sqrt(jnp.mean(jnp.square(d)))

  out = {}
  for v in ("sp", "mup"):
    num = model_lib.numerics(v, "adamw", width, 32, 2, d_state=4, base_state=4)
    out[v] = float(change(jax.tree.map(jnp.asarray, num)))
  return out


def test_width_doubled_first_update_scales_as_mup_predicts():
  # Adam moves every coordinate by ~lr * multiplier, so under SP the logits move ~2x more
  # when the width doubles (aligned sums over the fan-in); under muP the change is
  # width-independent (Tensor Programs V, Sec. 5: Delta W x = Theta(1)).
  small, big = _logit_change_after_two_adam_steps(64), _logit_change_after_two_adam_steps(128)
  mup, sp = big["mup"] / small["mup"], big["sp"] / small["sp"]
  assert 0.75 < mup < 1.33, (mup, sp)
  assert sp > 1.6, (mup, sp)
  print("logit-change ratio d=128 vs d=64: muP", mup, "SP", sp)


def test_unified_update_equals_the_optax_optimizers():
  # width 64 at base 16: the LR multipliers differ from 1, so the two decay rules differ
  # (each optimizer is checked under one rule here, both rules in closed form in
  # tests/test_hybrid_mup_mamba.py)
  c = _config("pattern=MA,dim=64")
  h = model_lib.build(c, 256)
  p0 = h.init(jax.random.PRNGKey(0))
  leaves, tree = jax.tree.flatten(p0)
  rng = np.random.default_rng(0)
  # a fixed sequence of gradients (scales spread over 3 decades, so the per-parameter and
  # the global second moments differ) replaces the model's: the optimizers see only grads
  grads = [jax.tree.unflatten(tree, [jnp.asarray(rng.normal(size=x.shape) * 10.0 ** rng.integers(-3, 1),
                                                 jnp.float32) for x in leaves]) for _ in range(3)]
  for kind, (name, rule) in enumerate(zip(par_lib.OPTIMIZERS, ("lr", "lr_mult", "lr"))):
    cc = config_lib.override(c, {"optim.name": name, "optim.weight_decay": 0.1,
                                 "optim.decay_rule": rule})
    sched = lm.schedule(cc, 3e-3, cc.train.steps)
    opt = model_lib.optimizer(cc, h, 3e-3)

    @jax.jit
    def both(p0, grads):
      def step(carry, xs):  # one scanned step: a third of the unrolled program to compile
        (pa, sa), (pb, sb) = carry
        g, t = xs
        upd, sa = opt.update(g, sa, pa)
        pa = optax.apply_updates(pa, upd)
        pb, sb, _ = sweep.unified_update(
            g, sb, pb, kind=kind, lr_t=sched(t), mults=h.lr_mults(), mask=h.decay_mask,
            b1=cc.optim.b1, b2=cc.optim.b2, eps=cc.optim.eps, weight_decay=0.1,
            clip_norm=cc.optim.clip_norm, decay_rule=rule)
        return ((pa, sa), (pb, sb)), None
      ((pa, _), (pb, _)), _ = jax.lax.scan(
          step, ((p0, opt.init(p0)), (p0, sweep.unified_init(p0))), (grads, jnp.arange(3)))
      return pa, pb

    pa, pb = both(p0, jax.tree.map(lambda *g: jnp.stack(g), *grads))
    for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)):
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_block_by_block_forward_equals_the_stack_and_reports_ssm_scales():
  c = _config("pattern=MAMA,parametrization=mup,dim=32")
  h = model_lib.build(c, 256)
  p = h.init(jax.random.PRNGKey(0))
  toks = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 16)), jnp.int32)
  # one compiled program for both (op-by-op dispatch compiled every op of the scans)
  (logits, stats), applied = jax.jit(lambda p, t: (h.forward(p, t), h.apply(p, t)))(p, toks)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(applied), rtol=1e-5, atol=1e-6)
  for k in ("embed", "ssm_B", "ssm_C", "ssm_delta", "ssm_y", "mamba_out",
            "attn_out", "mlp_out", "logits"):
    assert np.isfinite(float(stats[k])) and float(stats[k]) > 0


def test_patterns():
  assert mamba.nemotron_pattern(8, 4) == "M-M-M-*-M-M-M-*-"
  assert mamba.ratio_pattern(1, 2, 2) == "MMAMMA"


def test_bad_inputs_are_named(tmp_path):
  with pytest.raises(ValueError, match="parametrization"):
    model_lib.build(_config("parametrization=ntk"), 256)
  with pytest.raises(ValueError, match="discretization"):
    model_lib.build(_config("discretization=bilinear"), 256)
  with pytest.raises(ValueError, match="state_scaling"):
    model_lib.build(_config("state_scaling=quadratic"), 256)
  with pytest.raises(ValueError, match="unregistered"):
    model_lib.build(_config("pattern=MX"), 256)
  with pytest.raises(FileNotFoundError, match="nope.txt"):
    experiment.load_data(_config(f"path={tmp_path / 'nope.txt'}"))


def test_user_text_file_trains_and_proportional_zoh_state_builds(tmp_path):
  path = tmp_path / "corpus.txt"
  path.write_text("To be, or not to be, that is the question. " * 400, encoding="utf-8")
  c = _config(f"path={path},state_scaling=proportional,discretization=zoh,dim=32,"
              "parametrization=mup_ssm,base_width=16,eval_windows=8")
  data = experiment.load_data(c)
  assert data.name == "corpus.txt/byte"
  h = model_lib.build(c, data.vocab_size)
  assert h.model.blocks["M"].mc.d_state == 8  # 4 at base width 16, proportional
  task = model_lib.make_task(c, data, h)
  state = jax.jit(task.init)(jax.random.PRNGKey(0))
  state, m = jax.jit(task.train_step)(state, task.train_batch(0, slice(None)),
                                      jax.random.PRNGKey(1), 0)
  assert np.isfinite(float(m["loss"])) and float(m["loss"]) > 0


def test_study_cell_spread_over_8_devices_equals_the_1_device_cell():
  # One study cell (8 members: SP, muP, muP + SGD and muP + global Adam, two seeds each;
  # spread puts them on the 8 forced devices, one each) trained with the member axis over
  # the devices and, as the study did before, as one jit(vmap) program on one device. The
  # cell has the smoke study's shapes (width 16, 8 members of seeds 0 and 1, its held-out
  # split): the spread program is the one colabs/hybrid_mup.ipynb compiles (shared cache).
  assert jax.device_count() == 8
  # The study's path (study.py calls train_members without a mapper) is the spread one.
  assert inspect.signature(sweep.train_members).parameters["mapper"].default is sharding.spread
  placed = []

  def spread_and_record(f):  # the default mapper, noting where each chunk's outputs live
    run = sharding.spread(f)

    def call(*args):
      out = run(*args)
      placed.append({len(x.sharding.device_set) for x in jax.tree.leaves(out)})
      return out
    return call

  c = _config()
  cell = next(x for x in study.cells(c) if x["name"] == "width16")
  cc = study.cell_config(c, cell)
  data = experiment.load_data(cc)
  hybrid = model_lib.build(cc, data.vocab_size)
  from jaxpapers.data import text as text_lib  # pylint: disable=g-import-not-at-top
  w = text_lib.eval_windows(data.val, 16, c.study.eval_windows)
  n = (len(w) // 16) * 8   # run_cell's validation / test halves
  windows = {"val": w[:n], "test": w[n:2 * n]}
  members = []
  for variant, opt, lr in (("sp", "adamw", 1e-2), ("mup", "adamw", 3e-2), ("mup", "sgd", 1.0),
                           ("mup", "adam_global", 1e-2)):
    num = model_lib.numerics(variant, opt, 16, 16, 2, d_state=4, base_state=4)
    members += [{"seed": s, "lr": lr, "num": num} for s in range(c.study.seeds)]
  assert len(members) == 8
  groups = sweep.update_groups(hybrid)
  spread = sweep.train_members(cc, data, hybrid, members, windows, mapper=spread_and_record,
                               update_groups=groups)
  one = sweep.train_members(cc, data, hybrid, members, windows,
                            mapper=lambda f: jax.jit(jax.vmap(f)), update_groups=groups)
  assert {"mamba_in", "ssm_b", "attn_qkvo", "unembed"} <= set(groups)
  for g in groups:   # ||dW|| / ||W|| every step: 0 at step 0 (the warm-up's LR is 0), > 0 after
    assert np.all(spread["stats"][f"upd/{g}"][:, 0] == 0), g
    assert np.all(spread["stats"][f"upd/{g}"][:, 1:] > 0), g
  assert placed == [{8}], placed  # one member per device
  assert spread["val_bpb"].shape == (8,)
  for k in ("val_bpb", "test_bpb", "final_loss", "loss_curve"):
    np.testing.assert_allclose(spread[k], one[k], rtol=1e-5, atol=1e-6, err_msg=k)
  for k in spread["stats"]:
    np.testing.assert_allclose(spread["stats"][k], one["stats"][k], rtol=1e-5, err_msg=k)
  assert np.all(np.isfinite(spread["val_bpb"])) and not np.any(spread["diverged"])
