"""LPR: Layer Precision Reduction for autoencoder-based anomaly detection (abstract 16).

Eight deep detectors (AE, VAE, DAE, MemAE, Deep SVDD, Deep SAD, DevNet, MLP classifier),
each with and without LPR, against ten classical ones (IForest, LOF, OCSVM, KNN, ECOD,
COPOD, HBOS, PCA, CBLOF, LODA) on 14 tabular sets (10 real ODDS-style sets from
scikit-learn and Debian's r-cran-mlbench, 4 ADBench-style synthetic sets).

  python launch/study.py --config=configs/lpr.py:parts=main --workdir=/tmp/lpr_main
  python launch/study.py --config=configs/lpr.py:parts=bits+layers --workdir=/tmp/lpr_abl
  python launch/train.py --config=configs/lpr.py --workdir=/tmp/lpr    # main table
  python launch/train.py --config=configs/lpr.py:smoke --workdir=/tmp/lpr_smoke
  python launch/train.py --config=configs/lpr.py:datasets=mat:/data/cardio.mat,max_n=0 --workdir=/tmp/lpr_odds
  python launch/train.py --config=configs/lpr.py:datasets=csv:/data/t.csv,csv_label=y --workdir=/tmp/lpr_csv
  python launch/train.py --config=configs/lpr.py:layer_bits=encoder.0:2+decoder.-1:4 --workdir=/tmp/lpr_pl

`:smoke` values are applied first and explicit args after (`:smoke,steps=50`). The main
table is checkpointed per detector and resumes where a killed run stopped. The mlbench
sets need the .rda files (see jaxpapers/papers/lpr/README.md; the error says how to get
them); `datasets=wbc+wine+optdigits+local+global+dependency+clustered` runs without them.
Randomness depends only on (study seed, detector), never on a dataset's name or on what
else is in the run. Defaults since issue 50: 5 seeds, AE code size 16 and pca_recon with
k = 1, both chosen by the validation rule of `jaxpapers/papers/lpr/ae_tuning.py`
(training rows only; see the README). `code_frac=0.25,latent=32` gives the AE family a
code of round(0.25 d) units per set instead (searched in the tuning's third round, not
chosen); `pca_frac` the same for pca_recon's k. `code_select=true,latent=64` (the issue-50 third pass's
table) chooses each set's AE capacity (linear, deep 64-32, wide 128-64, and while a set's pick is the
largest capacity searched, wider 256-128, x8 512-256, x16 1024-512) and code, and pca_recon's k, by a
validation rule on training rows (jaxpapers/papers/lpr/selection.py); `select_steps=1600` (the issue-50
eighth pass's table) then chooses each set's Adam steps (100 .. 6400) and learning rate (1e-4 .. 3e-2) by the
same rule at that pick, and the AE family trains each set at its own. `mean_dist` is the trivial detector
(squared distance to the training mean). Columns constant or collinear on the training rows
are dropped for the classical detectors, with a line in the run log. Expected results and runtimes: the README's tables (the
main table took 10-20 min on the heavily shared 2-core CPU; smoke ~30 s wall).
"""
import ml_collections

from jaxpapers.core import config as config_lib

ALL_SETS = ("wbc", "wine", "optdigits", "breastw", "pima", "ionosphere", "glass",
            "satellite", "satimage2", "shuttle", "local", "global", "dependency",
            "clustered")
KINDS = ("ae", "vae", "dae", "memae", "deepsvdd", "deepsad", "devnet", "mlp")
CLASSICAL = ("iforest", "lof", "ocsvm", "knn", "ecod", "copod", "hbos", "pca", "cblof",
             "loda", "pca_recon", "mean_dist")
# What `:smoke` changes; every entry is an arg, so `:smoke,steps=50` runs 50 steps.
SMOKE = dict(datasets=("wine",), kinds=("ae",), hidden=(16,), steps=5, seeds=1,
             xla_opt_level=0, classical=("iforest",), bit_grid=(4,), other_grid=(4,),
             ablation_kinds=("ae",), layer_rules=("all",))
