"""Tests for the multisubject coupled SAE (abstract 1): each computation vs a reference."""
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.nn import llama
from jaxpapers.papers.coupled_sae import analysis
from jaxpapers.papers.coupled_sae import baselines
from jaxpapers.papers.coupled_sae import features
from jaxpapers.papers.coupled_sae import lebel
from jaxpapers.papers.coupled_sae import methods
from jaxpapers.papers.coupled_sae import model
from jaxpapers.papers.coupled_sae import signal
from jaxpapers.papers.coupled_sae import simulate


# ----------------------------------------------------------------------------- TopK SAE

def test_topk_keeps_exactly_k_largest():
  rng = np.random.default_rng(0)
  pre = rng.standard_normal((64, 50)).astype(np.float32) + 0.5
  for k in (1, 5, 12):
    z = np.asarray(model.topk_relu(jnp.asarray(pre), k))
    ref = np.zeros_like(pre)
    top = np.argsort(-pre, axis=1)[:, :k]
    np.put_along_axis(ref, top, np.maximum(np.take_along_axis(pre, top, 1), 0), 1)
    np.testing.assert_allclose(z, ref, rtol=1e-6)
    pos = (np.sort(pre, axis=1)[:, -k] > 0)  # rows whose k largest are all positive
    assert np.all((z > 0).sum(1)[pos] == k) and np.all((z > 0).sum(1) <= k)


def test_sae_encoder_is_tied_at_init_and_decoder_unit_norm():
  p = model.init_sae(jax.random.PRNGKey(0), 16, 8)
  np.testing.assert_allclose(np.asarray(p["w_enc"]), np.asarray(p["w_dec"]).T)
  p["w_dec"] = p["w_dec"] * 3.0
  np.testing.assert_allclose(np.linalg.norm(np.asarray(model.decoder(p)), axis=1), 1.0,
                             rtol=1e-5)


# ----------------------------------------------------------------------------- ridge

