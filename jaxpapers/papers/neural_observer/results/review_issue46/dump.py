# Dump the study's pendulum data (seeds 0-2; val/test) to npz: the only reuse of project code.
import numpy as np, sys
from jaxpapers.core import config as config_lib
from jaxpapers.papers.neural_observer import experiment, train
config = config_lib.load("configs/neural_observer.py")
cfg = experiment.flat(config)
for mode in ['exact', 'mismatch', 'friction']:
  kw = dict(mismatch=0.2) if mode=='mismatch' else dict(friction=0.3) if mode=='friction' else {}
  out = {}
  for s in range(3):
    prob = train.build_problem(cfg, 'pendulum', s, gain_alpha=2.0, **kw)
    for sp in ('val', 'test'):
      for k, v in prob.data[sp].items():
        out[f's{s}_{sp}_{k}'] = np.asarray(v, np.float64)
  out['s_z'] = np.asarray(prob.s_z); out['err_box'] = np.asarray(prob.err_box)
  np.savez(f'/tmp/review_issue46_pend_{mode}.npz', **out)
  print(mode, {k: v.shape for k, v in out.items() if k.startswith('s0_test')}, out['s_z'], out['err_box'])