# The paper's scale (launch/plan.py, accelerators): 30 real ADBench sets (the abstract),
# each capped at ADBench's 10,000 rows (its data_generator subsamples larger sets; 70/30
# split), padded to the widest ADBench tabular set (InternetAds, 1,555 features); the
# PyOD AE widths 64-32 (PyOD's default hidden_neuron_list) with the tuned code 16;
# 5 seeds x {off, on} as in the study.
PAPER = dict(max_n=10000, plan_sets=30, plan_train=7000, plan_test=3000, plan_dim=1555,
             hidden=(64, 32), latent=16, seeds=5, steps=400)


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg, smoke_args=SMOKE, paper_args=PAPER, smoke=False, paper=False, seed=0, study="main", datasets=ALL_SETS,
      kinds=KINDS, classical=CLASSICAL, bits=2, mode="mantissa", layers=r"(kernel|bias)$",
      layer_bits=("",), steps=400, seeds=5, hidden=(64, 32), latent=16, code_relu=True,
      scaling="zscore", max_n=4000, csv_label="label", mlbench_dir="", npz_dir="",
      xla_opt_level=-1, bit_grid=(1, 2, 3, 4, 6, 8), other_grid=(3, 4, 6, 8),
      ablation_kinds=("ae",), layer_rules=("none", "all", "encoder", "decoder", "each"),
      pca_k=1, pca_frac=0.0, code_frac=0.0, code_select=False,
      select_archs=("linear", "deep", "wide"), select_extend=True, select_steps=0,
      select_lrs=(3e-4, 1e-3, 3e-3), select_lpr=True,
      plan_sets=14, plan_train=2800, plan_test=1200, plan_dim=64,
      parts=("main", "bits", "layers"))
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.lpr.experiment"
  config.seed = arg.seed  # data split and first model seed
  config.study_name = arg.study

  config.data = dict(
      # names from datasets.py, or files: npz:<path.npz|stem> (ADBench), mat:<path> (ODDS),
      # csv:<path> (header row, 0/1 column `csv_label`)
      datasets=arg.datasets,
      test_frac=0.3,              # stratified test split (ADBench: 70/30)
      scaling=arg.scaling,        # 'zscore' or 'minmax', statistics of the training rows
      max_n=arg.max_n,            # stratified cap on rows, printed when applied (0 = none)
      csv_label=arg.csv_label,    # label column of csv: datasets (1 = anomaly)
      mlbench_dir=arg.mlbench_dir,  # folder of r-cran-mlbench .rda files ('' = search)
      npz_dir=arg.npz_dir,        # folder of ADBench .npz files for npz:<stem>
      synthetic_base="wbc",       # real set whose normals seed the synthetic anomalies
      synthetic_n=2000,           # rows per synthetic set
      synthetic_ratio=0.05,       # anomaly ratio of synthetic sets
      semi_frac=0.1,              # Deep SAD, DevNet: fraction of training anomalies labeled
  )
  config.model = dict(
      kinds=arg.kinds,            # deep detectors, each run with and without LPR
      hidden=arg.hidden,          # encoder widths; the decoder mirrors them (PyOD AE)
      latent=arg.latent,          # code size / Deep SVDD output size (16: ae_tuning.py)
      code_relu=arg.code_relu,    # AE/DAE: ReLU on the code (False: linear code)
      # AE family: round(code_frac * d) code units per dataset, 1..latent (0: latent units)
      code_frac=arg.code_frac,
      # Per set: the AE family's code size and pca_recon's k chosen by the validation rule
      # of jaxpapers/papers/lpr/selection.py (training rows only; grid 1, 2, 4, .. < d and
      # d - 1, at most `latent`, so use latent=64 for the full range on these sets).
      code_select=arg.code_select,
      # capacities every set searches: the linear AE (d -> code -> d), the deep AE
      # (`hidden`), the wide one (`hidden` x 2), wider (x 4), x8, x16
      select_archs=arg.select_archs,
      # a set whose pick is its largest capacity searched also searches the next rung
      # (wider, x8, x16) until the pick is inside (selection.py); false: no rung added
      select_extend=arg.select_extend,
      # > 0 (with code_select): each set's Adam steps and learning rate by the same rule
      # at its (capacity, code) pick, snapshots 100, 200, 400, .. up to this many steps
      # and rates select_lrs, both extended while a pick is on an edge (selection.py,
      # ladders selection.STEPS up to 6400 and selection.LRS 1e-4 .. 3e-2); the AE
      # family then trains each set at its pick. 0: optim.steps and optim.lr for all.
      select_steps=arg.select_steps,
      select_lrs=arg.select_lrs,
      # with select_steps > 0 and the AE in `kinds`: the AE with LPR chooses its own steps
      # and rate by the same rule at the same pick (issue 50, tenth pass); false: it
      # trains at the plain AE's (the eighth and ninth passes' tables)
      select_lpr=arg.select_lpr,
      mem_size=50,                # MemAE memory items
      noise_std=0.2,              # DAE corruption (standardized units)
      kl_weight=1.0,              # VAE beta
      entropy_weight=2e-4,        # MemAE attention entropy weight
      eta=1.0,                    # Deep SAD labeled-anomaly weight
  )
  config.lpr = dict(
      # Default chosen on the dev sets vehicle/sonar (not in the table), see README.
      bits=arg.bits,              # mantissa bits (mantissa) or total bits (fixed)
      mode=arg.mode,              # reduced 'mantissa' float or 'fixed' point
      int_bits=1,                 # fixed point range [-2, 2)
      layers=arg.layers,          # regex over parameter paths; default: every Dense W, b
      # Per-layer widths, e.g. layer_bits=encoder.0:2+decoder.-1:4 (replaces bits/layers;
      # unnamed layers stay float32). Layers: encoder.i, decoder.i (i may be < 0), memory.
      layer_bits=tuple(b for b in arg.layer_bits if b),
  )
  config.optim = dict(steps=arg.steps, batch=128, lr=1e-3, weight_decay=1e-6)
  config.train = dict(
      seeds=arg.seeds,            # model seeds, vmapped
      xla_opt_level=arg.xla_opt_level,  # XLA backend opt level (-1 default; 0 compiles faster)
  )
  config.classical = dict(
      names=arg.classical,
      pca_k=arg.pca_k,  # pca_recon: principal components kept (the linear AE's code size)
      pca_frac=arg.pca_frac,  # > 0: k = round(pca_frac * d) per dataset instead of pca_k
  )
  # Shapes for `plan` only (a run takes them from its datasets): sets, padded training
  # and test rows, padded width. Defaults: the 14-set study (4000-row cap, optdigits 64).
  config.scale = dict(sets=arg.plan_sets, train_rows=arg.plan_train,
                      test_rows=arg.plan_test, dim=arg.plan_dim)
  config.study = dict(
      bit_grid=arg.bit_grid,             # bit-width ablation in config.lpr.mode (+ off)
      other_grid=arg.other_grid,         # bit widths of the other format (here fixed)
      ablation_kinds=arg.ablation_kinds,  # detectors in the ablations
      # which-layers rows: none, all, encoder, decoder, each (= every layer alone)
      layer_rules=arg.layer_rules,
      parts=arg.parts,                   # study parts: main (table), bits, layers
  )
  if min(arg.plan_sets, arg.plan_train, arg.plan_test, arg.plan_dim) < 1:
    raise ValueError("plan_sets, plan_train, plan_test and plan_dim must be >= 1")
  if arg.code_select and config.lpr.layer_bits:
    raise ValueError("code_select chooses each set's AE depth, so layer_bits (per-layer "
                     "widths of one depth) cannot be combined with it")
  for key in ("code_frac", "pca_frac"):
    if not 0.0 <= arg[key] <= 1.0:
      raise ValueError(f"{key} must be in [0, 1] (a fraction of the input width), got {arg[key]}")
  return config_lib.lock(config)
