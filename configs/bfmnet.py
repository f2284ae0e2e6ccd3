"""BFMNet: truthful budget-feasible procurement menus (abstract 8).

Train BFMNet (self-bid-independent posted-price menus + the ex-post budget
transformation) and the RegretNet-style baseline on one market, then evaluate them with
the truthful classical baselines (Singer's proportional share, Chen-Gravin-Lu RANDOM-SM
with an affordable i*, GREEDY-SM(B/2) alone, tuned sequential posted prices):

  python launch/train.py --config=configs/bfmnet.py:n=10,valuation=additive --workdir=/tmp/bfm
  python launch/study.py --config=configs/bfmnet.py --workdir=/tmp/bfm_study
  python launch/study.py --config=configs/bfmnet.py:study=classical --workdir=/tmp/bfm_cl
  python launch/study.py --config=configs/bfmnet.py:study=singer_gap --workdir=/tmp/bfm_gap
  python launch/study.py --config=configs/bfmnet.py:study=scale,ns=50 --workdir=/tmp/bfm_scale50
  python launch/study.py --config=configs/bfmnet.py:study=scale,ns=100,scale_variants=offset0+penalty --workdir=/tmp/bfm_scale100
  python launch/study.py --config=configs/bfmnet.py:study=neural,ns=5 --workdir=/tmp/bfm_nn
  python launch/study.py --config=configs/bfmnet.py:study=grid,ns=5 --workdir=/tmp/bfm_grid
  python launch/benchmark.py --config=configs/bfmnet.py:n=10 --workdir=/tmp/bfm_bench

Expected (2 shared CPU cores): the train run takes a few minutes, mostly XLA compilation,
and checkpoints (orbax) so a killed run resumes to the same parameters. BFMNet has zero
budget and IR violations and no gain from any misreport. Against the corrected classical
baselines BFMNet (main-study training budget) is below the best proven-truthful baseline
in every cell (Singer on additive, tuned posted prices on submodular markets) and above
the corrected CGL in 13 of 16 cells. `study=classical` (no training) took 469 s,
`study=singer_gap,gap_variants=base+long+wide` 489 s, `study=neural,ns=5` 183 s (commits
7dd190d, 33f7434, 09ce6c9; at n = 5 the ex-post-constrained RegretNet with its lr chosen on
validation collapses to buying nothing, BFMNet keeps 0.60-0.76). `study=scale,ns=50`
took 200 s (commit 4f1c385): the default training collapses to value 0 on the submodular
cell (raw prices run into an exactly flat region of the relaxation), a lower initial price
scale (offset 2) does not help, the raw-overspend hinge (`penalty`) gives 0.580;
`study=scale,ns=100,...` 153 s (dfbb2e8): 0.57-0.65, 16-21% below the best truthful
baseline. `study=singer_gap,gap_variants=distill` 121 s (0818b4f): a Singer-distilled start
ends where the random one does. `study=grid` (the 16-cell table, each network's lr chosen
per cell on validation, 3 seeds) runs one part per n (and network): ns=5 514 s, ns=10
214 s (BFMNet) + 452 s (RegretNet), ns=20 191 s (BFMNet) + 564 s (RegretNet) and ns=50
252 s (BFMNet only), map_runs=True at n >= 20, one core each; BFMNet stays below the best truthful baseline in all 16 cells and the
admissible RegretNet buys nothing. Issue 17 follow-up: `study=grid,grid_kinds=rochetnet`
(the RochetNet-style menus, ~75-120 s per n), Singer priors `prior=feature|residual` with
`shrink=1e-4` (~205-220 s per n = 10 additive part), `study=singer_gap,gap_variants=facts`
(29 s), `study=relax` (69 s). Issue 17, relaxation tests: `tau=0.02|0.01`, `tau_end=0.005`
(anneal) and `objective=es` (score-function gradient of the hard value) on the n = 10
additive grid part (130-150 s; ES 275-310 s); the hinge tuned at n < 50
(`penalties=1.0,penalty_ns=N`, 150-170 s per n); tuned n = 100 (`ns=100,penalty_ns=100,
cost_dists=uniform,map_runs=True,log_every=25`, 231 s). Tables and commands in
jaxpapers/papers/bfmnet/README.md.
Smoke values are overridden by explicit args (`:smoke,steps=50`). `:paper` is the paper's
scale (n = 100, 128 markets per step, width 100, 400k steps; README "Scale"):
  python launch/plan.py --config=configs/bfmnet.py:paper --devices=8 --platform=h100
"""
from ml_collections import ConfigDict

