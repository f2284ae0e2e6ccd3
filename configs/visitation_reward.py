"""Success Visitation Matching: dense process rewards from a success/failure discriminator.

arXiv 2606.23640 (abstract 5). A discriminator over state-action visitations of earlier
successful vs failed episodes gives a potential; its shaping term is added to the sparse
outcome reward while a behaviour-cloned initial policy is fine-tuned with PPO. The
paper's per-step reading of the discriminator (log D, log-odds) runs beside it as the
methods `logd` and `logodds`. Baselines: sparse only, a VICE-like success-state
classifier, a hand-shaped distance and RND.

  # one method on one task over `seeds` seeds (checkpointed every `chunk` iterations):
  python launch/train.py --config=configs/visitation_reward.py:task=push_block,method=svm --workdir=/tmp/vr
  # the study: per task, every method's actor LR tuned on validation seeds, then the
  # reported seeds at the chosen LR; success vs env steps with 95% bands, AUC table,
  # tabular invariance check:
  python launch/study.py --config=configs/visitation_reward.py --workdir=/tmp/vr_study
  # study B: push_block + arm_place, 30 iterations (the SAC leg it also ran at commit
  # 81d9788 was removed from the study, README "Not done"):
  python launch/study.py --config=configs/visitation_reward.py:tasks=push_block+arm_place,iterations=30,lrs=3e-4+1e-3,val_seeds=3 --workdir=/tmp/vr_study_b

Expected: see jaxpapers/papers/visitation_reward/README.md (numbers with the commit).
`:smoke` runs in seconds plus compilation; explicit args override smoke values
(`:smoke,iterations=4`). `:paper` is PPO at brax scale (2048 envs, 50M env steps):
  python launch/plan.py --config=configs/visitation_reward.py:paper --devices=8 --platform=h100
  # brax reacher (needs brax; the plan adds its physics step):
  python launch/plan.py --config=configs/visitation_reward.py:paper,tasks=brax_reacher --devices=8 --platform=h100
"""
import ml_collections

from jaxpapers.core import config as config_lib

# The default study (PPO, 80 iterations) fits the 12-minute budget with three tasks;
# arm_place (BC success ~1%) runs as a second, shorter invocation.
_TASKS = ("point_reach", "push_block", "mountain_car")
# sparse only; svm: our potential-based reading (gamma Phi(s') - Phi(s)); logd / logodds:
# the paper's per-step reading (log D(s, a), log D - log(1 - D)); baselines vice, distance,
# rnd (README "Choices").
_METHODS = ("sparse", "svm", "logd", "logodds", "vice", "distance", "rnd")
_SMOKE = dict(iterations=2, num_envs=4, seeds=1, prefill_rollouts=1, aux_steps=2,
              aux_init_steps=2, bc_steps=20, bc_episodes=2, epochs=1, minibatches=2,
              tasks=("point_reach",), methods=_METHODS,
              lrs=(3e-4,), val_seeds=1, test_seeds=2, tabular_mdps=2, chunk=1, hidden=16,
              lane_group=2, scale_factors=(1.0,), sac_updates=2, eval_episodes=4)

