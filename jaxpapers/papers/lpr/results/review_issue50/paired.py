# Paired check of "plain AE within noise of PCA reconstruction": the study's AE (per-set
# choice from the committed selection) and PCA recon (own NumPy) on the SAME test rows;
# stratified bootstrap over test rows of [mean over 5 seeds AUROC(AE_s)] - AUROC(PCA).
import json, sys, numpy as np
from sklearn.metrics import roc_auc_score
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, detectors as Dt, selection as S, datasets as DL
sets = sys.argv[1].split("+"); kind = sys.argv[2] if len(sys.argv) > 2 else "ae"
sel = {r["dataset"]: r for r in json.load(open("jaxpapers/papers/lpr/results/issue50c_code_selection.json"))}
cfg = C.get_config(f"parts=main,kinds={kind},code_select=true,latent=64,datasets={'+'.join(sets)}")
data = E.load_datasets(cfg); seeds = [cfg.seed + i for i in range(cfg.train.seeds)]
base = E.detector_config(cfg, kind); rng = np.random.default_rng(0); res = {}
for d in data:
  r = sel[d.name]
  st = Dt.pad_stack([d], E.visible_labels(kind, [d], cfg), [r["code"]])
  out = Dt.fit(S.arch_config(base, r["arch"]), st, [0]*len(seeds), seeds, np.zeros(len(seeds)))
  m = len(d.y_test); sc = np.asarray(out["scores"])[:, :m]; y = d.y_test
  keep = DL.independent_columns(d.x_train); xtr = d.x_train[:, keep].astype(float); xte = d.x_test[:, keep].astype(float)
  mu = xtr.mean(0); vt = np.linalg.svd(xtr - mu, full_matrices=False)[2][:r["pca_k"]].T
  z = xte - mu; pca = ((z - z @ vt @ vt.T) ** 2).sum(1)
  f = lambda idx: np.mean([roc_auc_score(y[idx], s[idx]) for s in sc]) - roc_auc_score(y[idx], pca[idx])
  pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
  boots = np.array([f(np.r_[rng.choice(pos, len(pos)), rng.choice(neg, len(neg))]) for _ in range(1000)])
  allidx = np.arange(m)
  res[d.name] = dict(arch=r["arch"], code=r["code"], k=r["pca_k"], ae=100*np.mean([roc_auc_score(y, s) for s in sc]),
      study_auroc=100*float(np.mean(out["auroc"])), pca=100*roc_auc_score(y, pca), diff=100*f(allidx),
      boot_se=100*boots.std(), ci95=[100*np.percentile(boots, 2.5), 100*np.percentile(boots, 97.5)], n_anom=int(y.sum()))
  print(d.name, kind, {k: (np.round(v, 2).tolist() if not isinstance(v, str) else v) for k, v in res[d.name].items()}, flush=True)
json.dump(res, open(f"/tmp/rev50/paired_{kind}_{'_'.join(sets)}.json", "w"), indent=1)
