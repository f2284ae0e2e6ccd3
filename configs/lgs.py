"""LGS: latent generative PDE solver, PhyVAE + pyramidal flow-forcing transformer (abstract 17).

arXiv 2602.11229. A multi-family 2-D PDE corpus generated with exponax (eight families,
random parameters and initial conditions, cached in the workdir), one PhyVAE for all of
them, PFlowFT (input-noised pyramidal flow matching on the next latent, the context
updated on its own predictions) against the same transformer trained deterministically
(MSE) and with DPOT-style input noise, a pixel-space flow-matching transformer, FNO and
U-Net; fine-tuning on a held-out Kolmogorov flow at 2x resolution.

  # PhyVAE + PFlowFT (3 seeds), test L2RE per family at 1/5/10/20 steps:
  python launch/train.py --config=configs/lgs.py --workdir=/tmp/lgs
  # the study (every model, lr grids on validation, 3 seeds, FLOPs, fine-tuning), in
  # resumable cells: with budget_s it stops before a new cell, the same command continues
  python launch/study.py --config=configs/lgs.py:budget_s=360 --workdir=/tmp/lgs_study
  # real data instead of the generated corpus (The Well or PDEBench HDF5, 2-D):
  python launch/train.py --config=configs/lgs.py:real_path=/data/shear_flow_train_0.hdf5,real_format=well --workdir=/tmp/lgs_well
  # issue 41's eight-family study at 32^2 (closer frames, sub-pixel PhyVAE, 1500 / 800
  # steps, per-model lr grids; in pieces: budget_s stops it before a new cell):
  python launch/study.py --config=configs/lgs.py:setting=families8,finetune=false,budget_s=1200 --workdir=/tmp/lgs_f8
  # its first look (the corpus with the base study's models, 300 steps):
  python launch/study.py --config=configs/lgs.py:setting=families8_look --workdir=/tmp/lgs_f8_look
  # issue 41's close setting (frames 4-8x closer, 64 trajectories a family, latent x16):
  python launch/study.py --config=configs/lgs.py:setting=close --workdir=/tmp/lgs_close
  # every dynamics and training step timed beside a NumPy FNO forward (issue 41):
  python launch/benchmark.py --config=configs/lgs.py:setting=close --workdir=/tmp/lgs_bench
  # the PhyVAE whose reconstruction no longer floors the latent models (issue 41: one
  # down/up stage fewer, an 8x8x4 latent, sub-pixel decoder; README "Why the PhyVAE floored"):
  python launch/study.py --config=configs/lgs.py:setting=close,vae_widths=16+24,latent=4,vae_up=shuffle --workdir=/tmp/lgs_close_v
  # the paper-size plan (PFlowFT step, 128^2 -> 32^2 x 16 latent, DiT-B-like, 8 devices):
  python launch/plan.py --config=configs/lgs.py:paper --devices=8 --platform=h100

Expected on the shared 2-core CPU: `:smoke` in under a minute; the study (the defaults:
4 families at 16^2, 300 steps per model, fine-tuning off with finetune=false) ~7.5
minutes of one core; `setting=close` ~25 minutes; `setting=families8_look` (8 families
at 32^2, the base models) 14.6 minutes; `setting=families8` (the study) ~60 minutes
without fine-tuning (README "The eight-family study" has the measured pieces), its 64^2
fine-tuning cell 11 minutes more (669 s when it ran 100 steps; its 55-step rerun took 1097 s
on a loaded machine); the numbers of all are in jaxpapers/papers/lgs/README.md.
"""
import ml_collections

from jaxpapers.core import config as config_lib

DYNAMICS = ("lgs", "latent_mse", "latent_dpot", "pixel_fm", "fno", "unet")
# The study's cell order: the cheap models first, U-Net (the costliest) last.
STUDY_KINDS = ("lgs", "latent_mse", "fno", "latent_dpot", "pixel_fm", "unet")
FAMILIES = ("adv_diff", "burgers", "ks", "kdv", "gray_scott", "swift_hohenberg",
            "navier_stokes", "cahn_hilliard")
