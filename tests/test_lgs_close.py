"""Tests of lgs's `close` setting (issue 41): closer frames (dt_div), the frame-spacing
rule, the named setting, and the independent textbook FNO's spectral layer against a
dense NumPy DFT."""
import os

import jax
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.papers.lgs import frame_rule, pdes, textbook_fno, textbook_unet, vae_diversity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(arg):
  return config_lib.load(os.path.join(ROOT, "configs", f"lgs.py:{arg}"))


def test_dt_div_puts_the_same_solution_at_closer_frames():
  """dt_div=2: the solver at dt/2 with the same substeps, so frame 2k is frame k of the
  default corpus (advection-diffusion is linear: ETDRK is exact, so they agree to float
  rounding; the 2k+1 frames lie between; 16 points: the initial modes, cutoff 4, stay
  below the Nyquist mode, whose imaginary part each step's inverse rFFT drops).
  dt_div=1 is the default corpus bit for bit."""
  a, pa = pdes.trajectory("adv_diff", 7, 16, 3)
  b, pb = pdes.trajectory("adv_diff", 7, 16, 5, dt_div=2)
  assert pa == pb
  np.testing.assert_allclose(b[::2], a, atol=2e-5)
  assert np.abs(b[1] - a[0]).max() > 1e-3 and np.abs(b[1] - a[1]).max() > 1e-3
  np.testing.assert_array_equal(pdes.trajectory("adv_diff", 7, 16, 3, dt_div=1)[0], a)
  with pytest.raises(ValueError, match="dt_div"):
    pdes.trajectory("adv_diff", 7, 8, 3, dt_div=0)


def test_frame_rule_persistence_and_choice_by_hand():
  x = np.zeros((1, 3, 2, 2, 2), np.float32)
  x[0, :, 0, 0, 0] = [1.0, 2.0, 4.0]  # one nonzero pixel; channel 1 is padding
  got = frame_rule.persistence_l2re(x, 1, (1, 2))
  # 1 step: |1-2|/2 and |2-4|/4, mean 0.5; 2 steps: |1-4|/4
  assert got[1] == pytest.approx(0.5) and got[2] == pytest.approx(0.75)
  table = {"a": {1: {1: 0.2}, 2: {1: 0.1}, 4: {1: 0.04}}, "b": {1: {1: 0.3}, 2: {1: 0.2}}}
  assert frame_rule.choose(table, 0.05) == {"a": 4, "b": 2}  # b: none passes -> largest


def test_close_setting_and_its_overrides():
  c = _config("setting=close")
  assert c.study.setting == "close" and c.data.dt_div == (8, 4, 4, 4)
  assert c.model.latent == 16 and c.study.lrs_fno == (3e-3, 1e-2, 3e-2)
  assert c.study.lrs_lgs == (1e-3, 3e-3, 1e-2, 3e-2)
  assert _config("setting=close,dt_div=2+2+2+2,steps=10").train.steps == 10
  base = _config("")
  assert base.data.dt_div == () and base.model.latent == 4 and base.train.steps == 300
  from jaxpapers.papers.lgs import experiment  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="setting"):
    _config("setting=far")
  with pytest.raises(ValueError, match="dt_div"):
    experiment.validate(_config("dt_div=2+2"))  # 4 families, 2 divisors
  with pytest.raises(ValueError, match="dt_div"):
    _config("dt_div=a+b")


