"""Neural orthonormal bases as paths on the orthogonal group (abstract 6, arXiv 2605.19959).

A basis of L2 on an interval (or the square) is the endpoint of a path U(t) on the
orthogonal group started at the Fourier basis; dU/dt = K_t U with the rank-2r skew-adjoint
integral generator K_t(x, y) = sum_i a_i(x, t) b_i(y, t) - b_i(x, t) a_i(y, t), a, b an MLP
of (x, t), integrated by closed-form low-rank exponentials. Trained to turn Fourier into
the Karhunen-Loeve basis of Brownian motion / bridge / sheet, the Hermite functions of the
harmonic oscillator, or the modes of a simulated anharmonic Schroedinger equation.

  # the learned path on one target (all seeds x learning rates in one program):
  python launch/train.py --config=configs/lie_bases.py:target=bm --workdir=/tmp/lie_bm
  # the study (4 targets x {reference, learned path, Stiefel-Cayley, exact}, 4x finer grid,
  # rank and step sweeps, integrator and reference ablations); table + plots in workdir:
  flock /tmp/jaxpapers_heavy.lock nice -n 5 python launch/study.py \
      --config=configs/lie_bases.py --workdir=/tmp/lie_study
  # your own functional data (npz with x (P,) and f (n, P), or csv: first row = grid):
  python launch/train.py --config=configs/lie_bases.py:target=file,data_path=curves.npz \
      --workdir=/tmp/lie_file

Expected: see jaxpapers/papers/lie_bases/README.md for the measured table and its commit;
a default train run takes about a minute on 2 CPU cores, `:smoke` a few seconds plus
compilation, the study about 20 minutes alone (more on a loaded machine).
"""
import ml_collections

from jaxpapers.core import config as config_lib