# The CPU study's four (of the eight) at 16^2: a linear transport, a shock-forming, a
# phase-separating and a 2-D turbulent system. At 16 points the Kuramoto-Sivashinsky
# and Swift-Hohenberg solvers diverge and Gray-Scott's second species dies out (its
# norm falls to ~1e-20, which makes its relative error meaningless).
STUDY_FAMILIES = ("adv_diff", "burgers", "cahn_hilliard", "navier_stokes")

# Named settings (`setting=NAME`): each replaces some defaults; explicit args still win.
# "base" is the first CPU study (its rows in the README); "close" is issue 41's setting
# built to test the accuracy claims (README, "The close setting": it tests them only in
# pixel space; the PhyVAE still floors the latent models).
# close: frames dt_div times closer per family, dt_div chosen before any training by
# `python -m jaxpapers.papers.lgs.frame_rule --target=0.05` (the smallest power of 2 whose
# 1-step persistence L2RE on the training split is <= 0.05); 8x the training trajectories
# (closer frames cover less of each: with 8 a family the PhyVAE overfit, test
# reconstruction L2RE 0.54 at training loss 0.01); a PhyVAE without spatial
# compression of a one-channel field (4x4x16 = 16^2 numbers) trained 5x longer at 2x the
# lr; every dynamics model 8/3x longer; each model's lr grid centred on its base choice
# (PFlowFT, latent MSE and pixel FM extended to 3e-2: their first choices sat on the top
# edge of the 3-value grids; U-Net's moved up twice, 1e-2..1e-1 -> ..3e-1 -> 1e-1..1).
# families8_look: issue 41's corpus, all eight families at 32^2 (Kuramoto-Sivashinsky and
# Swift-Hohenberg diverge at 16^2, Gray-Scott's second species dies out in some 16^2
# trajectories: README "Choices"), the held-out Kolmogorov flow at 2x (64^2); the models
# keep the base setting's sizes (PhyVAE 16/24/32, nearest upsampling, an 8x8x4 latent),
# frames are not brought closer (dt_div all 1). Its one pass is the README's first look.
# families8: the eight-family study (README "The eight-family study"), each change by the
# close setting's rules: frames closer by the frame rule's per-family pick (`frame_rule
# --n=32 --divs=1,2,4,8,16 --target=0.05`, no model involved), 64 training trajectories
# a family, the sub-pixel PhyVAE (16/24/32: an 8x8x4 latent as in the close setting's
# rerun, here from 32^2) at the close lengths (1500 PhyVAE / 800 dynamics steps), each
# model's 4-value lr grid centred on its close-setting choice (latent DPOT's extended
# down twice: its first choice, 3e-3, sat on the lower edge); U-Net's spans decades from
# its first-look choice (1e-3) to past its close one (0.3): a 300-step pilot ranked 1e-3,
# 1, 1e-2, 1e-1 (README "The eight-family study").
_F8 = dict(families=FAMILIES, resolution=32, ft_resolution=64)
SETTINGS = dict(base={}, families8_look=_F8,
                families8=dict(
    _F8, dt_div=(8, 8, 8, 8, 1, 2, 4, 4), n_train=64, n_val=4, n_test=8, vae_up="shuffle",
    vae_steps=1500, vae_lr=2e-3, steps=800, chunk=50,
    lrs_lgs=(1e-3, 3e-3, 1e-2, 3e-2), lrs_latent_mse=(1e-3, 3e-3, 1e-2, 3e-2),
    lrs_fno=(1e-3, 3e-3, 1e-2, 3e-2), lrs_latent_dpot=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
    lrs_pixel_fm=(1e-3, 3e-3, 1e-2, 3e-2), lrs_unet=(1e-3, 1e-2, 1e-1, 1.0)),
                close=dict(
    dt_div=(8, 4, 4, 4), n_train=64, n_val=4, n_test=8, latent=16, vae_steps=1500,
    vae_lr=2e-3, steps=800,
    chunk=100, lrs_lgs=(1e-3, 3e-3, 1e-2, 3e-2), lrs_latent_mse=(1e-3, 3e-3, 1e-2, 3e-2),
    lrs_fno=(3e-3, 1e-2, 3e-2), lrs_latent_dpot=(3e-3, 1e-2, 3e-2),
    lrs_pixel_fm=(1e-3, 3e-3, 1e-2, 3e-2), lrs_unet=(1e-1, 3e-1, 1.0)))