def test_textbook_spectral_layer_matches_a_dense_numpy_dft():
  """The textbook FNO's Fourier layer written as dense DFT matrices (no FFT): forward 2-D
  DFT, keep rows 0..m-1 and H-m..H-1 and columns 0..m-1, multiply each kept mode by its
  complex weight, and invert the rFFT (a real field from the half spectrum: columns
  1..W/2-1 count twice, column 0 and the Nyquist column once)."""
  h, w, c, o, m = 8, 8, 2, 3, 2
  x = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (1, h, w, c)), np.float64)
  wt = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (2, 2, m, m, c, o)), np.float64)
  got = np.asarray(textbook_fno.spectral(x.astype(np.float32), wt.astype(np.float32)))
  fy = np.exp(-2j * np.pi * np.outer(np.arange(h), np.arange(h)) / h)
  fx = np.exp(-2j * np.pi * np.outer(np.arange(w), np.arange(w)) / w)
  xf = np.einsum("ky,lx,byxc->bklc", fy, fx, x)  # full 2-D DFT
  wc = wt[0] + 1j * wt[1]
  spec = np.zeros((1, h, w // 2 + 1, o), complex)
  for i in range(m):
    for j in range(m):
      spec[:, i, j] = xf[:, i, j] @ wc[0, i, j]
      spec[:, h - m + i, j] = xf[:, h - m + i, j] @ wc[1, i, j]
  # inverse of the half spectrum: y = Re sum_k sum_l a_l spec[k, l] e^{2 pi i (ky/h + lx/w)} / hw
  a = np.where((np.arange(w // 2 + 1) == 0) | (np.arange(w // 2 + 1) == w // 2), 1.0, 2.0)
  iy = np.exp(2j * np.pi * np.outer(np.arange(h), np.arange(h)) / h)
  ix = np.exp(2j * np.pi * np.outer(np.arange(w), np.arange(w // 2 + 1)) / w)
  want = np.real(np.einsum("yk,xl,bklo->byxo", iy, ix * a, spec)) / (h * w)
  np.testing.assert_allclose(got, want, atol=2e-4)


def test_textbook_fno_learns_a_shift_and_rolls_out():
  """A tiny training run: the next frame is the context's last frame shifted one cell
  (a linear, translation-invariant map an FNO represents exactly). 200 steps cut the
  relative L2 loss to a tenth of the identity map's (~1.4 for white noise)."""
  rng = np.random.default_rng(0)
  base = rng.normal(size=(6, 8, 8, 1)).astype(np.float32)
  x = np.stack([np.roll(base, t, axis=2) for t in range(6)], 1)  # [N, T, H, W, 1]
  mask = np.ones((6, 1), np.float32)
  p, losses = textbook_fno.train(x, mask, jax.random.PRNGKey(0), 3e-3, 200, 8, 2, 8, 4)
  ident = float(np.mean(np.linalg.norm((x[:, 2:] - x[:, 1:-1]).reshape(6, 4, -1), axis=-1)
                        / np.linalg.norm(x[:, 2:].reshape(6, 4, -1), axis=-1)))
  assert float(np.mean(losses[-20:])) < 0.1 * ident, (float(np.mean(losses[-20:])), ident)
  r = np.asarray(textbook_fno.rollout(p, x[:, :2], mask, 3))
  assert r.shape == (6, 3, 8, 8, 1) and np.all(np.isfinite(r))


def test_textbook_unet_conv_and_up_match_numpy_loops():
  """The textbook U-Net's periodic 3x3 convolution against a NumPy sum over shifted
  copies (np.roll), and its stride-2 transposed convolution against explicit blocks."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 6, 4, 3)).astype(np.float32)
  p = dict(w=rng.normal(size=(3, 3, 3, 5)).astype(np.float32),
           b=rng.normal(size=(5,)).astype(np.float32))
  want = np.zeros((2, 6, 4, 5)) + p["b"]
  for di in range(3):
    for dj in range(3):  # output (i, j) reads input (i + di - 1, j + dj - 1), wrapped
      want += np.roll(x, (1 - di, 1 - dj), axis=(1, 2)) @ p["w"][di, dj]
  np.testing.assert_allclose(np.asarray(textbook_unet.conv(p, x)), want, atol=1e-4)
  q = dict(w=rng.normal(size=(2, 2, 3, 4)).astype(np.float32), b=np.zeros(4, np.float32))
  got = np.asarray(textbook_unet.up(q, x))
  assert got.shape == (2, 12, 8, 4)
  for k in range(2):
    for l in range(2):
      np.testing.assert_allclose(got[:, k::2, l::2], x @ q["w"][k, l], atol=1e-4)


def test_textbook_unet_learns_a_shift():
  """The FNO test's one-cell shift through the textbook training loop: 200 steps cut the
  relative L2 loss below a fifth of the identity map's."""
  rng = np.random.default_rng(0)
  base = rng.normal(size=(6, 8, 8, 1)).astype(np.float32)
  x = np.stack([np.roll(base, t, axis=2) for t in range(6)], 1)
  mask = np.ones((6, 1), np.float32)
  net = (lambda k, i, o: textbook_unet.init(k, i, o, (8, 16)), textbook_unet.apply)
  p, losses = textbook_fno.train(x, mask, jax.random.PRNGKey(0), 3e-3, 200, 8, 2, None, None,
                                 net)
  ident = float(np.mean(np.linalg.norm((x[:, 2:] - x[:, 1:-1]).reshape(6, 4, -1), axis=-1)
                        / np.linalg.norm(x[:, 2:].reshape(6, 4, -1), axis=-1)))
  assert float(np.mean(losses[-20:])) < 0.2 * ident, (float(np.mean(losses[-20:])), ident)
  r = np.asarray(textbook_fno.rollout(p, x[:, :2], mask, 3, textbook_unet.apply))
  assert r.shape == (6, 3, 8, 8, 1) and np.all(np.isfinite(r))


def test_diversity_ablation_scores_the_shared_first_trajectories():
  """vae_diversity's `train_first`: the first n trajectories of a larger training split
  are the n-trajectory split (a trajectory is keyed by its index), and per_family's
  `first` averages exactly those, per seed, by hand."""
  small = pdes.generate(["adv_diff"], "train", 2, 16, 3, progress=False)["adv_diff"]
  big = pdes.generate(["adv_diff"], "train", 3, 16, 3, progress=False)["adv_diff"]
  np.testing.assert_array_equal(big[:2], small)
  err = np.arange(2 * 6 * 2, dtype=np.float64).reshape(2, 6, 2)  # [seeds, B, S]
  fam = np.array([0, 0, 0, 1, 1, 1])
  rows = vae_diversity.per_family(err, fam, 2, first=2)
  want0 = [err[s, :2].mean() for s in (0, 1)]
  want1 = [err[s, 3:5].mean() for s in (0, 1)]
  assert rows[0]["mean"] == pytest.approx(np.mean(want0))
  assert rows[0]["std"] == pytest.approx(np.std(want0))
  assert rows[1]["mean"] == pytest.approx(np.mean(want1))
  assert vae_diversity.per_family(err, fam, 2)[1]["mean"] == pytest.approx(err[:, 3:].mean())
