"""lgs (issue 41): the benchmark's NumPy FNO reference (it must compute the flax FNO's
function) and the PhyVAE decoder's sub-pixel upsampling (`vae_up=shuffle`), the floor
diagnosis's fix."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.papers.lgs import benchmark, experiment, models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_numpy_fno_matches_the_flax_fno():
  net = models.FNO(width=8, modes=3)
  ctx = jax.random.normal(jax.random.PRNGKey(1), (2, 2, 8, 8, 2))
  params = net.init(jax.random.PRNGKey(0), ctx)
  # the init's spectral weights are tiny (1 / (c * width)); scale them up so the Fourier
  # path, not the 1x1 path, carries the output and a wrong mode layout shows
  params = jax.tree_util.tree_map_with_path(
      lambda p, a: a * 50.0 if "SpectralConv" in jax.tree_util.keystr(p) else a, params)
  want = np.asarray(net.apply(params, ctx))
  got = benchmark.numpy_fno(params, np.asarray(ctx), modes=3)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  # the Fourier path matters at this scale: dropping it changes the output clearly
  no_fourier = jax.tree_util.tree_map_with_path(
      lambda p, a: a * 0.0 if "SpectralConv" in jax.tree_util.keystr(p) else a, params)
  assert np.abs(benchmark.numpy_fno(no_fourier, np.asarray(ctx), modes=3) - want).max() > 1e-2


def test_shuffle_decoder_gives_each_sub_cell_its_own_channels():
  """The PhyVAE decoder's sub-pixel upsampling (`vae_up=shuffle`): output cell
  (2i + k, 2j + l) takes channels (2k + l) C .. (2k + l + 1) C of input cell (i, j)."""
  x = np.arange(2 * 3 * 2 * 8, dtype=np.float32).reshape(2, 3, 2, 8)
  got = np.asarray(models.depth_to_space(jnp.asarray(x)))
  assert got.shape == (2, 6, 4, 2)
  for i in range(3):
    for j in range(2):
      for k in range(2):
        for l in range(2):
          np.testing.assert_array_equal(got[:, 2 * i + k, 2 * j + l],
                                        x[:, i, j, (2 * k + l) * 2:(2 * k + l + 1) * 2])
  vae = models.PhyVAE(widths=(4, 4, 4), latent=2, up="shuffle")
  out = jax.eval_shape(lambda: vae.apply(
      vae.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 2)), jax.random.PRNGKey(1)),
      jnp.ones((1, 2, 2, 2)), method=vae.decode))  # traced only: the wiring, no compile
  assert out.shape == (1, 8, 8, 2)


def test_vae_up_is_validated_and_defaults_to_the_earlier_decoder():
  load = lambda a: config_lib.load(os.path.join(ROOT, "configs", f"lgs.py:{a}"))
  assert load("setting=close").model.vae_up == "nearest"  # the close study's rows
  assert experiment.spec(load("vae_up=shuffle"), "vae").net().up == "shuffle"
  with pytest.raises(ValueError, match="vae_up"):
    experiment.validate(load("vae_up=bilinear"))
