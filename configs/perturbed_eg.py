"""Perturbed S-EG / S-OGDA: last-iterate rates in stochastic constrained minimax (abstract 19).

Regularise a convex-concave f into f + mu/2|x - x0|^2 - mu/2|y - y0|^2 and run stochastic
extragradient (S-EG) or single-call optimistic GDA (S-OGDA) on it, with mu and the step
chosen from the horizon T (mu ~ T^-(1/4-eps), eta ~ T^-(3/4-3eps)); the claim is a
last-iterate gap O(T^(-1/4+eps)), against the prior O~(T^(-1/7)), while vanilla S-EG /
S-OGDA last iterates do not converge under noise.

  # one method on one problem, all horizons x seeds (checkpointed every 128k steps):
  python launch/train.py --config=configs/perturbed_eg.py:method=pseg,problem=game_random --workdir=/tmp/peg
  # the rate study (seg, sogda, pseg, psogda and the two-timescale prior on 6 problems,
  # incl. quadratic_ball (interior saddle) and quadratic_ball_boundary); table with full
  # and tail (T >= 3.2e4) slopes + log-log plot in the workdir:
  python launch/study.py --config=configs/perturbed_eg.py:seeds=10,t_max=512000 --workdir=/tmp/peg_study
  # eps = 0.01 (theory -0.24), and several instances / 50 x 50 / sigma in {0.1, 1, 3}:
  python launch/study.py --config=configs/perturbed_eg.py:seeds=10,t_max=512000,eps=0.01,methods=pseg+psogda --workdir=/tmp/peg_eps
  python launch/study.py --config=configs/perturbed_eg.py:study=breadth,seeds=5,t_max=128000 --workdir=/tmp/peg_breadth
  # iterations/s of the vmapped JAX program vs a plain NumPy loop:
  python launch/benchmark.py --config=configs/perturbed_eg.py:t_max=128000 --workdir=/tmp/peg_bench
  # FLOPs / memory / hours at the paper-scale sizes (README "Scale"), nothing trained:
  python launch/plan.py --config=configs/perturbed_eg.py:paper --devices=8 --platform=h100

Expected (commit 9dd536f, shared 2-core CPU): the rate study with seeds=10,
t_max=512000 takes ~6 min (357 s); perturbed S-EG/S-OGDA full-range slopes -0.18 to
-0.27 (bilinear constrained), -0.23 (interior quadratic), -0.34 (boundary quadratic), all
95% intervals below -1/7; the prior two-timescale method's gap at T = 5.12e5 is 1.7-3.5x
larger; vanilla methods plateau in the tail on the bilinear games and do not converge
unconstrained. The benchmark ~6.6e5 seed-iterations/s (aaa3e67). `:smoke` runs in
seconds plus compilation; smoke values are overridden by explicit args
(`:smoke,t_max=4000`).
"""
import ml_collections

from jaxpapers.core import config as config_lib


def _doubling(t_min: int, t_max: int) -> tuple:
  """t_min * 2^k <= t_max: packs into two lanes of length t_max (see methods.py)."""
  out, t = [], t_min
  while t <= t_max:
    out.append(t)
    t *= 2
  return tuple(out)


_ALL = ("game_random", "game_rps", "bilinear_box", "quadratic_ball",
        "quadratic_ball_boundary", "bilinear_free")
