"""STGIB: spatio-temporal graph information bottleneck explanations (abstract 13).

A graph-convolutional GRU forecaster (12 steps in, 12 out) whose edge and feature masks
form a stochastic trajectory m_1..m_T, trained under predictive sufficiency (MAE) and the
recursive KL bound to a Markov prior; against the unmasked backbone, historical average,
STID, Graph WaveNet, and the explainers GNNExplainer, GSAT, GIB, an STExplainer-style
decoupled explainer, attention, saliency and integrated gradients, on a road-network
simulator whose causal gates are known.

  # one method (STGIB), 3 seeds vmapped, on the offline simulator:
  python launch/train.py --config=configs/stgib.py --workdir=/tmp/stgib
  # the study (every method, lr grid on validation, 2 generators, 3 seeds):
  flock /tmp/jaxpapers_heavy.lock nice -n 5 python launch/study.py --config=configs/stgib.py --workdir=/tmp/stgib_study
  # real data (forecasting + fidelity; no ground truth for AUROC):
  python launch/train.py --config=configs/stgib.py:source=metr,path=/data/metr-la.h5,adj=/data/adj_mx.pkl --workdir=/tmp/stgib_metr
  python launch/train.py --config=configs/stgib.py:source=pems,path=/data/PEMS04.npz,adj=/data/PEMS04.csv --workdir=/tmp/stgib_pems04
  python launch/train.py --config=configs/stgib.py:source=csv,path=/data/speed.csv,adj=/data/adj.csv --workdir=/tmp/stgib_csv
  # METR-LA sizes (207 sensors, 1515 edges, 34k steps), compiled for 8 devices:
  python launch/plan.py --config=configs/stgib.py:paper --devices=8 --platform=h100
"""
import ml_collections

from jaxpapers.core import config as config_lib

METHODS = ("stgnn", "stgib", "gsat", "decoupled", "attention", "stid", "gib", "gwnet",
           "nograph")
# Smoke: tiny shapes and 1 seed; the smoke study (launch/reproduce.py --smoke) runs every
# method on both generators once (the study-only fields: train_and_evaluate reads neither).
SMOKE = dict(rows=2, cols=3, days=3.0, steps=20, eval_every=10, ckpt_every=10, batch=4,
             hidden=8, seeds=1, test_windows=16, explain_windows=4, val_windows=16,
             gnnexp_steps=5, ig_steps=4, gnnexp_lrs=(0.01,), lrs=(3e-3,), gwnet_lrs=(3e-3,),
             methods=METHODS,
             generators=("markov", "flicker", "switch"), study_seeds=1, gib_mis=(0.1,),
             gib_pps=(0.3,))
# METR-LA: 207 sensors, 34,272 five-minute steps, 1,515 directed edges in DCRNN's graph (the
# plan uses a ring with 7 chords per node, 1,449 edges, as no file is needed to plan);
# DCRNN trains with batch 64 for about 100 epochs of 23,974 windows.
# `setting=coupled` (README, "A setting where the edges matter"): the review's levers,
# chosen by a 1-seed positive control of the backbone: stronger coupling along open edges
# and less own persistence (rho + coupling = 0.95), less node noise, longer travel delays
# (6-10 steps: more of the horizon is carried by values still pending), more incidents,
# no residual shortcut, no DropEdge, twice the simulated days and training steps.
COUPLED = dict(rho=0.1, coupling=0.85, sigma=0.05, delays=(6, 10), incident_rate=0.2,
               residual=False, edge_drop=0.0, days=28.0, steps=2400)
PAPER = dict(plan_nodes=207, plan_edges=1449, plan_steps=34272, hidden=64, batch=64,
             steps=37500, seeds=3)


SETTINGS = dict(default={}, coupled=COUPLED)


