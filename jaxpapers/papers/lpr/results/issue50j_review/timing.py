"""Item 1 timing: the study's run_grid (AE, 400 steps, 5 seeds x {off, on}) on four real
sets of widths 13/9/33/64, old (padded, one program) vs new (one program per set) fit;
each in a fresh process (compile included). Usage: timing.py old|new"""
import sys, time, importlib.util
sys.path.insert(0, "/work/main")
import numpy as np, jax
from configs import lpr as cfg_lib
from jaxpapers.papers.lpr import detectors, experiment
if sys.argv[1] == "old":
  spec = importlib.util.spec_from_file_location("jaxpapers.papers.lpr.detectors", "/tmp/lpr50j/detectors.py")
  old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
  experiment.detectors = detectors = old
config = cfg_lib.get_config("datasets=wine+breastw+ionosphere+optdigits,kinds=ae")
data = experiment.load_datasets(config)
cfg = experiment.detector_config(config, "ae")
t0 = time.perf_counter()
auc, _, _ = experiment.run_grid(cfg, detectors.pad_stack(data), len(data), list(range(5)), [0.0, 2.0])
t1 = time.perf_counter()
auc2, _, _ = experiment.run_grid(cfg, detectors.pad_stack(data), len(data), list(range(5)), [0.0, 2.0])
t2 = time.perf_counter()
print(sys.argv[1], f"first call (compile + run) {t1 - t0:.1f} s, second call {t2 - t1:.1f} s")
print(sys.argv[1], "mean AUROC per set off/on:", np.round(100 * auc.mean(1), 3).tolist())
