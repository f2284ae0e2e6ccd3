"""Learned autoscaling of prefill/decode-disaggregated LLM serving (abstract 12).

A recurrent PPO-Lagrangian controller of the prefill and decode GPU pools of a simulated
PD-disaggregated cluster (DistServe's fitted OPT-13B / A100 latency model, Azure-2023-like
workloads), against grid-searched KPA, APA, threshold, static, Erlang-C and an offline
oracle under the same P99 TTFT / TPOT targets.

  # train the controller (3 seeds vmapped) and evaluate it on held-out traces:
  python launch/train.py --config=configs/pd_autoscale.py --workdir=/tmp/pda
  # the study (baseline grids on validation traces, PPO + ablations, test table, plots):
  nice -n 5 python launch/study.py --config=configs/pd_autoscale.py --workdir=/tmp/pda_study
  # a real trace CSV (Azure TIMESTAMP,ContextTokens,GeneratedTokens or Vidur
  # arrived_at,num_prefill_tokens,num_decode_tokens), evaluated after training:
  python launch/train.py --config=configs/pd_autoscale.py:trace=/data/AzureLLMInferenceTrace_conv.csv,trace_duration=600 --workdir=/tmp/pda_azure
  # simulator throughput (simulated requests/s, simulated seconds per wall second):
  python launch/benchmark.py --config=configs/pd_autoscale.py --workdir=/tmp/pda_bench
  # the paper-size plan (one PPO iteration over 8 devices):
  python launch/plan.py --config=configs/pd_autoscale.py:paper --devices=8 --platform=h100

Expected on one core of the shared 2-core CPU: train ~5 min, study ~21 min (grids ~6 min,
PPO ~15 min: 12 members x 120 iterations for the step size, then 9 ablation members;
the learned policy does NOT beat the tuned heuristics at this budget: numbers and
verdicts in jaxpapers/papers/pd_autoscale/README.md).
`:smoke` runs a 60 s episode in seconds with a warm compilation cache (~2 min cold,
compilation dominates).
"""
import ml_collections

from jaxpapers.core import config as config_lib

FAMILIES = ("conversation", "code", "diurnal", "bursts")

SMOKE = dict(duration=60.0, warmup=10.0, tail=10.0, window=96, iterations=2, envs=2, seeds=1,
             eval_every=1, families=("conversation",), val_seeds=1, test_seeds=1,
             ablations=False, max_extend=1, lr_extend=0, bench_clusters=2, bench_duration=60.0,
             n_max_factor=3.0,
             chunk=4)
