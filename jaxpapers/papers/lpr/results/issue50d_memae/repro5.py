# MemAE shrinkage variants: is a set's result the same alone (10 runs) and in the 7-set deep group (70 runs)?
import json, sys, time, numpy as np, jax, jax.numpy as jnp, flax.linen as nn
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, detectors as Dt, selection as S, models
variant = sys.argv[1]
def shrink(att, l):
  if variant == "gong":
    return nn.relu(att - l) * att / (jnp.abs(att - l) + 1e-12)
  if variant.startswith("eps"):
    return nn.relu(att - l) * att / (jnp.abs(att - l) + float(variant[3:]))
  if variant == "stopgate":
    return att * jax.lax.stop_gradient(nn.relu(att - l) / (jnp.abs(att - l) + 1e-12))
  if variant == "where":
    return jnp.where(att > l, att, 0.0)
  raise ValueError(variant)
def call(self, x, code_mask=None):
  z = self.encoder(x)
  mem = self.memory if code_mask is None else self.memory * code_mask[None, :]
  z = z if code_mask is None else z * code_mask[None, :]
  att = jax.nn.softmax(z @ mem.T, axis=-1)
  att = shrink(att, self.shrink)
  att = att / (jnp.sum(jnp.abs(att), axis=-1, keepdims=True) + 1e-12)
  return self.decoder(att @ mem), att
if variant != "none":
  models.MemAE.__call__ = call
kind = "memae"
sel = {r["dataset"]: r for r in json.load(open("jaxpapers/papers/lpr/results/issue50c_code_selection.json"))}
group = "optdigits+wbc+breastw+ionosphere+glass+satellite+local".split("+")
cfg = C.get_config(f"parts=main,kinds={kind},code_select=true,latent=64,datasets={'+'.join(group)}")
data = {d.name: d for d in E.load_datasets(cfg)}; seeds = [0, 1, 2, 3, 4]
res = {}
for g in (["optdigits"], ["wbc"], group):
  t = time.time(); sub = [data[n] for n in g]
  st = Dt.pad_stack(sub, E.visible_labels(kind, sub, cfg), [sel[n]["code"] for n in g])
  auc, losses, _ = E.run_grid(S.arch_config(E.detector_config(cfg, kind), "deep"), st, len(sub), seeds, [0.0, 2.0], -1)
  for j, n in enumerate(g): res.setdefault(n, []).append((auc[j], losses[j]))
  print(variant, g[0], len(g), f"{time.time()-t:.0f}s", flush=True)
for n in ("optdigits", "wbc"):
  (a1, l1), (a2, l2) = res[n]
  print(variant, n, "alone", np.round(100*a1.mean(0), 2), "group", np.round(100*a2.mean(0), 2),
        "AUROC bit-equal" if np.array_equal(a1, a2) else f"AUROC max diff {100*np.abs(a1-a2).max():.2f}",
        f"loss max rel diff {np.max(np.abs(l1-l2)/np.abs(l1)):.2g}")
