"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660).

BNNs trained from scratch: clipped weights and activations are replaced by hard binary
ones layer by layer from input to output, with stochastic partial masks and soft refresh.

Train (default: binary ResNet-18 layout at width 16, StoMPP STE-free, forward order, 600
steps on scikit-learn's bundled digits; the README's quick start, recorded in
jaxpapers/papers/stompp/quickstart.json by `launch/reproduce.py --quickstart`: 105 s on 2
CPU cores, final test accuracy 0.9359 of the fully binarized network at commit 7190f65):
  python launch/train.py --config=configs/stompp.py --workdir=/tmp/stompp
Variants: --config=configs/stompp.py:model=resnet50,rule=ste,order=reverse,data=fashion_mnist
Smoke (seconds): --config=configs/stompp.py:smoke
Depth study on the binary MLP (rule x order x depth, 3 seeds vmapped, Fashion-MNIST where
installed; 24 cells, about 11 min on one core; at depth 8: STE 0.841, StoMPP forward
0.690, reverse 0.446, StoMPP+STE-on-frozen 0.814 at commit f41f9ad, see the paper README):
  python launch/study.py --config=configs/stompp.py:study=depth --workdir=/tmp/stompp_study
Architecture study, CPU size (what this README reports; binary ResNet-18 / ResNet-34 at
width 8 with a 3x3 stride-2 stem on Fashion-MNIST 28x28, 300 steps of batch 64, lr 3e-3,
3 seeds, rows trained one after another, resumable per row; about 81 s per ResNet-18
row on the loaded 2-core machine, so it runs in parts of <= 12 min: rerun the same
command, or name archs / variants per part; measured at lr 3e-3: ResNet-18 STE 0.764,
StoMPP forward 0.691, reverse 0.451, StoMPP+STE-on-frozen 0.716, full precision 0.834;
ResNet-34 STE 0.736, StoMPP forward 0.624; at the validation-selected lr on ResNet-18
(3e-2): STE 0.809, StoMPP forward 0.767, StoMPP+STE-on-frozen 0.782; on ResNet-34: STE
0.784 (3e-2), StoMPP forward 0.714 (1e-1), and at ResNet-18's rates StoMPP+STE-on-frozen
0.749 (3e-2), full precision 0.804 and StoMPP reverse 0.353 (3e-3); ResNet-34 rows
~140-160 s each; at 1200 steps (ResNet-18, 3 seeds) STE 0.856, StoMPP forward 0.830;
MobileNetV2 x0.5 both binary rules at chance; see the paper README for the commands):
  python launch/study.py --config=configs/stompp.py:study=resnet,data_path=/usr/share/datasets/fashion-mnist,resnet_width=8,stem=cifar_s2,batch_size=64,resnet_steps=300,chunk=50,lrs=0.003,seeds=3,archs=resnet18+resnet34,variants=ste+stompp_fwd+stompp_ste_fwd+fp+stompp_rev --workdir=DIR
Architecture study, accelerator size (ResNet-18 / ResNet-34 width 32, MobileNetV2 x0.5;
6 variants + 2 ablation rows x 2 learning rates x 3 seeds vmapped per architecture;
1500 steps of batch 128; estimated 4-7 min on one H200, never run; IDX files in .fmnist/):
  python launch/study.py --config=configs/stompp.py:study=resnet,data_path=.fmnist --workdir=DIR
Its CPU check at a tiny size (digits, 4 steps; a few minutes, mostly compiling):
  python launch/study.py --config=configs/stompp.py:study=resnet,smoke --workdir=DIR
