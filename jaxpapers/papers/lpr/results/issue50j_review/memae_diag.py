"""Item 4: MemAE(+LPR) on the deep-only clustered pick (deep 64-32, code 29, lr 1e-2,
3200 steps; ninth pass), 5 seeds x {off, on}: loss curve, test AUROC and the attention
after every snapshot. Usage: memae_diag.py out.json"""
import json, sys, time
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, "/work/main")
from configs import lpr as cfg_lib
from jaxpapers.papers.lpr import detectors, experiment
from jaxpapers.papers.lpr import quantize
config = cfg_lib.get_config("datasets=clustered,kinds=memae,latent=64")
(data,) = experiment.load_datasets(config)
cfg = experiment.detector_config(config, "memae")
import dataclasses
cfg = dataclasses.replace(cfg, steps=3200, lr=1e-2)
stacked = detectors.pad_stack([data], code_n=[29], lr=[1e-2])
d1 = jax.tree.map(lambda a: jnp.asarray(a[0]), stacked)
det = detectors.Detector(cfg, d1["x_train"].shape[-1])
SNAPS = [100, 200, 400, 800, 1600, 3200]

@jax.jit
def init(rng, bits):
  return detectors.init_run(det, detectors.run_key(rng, "memae"), bits, d1)

def seg(start, stop):
  @jax.jit
  def f(run_rng, aux, bits, carry):
    step = lambda c, t: detectors.train_step(det, run_rng, aux, bits, d1, c, t)
    return jax.lax.scan(step, carry, jnp.arange(start, stop))
  return f
segs = [seg(a, b) for a, b in zip([0] + SNAPS[:-1], SNAPS)]

@jax.jit
def probe(params, aux, bits):
  p = quantize.apply_lpr(params, bits, cfg.spec)
  cm = det.code_mask(d1["fmask"], d1["code_n"])
  x = d1["x_test"]
  recon, att = det.net.apply(p, x, cm)
  s = det._err(recon, x, d1["fmask"])
  nz = jnp.sum(att > 0, -1)
  used = jnp.zeros(cfg.mem_size).at[jnp.argmax(att, -1)].add(1.0)
  return (s, detectors.auroc(s, d1["y_test"], d1["tmask"]), jnp.mean(nz),
          jnp.mean(nz == 0), jnp.sum(used > 0))

out = []
t0 = time.time()
for seed in (2, 3, 4):
  for bits in (0.0, 2.0):
    run_rng, aux, carry = init(jax.random.key(seed), bits)
    losses, rows = [], []
    for f, stop in zip(segs, SNAPS):
      carry, l = f(run_rng, aux, bits, carry)
      losses.append(np.asarray(l))
      _, a, nz, zero, used = probe(carry[0], aux, bits)
      lw = np.concatenate(losses)
      rows.append({"steps": stop, "auroc": round(100 * float(a), 2),
                   "loss_last50": float(lw[-50:].mean()), "loss_max_seg": float(losses[-1].max()),
                   "att_nonzero_per_row": float(nz), "rows_all_zero_att": float(zero),
                   "memory_items_used": int(used)})
    lw = np.concatenate(losses)
    out.append({"seed": seed, "bits": bits, "snapshots": rows,
                "loss_every_100": [float(lw[i:i + 100].mean()) for i in range(0, len(lw), 100)]})
    print(seed, bits, [(r["steps"], r["auroc"], round(r["loss_last50"], 4), r["att_nonzero_per_row"],
                        r["rows_all_zero_att"], r["memory_items_used"]) for r in rows], flush=True)
print(f"{time.time() - t0:.0f} s")
json.dump(out, open(sys.argv[1], "w"), indent=1)
