# Does MemAE's AUROC on a set depend on which sets share its program? (padding invariance)
import json, numpy as np, sys
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, detectors as Dt, selection as S
kind = sys.argv[1]; groups = [g.split("+") for g in sys.argv[2:]]
sel = {r["dataset"]: r for r in json.load(open("jaxpapers/papers/lpr/results/issue50c_code_selection.json"))}
allsets = sorted({s for g in groups for s in g})
cfg = C.get_config(f"parts=main,kinds={kind},code_select=true,latent=64,datasets={'+'.join(allsets)}")
data = {d.name: d for d in E.load_datasets(cfg)}; seeds = [cfg.seed + i for i in range(cfg.train.seeds)]
for g in groups:
  sub = [data[n] for n in g]; arch = sel[g[0]]["arch"]
  st = Dt.pad_stack(sub, E.visible_labels(kind, sub, cfg), [sel[n]["code"] for n in g])
  auc, _, _ = E.run_grid(S.arch_config(E.detector_config(cfg, kind), arch), st, len(sub), seeds, [0.0, 2.0], -1)
  print(kind, "group", g, {n: np.round(100*np.asarray(auc)[j, :, :].T, 2).tolist() for j, n in enumerate(g)}, flush=True)