# The paper's scale (launch/plan.py, accelerators). The abstract fixes only the rank-2
# generator (r = 1); the rest is ours, at the resolutions of the 1-D neural-operator
# literature: 1,024 Gauss-Legendre nodes on the interval (FNO's Burgers grid, Li et al.
# 2021), 32 tracked basis functions, a 256-wide MLP, 16 integration steps, 1,024 training
# curves; 8 seeds (one per device of an 8-device mesh) x 3 learning rates.
PAPER = dict(n=1024, m=32, rank=1, width=256, int_steps=16, n_train=1024, seeds=8,
             lrs=(0.001, 0.003, 0.01), steps=1500)


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg, smoke_args=dict(seeds=2, steps=20, log_every=10, n=16, rank=2, int_steps=4,
                           width=16, n_train=40, lrs=(0.003,), taus=(0.3,), study_steps=20,
                           chunk=10),
      paper_args=PAPER, smoke=False, paper=False, seed=0, target="bm", reference="fourier", data_path="", seeds=3,
      steps=1500, log_every=250, n=64, m=8, rank=2, int_steps=8, scheme="cayley", width=64,
      n_train=1024, lrs=(0.001, 0.003, 0.01), taus=(0.1, 0.3, 1.0, 3.0),
      study_steps=3000, chunk=500, tol=0.01)
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.lie_bases.experiment"
  config.seed = arg.seed  # base seed: lane i uses seed + i for data and initialization

  config.target = ml_collections.ConfigDict()
  config.target.name = arg.target  # bm | bridge | sheet | oscillator | schrodinger | file
  config.target.reference = arg.reference  # fourier | legendre: where the path starts
  config.target.n = arg.n  # quadrature nodes on the interval
  config.target.n2d = max(arg.n * 3 // 16, 4)  # nodes per axis on the square (12 x 12)
  config.target.fine_factor = 4  # evaluation grid: fine_factor x more nodes per axis
  config.target.m = arg.m  # basis functions tracked on the interval
  config.target.m2d = 7  # on the square (the Brownian sheet has a spectral gap after 7)
  config.target.half_width = 7.0  # oscillator / Schroedinger domain [-L, L]
  config.target.kappa = 0.1  # Schroedinger: anharmonic term kappa x^4
  config.target.n_train = arg.n_train  # pca: training curves per seed
  config.target.n_val = 128  # pca: validation curves (learning-rate selection)
  config.target.n_test = 512  # pca: test curves
  config.target.dt = 0.05  # Schroedinger: time between snapshots (one Crank-Nicolson step)
  config.target.snapshots = 64  # Schroedinger: snapshots per trajectory
  config.target.beta = 0.5  # Schroedinger: thermal initial states e^{-beta H / 2} xi
  config.target.n_traj = 8  # Schroedinger: train / val / test trajectories
  config.target.n_traj_val = 4
  config.target.n_traj_test = 8
  # Schroedinger: lags (snapshots) of the propagator residual; a mixture of modes E1, E2
  # dephases by (E1 - E2) l dt, so one step (0.05) barely penalises it, 32 steps do.
  config.target.lags = (1, 2, 4, 8, 16, 32)
  config.target.data_path = arg.data_path  # target=file: npz (x, f) or csv of curves

  config.model = ml_collections.ConfigDict()
  config.model.rank = arg.rank  # r: generator rank 2r (the paper's universality: r = 1)
  config.model.width = arg.width  # MLP width for a, b
  config.model.depth = 2  # hidden layers
  config.model.features = 6  # Fourier features sin/cos(pi k s), k <= 6, of each coordinate
  config.model.out_scale = 0.5  # last-layer init scale (start near the reference basis)
  config.model.steps = arg.int_steps  # integration steps on [0, 1]
  config.model.scheme = arg.scheme  # cayley | exp (Magnus midpoint): both exactly orthogonal

  config.optim = ml_collections.ConfigDict()
  config.optim.lrs = arg.lrs  # Adam learning rates (lanes), selected on validation
  config.optim.taus = arg.taus  # Stiefel-Cayley steps in units of 1/L (curvature), selected likewise

  config.train = ml_collections.ConfigDict()
  config.train.steps = arg.steps  # optimization steps
  config.train.log_every = arg.log_every  # chunk length: log + checkpoint
  config.train.seeds = arg.seeds  # vmapped seeds (data and initialization)

  config.study = ml_collections.ConfigDict()
  config.study.targets = ("bm", "oscillator", "schrodinger", "sheet")
  config.study.steps = arg.study_steps  # cap on optimization steps of every study run
  config.study.chunk = arg.chunk  # steps between convergence checks
  # Stop once the validation-selected lane's gap to the optimum fell by less than this
  # (relative) over the last chunk; every method gets the same rule and cap.
  config.study.tol = arg.tol
  config.study.sweep_target = "bm"  # the rank sweep runs on this target
  config.study.ranks = (1, 2, 4, 8)  # r of the rank sweep (generator rank 2r = 2 .. 16)
  config.study.radam_lrs = (0.001, 0.003, 0.01, 0.03)  # Riemannian Adam learning rates
  config.study.preconds = ("none", "jacobi", "kinetic")  # LOBPCG preconditioners
  config.study.sheet_features = (6, 2)  # square: MLP Fourier features per axis (cause test)
  config.study.long_steps = (256, 4096)  # orthonormality check over long paths

  known = ("bm", "bridge", "sheet", "oscillator", "schrodinger", "file")
  if arg.target not in known:
    raise ValueError(f"unknown target {arg.target!r}; known: {', '.join(known)}")
  if not 1 <= arg.m <= arg.n:
    raise ValueError(f"m={arg.m} basis functions must be in 1..n={arg.n} nodes")
  if arg.target == "file" and not arg.data_path:
    raise ValueError("target=file needs data_path=<npz or csv of curves>")
  if arg.smoke:
    config.study.targets = ("bm", "oscillator")
    config.study.ranks = (1, 2)
    config.study.radam_lrs = (0.01,)
    config.study.preconds = ("none", "kinetic")
    config.study.sheet_features = (2,)
    config.study.long_steps = (64,)
  return config_lib.lock(config)