# What `:paper` changes (README "Scale" gives the sources): PPO at the scale of brax's
# PPO configuration for its arm tasks (reacher, a reaching arm: 2048 environments, 32
# minibatches, 8 epochs per batch, 50M env steps: 400 iterations x 2048 x 60 steps on
# push_block) and the networks of the fine-tuning prior named for this paper (RLPD:
# 256-unit MLPs); lane groups of 8 so that a group fills 8 devices.
_PAPER = dict(num_envs=2048, minibatches=32, epochs=8, iterations=400, hidden=256,
              lane_group=8, chunk=20)


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg, smoke_args=_SMOKE, paper_args=_PAPER, smoke=False, paper=False, seed=0,
      task="push_block", method="svm",
      lr=1e-3, seeds=3, iterations=80, num_envs=16, epochs=4, minibatches=4, hidden=32,
      prefill_rollouts=4, aux_steps=16, aux_init_steps=200, bc_steps=300, bc_episodes=10,
      bc_noise=0.5, tasks=_TASKS, methods=_METHODS,
      lrs=(3e-4, 1e-3, 3e-3), val_seeds=2, test_seeds=6, tabular_mdps=30, chunk=10, algo="ppo",
      sac_updates=32, svm_scale=5.0, lane_group=6, critic_warmup=2, demos="",
      scale_factors=(1.0, 4.0), eval_episodes=32, rlpd=False, sac_utd=0.0)
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.visitation_reward.experiment"
  config.seed = arg.seed  # offset of every seed index (runs draw keys from task + seed)

  config.task = ml_collections.ConfigDict()
  # point_reach | push_block | arm_place | mountain_car (gymnax) | brax_reacher (brax;
  # scripted demonstrator, README "brax reacher") | brax_pusher (brax; wrapper only: no
  # demonstrator). brax at `:paper` size: launch/plan.py ...:paper,tasks=brax_reacher
  config.task.name = arg.task

  config.bc = ml_collections.ConfigDict()
  config.bc.episodes = arg.bc_episodes  # noisy scripted demonstrations
  config.bc.noise = arg.bc_noise  # std of the Gaussian noise on the demonstrator's actions
  config.bc.steps = arg.bc_steps  # Adam steps of the MSE fit (short: imperfect policy)
  config.bc.lr = 1e-3
  # Recorded demonstrations for the initial policy (robomimic-style HDF5 or .npz, see
  # bc.load_demonstrations) instead of the scripted demonstrator; train runs only (the
  # study's tasks use their scripted demonstrators).
  config.bc.demos = arg.demos

  config.ppo = ml_collections.ConfigDict()
  config.ppo.num_envs = arg.num_envs  # episodes per iteration (one full episode each)
  config.ppo.iterations = arg.iterations  # env steps = iterations x num_envs x horizon
  config.ppo.epochs = arg.epochs
  config.ppo.minibatches = arg.minibatches
  config.ppo.gamma = 0.98
  config.ppo.lam = 0.95  # GAE lambda
  config.ppo.clip = 0.2
  config.ppo.critic_lr = 1e-3
  config.ppo.init_std = 0.3  # exploration std of the fine-tuned Gaussian policy
  # iterations with the actor frozen while the critic catches up (PPO and SAC)
  config.ppo.critic_warmup = arg.critic_warmup
  config.ppo.hidden = arg.hidden  # width of every MLP (2 hidden layers)
  # Separate episodes of the deterministic policy (mean action) after every iteration, on
  # fixed start states per run: the evaluation success beside the training rollouts'.
  config.ppo.eval_episodes = arg.eval_episodes

  config.reward = ml_collections.ConfigDict()
  # Dense-term scales (each method uses only its own term on top of the sparse reward).
  config.reward.svm = arg.svm_scale  # Phi in [0, scale]
  config.reward.vice = 0.05  # x log sigma(C(s')) in [-5, 0]
  config.reward.distance = 0.05  # x -distance(s')
  config.reward.rnd = 0.05  # x normalised RND error
  # The paper's per-step reward, at the visited (s, a); same base scale as VICE (a few
  # percent of the success reward per step), x1 / x4 chosen on validation seeds.
  config.reward.logd = 0.05  # x max(log D(s, a), -5)
  config.reward.logodds = 0.05  # x clip(log D - log(1 - D), -5, 5)
  config.reward.buffer_rollouts = 8  # earlier rollouts the discriminators train on
  config.reward.prefill_rollouts = arg.prefill_rollouts  # initial-policy rollouts
  config.reward.aux_steps = arg.aux_steps  # discriminator / RND Adam steps per iteration
  config.reward.aux_init_steps = arg.aux_init_steps  # on the initial-policy rollouts
  config.reward.aux_batch = 128
  config.reward.aux_lr = 1e-3

  config.sac = ml_collections.ConfigDict()
  config.sac.updates = arg.sac_updates  # gradient steps per iteration (E x H env steps)
  config.sac.batch = 128
  config.sac.buffer = 16  # rollouts kept in replay (also the discriminators' data)
  config.sac.tau = 0.005  # target-network Polyak rate
  config.sac.alpha = 0.01  # initial temperature (small: do not wash out the BC policy)
  # RLPD-style (issue 48; README "SAC"): half of every batch from demonstrations, LayerNorm
  # critics; utd > 0: gradient steps per env step (replaces `updates`; RLPD uses >= 1)
  config.sac.rlpd = arg.rlpd
  config.sac.utd = arg.sac_utd

  config.train = ml_collections.ConfigDict()
  config.train.algo = arg.algo  # ppo | sac (continuous manipulation fine-tuning)
  config.train.method = arg.method  # one of _METHODS
  config.train.lr = arg.lr  # actor Adam step size
  config.train.seeds = arg.seeds
  config.train.chunk = arg.chunk  # iterations per checkpoint
  # Runs (seeds x LRs x methods) are compiled and executed in groups of exactly this many
  # vmapped lanes (the last padded), so a run's numbers never depend on how many others
  # share the study. Changing it changes the compiled program (last-bit differences).
  config.train.lane_group = arg.lane_group

  config.study = ml_collections.ConfigDict()
  config.study.tasks = tuple(arg.tasks)
  config.study.methods = tuple(arg.methods)
  config.study.lrs = tuple(arg.lrs)  # actor LR grid, selected per method on val seeds
  # Each dense method's term is scaled by a factor from this grid (x its config.reward
  # scale), chosen with the LR on the validation seeds: no method keeps an untuned scale.
  config.study.scale_factors = tuple(float(f) for f in arg.scale_factors)
  config.study.val_seeds = arg.val_seeds  # seeds 1000 + i: LR selection only
  config.study.test_seeds = arg.test_seeds  # seeds 0 .. n-1: reported
  config.study.tabular_mdps = arg.tabular_mdps  # random goal MDPs in the invariance check

  if arg.algo not in ("ppo", "sac"):
    raise ValueError(f"unknown algo {arg.algo!r}; known: ppo, sac")
  for m in (arg.method,) + tuple(arg.methods):
    if m not in _METHODS:
      raise ValueError(f"unknown method {m!r}; known: {', '.join(_METHODS)}")
  return config_lib.lock(config)
