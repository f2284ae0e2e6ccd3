"""LGS: latent generative PDE solver (arXiv 2602.11229): launcher entry points.

`train_and_evaluate` builds (or reads from the cache) the multi-family exponax corpus,
trains PhyVAE and then PFlowFT on its latents (each stage checkpointed and resumed from
the workdir) and reports the test relative L2 error of autoregressive rollouts per
family. `run_study` is the README's study (study.py); `plan` hands the PFlowFT training
step at the paper's sizes to launch/plan.py.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from jax.sharding import NamedSharding, PartitionSpec as P

from jaxpapers.core import mesh as mesh_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import sharding
from jaxpapers.core import study as study_lib
from jaxpapers.papers.lgs import loaders
from jaxpapers.papers.lgs import pdes
from jaxpapers.papers.lgs import train as T

PATHS = ["jaxpapers/papers/lgs", "configs/lgs.py", "tests/test_lgs.py", "colabs/lgs.ipynb"]
REPORT_STEPS = (1, 5, 10, 20)


def validate(config):
  d, m = config.data, config.model
  bad = [f for f in d.families if f not in pdes.FAMILY_NAMES]
  if bad:
    raise ValueError(f"data.families: unknown {bad}; known: {', '.join(pdes.FAMILY_NAMES)}")
  if d.dt_div and (len(d.dt_div) != len(d.families) or min(d.dt_div) < 1):
    raise ValueError(f"data.dt_div={tuple(d.dt_div)}: one integer >= 1 per family "
                     f"({len(d.families)}: {', '.join(d.families)}), or empty (all 1)")
  if d.ft_dt_div < 1:
    raise ValueError(f"data.ft_dt_div={d.ft_dt_div} must be >= 1")
  f = vae_factor(config)  # the VAE halves the grid once per width after the first
  for key, r in (("resolution", d.resolution), ("ft_resolution", d.ft_resolution)):
    if r % f or r < 2 * f:
      raise ValueError(f"data.{key}={r} must be a multiple of {f} (>= {2 * f}): the "
                       f"PhyVAE (vae_widths={tuple(m.vae_widths)}) halves it "
                       f"{len(m.vae_widths) - 1} times")
  # Families whose solver diverges or degenerates below a grid (pdes.MIN_POINTS).
  low = [n for n in d.families if d.resolution < pdes.MIN_POINTS.get(n, 0)]
  if low and not d.real_path:
    raise ValueError(f"data.families {low} need data.resolution >= "
                     f"{max(pdes.MIN_POINTS[n] for n in low)} (got {d.resolution}): "
                     "pdes.MIN_POINTS says why")
  if m.vae_up not in ("nearest", "shuffle"):
    raise ValueError(f"model.vae_up={m.vae_up!r}; expected 'nearest' or 'shuffle'")
  if d.frames < m.context + max(config.eval.rollout_steps, config.eval.val_steps):
    raise ValueError(f"data.frames={d.frames} must be >= model.context + "
                     f"eval.rollout_steps ({m.context} + {config.eval.rollout_steps})")
  if m.stages not in (1, 2):
    raise ValueError(f"model.stages={m.stages} must be 1 (plain flow matching) or 2")
  if (d.resolution // f) % (2 ** (m.stages - 1)):
    raise ValueError(f"model.stages={m.stages}: the latent grid must halve evenly")
  if d.resolution % m.patch:
    raise ValueError(f"model.patch={m.patch} must divide data.resolution={d.resolution}")
  if m.width % m.heads:
    raise ValueError(f"model.width={m.width} must be divisible by model.heads={m.heads}")
  if not 0 <= m.sigma_inf or not 0 <= m.sigma_max:
    raise ValueError("model.sigma_max and model.sigma_inf must be >= 0")
  bad = [k for k in config.study.kinds if k not in T.DYNAMICS]
  if bad:
    raise ValueError(f"study.kinds: unknown {bad}; known: {', '.join(T.DYNAMICS)}")
  if d.real_path and d.real_format not in ("well", "pdebench"):
    raise ValueError(f"data.real_format={d.real_format!r}; expected 'well' or 'pdebench'")


def vae_factor(config) -> int:
  """How many times smaller the latent grid is than the pixel grid (per side)."""
  return 2 ** (len(config.model.vae_widths) - 1)


def spec(config, kind: str, steps: int | None = None, batch: int | None = None) -> T.Spec:
  m, t = config.model, config.train
  if kind == "vae":
    steps = t.vae_steps if steps is None else steps
  return T.Spec(kind=kind, context=m.context, latent=m.latent, vae_widths=tuple(m.vae_widths),
                vae_up=m.vae_up, beta=m.beta, width=m.width, depth=m.depth, heads=m.heads,
                patch=m.patch, stages=m.stages, flow_steps=m.flow_steps, sigma_max=m.sigma_max,
                sigma_inf=m.sigma_inf, fno_width=m.fno_width, fno_modes=m.fno_modes,
                unet_widths=tuple(m.unet_widths), batch=batch or t.batch_size,
                steps=t.steps if steps is None else steps, bf16=config.bf16,
                micro=t.microbatches)


# ------------------------------------------------------------------ data

def _split_counts(config):
  d = config.data
  return dict(train=d.n_train, val=d.n_val, test=d.n_test)


def corpus(config, workdir, log=print):
  """{split: dict(x [N, T, H, W, C] physical, fam [N], mask [N, C])} and family names."""
  d = config.data
  cache = d.cache_dir or os.path.join(workdir, "corpus")
  if d.real_path:
    arr, names = loaders.load(d.real_path, d.real_format)
    arr = loaders.resample(arr, d.resolution, d.real_path)[..., :pdes.C]
    if arr.shape[1] < d.frames:
      raise ValueError(f"{d.real_path}: {arr.shape[1]} time steps < data.frames={d.frames}")
    arr = arr[:, :d.frames]
    if arr.shape[-1] < pdes.C:
      arr = np.concatenate([arr, np.zeros(arr.shape[:-1] + (pdes.C - arr.shape[-1],),
                                          np.float32)], -1)
    n = arr.shape[0]
    if n < 3:
      raise ValueError(f"{d.real_path}: {n} trajectories; need >= 3 (train/val/test)")
    n_val = n_test = max(1, n // 6)
    cuts = dict(train=arr[:n - n_val - n_test], val=arr[n - n_val - n_test:n - n_test],
                test=arr[n - n_test:])
    mask = np.zeros((pdes.C,), np.float32)
    mask[:min(len(names), pdes.C)] = 1
    out = {s: dict(x=a, fam=np.zeros(len(a), np.int32), mask=np.tile(mask, (len(a), 1)))
           for s, a in cuts.items()}
    return out, ["real:" + os.path.basename(d.real_path)]
  fams = list(d.families)
  out = {}
  for split, count in _split_counts(config).items():
    data = pdes.cached(cache, fams, split, count, d.resolution, d.frames, config.seed,
                       dt_div=tuple(d.dt_div) or None)
    out[split] = dict(x=np.concatenate([data[f] for f in fams]),
                      fam=np.repeat(np.arange(len(fams)), count).astype(np.int32),
                      mask=np.concatenate([np.tile(pdes.channel_mask(f), (count, 1))
                                           for f in fams]))
  return out, fams


def finetune_corpus(config, workdir):
  d = config.data
  cache = d.cache_dir or os.path.join(workdir, "corpus")
  out = {}
  for split, count in (("finetune", d.n_ft), ("ft_test", d.n_ft_test)):
    x = pdes.cached(cache, [pdes.HELD_OUT], split, count, d.ft_resolution, d.frames,
                    config.seed, dt_div=(d.ft_dt_div,))[pdes.HELD_OUT]
    out[split] = dict(x=x, fam=np.zeros(count, np.int32),
                      mask=np.tile(pdes.channel_mask(pdes.HELD_OUT), (count, 1)))
  return out


def stats(train, n_fam):
  """Per-family, per-channel mean and std over the training split: [F, C] each."""
  mean = np.zeros((n_fam, pdes.C), np.float32)
  std = np.ones((n_fam, pdes.C), np.float32)
  for f in range(n_fam):
    x = train["x"][train["fam"] == f]
    mean[f] = x.mean(axis=(0, 1, 2, 3))
    std[f] = np.maximum(x.std(axis=(0, 1, 2, 3)), 1e-6)
  return mean, std


def normalize(split, mean, std):
  m, s = mean[split["fam"]], std[split["fam"]]
  x = (split["x"] - m[:, None, None, None]) / s[:, None, None, None]
  return x * split["mask"][:, None, None, None]


def residual_std(x):
  return float(np.maximum(np.std(x[:, 1:] - x[:, :-1]), 1e-6))


# ------------------------------------------------------------------ train / evaluate

def train_vae(config, workdir, xs_train, mask, seeds, tag="vae", log=print, steps=None,
              init=None, lr=None, batch=None):
  sp = spec(config, "vae", steps, batch)
  shape = xs_train.shape[2:]
  mem = init if init is not None else T.stack(
      [T.init_member(sp, 1000 + s, lr or config.train.vae_lr, shape) for s in seeds])
  data = dict(x=jnp.asarray(xs_train), mask=jnp.asarray(mask))
  ck = os.path.join(workdir, "ckpt", tag) if workdir else None
  return T.fit(sp, mem, data, 1.0, chunk=config.train.chunk, ckpt_dir=ck, log=log, tag=tag,
               batch_parallel=config.train.batch_parallel)


_JITS = {}


def encode_all(config, vae_params_one, x):
  sp = spec(config, "vae")
  if ("enc", sp) not in _JITS:
    _JITS[("enc", sp)] = jax.jit(lambda p, xx: T.encode(sp, p, xx))
  return np.asarray(_JITS[("enc", sp)](vae_params_one, jnp.asarray(x)))


def decode_all(config, vae_params_one, z):
  sp = spec(config, "vae")
  if ("dec", sp) not in _JITS:
    _JITS[("dec", sp)] = jax.jit(lambda p, zz: T.decode(sp, p, zz))
  return np.asarray(_JITS[("dec", sp)](vae_params_one, jnp.asarray(z)))


def latents(config, vae_params, xs, splits=None, train="train"):
  """Every split encoded by each seed's PhyVAE (posterior means), scaled to unit std by
  that seed's training latents: (lat {split: [M, N, T, h, w, d]}, z_std [M], res [M], the
  std of the training latents' frame-to-frame residual). The one preparation the study,
  the fine-tuning cell, train_and_evaluate and latent_eval share."""
  M = jax.tree.leaves(vae_params)[0].shape[0]
  splits = list(xs) if splits is None else list(splits)
  zs = [{s: encode_all(config, jax.tree.map(lambda a: a[i], vae_params), xs[s])
         for s in splits} for i in range(M)]
  z_std = np.array([z[train].std() for z in zs], np.float32)
  lat = {s: np.stack([z[s] / z_std[i] for i, z in enumerate(zs)]) for s in splits}
  res = np.array([residual_std(lat[train][i]) for i in range(M)], np.float32)
  return lat, z_std, res


def recon_errors(config, vae_params, split, xs, mean, std):
  """L2RE [seeds, B, S] of decode(encode(x)) on frames K..K+S-1: the PhyVAE's floor
  under every latent model's error (the study's vae cell)."""
  K, S = config.model.context, config.eval.rollout_steps
  M = jax.tree.leaves(vae_params)[0].shape[0]
  rec = []
  for i in range(M):
    p = jax.tree.map(lambda v: v[i], vae_params)
    z = encode_all(config, p, xs)[:, K:K + S]
    dec = decode_all(config, p, z.reshape((-1,) + z.shape[2:]))
    rec.append(dec.reshape(xs[:, K:K + S].shape) * split["mask"][:, None, None, None])
  return errors(np.stack(rec), split, mean, std, K)


def train_dynamics(config, workdir, kind, data_x, mask, res, seeds, lrs, tag, log=print,
                   steps=None, init=None, batch=None):
  """Members = (seed, lr) for lr in lrs for seed in seeds; returns (state, curve, members).

  data_x: [N, T, ...] shared by all members (res: float), or per seed [len(seeds), N, T,
  ...] with res [len(seeds)] (latent kinds: each seed trains on its own VAE's latents).
  """
  sp = spec(config, kind, steps, batch)
  members = [(s, lr) for lr in lrs for s in seeds]
  per_seed = np.ndim(res) == 1
  shape = data_x.shape[3:] if per_seed else data_x.shape[2:]
  mem = init if init is not None else T.stack(
      [T.init_member(sp, 2000 + 37 * s + T.KINDS.index(kind), lr, shape) for s, lr in members])
  if per_seed:
    idx = np.array([seeds.index(s) for s, _ in members])
    data = dict(x=jnp.asarray(data_x)[idx], mask=jnp.broadcast_to(
        jnp.asarray(mask), (len(members),) + np.shape(mask)))
    res = np.asarray(res, np.float32)[idx]
  else:
    data = dict(x=jnp.asarray(data_x), mask=jnp.asarray(mask))
  ck = os.path.join(workdir, "ckpt", tag) if workdir else None
  out, curve = T.fit(sp, mem, data, res, chunk=config.train.chunk, ckpt_dir=ck, log=log,
                     tag=tag, batch_parallel=config.train.batch_parallel)
  return out, curve, members


_ROLLOUTS = {}


def rollout_keys(member_seeds, seed=0):
  """One rollout-noise key per member, from the member's own training seed:
  fold_in(PRNGKey(seed), member_seed). A member's sampled rollout then depends on which
  model it is, not on its position among the members rolled out together."""
  base = jax.random.PRNGKey(seed)
  return jax.vmap(lambda s: jax.random.fold_in(base, s))(jnp.asarray(member_seeds, jnp.uint32))


def rollout_members(config, kind, params, ctx, mask, res, steps, vae=None, sigma_inf=None,
                    seed=0, spec_=None, member_seeds=None):
  """Predictions [M, B, steps, H, W, C] for stacked member params (spread over devices).

  ctx: [M, B, K, ...] per member (latent members each see their own VAE's latents);
  vae: (vae params stacked [M], z_std [M]) for latent kinds; member_seeds: each member's
  training seed (default 0..M-1), which keys its rollout noise (`rollout_keys`): members
  sharing a seed (the same seed at other learning rates) share their noise draws.
  """
  sp = spec_ or spec(config, kind)
  vsp = spec(config, "vae")
  key = (sp, steps)
  if key not in _ROLLOUTS:
    # sigma is traced (one compilation for every inference noise level).
    def one(p, c, m, r, vp, zs, rng, sig):
      return T.rollout(sp, p, c, m, rng, r, steps,
                       vae=(vsp, vp, zs) if kind in T.LATENT else None, sigma_inf=sig)
    _ROLLOUTS[key] = sharding.spread(one, in_axes=(0, 0, None, 0, 0, 0, 0, 0))
  M = jax.tree.leaves(params)[0].shape[0]
  if vae is None:
    vp, zs = jnp.zeros((M,)), jnp.ones((M,))
  else:
    vp, zs = vae
  sig = jnp.full((M,), sp.sigma_inf if sigma_inf is None else sigma_inf, jnp.float32)
  member_seeds = list(range(M)) if member_seeds is None else list(member_seeds)
  if len(member_seeds) != M:
    raise ValueError(f"member_seeds has {len(member_seeds)} entries for {M} members")
  rngs = rollout_keys(member_seeds, seed)
  return np.asarray(_ROLLOUTS[key](params, jnp.asarray(ctx), jnp.asarray(mask),
                                   jnp.asarray(res, jnp.float32), vp, jnp.asarray(zs), rngs,
                                   sig))


def errors(pred_norm, split, mean, std, K):
  """L2RE [M, B, S] in physical units; pred_norm [M, B, S, H, W, C] normalized frames."""
  m, s = mean[split["fam"]], std[split["fam"]]
  phys = pred_norm * s[None, :, None, None, None] + m[None, :, None, None, None]
  phys = phys * split["mask"][None, :, None, None, None]
  S = pred_norm.shape[2]
  true = split["x"][:, K:K + S]
  f = jax.vmap(lambda p: T.l2re(p, jnp.asarray(true), jnp.asarray(split["mask"])))
  return np.asarray(f(jnp.asarray(phys)))


def train_and_evaluate(config, workdir):
  validate(config)
  metrics_lib.write_config(workdir, config)
  data, fams = corpus(config, workdir)
  mean, std = stats(data["train"], len(fams))
  xs = {s: normalize(v, mean, std) for s, v in data.items()}
  seeds = list(range(config.train.seeds))
  vae, vcurve = train_vae(config, workdir, xs["train"], data["train"]["mask"], seeds)
  K, S = config.model.context, config.eval.rollout_steps
  lat, z_std, res = latents(config, vae["params"], xs)
  out, _, _ = train_dynamics(config, workdir, "lgs", lat["train"], data["train"]["mask"],
                             res, seeds, [config.train.lr], tag="lgs")
  params = out["params"]
  ctx = lat["test"][:, :, :K]
  pred = rollout_members(config, "lgs", params, ctx, data["test"]["mask"], res, S,
                         vae=(vae["params"], z_std), member_seeds=seeds)
  err = errors(pred, data["test"], mean, std, K)
  final = {}
  rows = []
  for f, name in enumerate(fams):
    sel = data["test"]["fam"] == f
    row = dict(family=name)
    for k in REPORT_STEPS:
      if k <= S:
        v = err[:, sel, k - 1].mean(axis=1)
        row[f"l2re@{k}"] = float(v.mean())
        row[f"std@{k}"] = float(v.std())
        final[f"test/{name}/l2re@{k}"] = float(v.mean())
    rows.append(row)
  metrics_lib.MetricsWriter(workdir, verbose=False).write(
      config.train.steps, final, split="test")
  md = study_lib.write_table(
      workdir, "test", rows, header=f"### LGS test L2RE, {len(seeds)} seeds (commit "
                                    f"{study_lib.git_commit(PATHS)})")
  print(md, flush=True)
  return final


def run_study(config, workdir):
  from jaxpapers.papers.lgs import study  # pylint: disable=g-import-not-at-top
  validate(config)
  if config.study.name != "main":
    raise ValueError(f"unknown study {config.study.name!r}; declared: main")
  metrics_lib.write_config(workdir, config)
  return study.run(config, workdir, commit=study_lib.git_commit(PATHS))


def benchmark(config, workdir):
  """launch/benchmark.py: every dynamics step and training step timed (FLOPs, achieved
  GFLOP/s against the measured matmul peak) and a NumPy FNO forward as the reference."""
  from jaxpapers.papers.lgs import benchmark as bench_lib  # pylint: disable=g-import-not-at-top
  validate(config)
  return bench_lib.run(config, workdir)


def plan(config):
  """One PFlowFT training step (batch train.batch_size) per seed: seeds spread, or with
  train.batch_parallel (the :paper config) every batch split over the devices."""
  from jaxpapers.core import planner  # pylint: disable=g-import-not-at-top
  sp = spec(config, "lgs")
  h = config.data.resolution // vae_factor(config)
  shape = (h, h, config.model.latent)
  M = config.train.seeds
  mem = jax.eval_shape(lambda: T.stack([T.init_member(sp, s, 1e-4, shape) for s in range(M)]))
  n_shard = config.plan_trajectories  # latent trajectories resident per step
  data = dict(x=jax.ShapeDtypeStruct((n_shard, config.data.frames) + shape, jnp.float32),
              mask=jax.ShapeDtypeStruct((n_shard, pdes.C), jnp.float32))
  start = jax.ShapeDtypeStruct((), jnp.int32)
  res = jax.ShapeDtypeStruct((), jnp.float32)
  def program(sp):  # the program fit runs
    axes = (0, None, None, None)
    if config.train.batch_parallel:  # each batch split over the devices
      repl = NamedSharding(mesh_lib.make_mesh(), P())
      return T.batch_parallel_chunk(sp, 1, axes), jax.tree.map(
          lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=repl),
          (mem, data, start, res))
    return sharding.spread_plan(T.make_chunk(sp, 1), mem, data, start, res, in_axes=axes)
  fn, args = program(sp)
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(mem["params"])) // M
  return planner.Plan(fn=fn, args=args, steps=config.train.steps, bf16=config.bf16,
                      label=f"lgs PFlowFT step: {M} seeds x batch {sp.batch}"
                            f"{' split over devices' if config.train.batch_parallel else ''}"
                            f" in {sp.micro} micro-batches"
                            f", latent "
                            f"{h}x{h}x{config.model.latent}, width {sp.width} depth "
                            f"{sp.depth} ({n_params / 1e6:.1f} M params/seed)")
