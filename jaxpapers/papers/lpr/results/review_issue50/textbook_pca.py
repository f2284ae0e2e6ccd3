# Independent textbook PCA reconstruction-error detector (sklearn), k chosen on a
# stratified 70/30 split of the TRAINING rows by validation AUROC (same kind of rule),
# plus label-free textbook rules (explained variance 90%/95%). Data from the study's raw loader.
import sys, json, numpy as np
from sklearn.decomposition import PCA
from sklearn.preprocessing import StandardScaler
from sklearn.model_selection import train_test_split
from sklearn.metrics import roc_auc_score
from jaxpapers.papers.lpr import datasets as D
def recon_err(xtr, xte, k):
    p = PCA(n_components=k, svd_solver="full").fit(xtr)
    return ((xte - p.inverse_transform(p.transform(xte)))**2).sum(1)
def drop_dependent(xtr):  # textbook: keep columns that raise the rank
    keep=[]; 
    for j in range(xtr.shape[1]):
        if np.linalg.matrix_rank(xtr[:, keep+[j]] - xtr[:, keep+[j]].mean(0)) > len(keep): keep.append(j)
    return np.array(keep)
out={}
for name in sys.argv[1:]:
    x, y = D.raw(name, 0)
    itr, ite = train_test_split(np.arange(len(y)), test_size=0.3, stratify=y, random_state=0)
    sc = StandardScaler().fit(x[itr]); xtr, xte = sc.transform(x[itr]), sc.transform(x[ite])
    keep = drop_dependent(xtr); xtr, xte = xtr[:, keep], xte[:, keep]; d = xtr.shape[1]
    ks = list(range(1, d))  # full grid 1..d-1
    f, v = train_test_split(np.arange(len(itr)), test_size=0.3, stratify=y[itr], random_state=0)
    val = [roc_auc_score(y[itr][v], recon_err(xtr[f], xtr[v], k)) for k in ks]
    test = [roc_auc_score(y[ite], recon_err(xtr, xte, k)) for k in ks]
    kv = ks[int(np.argmax(val))]
    ev = np.cumsum(PCA().fit(xtr).explained_variance_ratio_)
    k90, k95 = int(np.searchsorted(ev, .90)+1), int(np.searchsorted(ev, .95)+1)
    k90, k95 = min(k90, d-1), min(k95, d-1)
    r = dict(d=d, n_test_anom=int(y[ite].sum()), k_val=kv, test_at_kval=100*test[ks.index(kv)],
             k90=k90, test_k90=100*test[ks.index(k90)], k95=k95, test_k95=100*test[ks.index(k95)],
             oracle_k=ks[int(np.argmax(test))], oracle_test=100*max(test),
             norm=100*roc_auc_score(y[ite], (xte**2).sum(1)))
    out[name]=r; print(name, {a: (round(b,1) if isinstance(b,float) else b) for a,b in r.items()}, flush=True)
json.dump(out, open("/tmp/rev50/textbook_pca.json","w"), indent=1)
