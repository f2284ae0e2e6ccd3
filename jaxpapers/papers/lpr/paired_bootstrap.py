"""LPR: paired tests over test rows and seeds on a finished study's scores (issue 50).

  python -m jaxpapers.papers.lpr.paired_bootstrap <study workdir> <config arg> <out.json> [boots]

  python -m jaxpapers.papers.lpr.paired_bootstrap <auroc_per_seed.json> <out.json>

(<config arg>: the study's `configs/lpr.py:` argument, e.g.
`parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64`.) Reads the study's per-run
test scores (`<workdir>/scores/<kind>.npz`, [seeds, {off, on}] x test rows per set,
written by `experiment.compare`) and, for a per-set
choice, `code_selection.json` (PCA's k); recomputes PCA reconstruction on the same
columns. Per set and AE-family detector, with one stratified bootstrap of the test rows
(anomalies and normals resampled separately, the same resamples for every column, so
the differences are paired):

  * LPR gain: mean over seeds of AUROC(with LPR, seed s) - AUROC(without, seed s);
    its s.d. over seeds, the bootstrap s.e. over test rows, and the combined s.e.
    sqrt(boot_se^2 + sd^2 / n_seeds) (test rows and training randomness);
  * AE family minus PCA reconstruction (no LPR): the review's test of issue 50, mean over
    seeds of AUROC(detector, s) - AUROC(PCA), bootstrap s.e. and 95% interval, combined
    s.e. as above;
  * AE family minus the trivial detector (`mean_dist`, squared distance to the training
    mean; "minus_trivial"), the same way.

Each detector's mean over sets comes with the s.e. of that mean from the per-set
combined s.e.s (sets fixed: sqrt(sum se^2) / n_sets) and the number of sets whose
difference is beyond 2 combined s.e. in each direction.
"""
from __future__ import annotations

import json
import sys

import numpy as np
from scipy import stats

from jaxpapers.papers.lpr import classical
from jaxpapers.papers.lpr import datasets as data_lib
from jaxpapers.papers.lpr import detectors
from jaxpapers.papers.lpr import experiment


