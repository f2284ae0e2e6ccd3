"""Tests of lgs (arXiv 2602.11229): corpus vs analytic solutions, PhyVAE KL, flow
matching on a Gaussian transport, the pyramid sampler, FNO vs NumPy, loaders, spread."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.papers.lgs import flows, loaders, models, pdes
from jaxpapers.papers.lgs import train as T

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(arg="smoke"):
  return config_lib.load(os.path.join(ROOT, "configs", f"lgs.py:{arg}"))


# ------------------------------------------------------------------ corpus

def _grid(n):
  x = (np.arange(n) / n)
  return np.meshgrid(x, x, indexing="ij")


def test_heat_and_linear_advection_match_closed_forms():
  """exponax AdvectionDiffusion through the corpus' rollout: a Fourier mode decays as
  exp(-nu |k|^2 t) (heat) and translates by v t (advection), on a 32^2 periodic grid."""
  import exponax as ex
  n, dt, sub, frames = 32, 0.01, 3, 5
  xx, yy = _grid(n)
  k = np.array([2.0, 1.0])
  u0 = np.sin(2 * np.pi * (k[0] * xx + k[1] * yy))[None].astype(np.float32)
  nu = 0.003
  heat = ex.stepper.AdvectionDiffusion(2, 1.0, n, dt, velocity=0.0, diffusivity=nu)
  traj = np.asarray(pdes._rollout(heat, jnp.asarray(u0), frames, sub, 0))
  for i in range(frames):
    t = i * sub * dt
    want = np.exp(-nu * (2 * np.pi) ** 2 * np.sum(k ** 2) * t) * u0
    np.testing.assert_allclose(traj[i], want, atol=2e-5)
  v = np.array([0.7, -0.4])
  adv = ex.stepper.AdvectionDiffusion(2, 1.0, n, dt, velocity=jnp.asarray(v), diffusivity=0.0)
  traj = np.asarray(pdes._rollout(adv, jnp.asarray(u0), frames, sub, 0))
  for i in range(frames):
    t = i * sub * dt
    want = np.sin(2 * np.pi * (k[0] * (xx - v[0] * t) + k[1] * (yy - v[1] * t)))[None]
    np.testing.assert_allclose(traj[i], want, atol=2e-4)
  # Inviscid advection conserves energy (the L2 norm) as well as mass.
  np.testing.assert_allclose(np.sum(traj ** 2, axis=(1, 2, 3)), np.sum(u0 ** 2), rtol=1e-4)


def test_generated_families_conserve_what_their_pde_conserves():
  # Advection-diffusion and Cahn-Hilliard conserve mass; the vorticity of periodic
  # Navier-Stokes keeps a zero mean; every family is finite and really evolves.
  for name in ("adv_diff", "cahn_hilliard", "navier_stokes"):
    traj, _ = pdes.trajectory(name, 3, 16, 5)
    m = traj[..., 0].mean(axis=(1, 2))
    np.testing.assert_allclose(m, m[0], atol=1e-4)
    assert np.abs(traj[-1] - traj[0]).max() > 1e-3
    assert traj.shape == (5, 16, 16, pdes.C) and np.all(traj[..., 1] == 0)
  gs, _ = pdes.trajectory("gray_scott", 1, 16, 3)
  assert gs[..., 1].max() > 0 and np.all(np.isfinite(gs))


def test_corpus_cache_roundtrip_and_split_seeds_differ(tmp_path):
  a = pdes.cached(str(tmp_path), ["adv_diff"], "train", 2, 8, 3, progress=False)
  b = pdes.cached(str(tmp_path), ["adv_diff"], "train", 2, 8, 3, progress=False)
  np.testing.assert_array_equal(a["adv_diff"], b["adv_diff"])
  assert len(os.listdir(tmp_path)) == 1
  c = pdes.generate(["adv_diff"], "test", 2, 8, 3, progress=False)
  assert not np.allclose(a["adv_diff"], c["adv_diff"])
  with pytest.raises(ValueError, match="unknown PDE family"):
    pdes.family("heat3d")


# ------------------------------------------------------------------ PhyVAE

def test_vae_shapes_and_kl_closed_form():
  rng = np.random.default_rng(0)
  mu = rng.normal(size=(3, 4, 4, 2)).astype(np.float32)
  lv = rng.normal(size=(3, 4, 4, 2)).astype(np.float32)
  got = np.asarray(models.kl_diag_gaussian(jnp.asarray(mu), jnp.asarray(lv)))
  for b in range(3):  # 0.5 [tr S + m'm - d - log det S] for the full covariance
    S = np.diag(np.exp(lv[b].ravel()).astype(np.float64))
    m = mu[b].ravel().astype(np.float64)
    want = 0.5 * (np.trace(S) + m @ m - m.size - np.linalg.slogdet(S)[1])
    np.testing.assert_allclose(got[b], want, rtol=1e-5)
  net = models.PhyVAE((8, 8, 8), 3)
  x = jnp.asarray(rng.normal(size=(2, 16, 16, 2)), jnp.float32)
  # Jitted: flax's eager init and apply dispatch (and compile) every op on its own.
  p = jax.jit(net.init)(jax.random.PRNGKey(0), x, jax.random.PRNGKey(1))
  rec, m, l = jax.jit(net.apply)(p, x, jax.random.PRNGKey(2))
  assert rec.shape == x.shape and m.shape == (2, 4, 4, 3) and l.shape == m.shape
  # The masked reconstruction loss ignores the padded channel.
  mask = jnp.asarray([[1.0, 0.0], [1.0, 0.0]])
  vae_loss = jax.jit(lambda target: models.vae_loss(rec, target, mask, m, l, 0.0))
  loss1, _ = vae_loss(x)
  loss2, _ = vae_loss(x.at[..., 1].set(99.0))
  np.testing.assert_allclose(loss1, loss2, rtol=1e-6)


# ------------------------------------------------------------------ flow matching

def _gauss_velocity(m, s):
  """Optimal velocity E[x1 - n | x_t] for x1 ~ N(m, s^2), n ~ N(0, 1), x_t = t x1 + (1-t) n."""
  def v(x, ctx, tau, sigma, k):
    t = tau[:, None, None, None]
    var = t ** 2 * s ** 2 + (1 - t) ** 2
    return m + (t * s ** 2 - (1 - t)) / var * (x - t * m)
  return v


def test_flow_matching_loss_on_gaussian_transport_reaches_the_closed_form_minimum():
  m, s = 1.5, 0.5
  x1 = m + s * jax.random.normal(jax.random.PRNGKey(0), (4096, 2, 2, 1))
  ctx = jnp.zeros((4096, 1, 2, 2, 1))
  v = _gauss_velocity(m, s)
  loss = float(flows.fm_loss(v, x1, ctx, jnp.zeros(4096), jax.random.PRNGKey(1)))
  t = (np.arange(20000) + 0.5) / 20000  # minimum = E_t Var(x1 - n | x_t)
  cov = t * s ** 2 - (1 - t)
  want = np.mean(s ** 2 + 1 - cov ** 2 / (t ** 2 * s ** 2 + (1 - t) ** 2))
  np.testing.assert_allclose(loss, want, rtol=0.05)
  worse = float(flows.fm_loss(lambda *a: v(*a) + 0.3, x1, ctx, jnp.zeros(4096),
                              jax.random.PRNGKey(1)))
  assert worse > loss + 0.05
  # Integrating the optimal field transports N(0, 1) to N(m, s^2).
  y = flows.fm_sample(v, ctx, jnp.zeros(4096), jax.random.PRNGKey(2), 200, x1.shape)
  np.testing.assert_allclose([float(y.mean()), float(y.std())], [m, s], atol=0.03)


def _pyramid_oracle(c):
  """The exact pyramidal velocity field when the target is the point mass x1 = c."""
  def v(x, ctx, tau, sigma, k):
    (s, e) = flows.windows(2)[k]
    tl = ((tau - s) / (e - s))[:, None, None, None]
    if k == 0:
      dc = flows.down(c)
      n = (x - tl * e * dc) / (1 - tl * e)
      return e * dc - e * n
    udc = flows.up(flows.down(c))
    n = (x - tl * c - (1 - tl) * s * udc) / ((1 - tl) * (1 - s))
    return c - s * udc - (1 - s) * n
  return v


def test_pyramid_loss_and_sampler_are_exact_for_a_point_mass_target():
  c = jax.random.normal(jax.random.PRNGKey(0), (3, 8, 8, 2))
  ctx = jnp.zeros((3, 2, 8, 8, 2))
  v = _pyramid_oracle(c)
  loss = flows.pyramid_fm_loss(v, c, ctx, jnp.zeros(3), jax.random.PRNGKey(1), 2)
  assert float(loss) < 1e-8
  # The sampler: stage 0 at 4x4, the jump (recovering Down(x1), renoising), stage 1.
  out = flows.pyramid_fm_sample(v, ctx, jnp.zeros(3), jax.random.PRNGKey(2), 2, 3, c.shape)
  np.testing.assert_allclose(np.asarray(out), np.asarray(c), atol=1e-4)
  wrong = flows.pyramid_fm_loss(lambda *a: v(*a) * 0.5, c, ctx, jnp.zeros(3),
                                jax.random.PRNGKey(1), 2)
  assert float(wrong) > 1e-2
  with pytest.raises(ValueError, match="stages"):
    flows.pyramid_fm_loss(v, c, ctx, jnp.zeros(3), jax.random.PRNGKey(1), 3)


# ------------------------------------------------------------------ baselines, metric

def test_fno_spectral_conv_matches_numpy_fft():
  layer = models.SpectralConv2d(3, 4)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 2))
  p = layer.init(jax.random.PRNGKey(1), x)
  got = np.asarray(layer.apply(p, x))
  w = np.asarray(p["params"]["w_real"]) + 1j * np.asarray(p["params"]["w_imag"])
  xf = np.fft.rfft2(np.asarray(x, np.float64), axes=(1, 2))
  out = np.zeros((2, 16, 9, 3), complex)
  for i in range(4):
    for j in range(4):
      out[:, i, j] = xf[:, i, j] @ w[0, i, j]
      out[:, 16 - 4 + i, j] = xf[:, 16 - 4 + i, j] @ w[1, i, j]
  np.testing.assert_allclose(got, np.fft.irfft2(out, s=(16, 16), axes=(1, 2)), atol=1e-5)


def test_l2re_matches_numpy_and_masks_padded_channels():
  rng = np.random.default_rng(0)
  p = rng.normal(size=(2, 3, 4, 4, 2)).astype(np.float32)
  t = rng.normal(size=(2, 3, 4, 4, 2)).astype(np.float32)
  mask = np.array([[1, 0], [1, 1]], np.float32)
  got = np.asarray(T.l2re(jnp.asarray(p), jnp.asarray(t), jnp.asarray(mask)))
  rel = np.linalg.norm((p - t).reshape(2, 3, 16, 2), axis=2) / np.linalg.norm(
      t.reshape(2, 3, 16, 2), axis=2)
  np.testing.assert_allclose(got[0], rel[0, :, 0], rtol=1e-5)
  np.testing.assert_allclose(got[1], rel[1].mean(-1), rtol=1e-5)


def test_every_model_kind_trains_and_rolls_out_finite():
  """Every kind through the study's own path (train_vae, encode_all, train_dynamics,
  rollout_members) at the smoke config's sizes and data shapes, one member each: the
  VAE's and PFlowFT's programs are then the ones test_configs_smoke's lgs case and the
  notebook compile, which a suite run's compile cache shares."""
  from jaxpapers.papers.lgs import experiment as E
  config = _config()
  d, K, S = config.data, config.model.context, config.eval.rollout_steps
  n, R = len(d.families) * d.n_train, d.resolution
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, d.frames, R, R, pdes.C)).astype(np.float32)
  mask = np.ones((n, pdes.C), np.float32)
  quiet = lambda *a: None
  vae, _ = E.train_vae(config, None, x, mask, [0], log=quiet)
  vp = jax.tree.map(lambda a: a[0], vae["params"])
  lat = E.encode_all(config, vp, x)
  assert lat.shape == (n, d.frames, R // 4, R // 4, config.model.latent)
  for kind in T.DYNAMICS:
    latent = kind in T.LATENT
    data, res = (lat[None], np.ones(1, np.float32)) if latent else (x, 1.0)
    out, curve, _ = E.train_dynamics(config, None, kind, data, mask, res, [0], [1e-3],
                                     tag=kind, log=quiet)
    assert np.all(np.isfinite(curve[-1][1])), kind
    ctx = data[:, :, :K] if latent else x[None, :, :K]
    pred = E.rollout_members(config, kind, out["params"], ctx, mask, np.ones(1), S,
                             vae=(vae["params"], np.ones(1, np.float32)) if latent else None)
    assert pred.shape == (1, n, S, R, R, pdes.C), kind
    assert np.all(np.isfinite(pred)), kind
    if kind == "lgs":
      # Rollout noise is keyed by the member's own seed, not its position: the same
      # member (seed 0) as the 2nd of two members gives its rollout alone; the other
      # member (the same weights under seed 5) draws other noise.
      twice = lambda t: jax.tree.map(lambda a: jnp.concatenate([a, a]), t)
      pred2 = E.rollout_members(config, kind, twice(out["params"]), np.concatenate([ctx, ctx]),
                                mask, np.ones(2), S, vae=(twice(vae["params"]),
                                                          np.ones(2, np.float32)),
                                member_seeds=[5, 0])
      np.testing.assert_allclose(pred2[1], pred[0], rtol=1e-5, atol=1e-6)
      assert np.abs(pred2[0] - pred[0]).max() > 1e-3


# The three trainer tests below share one spec, one data set and one set of members, so
# they compile one init, one spread chunk (chunk=1: the resume test's program), one
# 1-device reference and the two batch-parallel programs (latent_mse: a deterministic loss,
# which micro-batching must reproduce; its batches are still drawn from each member's key).
_SP = T.Spec("latent_mse", latent=2, width=16, depth=1, heads=2, batch=16, steps=3)


@pytest.fixture(scope="module")
def trainer_case():
  rng = np.random.default_rng(0)
  data = dict(x=jnp.asarray(rng.normal(size=(5, 6, 4, 4, 2)), jnp.float32),
              mask=jnp.ones((5, 2)))
  mem = T.stack([T.init_member(_SP, s, 1e-3, (4, 4, 2)) for s in range(3)])
  return data, mem


@pytest.fixture(scope="module")
def one_device_reference(trainer_case):
  """A plain 1-device jit(vmap) of the 3-step chunk: what every split must reproduce."""
  data, mem = trainer_case
  return jax.jit(jax.vmap(T.make_chunk(_SP, 3), in_axes=(0, None, None, None)))(
      mem, data, jnp.int32(0), jnp.float32(1.0))


def test_training_is_deterministic_and_resumes_exactly(tmp_path, trainer_case):
  data, mem = trainer_case
  full, _ = T.fit(_SP, mem, data, 1.0, chunk=1, log=lambda *a: None)
  ck = str(tmp_path / "ck")
  # Stop after 2 chunks by raising from the logger, then resume in the same directory.
  class Stop(Exception):
    pass
  calls = []
  def log(msg):
    calls.append(msg)
    if len(calls) == 2:
      raise Stop
  with pytest.raises(Stop):
    T.fit(_SP, mem, data, 1.0, chunk=1, ckpt_dir=ck, log=log)
  rest = []
  resumed, _ = T.fit(_SP, mem, data, 1.0, chunk=1, ckpt_dir=ck, log=rest.append)
  assert len(rest) == 1 and "step 3/3" in rest[0]  # only the third chunk ran again
  for a, b in zip(jax.tree.leaves(full["params"]), jax.tree.leaves(resumed["params"])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_fit_runs_exactly_its_steps_when_the_chunk_does_not_divide_them(trainer_case,
                                                                      one_device_reference):
  """3 steps at chunk 2 run as a 2-step and a 1-step chunk (not 4 steps): the members
  equal one 3-step chunk's, and the log counts 3 steps."""
  data, mem = trainer_case
  logs = []
  out, curve = T.fit(_SP, mem, data, 1.0, chunk=2, log=logs.append)
  assert "step 3/3" in logs[-1] and len(curve) == 2
  for a, b in zip(jax.tree.leaves(out["params"]),
                  jax.tree.leaves(one_device_reference["params"])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)


def test_spread_over_8_devices_equals_one_device(trainer_case, one_device_reference):
  """The vmapped members (split over the 8 forced devices by core.sharding.spread, and
  run as 3 one-step chunks) give the numbers of a plain 1-device jit(vmap) of one 3-step
  chunk; so do the lgs kind's (PFlowFT) members in one 3-step chunk."""
  assert jax.device_count() == 8
  data, mem = trainer_case
  spread, _ = T.fit(_SP, mem, data, 1.0, chunk=1, log=lambda *a: None)
  ref = one_device_reference
  ref_mse = ref["params"]
  leaf = jax.tree.leaves(spread["params"])[0]
  assert len(leaf.sharding.device_set) == 3  # one member per device, on the first 3
  assert len(jax.tree.leaves(ref["params"])[0].sharding.device_set) == 1
  for a, b in zip(jax.tree.leaves(spread["params"]), jax.tree.leaves(ref["params"])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
  # the members really differ (else one device computing one member would pass)
  assert not np.allclose(np.asarray(leaf[0]), np.asarray(leaf[1]))
  # The lgs kind (PFlowFT: pyramid flow-matching loss, noised context, per-member random
  # draws) spread the same way equals its 1-device jit(vmap). Its transformer is the
  # latent_mse one, so the same members start it (no init program of its own): one
  # spread 3-step chunk and its 1-device reference are the two programs this adds.
  sp = dataclasses.replace(_SP, kind="lgs", flow_steps=1)
  spread, _ = T.fit(sp, mem, data, 1.0, chunk=3, log=lambda *a: None)
  ref = jax.jit(jax.vmap(T.make_chunk(sp, 3), in_axes=(0, None, None, None)))(
      mem, data, jnp.int32(0), jnp.float32(1.0))
  leaf = jax.tree.leaves(spread["params"])[0]
  assert len(leaf.sharding.device_set) == 3
  for a, b in zip(jax.tree.leaves(spread["params"]), jax.tree.leaves(ref["params"])):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
  assert not np.allclose(np.asarray(leaf[0]), np.asarray(leaf[1]))
  # and it is not the latent_mse run (the kind reached the loss)
  assert not np.allclose(np.asarray(leaf), np.asarray(jax.tree.leaves(ref_mse)[0]))


def test_batch_split_over_8_devices_and_micro_batches_equal_one_device(
    trainer_case, one_device_reference):
  """batch_parallel (the :paper path) splits each member's batch rows over the 8 devices
  and micro-batching accumulates the gradient over slices; both give the 1-device chunk's
  numbers for a deterministic loss (latent_mse), and a slice count that does not divide
  the batch is refused."""
  data, mem = trainer_case
  sp, ref = _SP, one_device_reference
  for micro in (1, 2):
    spm = dataclasses.replace(sp, micro=micro)
    out, _ = T.fit(spm, mem, data, 1.0, chunk=3, log=lambda *a: None, batch_parallel=True)
    assert len(jax.tree.leaves(out["params"])[0].sharding.device_set) == 8
    for a, b in zip(jax.tree.leaves(out["params"]), jax.tree.leaves(ref["params"])):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6,
                                 err_msg=f"micro={micro}")
  with pytest.raises(ValueError, match="microbatches=3 must be >= 1 and divide"):
    T.fit(dataclasses.replace(sp, micro=3), mem, data, 1.0, chunk=3, log=lambda *a: None)
  with pytest.raises(ValueError, match="batch 12 must be divisible by the 8 devices"):
    T.fit(dataclasses.replace(sp, batch=12), mem, data, 1.0, chunk=3, log=lambda *a: None,
          batch_parallel=True)


# ------------------------------------------------------------------ loaders

def _write_well(path, n=2, t=4, h=8, bad=None):
  import h5py
  rng = np.random.default_rng(0)
  with h5py.File(path, "w") as f:
    f.attrs["dataset_name"] = "toy_shear"
    f.attrs["n_spatial_dims"] = 1 if bad == "1d" else 2
    d = f.create_group("dimensions")
    d["time"] = np.arange(t, dtype=np.float32)
    d["x"] = np.arange(h, dtype=np.float32)
    d["y"] = np.arange(h, dtype=np.float32)
    bc = f.create_group("boundary_conditions")
    bc.create_group("x_periodic").attrs["bc_type"] = "PERIODIC"
    g0 = f.create_group("t0_fields")
    g0.attrs["field_names"] = ["density", "const"] if bad != "missing" else ["density", "gone"]
    if bad == "no_names":
      del g0.attrs["field_names"]
    rho = rng.normal(size=(n, t, h, h)).astype(np.float32)
    if bad == "nan":
      rho[0, 0, 0, 0] = np.nan
    g0["density"] = rho
    g0["density"].attrs["time_varying"] = True
    g0["density"].attrs["sample_varying"] = True
    g0["const"] = np.ones((h, h), np.float32)
    g0["const"].attrs["time_varying"] = False
    g0["const"].attrs["sample_varying"] = False
    g1 = f.create_group("t1_fields")
    g1.attrs["field_names"] = ["velocity"]
    g1["velocity"] = rng.normal(size=(n, t, h, h, 2)).astype(np.float32)
    f.create_group("t2_fields").attrs["field_names"] = []
  return rho


def test_well_loader_reads_fields_and_rejects_malformed(tmp_path):
  p = str(tmp_path / "w.hdf5")
  rho = _write_well(p)
  a, names = loaders.load_well(p)
  assert names == ["density", "velocity_x", "velocity_y"] and a.shape == (2, 4, 8, 8, 3)
  np.testing.assert_array_equal(a[..., 0], rho)
  np.testing.assert_allclose(loaders.resample(a, 4)[:, :, 0, 0], a[:, :, :2, :2].mean((2, 3)),
                             rtol=1e-6)
  for bad, msg in (("no_names", "field_names"), ("missing", "missing"), ("1d", "2-D"),
                   ("nan", "NaN")):
    q = str(tmp_path / f"{bad}.hdf5")
    _write_well(q, bad=bad)
    with pytest.raises(ValueError, match=msg):
      loaders.load_well(q)
  with pytest.raises(FileNotFoundError):
    loaders.load_well(str(tmp_path / "none.hdf5"))
  junk = tmp_path / "junk.hdf5"
  junk.write_text("not hdf5")
  with pytest.raises(ValueError, match="not a readable HDF5"):
    loaders.load_well(str(junk))


def test_pdebench_loader_reads_three_layouts_and_rejects_malformed(tmp_path):
  import h5py
  rng = np.random.default_rng(0)
  cfd = {k: rng.normal(size=(2, 3, 8, 8)).astype(np.float32)
         for k in ("density", "pressure", "Vx", "Vy")}
  with h5py.File(tmp_path / "cfd.hdf5", "w") as f:
    for k, v in cfd.items():
      f[k] = v
    f["x-coordinate"] = np.arange(8.0)
    f["t-coordinate"] = np.arange(4.0)
  a, names = loaders.load_pdebench(str(tmp_path / "cfd.hdf5"))
  assert names == ["density", "pressure", "Vx", "Vy"] and a.shape == (2, 3, 8, 8, 4)
  np.testing.assert_array_equal(a[..., 2], cfd["Vx"])
  with h5py.File(tmp_path / "seeds.hdf5", "w") as f:
    for s in ("0000", "0001"):
      f.create_group(s)["data"] = rng.normal(size=(3, 8, 8, 2)).astype(np.float32)
      f[s].create_group("grid")["x"] = np.arange(8.0)
  a, _ = loaders.load_pdebench(str(tmp_path / "seeds.hdf5"))
  assert a.shape == (2, 3, 8, 8, 2)
  with h5py.File(tmp_path / "tensor.hdf5", "w") as f:
    f["tensor"] = rng.normal(size=(2, 3, 8, 8)).astype(np.float32)
    f["x-coordinate"] = np.arange(8.0)
  assert loaders.load_pdebench(str(tmp_path / "tensor.hdf5"))[0].shape == (2, 3, 8, 8, 1)
  with h5py.File(tmp_path / "bad1d.hdf5", "w") as f:
    f["tensor"] = np.zeros((2, 3, 8), np.float32)
  with pytest.raises(ValueError, match="1-D"):
    loaders.load_pdebench(str(tmp_path / "bad1d.hdf5"))
  with h5py.File(tmp_path / "badcfd.hdf5", "w") as f:
    f["density"] = np.zeros((2, 3, 8, 8), np.float32)
  with pytest.raises(ValueError, match="needs density, pressure, Vx, Vy"):
    loaders.load_pdebench(str(tmp_path / "badcfd.hdf5"))
  with h5py.File(tmp_path / "other.hdf5", "w") as f:
    f["foo"] = np.zeros(3)
  with pytest.raises(ValueError, match="no PDEBench layout"):
    loaders.load_pdebench(str(tmp_path / "other.hdf5"))


# ------------------------------------------------------------------ config and runs

def test_config_rejects_bad_values():
  from jaxpapers.papers.lgs import experiment
  with pytest.raises(ValueError, match="unknown config arg"):
    _config("smoke,widht=3")
  for arg, msg in (("smoke,families=heat", "data.families"), ("smoke,stages=3", "stages"),
                   ("smoke,resolution=18", "multiple of 4"), ("smoke,frames=3", "frames"),
                   ("smoke,width=15", "heads")):
    with pytest.raises(ValueError, match=msg):
      experiment.validate(_config(arg))


def test_a_real_file_becomes_the_entrys_corpus(tmp_path):
  """A The Well-layout file through the entry's data path (`experiment.corpus`, what
  train_and_evaluate trains and evaluates on): it replaces the generated corpus, split
  4 / 1 / 1 in file order, resampled to the run's resolution (area means), cut to its
  frames, its first C channels kept and masked, and it names the evaluation rows. What
  follows `corpus` does not depend on the data's source and is run by
  test_configs_smoke's lgs case; training on this file as well cost ~30 s of
  compilation (different split shapes) and no other code."""
  from jaxpapers.papers.lgs import experiment
  p = str(tmp_path / "w.hdf5")
  rho = _write_well(p, n=6, t=9, h=32)
  config = _config(f"smoke,real_path={p},real_format=well")
  d = config.data
  splits, names = experiment.corpus(config, str(tmp_path))
  assert names == ["real:w.hdf5"]
  assert {s: len(v["x"]) for s, v in splits.items()} == dict(train=4, val=1, test=1)
  x = np.concatenate([splits[s]["x"] for s in ("train", "val", "test")])
  assert x.shape == (6, d.frames, d.resolution, d.resolution, pdes.C)
  # channel 0 is the density: 32 -> 16 by 2 x 2 block means, the first `frames` steps
  k = rho.shape[-1] // d.resolution
  want = rho[:, :d.frames].reshape(6, d.frames, d.resolution, k, d.resolution, k).mean((3, 5))
  np.testing.assert_allclose(x[..., 0], want, rtol=1e-5, atol=1e-6)
  for v in splits.values():
    np.testing.assert_array_equal(v["mask"], np.ones((len(v["x"]), pdes.C)))
    np.testing.assert_array_equal(v["fam"], np.zeros(len(v["x"])))
  with pytest.raises(ValueError, match="time steps"):
    experiment.corpus(_config(f"smoke,real_path={p},real_format=well,frames=10"),
                      str(tmp_path))


def test_study_cells_are_read_back_and_a_spent_budget_pauses(tmp_path):
  """The study's resumable cells: a finished cell is read back (not rerun), a new one is
  not started once study.budget_s is spent; per-model lr grids; the flatness summary."""
  import time
  from jaxpapers.papers.lgs import study
  calls = []
  cell = study._cells(str(tmp_path), 0, time.perf_counter(), lambda *a: None)
  assert cell("a", lambda: calls.append(1) or {"x": 1})["x"] == 1
  assert cell("a", lambda: calls.append(1) or {"x": 2})["x"] == 1
  assert calls == [1]
  late = study._cells(str(tmp_path), 5.0, time.perf_counter() - 10.0, lambda *a: None)
  assert late("a", lambda: {"x": 3})["x"] == 1
  with pytest.raises(study.Paused, match="b not started"):
    late("b", lambda: {"x": 3})
  config = _config("smoke,lrs_fno=1e-4+3e-4+1e-3")
  assert study.lr_grid(config, "fno") == [1e-4, 3e-4, 1e-3]
  assert study.lr_grid(config, "unet") == list(config.study.lrs)
  # members (lr-major): the chosen lr's seeds are columns 2, 3 of 4; 8 chunks
  curve = [(i + 1, [9.0, 9.0, 8.0 - i, 10.0 - i]) for i in range(8)]
  a50, a75, a100, rel = study.flatness(curve, np.array([2, 3]))
  assert (a50, a75, a100) == (6.5, 4.5, 2.5) and rel == pytest.approx(-2.0 / 4.5)