Plan (the paper's binary ResNet-50 on ImageNet shapes, 8 H100s; compiled, nothing trained):
  python launch/plan.py --config=configs/stompp.py:paper --devices=8 --platform=h100
Benchmark (JAX step vs PyTorch eager when torch is installed):
  python launch/benchmark.py --config=configs/stompp.py:model=mlp --workdir=/tmp/stompp_bench
"""
import ml_collections

from jaxpapers.core import config as config_lib


def get_config(arg=None):
  arg = config_lib.parse_arg(
      arg,
      # The MLP keeps the smoke run to seconds; tests cover the ResNets' shapes.
      # Explicit args win over these (`:smoke,batch_size=4` runs batch 4).
      smoke_args=dict(model="mlp", width=8, depth=2, steps=6, batch_size=16,
                      log_every=2, eval_every=3, checkpoint_every=3, eval_batch_size=64,
                      refresh_every=2, seeds=2, study_steps=20, study_depths=(2,),
                      study_width=16, study_data="digits", archs=("resnet18",),
                      resnet_width=4, mobilenet_width=8, resnet_steps=4, chunk=2,
                      lrs=(3e-3,), val_size=200, opt_level=0),
      # The paper's largest setting, for launch/plan.py (shapes only, nothing trained):
      # binary ResNet-50 at full width (64 base channels) with the 7x7 ImageNet stem on
      # 224x224x3 inputs, 1000 classes, batch 256; 90 epochs of 1,281,167 images at 256
      # (the standard ResNet-50 ImageNet recipe; the abstract gives no schedule) =
      # 450,450 steps. CIFAR-10/100 (32x32x3, 3x3 stem, batch 128, 200 epochs = 78,200
      # steps): `:paper,data=shapes:cifar10,stem=cifar,batch_size=128,steps=78200`.
      paper_args=dict(model="resnet50", width=64, stem="imagenet", data="shapes:imagenet",
                      batch_size=256, steps=450450),
      smoke=False, paper=False, seed=0, study="depth", compute_dtype="float32",
      model="resnet18", depth=4, width=16, first_real=True, last_real=True,
      rule="stompp", order="forward", binary_acts=True,
      refresh_every=50, refresh_frac=0.1, start=0.0, end=0.8, ramp="linear",
      stem="cifar", data="digits", data_path="", normalize=False, crop_pad=0, flip=False,
      steps=600, batch_size=128, lr=3e-3,
      log_every=50, eval_every=200, checkpoint_every=200, eval_batch_size=512,
      seeds=3, study_steps=800, study_depths=(2, 4, 8), study_width=128,
      study_data="auto",
      # resnet study (sized for one GPU; see the docstring for the CPU-sized command)
      archs=("resnet18", "resnet34", "mobilenetv2"), resnet_width=32, mobilenet_width=16,
      resnet_steps=1500, chunk=250, lrs=(1e-3, 3e-3), val_size=5000, variants=("",),
      ablation=("",), opt_level=-1, row_mode="auto", table_only=False)
  c = ml_collections.ConfigDict()
  c.experiment = "jaxpapers.papers.stompp.experiment"
  c.seed = arg.seed
  c.mesh = [("data", -1)]  # data parallel over every device
  c.compute_dtype = arg.compute_dtype  # float32 | bfloat16 (train step; eval stays float32)

  c.model = ml_collections.ConfigDict()
  c.model.name = arg.model  # mlp | cnn | resnet18 | resnet34 | resnet50
  c.model.depth = arg.depth  # binary hidden layers (mlp, cnn); resnets use their layout
  c.model.width = arg.width  # hidden width (mlp) / base channels (cnn, resnet)
  c.model.first_real = arg.first_real  # real-valued stem (XNOR/Bi-Real convention)
  c.model.last_real = arg.last_real  # real-valued classifier
  c.model.stem = arg.stem  # conv stem: cifar (3x3 s1) | imagenet (7x7 s2 + 3x3 max-pool)

  c.binarize = ml_collections.ConfigDict()
  c.binarize.rule = arg.rule  # ste | stompp (STE-free) | stompp_ste | fp
  c.binarize.order = arg.order  # forward | reverse | all
  c.binarize.binary_acts = arg.binary_acts  # False: binary weights, real activations
  c.binarize.start = arg.start  # binarization window start (fraction of training)
  c.binarize.end = arg.end  # every entry committed from here on
  c.binarize.ramp = arg.ramp  # per-layer ramp of the committed fraction: linear | cosine
  c.binarize.refresh_every = arg.refresh_every  # soft refresh period in steps (0: never)
  c.binarize.refresh_frac = arg.refresh_frac  # fraction of entries re-drawn per refresh

  c.data = ml_collections.ConfigDict()
  # digits | fashion_mnist | auto | tfds:cifar10 | ... | shapes:imagenet, shapes:cifar10,
  # shapes:cifar100 (input shape and classes only: launch/plan.py, never training)
  c.data.name = arg.data
  c.data.path = arg.data_path  # IDX directory or TFDS data_dir ('' = default)
  c.data.normalize = arg.normalize  # per-channel standardization (train-split statistics)
  c.data.crop_pad = arg.crop_pad  # random crop after zero-padding by this much (0: off)
  c.data.flip = arg.flip  # random horizontal flip

  c.optim = ml_collections.ConfigDict()
  c.optim.lr = arg.lr  # AdamW peak learning rate
  c.optim.warmup_frac = 0.05
  c.optim.weight_decay = 0.0  # decay would pull latent weights through zero

  c.train = ml_collections.ConfigDict()
  c.train.steps = arg.steps
  c.train.batch_size = arg.batch_size  # global batch, split over processes and devices
  c.train.log_every = arg.log_every
  c.train.eval_every = arg.eval_every
  c.train.checkpoint_every = arg.checkpoint_every
  c.train.keep_checkpoints = 2

  c.eval = ml_collections.ConfigDict()
  c.eval.batch_size = arg.eval_batch_size

  c.study = ml_collections.ConfigDict()
  c.study.name = arg.study  # depth: binary MLP rule x order x depth | resnet: see below
  c.study.seeds = arg.seeds  # vmapped
  c.study.steps = arg.study_steps
  c.study.depths = arg.study_depths  # binary hidden layers of the MLP
  c.study.width = arg.study_width
  c.study.data = arg.study_data  # auto: Fashion-MNIST where installed, else digits
  # resnet study: rules x orders x lrs x seeds vmapped in one program per architecture
  c.study.archs = arg.archs  # resnet18 | resnet34 | resnet50 | mobilenetv2
  c.study.resnet_width = arg.resnet_width  # base channels of the ResNets
  c.study.mobilenet_width = arg.mobilenet_width  # MobileNetV2 stem channels (32 = x1.0)
  c.study.resnet_steps = arg.resnet_steps  # training steps of every network
  c.study.chunk = arg.chunk  # steps per compiled scan (host sync once per chunk)
  c.study.lrs = arg.lrs  # learning-rate grid, selected per variant on validation
  c.study.val_size = arg.val_size  # validation images held out of the training split
  c.study.opt_level = arg.opt_level  # XLA backend optimization level (-1: default)
  c.study.variants = tuple(v for v in arg.variants if v)  # keys, e.g. ste+fp ("": all)
  # ablation rows on the first arch only, e.g. late_window ("": the built-in two when
  # variants is empty, none otherwise)
  c.study.ablation = tuple(v for v in arg.ablation if v)
  # vmap: every row in one vmapped program (accelerators) | sequential: one compiled
  # program trains the rows one after another (CPU: vmapped convs become slow grouped
  # convs) | auto: sequential on a CPU backend
  c.study.row_mode = arg.row_mode
  # True: train nothing, rebuild the table and plot from the workdir's finished rows
  # (rows of every arch in `archs`, whatever lr / seed / variant they were run with)
  c.study.table_only = arg.table_only

  return config_lib.lock(c)