def auroc_rows(scores: np.ndarray, y: np.ndarray) -> np.ndarray:
  """AUROC of each row of scores [R, M] against labels y [M] (Mann-Whitney, ties halved)."""
  r = stats.rankdata(scores, axis=-1)
  n_pos = int(y.sum())
  n_neg = len(y) - n_pos
  return (r[:, y == 1].sum(-1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _summary(point: float, seed_vals: np.ndarray, boots: np.ndarray) -> dict:
  sd = float(seed_vals.std(ddof=1)) if seed_vals.size > 1 else 0.0
  boot_se = float(boots.std(ddof=1))
  return {"diff": 100 * point, "seed_sd": 100 * sd, "boot_se": 100 * boot_se,
          "se": 100 * float(np.hypot(boot_se, sd / np.sqrt(seed_vals.size))),
          "ci95_test_rows": [100 * float(np.percentile(boots, 2.5)),
                             100 * float(np.percentile(boots, 97.5))]}


def per_set(scores: dict, pca: np.ndarray, y: np.ndarray, kinds, boots: int,
            rng: np.random.Generator, trivial: np.ndarray | None = None) -> dict:
  """scores[kind]: [seeds, 2 (off, on), M]; pca, trivial: [M]; y: [M] -> per-kind
  summaries (the resamples do not depend on `trivial`)."""
  n_seeds = scores[kinds[0]].shape[0]
  refs = [pca[None]] + ([] if trivial is None else [trivial[None]])
  allrows = np.concatenate([scores[k].reshape(-1, len(y)) for k in kinds] + refs)
  ip = 2 * n_seeds * len(kinds)  # PCA's column; the trivial detector's next
  pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
  idx = [np.arange(len(y))] + [
      np.r_[rng.choice(pos, len(pos)), rng.choice(neg, len(neg))] for _ in range(boots)]
  auc = np.stack([auroc_rows(allrows[:, i], y[i]) for i in idx])  # [1 + boots, rows]
  out = {}
  for j, k in enumerate(kinds):
    a = auc[:, 2 * n_seeds * j:2 * n_seeds * (j + 1)].reshape(-1, n_seeds, 2)
    gain = a[..., 1] - a[..., 0]  # [1 + boots, seeds]
    vs_pca = a[..., 0] - auc[:, ip:ip + 1]
    out[k] = {"auroc_off": 100 * float(a[0, :, 0].mean()),
              "auroc_on": 100 * float(a[0, :, 1].mean()),
              "lpr_gain": _summary(gain[0].mean(), gain[0], gain[1:].mean(-1)),
              "minus_pca": _summary(vs_pca[0].mean(), vs_pca[0], vs_pca[1:].mean(-1))}
    if trivial is not None:
      vs = a[..., 0] - auc[:, ip + 1:ip + 2]
      out[k]["minus_trivial"] = _summary(vs[0].mean(), vs[0], vs[1:].mean(-1))
  out["pca_recon"] = 100 * float(auc[0, ip])
  if trivial is not None:
    out["mean_dist"] = 100 * float(auc[0, ip + 1])
    vs = auc[:, ip:ip + 1] - auc[:, ip + 1:ip + 2]  # PCA - trivial (no seeds)
    out["pca_minus_trivial"] = _summary(vs[0].mean(), vs[0], vs[1:].mean(-1))
  out["n_anomalies"] = int(y.sum())
  return out


def _over_sets(rows: dict, kind: str, key: str) -> dict:
  d = np.array([r[kind][key]["diff"] for r in rows.values()])
  se = np.array([r[kind][key]["se"] for r in rows.values()])
  return {"mean": float(d.mean()), "se": float(np.sqrt((se ** 2).sum()) / len(d)),
          "sets_above_2se": int((d > 2 * se).sum()), "sets_below_2se": int((d < -2 * se).sum()),
          "sets": len(d)}


def markdown(res: dict) -> str:
  """Two tables: LPR gain and AE family - PCA per set, `diff +- combined s.e.` with a
  `*` beyond 2 s.e.; the last row the mean over sets (s.e. of that mean)."""
  kinds = list(res["over_sets"])
  out = []
  for key, title in (("lpr_gain", "LPR - no LPR"),
                     ("minus_pca", "AE family (no LPR) - PCA reconstruction"),
                     ("minus_trivial", "AE family (no LPR) - trivial detector (squared "
                                       "distance to the training mean)")):
    if key not in res["over_sets"][kinds[0]]:
      continue
    out += [f"{title}, AUROC points: mean over {res['seeds']} seeds +- combined s.e. "
            f"(test-row bootstrap, {res['boots']} paired resamples, and seed s.d. / "
            "sqrt(seeds)); [95% interval over test rows]; * beyond 2 s.e.", "",
            "| dataset | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for name, r in res["per_set"].items():
      cells = []
      for k in kinds:
        v = r[k][key]
        star = "*" if abs(v["diff"]) > 2 * v["se"] else ""
        lo, hi = v["ci95_test_rows"]
        cells.append(f"{v['diff']:+.2f} +- {v['se']:.2f}{star} [{lo:+.1f}, {hi:+.1f}]")
      out.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for k in kinds:
      o = res["over_sets"][k][key]
      cells.append(f"{o['mean']:+.2f} +- {o['se']:.2f} ({o['sets_above_2se']} above, "
                   f"{o['sets_below_2se']} below)")
    out += ["| **mean over sets** | " + " | ".join(cells) + " |", ""]
  return "\n".join(out)


def seed_paired(per_seed_path: str, out_path: str, kinds=detectors.AE_KINDS) -> dict:
  """Without scores (e.g. a committed `auroc_per_seed.json`): per set and AE-family
  detector, the LPR gain paired by seed, its s.d., s.e. and two-sided paired t-test p
  over seeds; the mean over sets with the s.e. from the per-set s.e.s."""
  with open(per_seed_path) as f:
    auc = json.load(f)["auroc"]
  kinds = [k for k in kinds if k in auc]
  rows = {}
  for n in auc[kinds[0]]:
    rows[n] = {}
    for k in kinds:
      g = np.asarray(auc[k + "+lpr"][n]) - np.asarray(auc[k][n])
      sd = float(g.std(ddof=1))
      p = float(stats.ttest_rel(auc[k + "+lpr"][n], auc[k][n]).pvalue) if sd > 0 else 1.0
      rows[n][k] = {"diff": float(g.mean()), "seed_sd": sd, "se": sd / np.sqrt(g.size),
                    "t_test_p": p}
  over = {}
  for k in kinds:
    d = np.array([r[k]["diff"] for r in rows.values()])
    se = np.array([r[k]["se"] for r in rows.values()])
    over[k] = {"mean": float(d.mean()), "se": float(np.sqrt((se ** 2).sum()) / len(d)),
               "sets_p_below_05": int(sum(r[k]["t_test_p"] < 0.05 for r in rows.values())),
               "sets": len(d)}
  res = {"source": per_seed_path, "per_set": rows, "over_sets": over}
  with open(out_path, "w") as f:
    json.dump(res, f, indent=1)
  for k in kinds:
    print(k, over[k], flush=True)
  return res


def main(workdir: str, config_arg: str, out_path: str, boots: int = 1000) -> dict:
  from configs import lpr as lpr_config
  config = lpr_config.get_config(config_arg)
  kinds = [k for k in config.model.kinds if k in detectors.AE_KINDS]
  data = experiment.load_datasets(config)
  sel = None
  if config.model.code_select:
    with open(f"{workdir}/code_selection.json") as f:
      sel = {r["dataset"]: r for r in json.load(f)}
  npz = {k: np.load(f"{workdir}/scores/{k}.npz") for k in kinds}
  rng = np.random.default_rng(0)
  rows = {}
  for d in data:
    keep = data_lib.independent_columns(d.x_train)
    k = sel[d.name]["pca_k"] if sel else config.classical.pca_k
    pca = classical.score("pca_recon", d.x_train, d.x_test, 0, keep, k,
                          0.0 if sel else config.classical.pca_frac)
    trivial = classical.score("mean_dist", d.x_train, d.x_test, 0, keep)
    rows[d.name] = per_set({kk: npz[kk][d.name] for kk in kinds}, np.asarray(pca),
                           np.asarray(d.y_test).astype(int), kinds, boots, rng,
                           np.asarray(trivial))
    if sel:
      rows[d.name]["arch"], rows[d.name]["code"] = sel[d.name]["arch"], sel[d.name]["code"]
    rows[d.name]["pca_k"] = k
    print(d.name, {kk: (round(rows[d.name][kk]["lpr_gain"]["diff"], 2),
                        round(rows[d.name][kk]["lpr_gain"]["se"], 2)) for kk in kinds},
          flush=True)
  # The saved scores must give the study's own AUROCs (a check that they are its runs).
  with open(f"{workdir}/auroc_per_seed.json") as f:
    study = json.load(f)["auroc"]
  gap = max(abs(rows[n][k][f"auroc_{s}"] - float(np.mean(study[k + t][n])))
            for n in rows for k in kinds for s, t in (("off", ""), ("on", "+lpr")))
  for ref in ("pca_recon", "mean_dist"):
    if ref in study:
      gap = max([gap] + [abs(rows[n][ref] - float(np.mean(study[ref][n]))) for n in rows])
  print(f"largest |AUROC here (saved scores, PCA) - study's AUROC|: {gap:.2e} points", flush=True)
  res = {"workdir": workdir, "config": config_arg, "max_auroc_gap_vs_study": gap, "boots": boots, "seeds": int(npz[kinds[0]][data[0].name].shape[0]),
         "per_set": rows,
         "over_sets": {k: {key: _over_sets(rows, k, key)
                           for key in ("lpr_gain", "minus_pca", "minus_trivial")}
                       for k in kinds}}
  d = np.array([r["pca_minus_trivial"]["diff"] for r in rows.values()])
  se = np.array([r["pca_minus_trivial"]["se"] for r in rows.values()])
  res["pca_minus_trivial_over_sets"] = {
      "mean": float(d.mean()), "se": float(np.sqrt((se ** 2).sum()) / len(d)),
      "sets_above_2se": int((d > 2 * se).sum()), "sets_below_2se": int((d < -2 * se).sum())}
  with open(out_path, "w") as f:
    json.dump(res, f, indent=1)
  md = markdown(res)
  with open(out_path.removesuffix(".json") + ".md", "w") as f:
    f.write(md)
  print(md, flush=True)
  return res


if __name__ == "__main__":
  if sys.argv[1].endswith(".json"):
    seed_paired(sys.argv[1], sys.argv[2])
    sys.exit(0)
  main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:5]))