def get_config(arg=None):
  defaults = dict(
      smoke=False, paper=False, seed=0, setting="default",
      study="main", source="sim", path="", adj="", rows=3, cols=4, days=14.0, sim_seed=0,
      generator="markov", delays=(3, 6), incident_len=(3, 12), rho=0.3, coupling=0.65,
      sigma=0.15, incident_rate=0.06, kind="stgib", hidden=16,
      temp=1.0, kappa=0.8, beta=1.0, residual=True,
      final_r=0.7, edge_msg=True, edge_drop=0.2, gib_mi=0.1, gib_pp=0.3, gib_inner=50,
      gib_out_relu=False,
      feature_masks=True, recursive=True, steps=1200, batch=16, eval_every=100,
      ckpt_every=300, val_windows=128, lr=1e-2, seeds=3, halt_after=0, test_windows=384,
      explain_windows=48, sparsity=0.2, gnnexp_steps=100, ig_steps=16, gnnexp_lr=0.01,
      gnnexp_lrs=(0.01, 0.03, 0.1, 0.3, 1.0),
      lrs=(3e-3, 1e-2, 3e-2), gwnet_lrs=(1e-3, 3e-3, 1e-2, 3e-2), methods=METHODS,
      generators=("markov", "flicker", "switch"), gib_mis=(0.01, 0.1, 1.0), gib_pps=(0.1, 0.3, 0.6),
      study_seeds=3, ablation=True, all_generators=False, plan_nodes=0, plan_edges=0, plan_steps=0)
  # A named setting replaces some defaults; explicit args (and smoke) still override it.
  setting = config_lib.parse_arg(arg, smoke_args=SMOKE, paper_args=PAPER,
                                 **defaults).setting
  if setting not in SETTINGS:
    raise ValueError(f"config arg 'setting': unknown {setting!r}; known: "
                     f"{', '.join(SETTINGS)}")
  defaults.update(SETTINGS[setting])
  arg = config_lib.parse_arg(arg, smoke_args=SMOKE, paper_args=PAPER, **defaults)
  bad = [m for m in arg.methods if m not in METHODS]
  if bad:
    raise ValueError(f"config arg 'methods': unknown {bad}; known: {', '.join(METHODS)}")
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.stgib.experiment"
  config.seed = arg.seed

  config.data = ml_collections.ConfigDict()
  config.data.source = arg.source  # sim | metr | pems | csv
  config.data.path = arg.path  # the table (h5 / npz / csv)
  config.data.adj = arg.adj  # the graph (DCRNN pickle / from,to,cost CSV / N x N CSV)
  config.data.rows = arg.rows  # simulator road grid
  config.data.cols = arg.cols
  config.data.days = arg.days  # simulated days of 288 five-minute steps
  config.data.sim_seed = arg.sim_seed
  # markov (regime gates) | flicker (iid gates) | switch (per-edge Markov gates, 40-min spells)
  config.data.generator = arg.generator
  config.data.delays = tuple(arg.delays)  # edge travel times, min+max 5-minute steps
  config.data.incident_len = tuple(arg.incident_len)  # incident durations, min+max steps
  # The gated VAR: own persistence rho, coupling along open edges (rho + coupling < 1),
  # node noise sigma, incidents per step over the graph (simulator.simulate).
  config.data.rho = arg.rho
  config.data.coupling = arg.coupling
  config.data.sigma = arg.sigma
  config.data.incident_rate = arg.incident_rate
  config.data.t_in = 12
  config.data.t_out = 12
  config.data.plan_nodes = arg.plan_nodes  # plan only: graph size without the file
  config.data.plan_edges = arg.plan_edges
  config.data.plan_steps = arg.plan_steps

  config.model = ml_collections.ConfigDict()
  config.model.kind = arg.kind
  config.model.hidden = arg.hidden
  config.model.temp = arg.temp  # relaxed-Bernoulli temperature
  config.model.kappa = arg.kappa  # Markov prior persistence (0 = independent steps)
  config.model.beta = arg.beta  # compression weight (GSAT's info_loss_coef is 1)
  config.model.feature_masks = arg.feature_masks
  config.model.edge_msg = arg.edge_msg  # node embeddings + edge-conditioned messages
  config.model.edge_drop = arg.edge_drop  # DropEdge rate in training (fidelity in distribution)
  config.model.recursive = arg.recursive
  config.model.residual = arg.residual  # y = last value + head (False: head alone)
  # Keep rate of the prior Bernoulli(r) after GSAT's schedule (0.9, -0.1 every tenth of
  # training), shared by every masked method (STGIB's Markov prior has marginal r).
  config.model.final_r = arg.final_r
  # GIB's weights (its code's defaults mi_weight 0.1, pp_weight 0.3, inner_loop 50) and
  # whether its discriminator ends in a ReLU (see model.gib_disc).
  config.model.gib_mi = arg.gib_mi
  config.model.gib_pp = arg.gib_pp
  config.model.gib_inner = arg.gib_inner
  config.model.gib_out_relu = arg.gib_out_relu

  config.train = ml_collections.ConfigDict()
  config.train.steps = arg.steps
  config.train.batch = arg.batch
  config.train.eval_every = arg.eval_every  # validation (early stopping) interval
  config.train.ckpt_every = arg.ckpt_every
  config.train.val_windows = arg.val_windows
  config.train.lr = arg.lr  # train.py's step size (the study tunes it over study.lrs)
  config.train.seeds = arg.seeds
  config.train.halt_after = arg.halt_after  # stop after this step's checkpoint (tests)

  config.eval = ml_collections.ConfigDict()
  config.eval.test_windows = arg.test_windows  # evenly spaced over the test split
  config.eval.explain_windows = arg.explain_windows
  config.eval.sparsity = arg.sparsity  # top fraction of (step, edge) entries kept
  config.eval.gnnexp_steps = arg.gnnexp_steps
  # GNNExplainer's Adam step: the study tunes it over study.gnnexp_lrs on validation
  # fidelity (fid+, removing the top 20%); train_and_evaluate and a one-value grid use
  # eval.gnnexp_lr.
  config.eval.gnnexp_lr = arg.gnnexp_lr
  config.eval.ig_steps = arg.ig_steps

  config.study = ml_collections.ConfigDict()
  config.study.name = arg.study
  config.study.lrs = tuple(arg.lrs)
  # Graph WaveNet's own grid: its authors train at 1e-3 (Adam), below the shared grid.
  config.study.gwnet_lrs = tuple(arg.gwnet_lrs)
  config.study.methods = tuple(arg.methods)
  config.study.gnnexp_lrs = tuple(arg.gnnexp_lrs)
  config.study.generators = tuple(arg.generators)
  # flicker / switch run study.FLICKER_METHODS of `methods` unless this is true (then all)
  config.study.all_generators = arg.all_generators
  config.study.seeds = arg.study_seeds
  # GIB's mi_weight x pp_weight grid, tuned on seed 0 before its seeds run (one value each:
  # no tuning, as in the smoke study).
  config.study.gib_mi = tuple(arg.gib_mis)
  config.study.gib_pp = tuple(arg.gib_pps)
  config.study.ablation = arg.ablation  # STGIB with kappa = 0 (markov generator)
  return config_lib.lock(config)