from jaxpapers.core import config as config_lib


# Per n: (training steps, instances per step, eval instances, regret instances x n sellers
# x 21 misreports), sized for a shared, contended 2-core CPU.
_STUDY_PER_N = {5: (200, 32, 128, 8), 10: (200, 32, 128, 8), 20: (150, 16, 64, 4),
                50: (50, 8, 32, 2), 100: (50, 4, 16, 1)}
# What `:smoke` changes; every entry is an arg, so `:smoke,steps=50` runs 50 steps.
_SMOKE = dict(n=5, steps=10, batch=8, log_every=5, hidden=8, channels=4, monotone=4,
              eval_instances=8, regret_instances=0, regret_grid=5, timing=False,
              classical=False, baseline=False, spp_val_instances=16, ns=(4, 5),
              valuations=("additive",), cost_dists=("uniform",), study_steps=(5, 5),
              study_batch=(8, 8), study_eval=(8, 8), study_regret=(2, 2), gap_steps=10,
              distill_steps=10, ascent_steps=2, eval_ascent_steps=3, expost_samples=16,
              val_instances=8, lrs=(1e-3, 1e-2), regretnet_lrs=(1e-3, 3e-3))
# What `:paper` changes: the largest market (n = 100: the abstract claims scaling to
# "larger auction instances" without a number; 100 is this implementation's largest
# measured market) at the prior neural-AMD training budget of RegretNet's reference
# configuration files (Duetting et al. 2019: minibatch 128, 100 hidden units,
# 400,000 iterations, test batch 1024). Sources in the README's "Scale" section.
_PAPER = dict(n=100, batch=128, hidden=100, steps=400_000, log_every=1000, ns=(100,),
              study_steps=(400_000,), study_batch=(128,), study_eval=(1024,),
              study_regret=(16,), penalty_ns=(100,))


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg, smoke_args=_SMOKE, paper_args=_PAPER, smoke=False, paper=False, seed=0,
      study="main", n=10,
      valuation="additive", cost_dist="uniform", steps=400, batch=64, log_every=50,
      hidden=32, channels=16, monotone=8, offset=0.0, eval_instances=256,
      regret_instances=16, regret_grid=21, timing=True, classical=True, baseline=True,
      spp_val_instances=256, ns=(5, 10, 20, 50), valuations=("additive", "submodular"),
      cost_dists=("uniform", "bimodal"), study_steps=(0,), study_batch=(0,),
      study_eval=(0,), study_regret=(0,), gap_steps=200, distill_steps=300,
      gap_variants=("base", "long", "wide", "distill"), lr=3e-3, ascent_steps=5,
      eval_ascent_steps=25, expost_samples=256, val_instances=64,
      lrs=(1e-3, 3e-3, 1e-2), regretnet_lrs=(3e-4, 1e-3, 3e-3), penalty=0.0,
      scale_variants=("offset0", "offset2", "penalty"), scale_penalty=1.0,
      scale_log_every=10, seeds=3, penalty_ns=(50,), penalties=(0.0, 1.0),
      map_runs=False, grid_kinds=("bfmnet", "regretnet"), prior="none", shrink=0.0,
      tag="", options=4, gain0=0.0, relax_priors=("feature",), relax_dirs=("",),
      tau=0.05, tau_end=0.0, objective="relaxed", es_pairs=8, es_sigma=0.02,
      relax_taus=(0.05,))
  if arg.objective not in ("relaxed", "es"):
    raise ValueError(f"objective={arg.objective!r}; known: relaxed, es")
  if not 0.0 < arg.tau or arg.tau_end < 0.0:
    raise ValueError(f"tau={arg.tau}, tau_end={arg.tau_end}: need tau > 0, tau_end >= 0")
  config = ConfigDict()
  config.experiment = "jaxpapers.papers.bfmnet.experiment"
  config.seed = arg.seed

  config.market = ConfigDict()
  config.market.n = arg.n                          # number of sellers
  config.market.valuation = arg.valuation          # additive | submodular (coverage)
  config.market.cost_dist = arg.cost_dist          # uniform | skewed | bimodal, costs in [0, 1]
  config.market.budget_per_seller = 0.1            # B = 0.1 n: ~1/4 of sellers affordable

  config.model = ConfigDict()
  config.model.hidden = arg.hidden                 # embedding width
  config.model.channels = arg.channels             # monotone bid channels
  config.model.monotone = arg.monotone             # monotone-MLP outputs mixed by gates
  config.model.offset = arg.offset                 # initial raw prices ~ softplus(O(1) - offset)
  config.model.tau = arg.tau                       # sigmoid temperature of the relaxation
  # > 0: tau annealed geometrically from tau to tau_end over training (train_lib.tau_at)
  config.model.tau_end = arg.tau_end
  # Singer's prices as a monotone input (`feature`) or the base of a multiplicative
  # residual (`residual`); menus.py. Additive markets (on coverage: an additive proxy).
  config.model.prior = arg.prior
  # The budget transformation's evaluation point (1 - shrink) t0_i (mechanism.py); 0 is
  # the original map, 1e-4 lets Singer's own prices pass unchanged.
  config.model.shrink = arg.shrink
  config.model.gain0 = arg.gain0                   # residual prior: initial gain (menus.py)
  config.model.options = arg.options               # RochetNet-style baseline: options per seller

  config.baseline = ConfigDict()
  config.baseline.train = arg.baseline             # also train the RegretNet baseline
  config.baseline.hidden = arg.hidden
  config.baseline.rho = 1.0                        # augmented-Lagrangian step / penalty
  config.baseline.train_grid = 5                   # grid misreports per seller per step
  # Inner misreport search (Duetting et al. 2019): gradient ascent on the bid from random
  # starting points, projected on [0, 1], against the current network.
  config.baseline.ascent_inits = 2                 # random starts per seller per step
  config.baseline.ascent_steps = arg.ascent_steps  # ascent steps per outer step
  config.baseline.ascent_lr = 0.1                  # ascent step size (cost units)
  # Ex-post budget penalty: realised winner sets from relaxed (Gumbel-sigmoid) draws.
  config.baseline.expost_samples = 8               # draws per instance per step
  config.baseline.expost_temp = 0.1                # relaxation temperature

  config.optim = ConfigDict()
  config.optim.steps = arg.steps
  config.optim.batch = arg.batch                   # instances per step (vmapped)
  config.optim.lr = arg.lr                         # (study=neural sweeps study.lrs instead)
  config.optim.clip = 1.0
  # Training-only hinge on the raw menus' relaxed overspend (0 = off, the main study's
  # setting); see train_lib.bfm_loss. The `scale` study's "penalty" variant sets it.
  config.optim.raw_overspend_penalty = arg.penalty
  config.optim.log_every = arg.log_every           # steps per jitted lax.scan chunk
  # Train the vmapped runs of a sweep one after another (lax.map): bounded memory for the
  # grid study's large sweeps at n >= 20.
  config.optim.map_runs = arg.map_runs
  # BFMNet's training gradient: `relaxed` (autodiff of the sigmoid-relaxed value) or `es`
  # (score-function estimate of the hard mechanism's value under Gaussian parameter
  # noise es_sigma, es_pairs antithetic pairs per step; train_lib.es_grad)
  config.optim.objective = arg.objective
  config.optim.es_pairs = arg.es_pairs
  config.optim.es_sigma = arg.es_sigma

  config.eval = ConfigDict()
  config.eval.instances = arg.eval_instances       # for value / violations
  config.eval.regret_instances = arg.regret_instances  # exhaustive misreport search
  config.eval.regret_grid = arg.regret_grid        # misreports per seller on [0, 1]
  config.eval.milp_time_limit = 1.0                # seconds per optimum MILP
  config.eval.timing = arg.timing                  # time inference of every mechanism
  config.eval.classical = arg.classical            # also evaluate the classical baselines
  config.eval.spp_val_instances = arg.spp_val_instances  # validation markets to tune SPP
  config.eval.ascent_steps = arg.eval_ascent_steps  # RegretNet audit: ascent from each grid bid
  config.eval.ascent_lr = 0.05
  config.eval.expost_samples = arg.expost_samples  # RegretNet audit: lottery draws per instance
  # study=neural: learning rates chosen per cell on validation markets (own key).
  config.eval.val_instances = arg.val_instances
  config.eval.val_regret_instances = 4
  config.eval.max_val_regret = 0.005               # RegretNet: admissible validation regret
  config.eval.max_val_overspend = 0.05             # ... and ex-post overspend probability

  config.study = ConfigDict()
  # main (BFMNet + baselines over n) | classical (baselines only, no training) |
  # singer_gap (ablations on additive n=10) | scale (n = 50, 100) |
  # neural (BFMNet and ascent/ex-post RegretNet, learning rates chosen on validation) |
  # grid (the 16-cell grid, both networks tuned on validation, `seeds` seeds each)
  config.study.name = arg.study
  unknown = [n for n in arg.ns if n not in _STUDY_PER_N]
  if unknown and not arg.smoke:
    raise ValueError(f"ns: no study settings for n={unknown}; known: {sorted(_STUDY_PER_N)}")
  config.study.ns = tuple(arg.ns)                  # `ns=5+10` runs a subset of the grid
  config.study.valuations = tuple(arg.valuations)
  config.study.cost_dists = tuple(arg.cost_dists)

  def per_n(given, k):  # explicit tuple if given, else the per-n defaults above
    if any(given):
      if len(given) != len(arg.ns):
        raise ValueError(f"study tuple {given} needs one entry per n in ns={arg.ns}")
      return tuple(given)
    return tuple(_STUDY_PER_N[n][k] for n in arg.ns)
  config.study.steps = per_n(arg.study_steps, 0)
  config.study.batch = per_n(arg.study_batch, 1)
  config.study.eval_instances = per_n(arg.study_eval, 2)
  config.study.regret_instances = per_n(arg.study_regret, 3)
  config.study.gap_steps = arg.gap_steps           # singer_gap: value-training steps
  config.study.distill_steps = arg.distill_steps   # singer_gap: regression to Singer's prices
  config.study.gap_variants = tuple(arg.gap_variants)  # singer_gap: base|long|wide|distill
  config.study.lrs = tuple(float(x) for x in arg.lrs)  # neural: BFMNet lr sweep
  # neural: RegretNet lr sweep (lr 1e-2 gave NaN within 50 steps in a first attempt)
  config.study.regretnet_lrs = tuple(float(x) for x in arg.regretnet_lrs)
  # scale: BFMNet variants per n -- offset0 (default init), offset2 (initial prices
  # ~softplus(O(1) - 2)), penalty (offset 0 + raw-overspend hinge of weight scale_penalty)
  config.study.scale_variants = tuple(arg.scale_variants)
  config.study.scale_penalty = arg.scale_penalty
  config.study.scale_log_every = arg.scale_log_every  # steps per logged training chunk
  # grid: training seeds per (network, cell) at the setting chosen on validation, and the
  # n at which BFMNet's sweep also covers the raw-overspend hinge weights `penalties`
  # (the n = 50 collapse; elsewhere the hinge is off).
  config.study.seeds = arg.seeds
  config.study.penalty_ns = tuple(arg.penalty_ns)
  config.study.penalties = tuple(float(x) for x in arg.penalties)
  config.study.grid_kinds = tuple(arg.grid_kinds)  # grid: networks of this part
  config.study.tag = arg.tag                       # grid: suffix of the output files
  # relax: grid workdirs (n = 10, additive) whose sweep checkpoints are re-evaluated, and
  # the prior each was trained with
  config.study.relax_priors = tuple(arg.relax_priors)
  config.study.relax_dirs = tuple(arg.relax_dirs)
  config.study.relax_taus = tuple(float(t) for t in arg.relax_taus)  # relaxed value at each
  return config_lib.lock(config)
