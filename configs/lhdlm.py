"""lhdlm: learnable hierarchical discrete diffusion language model (LHDLM).

Paper: abstract 9 of shared/papers/abstracts.txt; prior art HDLM (arXiv 2510.08632) and
MDLM (Sahoo et al. 2024). Code and README: jaxpapers/papers/lhdlm/.

A time-conditioned bidirectional denoiser on the workbench stack ('D' blocks), trained
through core.loop on the closed-form CT-ELBO of its forward process; the kinds are
lhdlm (learnable column-stochastic Gamma + I(X;C) regularizer), hdlm (k-means clusters),
mdlm, udlm (uniform noise) and ar (the same stack, causal).

  # one LHDLM run on the synthetic planted word-class language (default):
  python launch/train.py --config=configs/lhdlm.py --workdir=/tmp/lh
  # MDLM on Shakespeare bytes, 3 seeds as one population:
  python launch/train.py --config=configs/lhdlm.py:kind=mdlm,corpus=shakespeare,seeds=3 --workdir=/tmp/lh_m
  # a user's UTF-8 text file (bytes):
  python launch/train.py --config=configs/lhdlm.py:path=/data/my.txt --workdir=/tmp/lh_txt
  # the study (both corpora, every model, 3 seeds x LR grid):
  python launch/study.py --config=configs/lhdlm.py --workdir=/tmp/lh_study
  # the paper's size (GPT-2-small-like denoiser, OpenWebText-shaped BPE), planned only:
  python launch/plan.py --config=configs/lhdlm.py:paper --devices=8 --platform=h100
Smoke (seconds): `:smoke`.
"""
import ml_collections

