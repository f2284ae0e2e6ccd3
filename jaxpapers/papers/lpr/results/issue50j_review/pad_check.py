import sys, importlib.util, time
import numpy as np
sys.path.insert(0, "/work/main")
from jaxpapers.papers.lpr import datasets as data_lib, detectors, experiment
which = sys.argv[1]
if which == "old":
  spec = importlib.util.spec_from_file_location("jaxpapers.papers.lpr.detectors", "/tmp/lpr50j/detectors.py")
  old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
  experiment.detectors = old; det = old
else:
  det = detectors
rng = np.random.default_rng(0)
def toy(name, n, d):
  x = rng.normal(size=(n, 1)) @ rng.normal(size=(1, d)) + 0.1 * rng.normal(size=(n, d))
  y = np.zeros(n, np.int32); y[:5] = 1; x[:5] = 3.0 * rng.normal(size=(5, d))
  return data_lib.split(name, x, y, 0.5, 0)
for dn, dw in [(4, 11), (5, 19), (9, 33), (13, 40)]:
  narrow, wide = toy("n", 50, dn), toy("w", 90, dw)
  cfg = det.DetectorConfig(kind="ae", hidden=(8,), latent=3, steps=40, batch=16, lr=1e-2)
  a = experiment.run_grid(cfg, det.pad_stack([narrow]), 1, [0, 1], [0, 2], 0)
  b = experiment.run_grid(cfg, det.pad_stack([wide, narrow]), 2, [0, 1], [0, 2], 0)
  print(which, dn, dw, "auroc eq", np.array_equal(a[0][0], b[0][1]), "loss eq", np.array_equal(a[1][0], b[1][1]),
        "max loss diff", float(np.abs(a[1][0]-b[1][1]).max()), "scores eq", np.array_equal(a[2][0], b[2][1][..., :a[2].shape[-1]]))
