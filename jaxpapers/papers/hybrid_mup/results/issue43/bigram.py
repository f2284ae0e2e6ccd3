"""Smoothed bigram count model (add-k, k chosen on validation) on the transfer study's
held-out windows (configs/hybrid_mup.py study: T=32, 128 windows, B=8: val = first 64,
test = next 64), scored like the study: next-byte nats summed over the windows' targets
/ (ln 2 x bytes)."""
import math, os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))))
import numpy as np
from jaxpapers.core import config as config_lib
from jaxpapers.data import text as text_lib
from jaxpapers.papers.hybrid_mup import experiment
for T, nwin, B in ((32, 128, 8), (64, 512, 8)):
  c = config_lib.load("configs/hybrid_mup.py")
  data = experiment.load_data(c)
  tr = np.asarray(data.train)
  counts = np.zeros((256, 256))
  np.add.at(counts, (tr[:-1], tr[1:]), 1)
  w = text_lib.eval_windows(data.val, T, nwin)
  n = (len(w) // (2 * B)) * B
  val, test = w[:n], w[n:2 * n]
  def bpb(win, k):
    p = (counts + k) / (counts + k).sum(1, keepdims=True)
    prev, nxt = win[:, :-1], win[:, 1:]
    return -np.log(p[prev, nxt]).sum() / (math.log(2) * nxt.size)
  ks = [1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3]
  vs = [bpb(val, k) for k in ks]
  k = ks[int(np.argmin(vs))]
  print(f"T={T}: test bpb per k: " + ", ".join(f"{kk:g}: {bpb(test, kk):.3f}" for kk in ks))
  print(f"T={T}, {len(val)} val / {len(test)} test windows: add-k bigram, k={k} (grid {ks[0]}..{ks[-1]}, chosen on validation): val {min(vs):.3f}, test {bpb(test, k):.3f} bits per byte; unigram test {(-np.log(((np.bincount(tr, minlength=256) + 1) / (len(tr) + 256))[test[:, 1:]]).sum() / (math.log(2) * test[:, 1:].size)):.3f}")
