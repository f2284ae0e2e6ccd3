"""Textbook AE (sklearn MLPRegressor) and textbook PCA reconstruction on the study's split."""
import json, sys, time, warnings
import numpy as np
from sklearn.neural_network import MLPRegressor
from sklearn.decomposition import PCA
from sklearn.metrics import roc_auc_score
from jaxpapers.papers.lpr import datasets as D
warnings.filterwarnings("ignore")
sets = sys.argv[1].split("+")
out = {}
for name in sets:
  t0 = time.time()
  d = D.load(name, seed=0)  # same defaults as configs/lpr.py: seed 0, 0.3, zscore, max_n 4000
  xtr, xte, yte = d.x_train.astype(np.float64), d.x_test.astype(np.float64), d.y_test
  r = {"n_train": len(xtr), "n_test": len(yte), "test_anom": int(yte.sum()), "d": xtr.shape[1]}
  for var in (0.80, 0.90, 0.95):
    p = PCA(n_components=var, svd_solver="full").fit(xtr)
    rec = p.inverse_transform(p.transform(xte))
    r[f"pca_recon_var{int(var*100)}"] = (100 * roc_auc_score(yte, ((xte - rec) ** 2).sum(1)), int(p.n_components_))
  for hid in ((64, 32, 64), (32, 8, 32)):
    aucs = []
    for s in range(5):
      m = MLPRegressor(hidden_layer_sizes=hid, activation="relu", solver="adam", learning_rate_init=1e-3,
                       batch_size=32, max_iter=100, alpha=1e-4, random_state=s).fit(xtr, xtr)
      aucs.append(100 * roc_auc_score(yte, ((xte - m.predict(xte)) ** 2).sum(1)))
    r["skAE_" + "-".join(map(str, hid))] = (float(np.mean(aucs)), float(np.std(aucs)), aucs)
  r["sec"] = time.time() - t0
  out[name] = r
  print(name, json.dumps({k: (v if not isinstance(v, tuple) else v[:2]) for k, v in r.items()}), flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