# What `:smoke` changes; every entry is an arg, so `:smoke,t_max=4000` runs to 4000.
_SMOKE = dict(t_max=1000, seeds=4, numpy_steps=500, breadth_dim=10, checkpoint_blocks=2)
# What `:paper` changes (the planner's run; README "Scale"): the abstract gives no sizes, so
# the study's own largest ones: horizons to 1.024e6 (three decades above T = 1e3, what a
# rate slope needs), 20 seeds, and the breadth study's 50 x 50 instance.
_PAPER = dict(t_max=1_024_000, seeds=20, n=50)


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg, smoke_args=_SMOKE, paper_args=_PAPER, smoke=False, paper=False, seed=0,
      study="rates", method="pseg", problem="game_random", seeds=20, t_max=1_024_000,
      eps=0.05, sigma=1.0, n=7,
      instance_seed=0, problems=_ALL, methods=("seg", "sogda", "pseg", "psogda", "dseg"),
      free_methods=("seg", "dseg", "pseg", "sogda", "psogda"), tail_min=32_000,
      numpy_steps=20_000, checkpoint_blocks=1024, breadth_dim=50, breadth_instances=(0, 1, 2),
      breadth_sigmas=(0.1, 1.0, 3.0),
      breadth_problems=("game_random", "bilinear_box", "quadratic_ball"))
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.perturbed_eg.experiment"
  config.seed = arg.seed  # noise streams; the problem instance has its own seed below

  config.problem = ml_collections.ConfigDict()
  # game_random | game_rps | bilinear_box | quadratic_ball (interior saddle) |
  # quadratic_ball_boundary (saddle on the spheres) | bilinear_free
  config.problem.name = arg.problem
  config.problem.n = arg.n  # dimension of x (game_rps needs n == m odd)
  config.problem.m = arg.n  # dimension of y
  config.problem.rank = 2  # rank of P, Q (quadratic_ball*) or of A (bilinear_free)
  config.problem.instance_seed = arg.instance_seed  # draws A, b, c, P, Q

  config.noise = ml_collections.ConfigDict()
  config.noise.sigma = arg.sigma  # std of the Gaussian noise per coordinate and oracle call

  config.method = ml_collections.ConfigDict()
  config.method.name = arg.method  # seg | sogda | pseg | psogda | dseg (see schedules.py)

  config.schedule = ml_collections.ConfigDict()
  config.schedule.eps = arg.eps  # rate T^(-1/4+eps); sets the exponents below if < 0
  config.schedule.eta_exponent = -1.0  # a in eta ~ T^-a; -1: 3/4 - 3 eps
  config.schedule.mu_exponent = -1.0  # b in mu ~ T^-b; -1: 1/4 - eps
  config.schedule.eta0 = 2.0  # eta_T = min(eta0 T^-a, eta_cap) / (L + mu_T)
  config.schedule.eta_cap = 0.5  # largest eta (L + mu): stable for EG and Popov's method
  config.schedule.vanilla_eta_exponent = 0.5  # vanilla eta ~ T^-1/2 (Juditsky et al. 2011)
  config.schedule.mu0 = 1.0  # mu_T = mu0 L T^-b
  config.schedule.t0 = 100.0  # anytime schedule: decays in (1 + t / t0)

  config.run = ml_collections.ConfigDict()
  config.run.block = 125  # steps per noise block; horizons are multiples of it
  config.run.horizons = _doubling(125, arg.t_max)  # T grid (anytime: checkpoints)
  config.run.seeds = arg.seeds  # independent noise streams, vmapped
  # train_and_evaluate checkpoints every this many blocks (1024 x 125 = 128k steps/lane)
  config.run.checkpoint_blocks = arg.checkpoint_blocks

  config.study = ml_collections.ConfigDict()
  # rates: every method on `problems`; breadth: instances x dimension x noise levels
  config.study.name = arg.study
  config.study.problems = tuple(arg.problems)
  config.study.methods = tuple(arg.methods)  # on constrained problems
  config.study.free_methods = tuple(arg.free_methods)  # on bilinear_free
  # Vanilla runs stop at this horizon so that they pack into one extra lane beside the
  # perturbed runs (whose doubling grid fills two lanes exactly); they plateau anyway.
  config.study.vanilla_t_max = arg.t_max // 2
  config.study.tail_min = arg.tail_min  # the tail slope is fitted over T >= tail_min
  config.study.breadth_problems = tuple(arg.breadth_problems)
  config.study.breadth_instances = tuple(arg.breadth_instances)  # instance seeds, n x n
  config.study.breadth_dim = arg.breadth_dim  # one larger instance per family (seed 0)
  config.study.breadth_sigmas = tuple(arg.breadth_sigmas)  # noise levels (seed 0, n x n)

  config.bench = ml_collections.ConfigDict()
  config.bench.numpy_steps = arg.numpy_steps  # iterations of the NumPy reference loop

  if arg.study not in ("rates", "breadth"):
    raise ValueError(f"unknown study {arg.study!r}; known: rates, breadth")
  return config_lib.lock(config)