SMOKE = dict(resolution=16, ft_resolution=32, frames=8, n_train=2, n_val=1, n_test=1,
             n_ft=2, n_ft_test=1, families=("adv_diff", "gray_scott"), width=16, depth=1,
             heads=2, vae_widths=(8, 8, 8), fno_width=8, fno_modes=4, unet_widths=(8, 8),
             batch_size=4, vae_steps=4, steps=4, chunk=2, seeds=1, rollout_steps=3,
             val_steps=2, lrs=(1e-3, 3e-3), flow_steps=1, ft_epochs=1, ft_batch=2, patch=2,
             dt_div=())
# The paper's sizes (its section on the corpus and model): 16 systems at 128^2, a
# 2.5 M-trajectory corpus, fine-tuning at 256^2. Widths follow a DiT-B-like transformer
# (our reading; the abstract gives no width).
PAPER = dict(resolution=128, ft_resolution=256, latent=16, width=768, depth=12, heads=12,
             batch_size=256, steps=200_000, vae_steps=100_000, frames=32, patch=4,
             vae_widths=(128, 256, 512), seeds=1,
             # one model's 256-row batch does not fit a device: split over the mesh
             # (32 rows each), the gradient accumulated over 8 slices of 4 rows (the
             # 1024^2 attention weights of 4 rows at a time)
             batch_parallel=True, microbatches=8)


def _int_tuple(key, vals):
  try:
    return tuple(int(v) for v in vals)
  except ValueError:
    raise ValueError(f"config arg {key!r}: expected integers joined by '+', got "
                     f"{'+'.join(map(str, vals))!r}") from None


def get_config(arg=None):
  defaults = _defaults()
  first = config_lib.parse_arg(arg, smoke_args=SMOKE, paper_args=PAPER, **defaults)
  if first.setting not in SETTINGS:
    raise ValueError(f"setting={first.setting!r}; known: {', '.join(SETTINGS)}")
  # A named setting replaces the defaults; explicit args (and smoke/paper) still win.
  defaults.update(SETTINGS[first.setting])
  arg = config_lib.parse_arg(arg, smoke_args=SMOKE, paper_args=PAPER, **defaults)
  return _build(arg)


def _defaults():
  return dict(
      smoke=False, paper=False, seed=0, setting="base",
      study="main", families=STUDY_FAMILIES, resolution=16, ft_resolution=32, frames=24,
      n_train=8, n_val=2, n_test=4, n_ft=4, n_ft_test=2, cache_dir="", real_path="",
      real_format="well", context=2, latent=4, vae_widths=(16, 24, 32), vae_up="nearest",
      beta=1e-3,
      width=48, depth=2, heads=4, patch=4, stages=2, flow_steps=4, sigma_max=0.3,
      sigma_inf=0.1, fno_width=16, fno_modes=6, unet_widths=(8, 16, 32), batch_size=8,
      vae_steps=300, steps=300, vae_lr=1e-3, lr=1e-3, chunk=50, seeds=3,
      rollout_steps=20, val_steps=10, lrs=(1e-3, 3e-3, 1e-2), ft_epochs=5, ft_batch=8,
      bf16=False, plan_trajectories=1024, batch_parallel=False, microbatches=1,
      kinds=STUDY_KINDS, budget_s=0.0, finetune=True, lrs_lgs=(), lrs_latent_mse=(),
      lrs_latent_dpot=(), lrs_pixel_fm=(), lrs_fno=(), lrs_unet=(), dt_div=(),
      ft_dt_div=1, bench_min_time=1.0)


