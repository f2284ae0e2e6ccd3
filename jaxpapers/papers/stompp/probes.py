"""StoMPP: two cheap diagnostics of the architecture study's networks (no training result).

  python -m jaxpapers.papers.stompp.probes init [steps]    # step-0 loss / logit scale /
      per-layer gradient norms of ResNet-18 and MobileNetV2 for STE, StoMPP and fp, and
      `steps` training steps of fp (lr 3e-3, 1e-2) and STE (1e-2) on each
  python -m jaxpapers.papers.stompp.probes step_cost resnet50   # s/step of one study row

Both use the study's protocol: Fashion-MNIST from /usr/share/datasets/fashion-mnist (or
$FMNIST), its validation split, width 8 (ResNets) / 16 (MobileNetV2), cifar_s2 stem,
batch 64, the 300-step schedule.
"""
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import config as config_lib
from jaxpapers.data import sources
from jaxpapers.papers.stompp import study_resnet
from jaxpapers.papers.stompp import model as model_lib
from jaxpapers.papers.stompp import train_lib


def _config(arch, **train):
  from configs import stompp as cfgmod
  c = cfgmod.get_config(
      "study=resnet,data_path=" + os.environ.get("FMNIST", "/usr/share/datasets/fashion-mnist")
      + ",resnet_width=8,stem=cifar_s2,batch_size=64,steps=300,resnet_steps=300,chunk=50")
  return config_lib.override(c, {"study.data": "fashion_mnist", "model.name": arch,
                                 "model.width": 16 if arch == "mobilenetv2" else 8,
                                 "binarize.rule": "stompp", **train})


def init_probe(steps=40, archs=("resnet18", "mobilenetv2")):
  base = _config(archs[0])
  (trx, tr_y), _, _ = study_resnet.split_validation(study_resnet.load_fashion_mnist(base), 5000)
  x, y = jnp.asarray(trx[:256]), jnp.asarray(tr_y[:256])
  for arch in archs:
    c = _config(arch)
    model, opt = model_lib.build(c, 10), train_lib.make_optimizer(c)

    @jax.jit
    def probe(st, var):
      prog = train_lib.progress_at(c, model.num_binary, jnp.int32(0), var)
      def lossf(p):
        logits, _ = model.apply({"params": p, "batch_stats": st["batch_stats"],
                                 "ranks": st["ranks"]}, x, prog, train=True,
                                knobs=var["knobs"], mutable=["batch_stats"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits
      (l, lg), g = jax.value_and_grad(lossf, has_aux=True)(st["params"])
      return l, lg.std(0).mean(), train_lib.layer_grad_norms(g, model.num_binary)
    for seed in range(2):
      st = train_lib.init_state(c, model, opt, x.shape[1:], jax.random.PRNGKey(seed))
      for rule in ("ste", "stompp", "fp"):
        l, sd, gn = jax.device_get(probe(st, train_lib.variant(rule, lr=1e-2)))
        print(f"{arch} seed {seed} {rule:6s} step-0 loss (256 images) {l:.3f}  logit std "
              f"{sd:.3f}  layer grad norm first/median/last {gn[0]:.2e}/{np.median(gn):.2e}/"
              f"{gn[-1]:.2e}", flush=True)
    step = jax.jit(lambda st, b, k, t, v: train_lib.train_step(c, model, opt, st, b, k, t, v))
    for rule, lr in (("fp", 3e-3), ("fp", 1e-2), ("ste", 1e-2)) if steps else ():
      var = train_lib.variant(rule, lr=lr)
      st = train_lib.init_state(c, model, opt, x.shape[1:], jax.random.PRNGKey(0))
      losses = []
      for t in range(steps):  # the study's batches of seed 0
        ix = sources.batch_indices(0, t, 64, len(tr_y))
        st, m = step(st, {"image": jnp.asarray(trx[ix]), "label": jnp.asarray(tr_y[ix])},
                     jax.random.fold_in(jax.random.PRNGKey(0), t), jnp.int32(t), var)
        losses.append(float(m["loss"]))
      print(f"{arch} {rule} lr {lr}: training loss per 10 steps "
            f"{[round(float(np.mean(losses[i:i + 10])), 3) for i in range(0, steps, 10)]}",
            flush=True)


def step_cost(arch="resnet50", steps=30, chunk=10):
  """Seconds per step of one study row (the study's compiled chunk program)."""
  c = _config(arch, **{"train.steps": steps, "study.chunk": chunk})
  data = study_resnet.split_validation(study_resnet.load_fashion_mnist(c), 5000)
  t = time.perf_counter()
  b = study_resnet.build_arch(c, arch, c.model.width, [("stompp_fwd", 0.03, 0)], data, 10,
                              evaluate=False, sequential=True)
  print(f"{arch}: compiled in {time.perf_counter() - t:.0f}s, {b['model'].num_binary} binary "
        f"layers, XLA GFLOP/step {(b['flops'] or 0) / 1e9:.2f}", flush=True)
  res = study_resnet.run_arch(b)
  s = res["chunk_s"] / chunk
  print(f"{arch}: {s:.3f} s/step (median chunk of {chunk}); a 300-step row ~{300 * s:.0f}s")


if __name__ == "__main__":
  cmd, *args = sys.argv[1:] or ["init"]
  {"init": lambda *a: init_probe(*map(int, a)),
   "step_cost": lambda *a: step_cost(*a)}[cmd](*args)