from jaxpapers.core import config as config_lib


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg,
      smoke_args=dict(dim=16, layers=1, n_heads=2, clusters=3, seq_len=16, batch_size=8,
                      steps=4, syn_tokens=4000, eval_windows=8, samples=2, log_every=2,
                      eval_every=2, sample_steps=4, sample_n=2, study_steps=3,
                      study_seeds=2, study_lrs=(1e-3, 3e-3, 1e-2), study_kinds="ar+mdlm+lhdlm",
                      study_kinds_shakespeare="ar+mdlm", study_corpora="synthetic",
                      study_dim=16, study_layers=1, study_seq=16, study_batch=8,
                      study_tau_steps=(4,), study_eval_windows=8, study_samples=2,
                      study_sample_steps=(4,), max_chars=20000, kmeans_tokens=4000,
                      study_val_points=3, study_val_windows=4, study_val_samples=1,
                      study_probe_windows=2, study_gen_n=4),
      # The paper's scale (MDLM / HDLM's OpenWebText setting): a GPT-2-small-sized
      # denoiser (12 layers, d=768, 12 heads), GPT-2's BPE vocabulary (50257), T=1024,
      # batch 512, 1M steps; C=64 clusters is our assumption (the abstract gives none).
      paper_args=dict(dim=768, layers=12, n_heads=12, clusters=64, seq_len=1024,
                      batch_size=512, steps=1000000, vocab_size=50257, tokenizer="bpe",
                      compute_dtype="bfloat16", log_every=1000, eval_every=50000,
                      # 64 rows per device in 16 accumulated slices of 4: the logits of
                      # 4 x 1024 x 50257 tokens at a time (nn/lm.py, train.microbatches)
                      microbatches=16),
      smoke=False, paper=False, mesh=("data:-1",), compute_dtype="float32", seed=0,
      kind="lhdlm", corpus="synthetic", path="", tokenizer="byte", vocab_size=256,
      max_chars=0, syn_tokens=200000, syn_classes=4, syn_per_class=8, syn_functions=6,
      syn_p_function=0.4, syn_overlap=0.0, syn_order=2,
      dim=64, layers=2, n_heads=4, clusters=4, gamma=1.0, reg=1.0, reg_target=0.0, gamma_init_std=1.0,
      gamma_lr_mult=10.0, kmeans_tokens=200000,
      lr=3e-3, weight_decay=0.0, steps=600, batch_size=32, microbatches=1, seq_len=64,
      seeds=1, lrs=(0.0,),
      eval_windows=64, samples=4, log_every=50, eval_every=300,
      sample_steps=64, sample_n=4, sample_method="ancestral",
      # the study's size: ~35 minutes of one CPU core for ~10 populations of 9 members
      study_steps=1000, study_seeds=3, study_lrs=(6e-4, 1.5e-3, 4e-3), study_dim=32,
      study_layers=2, study_heads=2, study_seq=32, study_batch=32,
      study_kinds="ar+mdlm+lhdlm+lhdlm_noreg+hdlm+hdlm_planted+udlm",
      # Shakespeare bytes: every model, as run in the README's "Shakespeare bytes" section
      # (with clusters=8,study_steps=4000,study_lrs=0.00075+0.0015+0.003 on the command line)
      study_kinds_shakespeare="ar+mdlm+hdlm+lhdlm+udlm", study_kinds_overlap="hdlm+lhdlm+mdlm",
      study_overlap=0.3, study_corpora="synthetic+synthetic_overlap", study_syn_clusters=0,
      study_eval_windows=128, study_samples=64, study_sample_steps=(16, 128),
      study_tau_steps=(128,), study_shakespeare_chars=400000,
      study_val_points=8, study_val_windows=64, study_val_samples=4, study_only="",
      study_bigram_ks=(0.03, 0.1, 0.3, 1.0, 3.0, 10.0), study_probe_windows=4,
      study_gen_corpora="synthetic", study_gen_n=32)
  c = ml_collections.ConfigDict()
  c.experiment = "jaxpapers.papers.lhdlm.experiment"
  c.seed = arg.seed
  c.mesh = config_lib.mesh_axes(arg.mesh)
  c.compute_dtype = arg.compute_dtype   # 'float32' | 'bfloat16' (float32 master weights)

  c.data = ml_collections.ConfigDict()
  c.data.corpus = arg.corpus            # 'synthetic' | 'shakespeare' | 'python' | 'auto'
  c.data.path = arg.path                # a UTF-8 text file instead (bytes or BPE)
  c.data.tokenizer = arg.tokenizer      # 'byte' | 'bpe' (real text only)
  c.data.vocab_size = arg.vocab_size    # BPE only
  c.data.max_chars = arg.max_chars
  c.data.holdout = 0.1                  # held-out tail: validation half + test half
  c.data.seq_len = arg.seq_len
  c.data.synthetic = ml_collections.ConfigDict()
  c.data.synthetic.tokens = arg.syn_tokens
  c.data.synthetic.classes = arg.syn_classes
  c.data.synthetic.per_class = arg.syn_per_class
  c.data.synthetic.functions = arg.syn_functions
  c.data.synthetic.p_function = arg.syn_p_function
  c.data.synthetic.overlap = arg.syn_overlap  # > 0: no hard partition is planted
  c.data.synthetic.order = arg.syn_order      # class chain order (2: beyond a bigram's reach)
  c.data.synthetic.seed = 0

  c.model = ml_collections.ConfigDict()
  c.model.kind = arg.kind               # 'lhdlm' | 'hdlm' | 'mdlm' | 'udlm' | 'ar'
  c.model.dim = arg.dim
  c.model.layers = arg.layers
  c.model.n_heads = arg.n_heads
  c.model.init_std = 0.02
  c.model.clusters = arg.clusters       # C (hdlm, lhdlm)
  c.model.gamma = arg.gamma             # alpha_t = (1 - t)^gamma for every diffusion
  c.model.reg = arg.reg                 # weight of -I(X;C) in LHDLM's loss (0: off)
  c.model.reg_target = arg.reg_target   # > 0: reg * max(0, target - I(X;C)) instead (nats)
  c.model.gamma_init_std = arg.gamma_init_std  # std of Gamma's initial logits
  c.model.gamma_lr_mult = arg.gamma_lr_mult    # Gamma's LR / the denoiser's
  c.model.kmeans_tokens = arg.kmeans_tokens    # training tokens HDLM's k-means reads

  c.optim = ml_collections.ConfigDict()
  c.optim.lr = arg.lr
  c.optim.schedule = "cosine"
  c.optim.warmup_frac = 0.05
  c.optim.min_lr_frac = 0.1
  c.optim.b1 = 0.9
  c.optim.b2 = 0.99
  c.optim.eps = 1e-8
  c.optim.weight_decay = arg.weight_decay
  c.optim.clip_norm = 1.0

  c.population = ml_collections.ConfigDict()
  c.population.seeds = arg.seeds
  c.population.lrs = tuple(x for x in arg.lrs if x > 0)

  c.train = ml_collections.ConfigDict()
  c.train.steps = arg.steps
  c.train.batch_size = arg.batch_size
  c.train.microbatches = arg.microbatches  # gradient accumulated over this many slices
  c.train.log_every = arg.log_every
  c.train.eval_every = arg.eval_every
  c.train.checkpoint_every = 300
  c.train.keep_checkpoints = 2

  c.eval = ml_collections.ConfigDict()
  c.eval.batch_size = 32
  c.eval.max_windows = arg.eval_windows
  c.eval.samples = arg.samples          # Monte-Carlo draws of the ELBO per window

  c.sample = ml_collections.ConfigDict()
  c.sample.steps = arg.sample_steps
  c.sample.n = arg.sample_n
  c.sample.method = arg.sample_method   # 'ancestral' | 'tau_leaping'

  c.study = ml_collections.ConfigDict()
  c.study.steps = arg.study_steps
  c.study.seeds = arg.study_seeds
  c.study.lrs = arg.study_lrs
  c.study.kinds = arg.study_kinds       # '+'-joined; lhdlm_noreg = lhdlm with reg 0
  c.study.kinds_shakespeare = arg.study_kinds_shakespeare  # the models run on Shakespeare
  c.study.kinds_overlap = arg.study_kinds_overlap  # ... on 'synthetic_overlap'
  c.study.overlap = arg.study_overlap   # 'synthetic_overlap': no hard partition planted
  # C on the synthetic corpora; 0 = K + 1 (a cluster per class and one for the function
  # words). C = K leaves the function words no cluster of their own.
  c.study.syn_clusters = arg.study_syn_clusters
  c.study.dim = arg.study_dim
  c.study.layers = arg.study_layers
  c.study.n_heads = arg.study_heads
  c.study.seq_len = arg.study_seq
  c.study.batch_size = arg.study_batch
  c.study.tau_steps = arg.study_tau_steps  # tau-leaping step counts (ancestral: sample_steps)
  c.study.corpora = arg.study_corpora
  c.study.eval_windows = arg.study_eval_windows  # first half validation, second test
  c.study.samples = arg.study_samples
  c.study.sample_steps = arg.study_sample_steps  # ancestral step counts
  c.study.shakespeare_chars = arg.study_shakespeare_chars
  c.study.val_points = arg.study_val_points    # validation evaluations over training
  c.study.val_windows = arg.study_val_windows  # ... on this prefix of the validation half
  c.study.val_samples = arg.study_val_samples  # ... with this many ELBO draws
  c.study.only = arg.study_only          # '+'-joined models to train now ('' = all); the
  #                                        others are read from their cached cells
  c.study.bigram_ks = arg.study_bigram_ks  # add-k grid of the bigram (k chosen on validation)
  c.study.probe_windows = arg.study_probe_windows  # LHDLM: fixed windows for the two terms
  c.study.gen_corpora = arg.study_gen_corpora  # corpora whose samples the AR model scores
  c.study.gen_n = arg.study_gen_n        # samples per seed and sampler setting
  return config_lib.lock(c)