def _build(arg):
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.lgs.experiment"
  config.seed = arg.seed
  config.bf16 = arg.bf16  # bf16 matmuls in the transformer (compute dtype)
  config.plan_trajectories = arg.plan_trajectories  # latent trajectories resident in plan
  config.bench_min_time = arg.bench_min_time  # launch/benchmark.py: seconds per timing

  config.data = ml_collections.ConfigDict()
  config.data.families = tuple(arg.families)  # pdes.FAMILY_NAMES
  config.data.resolution = arg.resolution  # grid of the pre-training corpus (H = W)
  config.data.ft_resolution = arg.ft_resolution  # held-out Kolmogorov grid (2x)
  config.data.frames = arg.frames  # frames per trajectory
  # solver dt divided by this per family (frames that much closer in time; () = all 1)
  config.data.dt_div = _int_tuple("dt_div", arg.dt_div)
  config.data.ft_dt_div = arg.ft_dt_div  # the same for the held-out Kolmogorov flow
  config.data.n_train = arg.n_train  # trajectories per family and split
  config.data.n_val = arg.n_val
  config.data.n_test = arg.n_test
  config.data.n_ft = arg.n_ft  # Kolmogorov fine-tuning trajectories
  config.data.n_ft_test = arg.n_ft_test
  config.data.cache_dir = arg.cache_dir  # "" = <workdir>/corpus
  config.data.real_path = arg.real_path  # a The Well / PDEBench HDF5 file ("" = corpus)
  config.data.real_format = arg.real_format  # well | pdebench

  config.model = ml_collections.ConfigDict()
  config.model.context = arg.context  # K context frames (updated on own predictions)
  config.model.latent = arg.latent  # PhyVAE latent channels (grid: resolution halved per
  # stage after the first of vae_widths: / 4 for three widths)
  config.model.vae_widths = tuple(arg.vae_widths)
  config.model.vae_up = arg.vae_up  # decoder upsampling: nearest | shuffle (sub-pixel conv)
  config.model.beta = arg.beta  # KL weight per latent element
  config.model.width = arg.width  # transformer width (PFlowFT and its baselines)
  config.model.depth = arg.depth
  config.model.heads = arg.heads
  config.model.patch = arg.patch  # pixel-space transformer patch (pixel_fm)
  config.model.stages = arg.stages  # pyramid stages (1 = plain flow matching)
  config.model.flow_steps = arg.flow_steps  # Euler steps per stage
  config.model.sigma_max = arg.sigma_max  # context noise levels while training
  config.model.sigma_inf = arg.sigma_inf  # context noise level at inference
  config.model.fno_width = arg.fno_width
  config.model.fno_modes = arg.fno_modes
  config.model.unet_widths = tuple(arg.unet_widths)

  config.train = ml_collections.ConfigDict()
  config.train.batch_size = arg.batch_size
  config.train.vae_steps = arg.vae_steps
  config.train.steps = arg.steps  # every dynamics model, the same budget
  config.train.vae_lr = arg.vae_lr
  config.train.lr = arg.lr  # train.py's PFlowFT learning rate (the study tunes lrs)
  config.train.chunk = arg.chunk  # steps per scanned, checkpointed chunk
  config.train.seeds = arg.seeds
  config.train.batch_parallel = arg.batch_parallel  # each batch over the devices (else seeds)
  config.train.microbatches = arg.microbatches  # gradient accumulated over batch slices
  config.train.ft_epochs = arg.ft_epochs
  config.train.ft_batch = arg.ft_batch

  config.eval = ml_collections.ConfigDict()
  config.eval.rollout_steps = arg.rollout_steps
  config.eval.val_steps = arg.val_steps  # rollout length of the lr selection

  config.study = ml_collections.ConfigDict()
  config.study.name = arg.study
  config.study.setting = arg.setting  # the named setting the defaults came from
  config.study.lrs = tuple(arg.lrs)  # every dynamics model's lr grid
  for kind in DYNAMICS:  # a model's own grid where the shared one puts its choice on an edge
    setattr(config.study, f"lrs_{kind}", tuple(float(x) for x in getattr(arg, f"lrs_{kind}")))
  config.study.kinds = tuple(arg.kinds)  # the dynamics models the study trains
  config.study.budget_s = arg.budget_s  # no new cell after this many seconds (0: none)
  config.study.finetune = arg.finetune  # the held-out Kolmogorov fine-tuning cell
  return config_lib.lock(config)
