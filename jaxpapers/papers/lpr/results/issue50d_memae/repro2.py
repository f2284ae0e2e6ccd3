# MemAE: optdigits's runs alone vs in bigger programs; where do they first differ?
import json, sys, time, numpy as np
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, detectors as Dt, selection as S
kind = sys.argv[1]; groups = [g.split("+") for g in sys.argv[2:]]
sel = {r["dataset"]: r for r in json.load(open("jaxpapers/papers/lpr/results/issue50c_code_selection.json"))}
allsets = sorted({s for g in groups for s in g})
cfg = C.get_config(f"parts=main,kinds={kind},code_select=true,latent=64,datasets={'+'.join(allsets)}")
data = {d.name: d for d in E.load_datasets(cfg)}; seeds = [0, 1, 2, 3, 4]
target = groups[0][0]; ref = None
for g in groups:
  t = time.time()
  sub = [data[n] for n in g]; arch = sel[g[0]]["arch"]
  st = Dt.pad_stack(sub, E.visible_labels(kind, sub, cfg), [sel[n]["code"] for n in g])
  auc, losses, scores = E.run_grid(S.arch_config(E.detector_config(cfg, kind), arch), st, len(sub), seeds, [0.0, 2.0], -1)
  j = g.index(target); l = losses[j]; s = scores[j][..., :len(data[target].y_test)]
  msg = ""
  if ref is not None:
    diff = (l != ref[0])
    first = [int(np.argmax(diff[a, b])) if diff[a, b].any() else -1 for a in range(5) for b in range(2)]
    msg = f"first differing step per run {first}; max |score diff| {np.abs(s - ref[1]).max():.3g}"
  else:
    ref = (l, s)
  print(kind, len(g), "sets", st["x_train"].shape, f"{time.time()-t:.0f}s", np.round(100*auc[j].T, 2).tolist(), msg, flush=True)