PAPER = dict(rate_scale=4.0, max_prefill=16, max_decode=32, window=1024, dt=0.1,
             duration=3600.0, envs=64, iterations=500, seeds=3)


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg, smoke_args=SMOKE, paper_args=PAPER, smoke=False, paper=False, seed=0,
      study="main", profile="distserve_opt13b_a100", rate_scale=1.5, duration=600.0,
      warmup=60.0, tail=60.0, dt=0.25, epoch_s=5.0, window=256, max_prefill=8,
      max_decode=12, startup=60.0, ttft_slo=2.0, tpot_slo=0.1, token_budget=2048.0,
      kv_capacity=0.0, iterations=120, envs=4, seeds=3, lr=1e-3, hidden=64, recurrent=True,
      masks=True, cooldowns=True, budget=0.005, multiplier="per_family", lam_lr=0.1,
      dual_cap=20.0, dual="log", eval_every=20,
      ckpt_every=5,
      families=FAMILIES, val_seeds=2, test_seeds=3, ablations=True, ablation_seeds=3,
      max_extend=3, lr_extend=2, trace="",
      trace_speedup=1.0, trace_start=0.0, trace_duration=0.0, bench_clusters=16,
      bench_duration=300.0, n_max_factor=2.5, chunk=32)
  bad = [f for f in arg.families if f not in FAMILIES]
  if bad:
    raise ValueError(f"config arg 'families': unknown {bad}; known: {', '.join(FAMILIES)}")
  if arg.multiplier not in ("per_family", "shared"):
    raise ValueError(f"config arg 'multiplier': {arg.multiplier!r}; known: per_family, shared")
  if arg.duration <= arg.warmup + arg.tail:
    raise ValueError("config args: duration must exceed warmup + tail")
  if abs(arg.epoch_s / arg.dt - round(arg.epoch_s / arg.dt)) > 1e-6:
    raise ValueError(f"config args: epoch_s={arg.epoch_s} must be a multiple of dt={arg.dt}")
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.pd_autoscale.experiment"
  config.seed = arg.seed

  config.sim = ml_collections.ConfigDict()
  config.sim.profile = arg.profile  # calibration.PROFILES key
  config.sim.dt = arg.dt  # tick, s
  config.sim.epoch_s = arg.epoch_s  # decision interval of every controller, s
  config.sim.window = arg.window  # slot-table rows (requests in flight + next arrivals)
  config.sim.max_prefill = arg.max_prefill  # pool upper bounds (GPUs)
  config.sim.max_decode = arg.max_decode
  config.sim.min_prefill = 1
  config.sim.min_decode = 1
  config.sim.token_budget = arg.token_budget  # prefill batch token budget
  config.sim.max_batch = 128  # decode batch slots per GPU
  config.sim.kv_capacity = arg.kv_capacity  # KV tokens per decode GPU; 0 = the profile's
  config.sim.bandwidth = 25e9  # KV transfer, bytes/s per request
  config.sim.transfer_latency = 1e-3  # s
  config.sim.startup_s = arg.startup  # pod start-up delay, s
  config.sim.ttft_slo = arg.ttft_slo  # P99 TTFT target, s
  config.sim.tpot_slo = arg.tpot_slo  # P99 TPOT target, s
  config.sim.init_prefill = 2  # pods ready at t = 0
  config.sim.init_decode = 4
  config.sim.chunk = arg.chunk  # clusters per compiled evaluation call

  config.data = ml_collections.ConfigDict()
  config.data.families = tuple(arg.families)
  config.data.rate_scale = arg.rate_scale  # x the Azure conversation rate (5.5 req/s)
  config.data.duration = arg.duration  # episode, s
  config.data.warmup = arg.warmup  # excluded from the metrics, s
  config.data.tail = arg.tail  # requests arriving in the last `tail` s are not scored
  config.data.val_seeds = arg.val_seeds  # traces per family for selection
  config.data.test_seeds = arg.test_seeds  # traces per family for the table
  config.data.n_max_factor = arg.n_max_factor  # padded requests / expected requests
  config.data.trace = arg.trace  # a real trace CSV; "" = synthetic only
  config.data.trace_speedup = arg.trace_speedup
  config.data.trace_start = arg.trace_start
  config.data.trace_duration = arg.trace_duration

  config.rl = ml_collections.ConfigDict()
  # Training traces: the code family (CV 13) is held out. Its bursts of hundreds of
  # simultaneous requests make the P99 targets infeasible for every controller at these
  # pool bounds, which would drive the Lagrange multiplier up without bound; it stays in
  # the test set as the out-of-distribution generator.
  config.rl.train_families = tuple(f for f in arg.families if f != "code") or tuple(arg.families)
  config.rl.iterations = arg.iterations  # PPO iterations (rollout + update)
  config.rl.envs = arg.envs  # clusters per member per iteration
  config.rl.seeds = arg.seeds  # members (vmapped)
  config.rl.lr = arg.lr  # Adam step size
  config.rl.hidden = arg.hidden
  config.rl.recurrent = arg.recurrent
  config.rl.masks = arg.masks
  config.rl.cooldowns = arg.cooldowns
  config.rl.cooldown_down_s = 60.0  # no scale-down this long after a scale-up
  config.rl.cooldown_up_s = 30.0  # no scale-up this long after a scale-down
  config.rl.budget = arg.budget  # allowed violating fraction (P99 => <= 1%)
  # One Lagrange multiplier per training trace family, each updated from its own
  # family's violations ("shared": one multiplier for the whole training mix, which an
  # infeasible family drives to its maximum; README, Results).
  config.rl.multiplier = arg.multiplier
  # Dual ascent: step = lam_lr x min(violating fraction / budget - 1, dual_cap) (ppo.py),
  # on log lambda (dual="log", the default: a clean iteration multiplies lambda by
  # exp(-lam_lr)) or on lambda (dual="linear": lowers it by lam_lr; it could not come
  # down from the early overshoot within the training budget). The dual rule and lam_lr
  # were picked on a training diagnostic (README, Controller). `dual=linear,lam_lr=0.5,
  # dual_cap=1` is the first version's clipped step (the lower clip at -1 never binds).
  if not (arg.lam_lr > 0 and arg.dual_cap > 0):
    raise ValueError(f"config args 'lam_lr'={arg.lam_lr}, 'dual_cap'={arg.dual_cap}: both "
                     "must be > 0")
  if arg.dual not in ("linear", "log"):
    raise ValueError(f"config arg 'dual': {arg.dual!r}; known: linear, log")
  config.rl.lam_lr = arg.lam_lr
  config.rl.dual_cap = arg.dual_cap
  # "log": the same step on log lambda (ppo.PPOSpec.dual_log).
  config.rl.dual = arg.dual
  config.rl.update_epochs = 4
  config.rl.minibatches = 2
  config.rl.gamma = 0.98
  config.rl.ent = 0.01
  config.rl.eval_every = arg.eval_every  # validation of snapshots (selection)
  config.rl.ckpt_every = arg.ckpt_every

  config.study = ml_collections.ConfigDict()
  config.study.name = arg.study
  config.study.ablations = arg.ablations
  # The PPO step-size grid (main variant, config.rl.seeds seeds each); a pick on its edge
  # extends it one geometric step (lr_extend rounds; study.train_ppo).
  config.study.lrs = (1e-4, 3e-4, 1e-3, 3e-3)
  config.study.lr_extend = arg.lr_extend
  # Baseline grids (every value printed with the selection; an edge choice is flagged).
  config.study.ablation_seeds = arg.ablation_seeds  # training seeds per ablation
  # Baseline grids (every value printed with the selection). A feasible choice on an
  # axis' edge extends that axis (max_extend rounds, study.run_grid); an edge left is
  # flagged with its reason (natural bound, no feasible point).
  config.study.max_extend = arg.max_extend
  # The reactive baselines (KPA, APA, threshold) do not scale down during the first
  # start_hold_s of an episode (baselines.start_guard): one KPA stable window (60 s, = one
  # pod start-up). Episodes start empty at the full rate, and without it KPA halved the
  # decode pool in the first seconds and its start-up backlog landed in the scored window.
  config.study.start_hold_s = 60.0
  config.study.kpa_target_p = (0.5, 1.0, 2.0, 3.0)  # in-flight prefill requests / pod
  config.study.kpa_target_d = (3.0, 5.0, 10.0, 20.0, 30.0)  # in-flight decode requests / pod
  config.study.kpa_delay_s = (0.0, 60.0, 300.0)  # scale-down delay (Knative default 0)
  config.study.apa_target_p = (0.2, 0.3, 0.5, 0.7, 0.9)  # prefill busy fraction
  config.study.apa_target_d = (0.2, 0.3, 0.5, 0.65, 0.8)  # KV utilisation
  config.study.apa_cooldown_s = (60.0, 300.0)
  config.study.thr_hi_p = (0.5, 1.0, 2.0, 4.0, 8.0)  # in-flight prefill requests / pod
  config.study.thr_hi_d = (0.2, 0.3, 0.5, 0.7, 0.85)  # KV utilisation
  config.study.erlang_headroom = (0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0)
  config.study.erlang_delay_s = (0.0, 60.0, 300.0)  # scale-down stabilisation window
  config.study.oracle_h_p = (0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0)
  config.study.oracle_h_d = (0.7, 0.85, 1.0, 1.1, 1.25, 1.5)

  config.bench = ml_collections.ConfigDict()
  config.bench.clusters = arg.bench_clusters
  config.bench.duration = arg.bench_duration
  return config_lib.lock(config)
