"""BFMNet: truthful budget-feasible procurement mechanisms learned as menus (abstract 8).

Train BFMNet (self-bid-independent posted-price menus + the ex-post budget
transformation) and the RegretNet-style baseline on one market, then evaluate them with
Singer's proportional share and Chen-Gravin-Lu RANDOM-SM:

  python launch/train.py --config=configs/bfmnet.py:n=10,valuation=additive --workdir=/tmp/bfm
  python launch/study.py --config=configs/bfmnet.py --workdir=/tmp/bfm_study
  python launch/benchmark.py --config=configs/bfmnet.py:n=10 --workdir=/tmp/bfm_bench

Expected (2 shared CPU cores): the train run takes a few minutes, mostly XLA compilation.
BFMNet has exactly zero regret, zero budget violations and zero IR violations. Measured
against the best classical mechanism: +11% to +34% on coverage (submodular) markets with
n <= 20, and 12-25% below Singer's proportional share on additive ones. The full study
(n = 5, 10, 20, 50 x additive/submodular x uniform/bimodal costs) took 10-13 min per
process with `ns=5+10`, `ns=20` and `ns=50` run in parallel. The table and commands are
in jaxpapers/papers/bfmnet/README.md.
"""
from ml_collections import ConfigDict

from jaxpapers.core import config as config_lib


# Per n: (training steps, instances per step, eval instances, regret instances x n sellers
# x 21 misreports), sized for a shared, contended 2-core CPU.
_STUDY_PER_N = {5: (200, 32, 128, 8), 10: (200, 32, 128, 8), 20: (150, 16, 64, 4),
                50: (50, 8, 32, 2)}


def get_config(arg=None):
  arg = config_lib.parse_arg(arg, smoke=False, seed=0, study="main", n=10,
                             valuation="additive", cost_dist="uniform", steps=400,
                             baseline=True, ns=(5, 10, 20, 50))
  config = ConfigDict()
  config.experiment = "jaxpapers.papers.bfmnet.experiment"
  config.seed = arg.seed

  config.market = ConfigDict()
  config.market.n = arg.n                          # number of sellers
  config.market.valuation = arg.valuation          # additive | submodular (coverage)
  config.market.cost_dist = arg.cost_dist          # uniform | beta | bimodal, costs in [0, 1]
  config.market.budget_per_seller = 0.1            # B = 0.1 n: ~1/4 of sellers affordable

  config.model = ConfigDict()
  config.model.hidden = 32                         # embedding width
  config.model.channels = 16                       # monotone bid channels
  config.model.monotone = 8                        # monotone-MLP outputs mixed by gates
  config.model.tau = 0.05                          # sigmoid temperature of the relaxation

  config.baseline = ConfigDict()
  config.baseline.train = arg.baseline             # also train the RegretNet baseline
  config.baseline.hidden = 32
  config.baseline.rho = 1.0                        # augmented-Lagrangian step / penalty
  config.baseline.train_grid = 5                   # grid misreports per seller per step

  config.optim = ConfigDict()
  config.optim.steps = arg.steps
  config.optim.batch = 64                          # instances per step (vmapped)
  config.optim.lr = 3e-3
  config.optim.clip = 1.0
  config.optim.log_every = 50                      # steps per jitted lax.scan chunk

  config.eval = ConfigDict()
  config.eval.instances = 256                      # for value / violations
  config.eval.regret_instances = 16                # exhaustive misreport search
  config.eval.regret_grid = 21                     # misreports per seller on [0, 1]
  config.eval.milp_time_limit = 1.0                # seconds per optimum MILP
  config.eval.timing = True                        # time inference of every mechanism
  config.eval.classical = True                     # also evaluate Singer / CGL

  config.study = ConfigDict()
  config.study.name = arg.study                    # main
  # Study grid; `ns=5+10` runs a subset (e.g. one process per n on a shared machine).
  unknown = [n for n in arg.ns if n not in _STUDY_PER_N]
  if unknown:
    raise ValueError(f"ns: no study settings for n={unknown}; known: {sorted(_STUDY_PER_N)}")
  config.study.ns = tuple(arg.ns)
  config.study.valuations = ("additive", "submodular")
  config.study.cost_dists = ("uniform", "bimodal")
  config.study.steps = tuple(_STUDY_PER_N[n][0] for n in arg.ns)
  config.study.batch = tuple(_STUDY_PER_N[n][1] for n in arg.ns)
  config.study.eval_instances = tuple(_STUDY_PER_N[n][2] for n in arg.ns)
  config.study.regret_instances = tuple(_STUDY_PER_N[n][3] for n in arg.ns)

  if arg.smoke:
    config.market.n = min(arg.n, 5)
    config.optim.steps = 10
    config.optim.batch = 8
    config.optim.log_every = 5
    config.model.hidden = 8
    config.model.channels = 4
    config.model.monotone = 4
    config.baseline.hidden = 8
    config.eval.instances = 8
    config.eval.regret_instances = 0               # the misreport audit is in the tests
    config.eval.regret_grid = 5
    config.eval.timing = False
    # The smoke run (< 15 s incl. compilation) trains and audits BFMNet only; the
    # baselines have their own tests in tests/test_bfmnet.py.
    config.eval.classical = False
    config.baseline.train = False
    config.study.ns = (4, 5)
    config.study.valuations = ("additive",)
    config.study.cost_dists = ("uniform",)
    config.study.steps = (5, 5)
    config.study.batch = (8, 8)
    config.study.eval_instances = (8, 8)
    config.study.regret_instances = (2, 2)
  return config