@pytest.mark.parametrize("n_feat", [6, 40])  # primal (T > F) and kernel (T < F) solvers
def test_ridge_matches_closed_form(n_feat):
  rng = np.random.default_rng(1)
  x = rng.standard_normal((30, n_feat))
  y = x[:, :3] @ rng.standard_normal((3, 4)) + 0.5 * rng.standard_normal((30, 4)) + 2.0
  folds = baselines.block_folds(30, 3)
  w, alphas = baselines.ridge_cv(x, y, folds, alphas=(7.0,))
  np.testing.assert_allclose(w, baselines.ridge_closed_form(x, y, 7.0), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(alphas, 7.0, rtol=1e-6)


def test_ridge_cv_picks_per_voxel_alpha():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((80, 5))
  clean = x @ rng.standard_normal((5, 1))
  y = np.concatenate([clean + 0.01 * rng.standard_normal((80, 1)),
                      rng.standard_normal((80, 1))], axis=1)  # signal voxel, noise voxel
  _, alphas = baselines.ridge_cv(x, y, baselines.block_folds(80, 4), (1e-2, 1e4))
  np.testing.assert_allclose(alphas, [1e-2, 1e4], rtol=1e-6)


# ----------------------------------------------------------------------------- resampling

def test_lanczos_kernel_against_formula():
  t = np.linspace(-4, 4, 161)
  a, fc = 3, 0.5
  u = t * fc
  ref = np.array([1.0 if ui == 0 else (a * np.sin(np.pi * ui) * np.sin(np.pi * ui / a)
                                       / (np.pi ** 2 * ui ** 2) if abs(ui) < a else 0.0)
                  for ui in u])
  np.testing.assert_allclose(signal.lanczos_kernel(t, fc, a), ref, atol=1e-12)


def test_lanczos_resampling_sums_events():
  """Events every dt carry TR/dt of a constant into each TR; a slow sinusoid keeps shape."""
  dt, tr = 0.37, 2.0
  old = np.arange(0, 300, dt)
  new = signal.tr_times(150, tr)
  const = signal.lanczos_resample(np.ones((len(old), 1)), old, new)[10:-10, 0]
  np.testing.assert_allclose(const, tr / dt, rtol=0.03)
  slow = np.sin(2 * np.pi * old / 60.0)[:, None]
  out = signal.lanczos_resample(slow, old, new)[10:-10, 0] * dt / tr
  np.testing.assert_allclose(out, np.sin(2 * np.pi * new[10:-10] / 60.0), atol=0.05)


def test_delays_against_loop_and_story_boundaries():
  rng = np.random.default_rng(3)
  x = rng.standard_normal((12, 2))
  d = signal.make_delayed(x, (1, 3))
  for t in range(12):
    for j, lag in enumerate((1, 3)):
      ref = x[t - lag] if t - lag >= 0 else np.zeros(2)
      np.testing.assert_array_equal(d[t, 2 * j:2 * j + 2], ref)
  # The JAX model's delayed codes equal NumPy delays applied story by story.
  lengths, delays, k = [7, 5], (1, 2, 4), 2
  p = model.init_sae(jax.random.PRNGKey(1), 2, 4)
  prev = model.prev_index(lengths, delays)
  zd = np.asarray(model.delayed_codes(p, model.pad_rows(jnp.asarray(x, jnp.float32)),
                                      jnp.asarray(prev), k))
  z = np.asarray(model.encode(p, jnp.asarray(x, jnp.float32), k))
  np.testing.assert_allclose(zd, signal.make_delayed_stories(z, lengths, delays), atol=1e-6)


def test_hrf_shape_and_convolution():
  h = signal.spm_hrf(2.0)
  assert abs(h.sum() - 1) < 1e-9 and 4.0 <= 2.0 * np.argmax(h) <= 6.0 and h.min() < 0
  x = np.random.default_rng(4).standard_normal((40, 3))
  ref = np.stack([np.convolve(x[:, j], h)[:40] for j in range(3)], axis=1)
  np.testing.assert_allclose(signal.convolve_hrf(x, h), ref, atol=1e-12)


# ----------------------------------------------------------------------------- LM features

def test_layer_hidden_matches_llama_at_last_layer():
  cfg, params, _ = features.tiny_lm()
  toks = jnp.asarray(np.random.default_rng(5).integers(0, 256, (2, 9)), jnp.int32)
  h = features.layer_hidden(params, toks, cfg, cfg.n_layers)
  ref, _ = llama.hidden(params, toks, cfg)
  np.testing.assert_allclose(np.asarray(llama.rms_norm(h, params["final_norm"], cfg.norm_eps)),
                             np.asarray(ref), rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="layer"):
    features.layer_hidden(params, toks, cfg, 0)


def test_word_features_read_the_last_token_of_each_word():
  """With a 'model' that returns token positions, each word gets its last token's index."""
  tok = features.tiny_lm()[2]
  words = "the quick brown fox jumps over the lazy dog again and again".split() * 3
  win, ctx = 16, 6
  w, starts, last, n_tok = features.story_windows(tok, words, win, ctx, tok.eos_id)
  pos = np.stack([np.arange(s, s + win) for s in starts]).astype(np.float32)[..., None]
  got = features.gather_words(pos, starts, last, n_tok, ctx)[:, 0]
  np.testing.assert_array_equal(got, last)
  assert n_tok == len(" ".join(words).encode())  # per-word tokens tile the running text
  # Windows after the first keep only tokens with at least `ctx` tokens of context.
  assert all(b - a == win - ctx for a, b in zip(starts[:-1], starts[1:]))


# ----------------------------------------------------------------------------- simulator

def _sim_cfg(**kw):
  base = dict(tr=2.0, rows=8, cols=10, n_subjects=3, n_planted=6, k_true=3, active_frac=0.2,
              shift_sd=0.5, gain_sd=0.2, idio=0.1, dense_frac=0.0, dense_rank=4, ar=0.3,
              spatial_sigma=1.0, peak_ceiling=0.6)
  base.update(kw)
  return types.SimpleNamespace(**base)


def _fake_stories(n=6, T=120, D=24, seed=0):
  rng = np.random.default_rng(seed)
  mix = rng.standard_normal((D, D)) / np.sqrt(D)
  return [signal.zscore(rng.standard_normal((T, D)) @ mix) for _ in range(n)]


def test_planted_atoms_are_recovered_by_an_oracle():
  """Ridge on the true delayed atom activations reaches the noise ceiling on held-out
  stories; the codes are sparse as planted; the ceilings peak where configured."""
  xs = _fake_stories()
  cfg = _sim_cfg()
  sim = simulate.simulate(xs, [0, 1, 2, 3], cfg, seed=0)
  codes = np.concatenate(sim.codes)
  assert np.all((codes > 0).sum(1) <= cfg.k_true)
  assert 0.05 < (codes > 0).mean() < 0.25
  delays = (1, 2, 3, 4, 5, 6, 7, 8)
  f_tr = np.concatenate([signal.make_delayed(sim.codes[i], delays) for i in range(4)])
  f_te = np.concatenate([signal.make_delayed(sim.codes[i], delays) for i in (4, 5)])
  lengths = [120] * 4
  for s in range(cfg.n_subjects):
    y_tr = np.concatenate(sim.responses[s][:4])
    y_te = np.concatenate(sim.responses[s][4:])
    w, _ = baselines.ridge_cv(f_tr, y_tr, baselines.story_folds(lengths, 4))
    r = signal.correlation(baselines.predict(w, f_tr, y_tr, f_te), y_te)
    ceil = simulate.noise_ceiling(np.concatenate(sim.signals[s][4:]), y_te)
    good = ceil > 0.3
    assert good.sum() > 10
    assert r[good].mean() > 0.85 * ceil[good].mean()
    assert abs(np.quantile(simulate.noise_ceiling(np.concatenate(sim.signals[s]),
                                                  np.concatenate(sim.responses[s])), 0.95)
               - cfg.peak_ceiling) < 0.08


def test_smooth_generator_is_not_topk():
  """The second generator: exp(kappa (cos - 1)) per atom (a NumPy formula reference),
  positive on every TR (no threshold, no TopK), so no TopK-ReLU encoder reproduces it;
  an oracle on its activations still predicts the responses."""
  xs = _fake_stories()
  cfg = _sim_cfg(generator="smooth", kappa=6.0)
  sim = simulate.simulate(xs, [0, 1, 2, 3], cfg, seed=0)
  a = sim.atoms
  xn = xs[4] / np.linalg.norm(xs[4], axis=1, keepdims=True)
  ref = np.exp(6.0 * (xn @ a.directions.T - 1.0)) / a.scales
  np.testing.assert_allclose(sim.codes[4], ref, rtol=1e-10)
  codes = np.concatenate(sim.codes)
  assert codes.min() > 0 and (codes > 0).sum(1).min() == cfg.n_planted > cfg.k_true
  np.testing.assert_allclose(np.concatenate(sim.codes[:4]).std(0), 1.0, rtol=1e-6)
  f_tr = np.concatenate([signal.make_delayed(sim.codes[i], (1, 2, 3, 4, 5, 6, 7, 8))
                         for i in range(4)])
  f_te = np.concatenate([signal.make_delayed(sim.codes[i], (1, 2, 3, 4, 5, 6, 7, 8))
                         for i in (4, 5)])
  y_tr, y_te = (np.concatenate(sim.responses[0][a:b]) for a, b in ((0, 4), (4, 6)))
  w, _ = baselines.ridge_cv(f_tr, y_tr, baselines.story_folds([120] * 4, 4))
  r = signal.correlation(baselines.predict(w, f_tr, y_tr, f_te), y_te)
  ceil = simulate.noise_ceiling(np.concatenate(sim.signals[0][4:]), y_te)
  assert r[ceil > 0.3].mean() > 0.8 * ceil[ceil > 0.3].mean()


def test_stories_drawn_per_seed_from_the_pool():
  from jaxpapers.papers.coupled_sae import data as data_lib  # pylint: disable=g-import-not-at-top
  n = 38
  stories = [features.Story(f"play{i}", ["a"], np.zeros(1), np.ones(1)) for i in range(n)]
  pool = data_lib.Features(stories, [np.full((3, 2), i, np.float32) for i in range(n)],
                           [[["a"]] * 3 for _ in range(n)], {"pool": list(range(n))}, None)
  cfg = config_lib.load("configs/coupled_sae.py:n_train=24,n_val=2,n_test=2")
  names = lambda f: {k: [f.stories[i].name for i in v] for k, v in f.split.items()}  # noqa: E731
  a, b, a2 = (names(data_lib.for_seed(pool, cfg, s)) for s in (0, 1, 0))
  assert a == a2 and a != b and a["test"] != b["test"]
  for d in (a, b):
    picked = d["train"] + d["val"] + d["test"]
    assert len(d["train"]) == 24 and len(set(picked)) == 28       # disjoint splits
  f0 = data_lib.for_seed(pool, cfg, 0)                            # features follow names
  assert all(f0.x[i][0, 0] == int(f0.stories[i].name[4:]) for i in range(28))
  fixed = config_lib.load("configs/coupled_sae.py:draw_stories=false")
  assert names(data_lib.for_seed(pool, fixed, 5))["test"] == ["play10", "play11"]
  with pytest.raises(ValueError, match="n_plays"):
    data_lib.features_for(config_lib.load("configs/coupled_sae.py:n_plays=8"), None)


def test_parcellation_and_maps():
  rng = np.random.default_rng(0)
  surf = simulate.parcellation(20, 24, rng)
  assert set(np.unique(surf.labels)) == set(range(7))
  specs = simulate.atom_specs(surf, 5, rng)
  for spec in specs:
    m = simulate.atom_map(surf, spec)
    # Most of a map's energy sits in its home network (blobs centred there, leak 0.3).
    assert analysis.network_purity(m, surf.labels, 7) >= (
        (m[surf.labels == spec.home] ** 2).sum() / (m ** 2).sum()) - 1e-12
    assert (m[surf.labels == spec.home] ** 2).sum() / (m ** 2).sum() > 0.5


# ----------------------------------------------------------------------------- analyses

def test_recovery_and_reproducibility_references():
  rng = np.random.default_rng(6)
  true = np.maximum(rng.standard_normal((200, 4)), 0)
  perm = np.concatenate([true[:, [2, 0, 3, 1]], rng.standard_normal((200, 3))], axis=1)
  assert analysis.recovery_timecourse(true, perm) == pytest.approx(1.0)
  assert analysis.recovery_timecourse(true, rng.standard_normal((200, 7))) < 0.3
  maps = rng.standard_normal((1, 5, 30))
  same = np.concatenate([maps, 2 * maps, maps + 1], axis=0)
  assert analysis.reproducibility(same) == pytest.approx(1.0)
  w = rng.standard_normal((3, 2 * 6, 30))
  ds = analysis.delay_sum(w[0], 2)
  np.testing.assert_allclose(ds, w[0][:6] + w[0][6:])


# ----------------------------------------------------------------------------- training

def _tiny_train_setup():
  rng = np.random.default_rng(7)
  lengths = [40, 30]
  x = rng.standard_normal((70, 12)).astype(np.float32)
  delays = (1, 2)
  prev = model.prev_index(lengths, delays)
  y = np.stack([signal.make_delayed_stories(np.maximum(x[:, :3], 0), lengths, delays)
                @ rng.standard_normal((6, 9)) for _ in range(2)]).astype(np.float32)
  split = methods.Split(x, prev, signal.make_delayed_stories(x, lengths, delays), y, lengths)
  cfg = config_lib.load("configs/coupled_sae.py:smoke,n_atoms=6,k=2,steps=24,batch=16,"
                        "ckpt_every=8,lrs=1e-2+3e-3,betas=1.0")
  cfg.unlock()
  cfg.data.delays = delays
  return cfg, split


def test_coupled_training_fits_voxels_and_resumes_exactly(tmp_path):
  from jaxpapers.core import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from tests import _runs  # pylint: disable=g-import-not-at-top
  cfg, split = _tiny_train_setup()
  # Uninterrupted, in chunks of 8 steps (the same compiled chunk as the resumed run).
  train = lambda c, d: methods.train_grid(  # noqa: E731
      c, split, 2, 0, "joint", 10.0, ckpt_dir=d,
      writer=metrics_lib.MetricsWriter(d, verbose=False))
  full = train(cfg, str(tmp_path / "full"))
  # A member trained inside the grid equals the same member trained alone (same batches,
  # same init; only float32 rounding of the differently batched kernels may differ).
  alone_cfg = config_lib.override(cfg, {"train.lrs": (1e-2,)})
  alone = train(alone_cfg, str(tmp_path / "alone"))
  np.testing.assert_allclose(full["params"]["maps"]["m"][0], alone["params"]["maps"]["m"][0],
                             rtol=1e-4, atol=1e-6)
  # Checkpointed in chunks of 8 steps, killed after 16 and resumed: bitwise equal.
  ck = str(tmp_path / "ck")
  part = config_lib.override(cfg, {"train.steps": 16})
  train(part, ck)
  resumed = train(cfg, ck)
  for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(a, b)
  _runs.assert_same_metrics(ck, tmp_path / "full")
  # The coupled maps learn something: training-TR correlation above the untrained zero.
  p = jax.tree.map(lambda a: a[0], full["params"])
  r = np.stack(methods.eval_joint(p, split, 2, 2)[1])
  assert np.isfinite(r).all() and r.mean() > 0.1


def test_grid_spread_over_8_devices_equals_one_device():
  """One study cell (a 3-member (lr, beta) grid, on 3 of the 8 devices) through `sharding.spread`
  on the 8 forced devices gives the 1-device `jit(vmap)` numbers."""
  assert jax.device_count() == 8
  cfg, split = _tiny_train_setup()
  spec = model.TrainSpec(2, 12, 16, True)
  D, V = split.x.shape[1], split.y.shape[-1]
  one = model.init_state(jax.random.PRNGKey(3), D, 6, len(cfg.data.delays), 2, V, True)
  states = jax.tree.map(lambda a: jnp.stack([a] * 3), one)
  lrs = jnp.asarray([1e-2, 3e-3, 1e-3], jnp.float32)
  betas = jnp.asarray([1.0, 0.5, 2.0], jnp.float32)
  x = jnp.asarray(split.x)
  data = (x, model.pad_rows(x), jnp.asarray(split.prev), jnp.asarray(split.y),
          jnp.asarray(split.vmask()))
  args = (states, lrs, betas, data, jax.random.PRNGKey(4), jnp.float32(10.0), jnp.int32(5))
  spread_out = model.make_train(spec, 12)(*args)
  ref = jax.jit(jax.vmap(model.member_run(spec, 12), in_axes=model.GRID_AXES))(*args)
  m = spread_out[0]["params"]["maps"]["m"]  # one member per device (first n of the 8)
  assert len(m.sharding.device_set) == min(m.shape[0], 8) > 1
  assert len(ref[0]["params"]["maps"]["m"].sharding.device_set) == 1
  assert spread_out[1]["loss"].shape == (3, 12)
  for a, b in zip(jax.tree.leaves(spread_out), jax.tree.leaves(ref)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
  # The members differ (the grid is not one member copied): lr changes the maps.
  m = np.asarray(spread_out[0]["params"]["maps"]["m"])
  assert np.abs(m[0] - m[1]).max() > 1e-4


# ----------------------------------------------------------------------------- real data

def test_lebel_loader_on_generated_files(tmp_path):
  rng = np.random.default_rng(8)
  lebel.write_example(str(tmp_path), ["UTS01", "UTS02"], ["storya", "storyb"], 7, rng)
  stories, resp, times = lebel.load(str(tmp_path), ["UTS01", "UTS02"], ["storya", "storyb"])
  assert [s.name for s in stories] == ["storya", "storyb"]
  assert all(len(s.words) >= 60 and np.all(np.diff(s.onsets) > 0) for s in stories)
  for s in ("UTS01", "UTS02"):
    assert [y.shape for y in resp[s]] == [(len(t), 7) for t in times]
  # A word tier read back exactly (first word after the leading silence starts at 0.8 s).
  assert stories[0].onsets[0] == pytest.approx(0.8)
  d = tmp_path / "derivative"
  rd = json.loads((d / "respdict.json").read_text())
  rd["storya"] += 3
  (d / "respdict.json").write_text(json.dumps(rd))
  with pytest.raises(ValueError, match="storya.hf5 has"):
    lebel.load(str(tmp_path), ["UTS01"], ["storya"])
  with pytest.raises(FileNotFoundError, match="ds003020"):
    lebel.load(str(tmp_path / "nope"), ["UTS01"], ["storya"])
  with pytest.raises(ValueError, match="not in"):
    lebel.load(str(tmp_path), ["UTS01"], ["nostory"])


def test_subjects_with_7_and_9_voxels_through_the_whole_path(tmp_path):
  """LeBel files of subjects with 7 and 9 voxels (plus a held-out one with 8) go through
  the loader, every method, the metrics and the top segments; the coupled model's padded
  map columns stay exactly zero and every subject is scored on its own voxels."""
  from jaxpapers.papers.coupled_sae import data as data_lib  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.coupled_sae import experiment  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(9)
  subs, stories = ["UTS01", "UTS02", "UTS03"], ["sa", "sb", "sc", "sd", "se"]
  lebel.write_example(str(tmp_path / "ds"), subs, stories, (7, 9, 8), rng)
  cfg = config_lib.load(
      f"configs/coupled_sae.py:smoke,source=lebel,path={tmp_path / 'ds'},"
      f"subjects={'+'.join(subs)},stories={'+'.join(stories)},n_train=3,n_val=1,n_test=1,"
      "steps=8,ckpt_every=8,batch=16")
  feats = data_lib.features_for(cfg, None, log=lambda *_: None)
  resp = data_lib.responses_for(feats, cfg, 0)
  fit = methods.fit_all(cfg, feats, resp, 0, log=lambda *_: None)
  assert [r.shape for r in fit["joint"]["test_r"]] == [(7,), (9,)]
  assert [r.shape for r in fit["dense"]["test_r"]] == [(7,), (9,), (8,)]
  m = np.asarray(fit["joint"]["params"]["maps"]["m"])        # (2 fitted, F, 9)
  assert m.shape[-1] == 9 and np.all(m[0, :, 7:] == 0) and np.abs(m[0, :, :7]).max() > 0
  out = experiment.train_and_evaluate(cfg, str(tmp_path / "run"))
  assert np.isfinite(out["pct_dense_coupled"]) and np.isfinite(out["pct_dense_two_stage"])
  # Any other shape mismatch: one line naming the subject and story.
  bad = data_lib.Responses([resp.y[0], resp.y[1][:-1] + [resp.y[1][-1][:-2]]], None,
                           ("UTS01", "UTS02"))
  with pytest.raises(ValueError, match=r"UTS02, story se: response has \d+ TRs"):
    data_lib.check_responses(feats, bad)
  bad = data_lib.Responses([resp.y[0][:-1] + [resp.y[0][-1][:, :5]]], None, ("UTS01",))
  with pytest.raises(ValueError, match=r"UTS01: stories have different voxel counts \[5, 7\]"):
    data_lib.check_responses(feats, bad)


def test_padding_does_not_change_the_coupled_fit():
  """The same subjects padded to 9 or to 13 voxels train to the same maps on their real
  voxels: the mask keeps padding out of the loss, the penalty and the means. Without the
  mask the mean over padded voxels would rescale the brain loss and change the fit."""
  cfg, split = _tiny_train_setup()
  ys = [split.y[0][:, :7], split.y[1]]                        # 7 and 9 voxels
  fits = []
  for v_max in (9, 13):
    y, n_vox = methods.pad_subjects(ys, v_max)
    sp = methods.Split(split.x, split.prev, split.xdel, y, split.lengths, n_vox)
    fits.append(methods.train_grid(cfg, sp, 2, 0, "joint", 10.0))
  a, b = (f["params"]["maps"]["m"] for f in fits)
  np.testing.assert_allclose(a[:, 0, :, :7], b[:, 0, :, :7], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(a[:, 1], b[:, 1, :, :9], rtol=1e-4, atol=1e-6)
  assert np.all(b[:, 0, :, 7:] == 0) and np.all(b[:, 1, :, 9:] == 0)
  np.testing.assert_allclose(fits[0]["params"]["sae"]["w_dec"], fits[1]["params"]["sae"]["w_dec"],
                             rtol=1e-4, atol=1e-6)


def test_config_bad_inputs():
  with pytest.raises(ValueError, match="no_such_key"):
    config_lib.load("configs/coupled_sae.py:no_such_key=1")
  with pytest.raises(ValueError, match="k=9"):
    config_lib.load("configs/coupled_sae.py:k=9,n_atoms=4")
  with pytest.raises(ValueError, match="source"):
    config_lib.load("configs/coupled_sae.py:source=nifti")
  with pytest.raises(ValueError, match="generator"):
    config_lib.load("configs/coupled_sae.py:generator=relu")


def _pca_split(rng, lengths, n_vox, w):
  x = rng.standard_normal((sum(lengths), 12)).astype(np.float32)
  x1 = signal.make_delayed_stories(x, lengths, (1,))  # responses lag the features by 1 TR
  ys = [(x1 @ w[:, :v] + 0.5 * rng.standard_normal((len(x), v))).astype(np.float32)
        for v in n_vox]
  y, n = methods.pad_subjects(ys)
  return methods.Split(x, model.prev_index(lengths, (1, 2)),
                       signal.make_delayed_stories(x, lengths, (1, 2)), y, lengths, n)


def test_tuned_pca_equals_per_subject_ridge_and_picks_on_validation():
  """The tuned PCA-k baseline fits the subjects' concatenated voxels in one ridge: it must
  equal a separate per-subject ridge on the same PC features (per-voxel alphas are
  independent per target), and its k must be the grid's best on validation r. The
  responses read all 12 feature directions, so 2 PCs must lose to >= 8 on validation."""
  rng = np.random.default_rng(7)
  w = rng.standard_normal((12, 5)).astype(np.float32)
  tr, va, te = (_pca_split(rng, lens, (3, 5), w) for lens in ((40, 40, 40, 40), (40,), (40,)))
  cfg = config_lib.load("configs/coupled_sae.py:smoke,pca_ks=2+8+12")
  cfg = config_lib.override(cfg, {"data.delays": (1, 2)})
  got = methods._pca_tuned(tr, va, te, 2, cfg)  # pylint: disable=protected-access
  assert [g["k"] for g in got["grid"]] == [2, 8, 12]
  assert got["k"] == max(got["grid"], key=lambda g: g["val_r"])["k"] and got["k"] != 2
  mu, comps = baselines.pca_fit(tr.x, got["k"])
  pc = {n: signal.make_delayed_stories(baselines.pca_scores(s.x, mu, comps), s.lengths, (1, 2))
        for n, s in (("train", tr), ("test", te))}
  ref = methods._ridge_method(pc["train"], pc["test"], tr, te, 2, cfg)["test_r"]  # pylint: disable=protected-access
  for a, b in zip(got["test_r"], ref):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="pca_ks"):
    methods._pca_tuned(tr, va, te, 2, config_lib.override(cfg, {"eval.pca_ks": (400,)}))  # pylint: disable=protected-access


def test_sweep_edges_table_and_study_rows(tmp_path):
  """Edge flags mark picks on a grid's boundary; rows without the tuned PCA read "-"; a
  study run with other training settings is refused as a sweep cell, naming the key."""
  from jaxpapers.core import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.coupled_sae import sweep  # pylint: disable=g-import-not-at-top
  cfg = config_lib.load("configs/coupled_sae.py")
  lrs, betas = cfg.train.lrs, cfg.train.betas
  assert not sweep.edges(cfg, {"coupled_lr": lrs[1], "coupled_beta": betas[1]})["edge_coupled"]
  assert sweep.edges(cfg, {"coupled_lr": lrs[-1], "coupled_beta": betas[1]})["edge_coupled"]
  assert sweep.edges(cfg, {"coupled_lr": lrs[1], "coupled_beta": betas[0],
                           "pca_k": cfg.eval.pca_ks[-1]}) == {"edge_coupled": True,
                                                              "edge_pca_k": True}
  base = {"generator": "topk", "dense_frac": 0.3, "n_planted": 10, "pct_dense_coupled": 100.0,
          "pct_dense_two_stage": 90.0, "pct_dense_pca": 95.0, "pct_dense_oracle": 120.0,
          "pct_dense_coupled_refit": 101.0}
  rows = [dict(base, seed=s, pct_dense_coupled=100.0 + s) for s in range(3)]
  line = sweep.table(rows).splitlines()[-1]
  assert "| 6.0 ± 1.0 | better | - | - |" in line, line
  metrics_lib.write_config(str(tmp_path), config_lib.load("configs/coupled_sae.py:steps=600"))
  with pytest.raises(ValueError, match="train.steps"):
    sweep.study_rows(str(tmp_path), cfg)


def test_sweep_maps_table_and_rows_file(tmp_path):
  """The transfer / map-analysis table pairs each seed's coupled value with its baseline
  (gap mean and std by NumPy, seeds ahead, the spread call); a committed rows file becomes
  rows of the cell it names; the SAE lr edge is flagged."""
  from jaxpapers.papers.coupled_sae import sweep  # pylint: disable=g-import-not-at-top
  cfg = config_lib.load("configs/coupled_sae.py")
  assert sweep.edges(cfg, {"coupled_lr": cfg.train.lrs[1], "coupled_beta": cfg.train.betas[1],
                           "two_stage_lr": cfg.train.sae_lrs[0]})["edge_two_stage"]
  c30, d30 = np.array([0.10, 0.12, 0.11]), np.array([0.08, 0.09, 0.095])
  al_c, al_p = np.array([0.10, 0.20, 0.15]), np.array([0.12, 0.14, 0.13])
  rows = [{"generator": "smooth", "dense_frac": 0.9, "n_planted": 50, "seed": s,
           "transfer": [{"n_trs": 30, "coupled": c30[s], "dense": d30[s]}],
           "align_coupled": al_c[s], "align_two_stage": 0.0, "align_posthoc_pca": al_p[s],
           "align_truth": 0.3} for s in range(3)]
  line = sweep.maps_table(rows, n_trs=(30,)).splitlines()[-1]
  g = c30 - d30
  assert f"{g.mean():+.3f} ± {g.std(ddof=1):.3f} (3/3, better)" in line, line
  g = al_c - al_p
  assert f"{g.mean():+.3f} ± {g.std(ddof=1):.3f} (2/3, within spread)" in line, line
  assert line.rstrip().endswith("| - | - |"), line  # no reproducibility in these rows
  path = tmp_path / "rows.json"
  path.write_text(json.dumps({"commit": "abc", "rows": [{"seed": 0, "pct_dense_coupled": 1.0}]}))
  got = sweep.file_rows(f"{path}:topk:0.3:50")
  assert got[0]["generator"] == "topk" and got[0]["dense_frac"] == 0.3
  assert got[0]["n_planted"] == 50 and got[0]["commit"] == "abc"


def test_sweep_union_selects_over_both_grids_and_flags_the_union_edge():
  """Two runs of one (cell, seed) with overlapping grids: the pick is the best validation
  r of the union (not of either run), an edge is judged against the union grid, and a
  shared member that differs between runs (not one grid) is refused."""
  from jaxpapers.papers.coupled_sae import sweep_union  # pylint: disable=g-import-not-at-top
  cell = {"generator": "topk", "dense_frac": 0.0, "n_planted": 200, "seed": 1,
          "pct_dense_two_stage": 90.0}
  m = lambda lr, beta, v: {"lr": lr, "beta": beta, "val_r": v, "pct_dense": 100 * v}  # noqa: E731
  a = dict(cell, grid=[m(1e-4, 2.0, 0.10), m(1e-4, 8.0, 0.12), m(1e-3, 8.0, 0.13)],
           coupled_lr=1e-3, coupled_beta=8.0, pct_dense_coupled=13.0)  # picks its top beta
  b = dict(cell, grid=[m(1e-4, 8.0, 0.12), m(1e-3, 8.0, 0.13), m(1e-3, 32.0, 0.14),
                       m(1e-2, 32.0, 0.11), m(1e-3, 128.0, 0.135)],
           coupled_lr=1e-3, coupled_beta=32.0, pct_dense_coupled=14.0)
  (got,) = sweep_union.union([a, b])
  assert (got["coupled_lr"], got["coupled_beta"], got["pct_dense_coupled"]) == (1e-3, 32.0, 14.0)
  assert not got["edge_coupled"] and len(got["grid"]) == 6 and got["union_of"] == 2
  (only_a,) = sweep_union.union([a])
  assert only_a["edge_coupled"]  # beta 8 is the top of a's own grid
  # The reduction's bias: full-minus-reduced gap range over the cells run both ways; a
  # call stands only if it survives both ends (else "undecided").
  red = [dict(cell, seed=s, pct_dense_coupled=c, pct_dense_pca=100.0, pct_dense_pca_tuned=100.0,
              pct_dense_two_stage=90.0) for s, c in enumerate((108.0, 109.0, 110.0))]
  full = [dict(r, pct_dense_coupled=r["pct_dense_coupled"] - 5.0) for r in red]
  shift = sweep_union.sweep.reduction_bias(red, full)
  assert shift["pca_tuned"] == pytest.approx((-5.0, -5.0))
  assert "| 9.0 ± 1.0 | better |" in sweep_union.sweep.table(red)  # 9 > spread 1
  assert "| 9.0 ± 1.0 | undecided |" in sweep_union.sweep.table(red, {"pca_tuned": (-8.5, 0.0)})
  with pytest.raises(ValueError, match="no cell"):
    sweep_union.sweep.reduction_bias(red, [dict(r, n_planted=10) for r in full])
  bad = dict(b, grid=[m(1e-4, 8.0, 0.125)] + b["grid"][1:])
  with pytest.raises(ValueError, match="differs between runs"):
    sweep_union.union([a, bad])
  # A pick check (an outward rerun that only agrees to rounding): the base pick stays and
  # is judged against both grids; a moved pick or a check without the pick is refused.
  chk = dict(cell, grid=[m(1e-3, 8.0, 0.1301), m(1e-3, 32.0, 0.129), m(1e-2, 8.0, 0.12)],
             coupled_lr=1e-3, coupled_beta=8.0)
  (kept,) = sweep_union.check([only_a], [chk])
  assert not kept["edge_coupled"] and kept["checked_by"] == 1 and kept["pct_dense_coupled"] == 13.0
  assert sweep_union.check([only_a], [dict(chk, grid=chk["grid"][:2])])[0]["edge_coupled"]
  with pytest.raises(ValueError, match="moved"):
    sweep_union.check([only_a], [dict(chk, coupled_beta=32.0)])
  with pytest.raises(ValueError, match="lacks the base pick"):
    sweep_union.check([only_a], [dict(chk, grid=chk["grid"][1:])])
  # PCA k: a check of k below the base grid's bottom pick (the shared k equal) makes it
  # interior if the pick stays; a moved pick or an unequal shared k is refused.
  g = lambda *kv: [{"k": k, "val_r": v} for k, v in kv]  # noqa: E731
  base = dict(only_a, pca_k=10, pca_grid=g((10, 0.2), (20, 0.19)), edge_pca_k=True)
  low = dict(chk, pca_k=10, pca_grid=g((5, 0.18), (10, 0.2)))
  assert not sweep_union.check([base], [low])[0]["edge_pca_k"]
  assert sweep_union.check([base], [dict(low, pca_grid=g((10, 0.2)))])[0]["edge_pca_k"]
  with pytest.raises(ValueError, match="PCA k pick moved"):
    sweep_union.check([base], [dict(low, pca_k=5, pca_grid=g((5, 0.21), (10, 0.2)))])
  with pytest.raises(ValueError, match="differs from the base row"):
    sweep_union.check([base], [dict(low, pca_grid=g((5, 0.18), (10, 0.201)))])
