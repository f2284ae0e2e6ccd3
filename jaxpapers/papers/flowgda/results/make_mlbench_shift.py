"""A real tabular gradual shift from an offline UCI table (issue 44, deliverable 3).

  apt-get download r-cran-mlbench && dpkg-deb -x r-cran-mlbench_*.deb x   # UCI tables as .rda
  pip install rdata                                                       # pure-Python reader
  python jaxpapers/papers/flowgda/results/make_mlbench_shift.py \
      x/usr/lib/R/site-library/mlbench/data/LetterRecognition.rda --order=y.box \
      --domains=8 --out=/tmp/letter_ybox.npz --check

Cover-Type-style (Kumar et al. 2020 sort Cover Type by a real covariate): the table's
rows are sorted by the column `--order`, which is then dropped from the features, and
cut into `--domains` consecutive windows of equal size (`data.ordered_domains`; ties
broken by a seeded permutation). The result is the per-domain npz of `data.load_npz`
(X_k, y_k; plus each window's covariate range), read by the study with
`benchmark=npz,path=FILE` (or `benchmarks=npz,path=FILE` in launch/study.py).
`--classes=A+B+...` keeps those labels only; labels are re-coded 0..C-1 in sorted order.

`--check` (cheap, scikit-learn, before any study is spent on it): a logistic regression
fitted on 400 source rows is scored on every window (does its accuracy fall along the
order?), and a target oracle (the same model on 400 labelled target rows) on 500 other
target rows, beside each window's majority-class rate and the label shift (total
variation between the source's and the target's class frequencies).
`rdata` is imported only here, never by the package or its tests.
"""
import argparse
import os
import sys
import warnings

import numpy as np

from jaxpapers.papers.flowgda import data


def read_table(path, table=None):
  """(features DataFrame, label Series) of an mlbench .rda: the label is the one
  categorical column."""
  import rdata  # noqa: PLC0415 (optional: pip install rdata)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII."
    frames = rdata.read_rda(path)
  name = table or os.path.splitext(os.path.basename(path))[0]
  df = frames[name]
  cats = [c for c in df.columns if str(df[c].dtype) == "category"]
  if len(cats) != 1:
    raise ValueError(f"{path}: expected one categorical (label) column, found {cats}")
  return df.drop(columns=cats), df[cats[0]].astype(str)


def convert(feats, labels, order, n_dom, classes=None, seed=0):
  if order not in feats.columns:
    raise ValueError(f"--order {order!r} is not a column; columns: {list(feats.columns)}")
  keep = np.ones(len(labels), bool) if not classes else labels.isin(classes).to_numpy()
  names, y = np.unique(labels.to_numpy()[keep], return_inverse=True)
  x = feats.drop(columns=[order]).to_numpy(np.float32)[keep]
  out = data.ordered_domains(x, y, feats[order].to_numpy(float)[keep], n_dom, seed)
  out["class_names"] = np.asarray(names, str)  # not object: np.load refuses pickles
  out["feature_names"] = np.asarray([c for c in feats.columns if c != order])
  return out


def check(out, n=400, n_test=500, seed=0):
  from sklearn.linear_model import LogisticRegression  # noqa: PLC0415
  from sklearn.preprocessing import StandardScaler  # noqa: PLC0415
  rng = np.random.default_rng(seed)
  d = sum(k.startswith("X_") for k in out)
  classes = int(max(out[f"y_{k}"].max() for k in range(d))) + 1
  freq = lambda y: np.bincount(y, minlength=classes) / len(y)  # noqa: E731
  i = rng.permutation(len(out["y_0"]))[:n]
  if len(np.unique(out["y_0"][i])) < 2:
    print(f"the source window's {n} sampled rows hold one class "
          f"({np.bincount(out['y_0'], minlength=classes).tolist()} per class in the "
          "window): nothing to check, not a usable source")
    return
  sc = StandardScaler().fit(out["X_0"][i])
  fit = lambda x, y: LogisticRegression(max_iter=1000).fit(sc.transform(x), y)  # noqa: E731
  src = fit(out["X_0"][i], out["y_0"][i])
  t = rng.permutation(len(out["y_" + str(d - 1)]))
  xt, yt = out[f"X_{d - 1}"], out[f"y_{d - 1}"]
  print("window  covariate range   rows  majority  label TV vs source  source-only acc")
  for k in range(d):
    x, y = out[f"X_{k}"], out[f"y_{k}"]
    j = rng.permutation(len(y))[:n_test] if k < d - 1 else t[n:n + n_test]
    tv = 0.5 * np.abs(freq(y) - freq(out["y_0"])).sum()
    print(f"{k:6d}  {out[f'order_lo_{k}']:7.3g} .. {out[f'order_hi_{k}']:<7.3g}  "
          f"{len(y):5d}  {freq(y).max():8.3f}  {tv:18.3f}  "
          f"{src.score(sc.transform(x[j]), y[j]):15.3f}")
  oracle = fit(xt[t[:n]], yt[t[:n]]).score(sc.transform(xt[t[n:n + n_test]]),
                                            yt[t[n:n + n_test]])
  print(f"target oracle (logistic regression on {n} labelled target rows): {oracle:.3f}")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("rda")
  p.add_argument("--table", default=None, help="object name in the .rda (default: file stem)")
  p.add_argument("--order", required=True, help="the column to sort by (then dropped)")
  p.add_argument("--domains", type=int, default=8)
  p.add_argument("--classes", default="", help="keep these labels only: A+B+...")
  p.add_argument("--seed", type=int, default=0, help="tie-break permutation")
  p.add_argument("--out", default="")
  p.add_argument("--check", action="store_true")
  a = p.parse_args(argv)
  feats, labels = read_table(a.rda, a.table)
  out = convert(feats, labels, a.order, a.domains,
                [c for c in a.classes.split("+") if c], a.seed)
  y = np.concatenate([out[f"y_{k}"] for k in range(a.domains)])
  print(f"{len(y)} rows, {out['X_0'].shape[1]} features, {len(out['class_names'])} "
        f"classes, majority rate {np.bincount(y).max() / len(y):.3f}; ordered by "
        f"{a.order!r} into {a.domains} windows of {len(out['y_0'])} rows")
  if a.out:
    np.savez(a.out, **out)
    print(f"wrote {a.out}")
  if a.check:
    check(out)


if __name__ == "__main__":
  sys.exit(main())
