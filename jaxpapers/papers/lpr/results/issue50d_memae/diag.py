# Which runs-per-call width makes MemAE's per-set numbers independent of the study's composition?
import json, sys, time, numpy as np
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, detectors as Dt, selection as S
sel = {r["dataset"]: r for r in json.load(open("jaxpapers/papers/lpr/results/issue50c_code_selection.json"))}
group = "optdigits+wbc+breastw+ionosphere+glass+satellite+local".split("+")
cfg = C.get_config(f"parts=main,kinds=memae,code_select=true,latent=64,datasets={'+'.join(group)}")
data = {d.name: d for d in E.load_datasets(cfg)}; seeds = [0, 1, 2, 3, 4]
def run(kind, g):
  sub = [data[n] for n in g]
  st = Dt.pad_stack(sub, E.visible_labels(kind, sub, cfg), [sel[n]["code"] for n in g])
  auc, losses, _ = E.run_grid(S.arch_config(E.detector_config(cfg, kind), "deep"), st, len(sub), seeds, [0.0, 2.0], -1)
  return {n: (auc[j], losses[j]) for j, n in enumerate(g)}
ok = []
for c in [int(a) if a != "none" else None for a in sys.argv[1:]]:
  t = time.time()
  ref = {**run("memae", ["wbc"]), **run("memae", ["optdigits"])}
  res = {"group7": run("memae", group), "wbc+optdigits": run("memae", ["wbc", "optdigits"])}
  good = True
  for gname, r in res.items():
    for n in ("wbc", "optdigits"):
      eq = np.array_equal(ref[n][1], r[n][1])
      good &= eq
      print(f"chunk {c}: {n} alone vs {gname}:", "bit-equal" if eq else f"differ (AUROC max {100*np.abs(ref[n][0]-r[n][0]).max():.2f})", flush=True)
  print(f"chunk {c}: {'OK' if good else 'FAIL'} {time.time()-t:.0f}s", flush=True)
  if good: ok.append(c)
print("OK chunks", ok)
if ok and ok[0] is not None: open("/tmp/lpr/chunk_ok", "w").write(str(ok[0]))
