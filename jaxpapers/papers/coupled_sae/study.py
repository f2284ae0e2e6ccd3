"""Multisubject coupled SAE (abstract 1): the study of every headline claim over seeds.

Features are extracted once (cached in the workdir); every seed draws new subjects,
planted atoms and model initializations, trains every method and writes
`seeds/seed<k>.json` (+ `.npz` maps), so a killed study resumes at the next seed. The
table (`coupled_sae.md/.json`), the plot (`coupled_sae.png`, `coupled_sae_maps.png`) and
the top text segments (`top_segments.md`) are written into the workdir. The commit is
stamped when the study starts.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.coupled_sae import analysis
from jaxpapers.papers.coupled_sae import data as data_lib
from jaxpapers.papers.coupled_sae import experiment
from jaxpapers.papers.coupled_sae import methods


def _ms(vals):
  v = np.asarray([x for x in vals if x is not None], np.float64)
  return (float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0) if len(v) else (
      float("nan"), float("nan"))


def _fmt(vals, digits=3):
  m, s = _ms(vals)
  return f"{m:.{digits}f} ± {s:.{digits}f}"


def run(config, workdir: str):
  commit = os.environ.get("JAXPAPERS_COMMIT") or study_lib.git_commit(paths=experiment.PATHS)
  t0 = time.time()
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir, None)
  feats = data_lib.features_for(config, os.path.join(workdir, "cache"))
  t_feat = time.time() - t0
  rows = []
  os.makedirs(os.path.join(workdir, "seeds"), exist_ok=True)
  for seed in config.study.seeds:
    path = os.path.join(workdir, "seeds", f"seed{seed}.json")
    if os.path.exists(path):
      with open(path) as f:
        rows.append(json.load(f))
      continue
    ts = time.time()
    sfeats = data_lib.for_seed(feats, config, seed)  # this seed's stories
    resp = data_lib.responses_for(sfeats, config, seed)
    fit = methods.fit_all(config, sfeats, resp, seed)
    out, arts = experiment.summarize(config, sfeats, resp, fit, seed)
    out["stories"] = {k: [sfeats.stories[i].name for i in v] for k, v in sfeats.split.items()}
    out["seconds"] = time.time() - ts
    out = experiment._jsonable(out)  # pylint: disable=protected-access
    np.savez(os.path.join(workdir, "seeds", f"seed{seed}_maps.npz"),
             **{k: np.asarray(v, np.float32) for k, v in arts["maps"].items()},
             labels=arts["surface"].labels if "surface" in arts else np.zeros(1),
             test_true=(data_lib.stack(resp.sim.codes, sfeats.split["test"])
                        if resp.sim is not None else np.zeros(1)),
             test_coupled=fit["joint"]["test_codes"],
             shape=np.array([config.sim.rows, config.sim.cols]))
    with open(path + ".tmp", "w") as f:
      json.dump(out, f, indent=1)
    os.replace(path + ".tmp", path)
    writer.write(int(seed), {k: v for k, v in out.items() if isinstance(v, (int, float))},
                 split="seed")
    rows.append(out)
  md = write_outputs(config, workdir, rows, commit, time.time() - t0, t_feat)
  print(md)
  return rows


def _claim_rows(rows, sim: bool):
  get = lambda k: [r.get(k) for r in rows]
  table = [
      {"claim": "held-out prediction, % of dense ridge (paper: 88%, 50 atoms, k=5)",
       "metric": "coupled", "value": _fmt(get("pct_dense_coupled"), 1)},
      {"claim": "", "metric": "ablation: coupled codes, maps refit by CV ridge",
       "value": _fmt(get("pct_dense_coupled_refit"), 1)},
      {"claim": "", "metric": "two-stage SAE->ridge", "value": _fmt(get("pct_dense_two_stage"), 1)},
      {"claim": "", "metric": "PCA->ridge (50 PCs)", "value": _fmt(get("pct_dense_pca"), 1)},
      {"claim": "", "metric": "PCA-k->ridge, k on validation (textbook baseline)",
       "value": _fmt(get("pct_dense_pca_tuned"), 1)},
      {"claim": "", "metric": "dense ridge mean r (predictable voxels)",
       "value": _fmt(get("r_dense"))},
  ]
  if sim:
    table += [
        {"claim": "", "metric": "oracle (ridge on planted activations)",
         "value": _fmt(get("pct_dense_oracle"), 1)},
        {"claim": "", "metric": "mean noise ceiling of predictable voxels",
         "value": _fmt(get("ceiling_mean"))},
        {"claim": "interpretability: planted-atom recovery (matched time-course r)",
         "metric": "coupled", "value": _fmt(get("recovery_coupled"))},
        {"claim": "", "metric": "two-stage SAE", "value": _fmt(get("recovery_two_stage"))},
        {"claim": "", "metric": "PCA", "value": _fmt(get("recovery_pca"))},
        {"claim": "", "metric": "direction cosine: coupled / two-stage / PCA",
         "value": " / ".join(_fmt(get(f"recovery_dir_{m}"))
                            for m in ("coupled", "two_stage", "pca"))},
        {"claim": "feature reconstruction (test FVU)", "metric": "coupled / two-stage",
         "value": f"{_fmt(get('recon_fvu_coupled'))} / {_fmt(get('recon_fvu_two_stage'))}"},
        {"claim": "cross-subject map reproducibility (top-10 units, mean pairwise r)",
         "metric": "coupled", "value": _fmt(get("repro_coupled"))},
        {"claim": "", "metric": "ablation: coupled codes, maps refit by CV ridge",
         "value": _fmt(get("repro_coupled_refit"))},
        {"claim": "", "metric": "two-stage SAE->ridge maps", "value": _fmt(get("repro_two_stage"))},
        {"claim": "", "metric": "post hoc PCA of dense ridge weights",
         "value": _fmt(get("repro_posthoc_pca"))},
        {"claim": "", "metric": "planted maps (ceiling)", "value": _fmt(get("repro_truth"))},
        {"claim": "alignment with the Yeo-7-like parcellation (purity - chance)",
         "metric": "coupled", "value": _fmt(get("align_coupled"))},
        {"claim": "", "metric": "ablation: coupled codes, maps refit by CV ridge",
         "value": _fmt(get("align_coupled_refit"))},
        {"claim": "", "metric": "two-stage", "value": _fmt(get("align_two_stage"))},
        {"claim": "", "metric": "post hoc PCA", "value": _fmt(get("align_posthoc_pca"))},
        {"claim": "", "metric": "planted maps", "value": _fmt(get("align_truth"))},
    ]
    if rows and rows[0].get("transfer"):
      for i, t in enumerate(rows[0]["transfer"]):
        table.append({"claim": "transfer to a held-out subject (test r)" if i == 0 else "",
                      "metric": f"{t['n_trs']} TRs: coupled codes / dense ridge",
                      "value": f"{_fmt([r['transfer'][i]['coupled'] for r in rows])} / "
                               f"{_fmt([r['transfer'][i]['dense'] for r in rows])}"})
  if rows and rows[0].get("sae_grid"):
    for i, g in enumerate(rows[0]["sae_grid"]):
      table.append({"claim": "two-stage at each SAE lr (bounds a flipped lr choice)"
                    if i == 0 else "",
                    "metric": f"SAE lr {g['lr']:g}: val FVU / % of dense ridge",
                    "value": f"{_fmt([r['sae_grid'][i]['val_fvu'] for r in rows], 4)} / "
                             f"{_fmt([r['sae_grid'][i]['pct_dense'] for r in rows], 1)}"})
  table.append({"claim": "selected hyper-parameters (validation)",
                "metric": "coupled (lr, beta) / SAE lr / PCA k",
                "value": "; ".join(f"({r['coupled_lr']:g}, {r['coupled_beta']:g}) / "
                                   f"{r['two_stage_lr']:g} / {r.get('pca_k', '-')}"
                                   for r in rows)})
  if rows and rows[0].get("grid"):
    g = rows[0]["grid"]
    table.append({"claim": "", "metric": "grids: coupled lr x beta / SAE lr / PCA k",
                  "value": " x ".join("{" + ", ".join(f"{v:g}" for v in sorted({x[k] for x in g}))
                                      + "}" for k in ("lr", "beta"))
                           + " / {" + ", ".join(f"{x['lr']:g}" for x in rows[0].get("sae_grid", []))
                           + "} / {" + ", ".join(str(x["k"]) for x in rows[0].get("pca_grid", []))
                           + "}"})
  return table


def write_outputs(config, workdir, rows, commit, seconds, t_feat):
  sim = config.data.source == "shakespeare"
  table = _claim_rows(rows, sim)
  header = (f"coupled_sae study: {len(rows)} seeds {tuple(r['seed'] for r in rows)}, "
            f"commit {commit}, {seconds:.0f} s (features {t_feat:.0f} s); "
            f"mean ± std over seeds")
  md = study_lib.write_table(workdir, "coupled_sae", table, ["claim", "metric", "value"],
                             header)
  with open(os.path.join(workdir, "coupled_sae_rows.json"), "w") as f:
    json.dump({"commit": commit, "seconds": seconds, "rows": rows}, f, indent=1)
  with open(os.path.join(workdir, "top_segments.md"), "w") as f:
    f.write(f"# Top text segments of the coupled model's atoms (seed {rows[0]['seed']})\n\n")
    for a, segs in rows[0]["top_segments"].items():
      f.write(f"- atom {a}: " + " | ".join(f"“{s}”" for s in segs) + "\n")
  if sim:
    _plot(workdir, rows)
    _plot_maps(workdir, rows[0]["seed"])
  return md


def _plot(workdir, rows):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(1, 4, figsize=(20, 4.2))
  names = ["coupled", "two_stage", "pca", "oracle"]
  ms = [_ms([r[f"pct_dense_{n}"] for r in rows]) for n in names]
  ax[0].bar(range(len(names)), [m for m, _ in ms], yerr=[s for _, s in ms], capsize=4)
  ax[0].axhline(100, color="k", lw=0.8)
  ax[0].axhline(88, color="r", ls="--", lw=0.8, label="paper: 88%")
  ax[0].set_xticks(range(len(names)), names)
  ax[0].set(ylabel="% of dense ridge (test r)", title="held-out prediction")
  ax[0].legend()
  for r in rows:
    g = r["grid"]
    ax[1].scatter([x["pct_dense"] for x in g], [x["recovery"] for x in g], c="C0", alpha=0.6,
                  label="coupled grid" if r is rows[0] else None)
    ax[1].scatter([r["pct_dense_coupled"]], [r["recovery_coupled"]], c="C0", marker="*",
                  s=160, label="coupled (selected)" if r is rows[0] else None)
    ax[1].scatter([r["pct_dense_two_stage"]], [r["recovery_two_stage"]], c="C1", marker="s",
                  label="two-stage" if r is rows[0] else None)
    ax[1].scatter([r["pct_dense_pca"]], [r["recovery_pca"]], c="C2", marker="^",
                  label="PCA" if r is rows[0] else None)
  ax[1].set(xlabel="% of dense ridge", ylabel="planted-atom recovery",
            title="prediction vs interpretability")
  ax[1].legend(fontsize=8)
  if rows[0].get("transfer"):
    n = [t["n_trs"] for t in rows[0]["transfer"]]
    for key, c in (("coupled", "C0"), ("dense", "C3")):
      m = np.array([[r["transfer"][i][key] for i in range(len(n))] for r in rows])
      ax[2].errorbar(n, m.mean(0), yerr=m.std(0), label=key, color=c, marker="o", capsize=3)
    ax[2].set_xscale("log")
    ax[2].set(xlabel="training TRs of the new subject", ylabel="test r",
              title="transfer to a held-out subject")
    ax[2].legend()
  keys = ["coupled", "two_stage", "posthoc_pca", "truth"]
  x = np.arange(len(keys))
  for j, (what, off) in enumerate((("repro", -0.2), ("align", 0.2))):
    ms = [_ms([r[f"{what}_{k}"] for r in rows]) for k in keys]
    ax[3].bar(x + off, [m for m, _ in ms], 0.4, yerr=[s for _, s in ms], capsize=3,
              label={"repro": "cross-subject reproducibility", "align": "network alignment"}[what])
  ax[3].set_xticks(x, keys)
  ax[3].set(title="cortical maps")
  ax[3].legend(fontsize=8)
  plt.tight_layout()
  fig.savefig(os.path.join(workdir, "coupled_sae.png"), dpi=110)
  plt.close(fig)


def _plot_maps(workdir, seed):
  path = os.path.join(workdir, "seeds", f"seed{seed}_maps.npz")
  if not os.path.exists(path):
    return
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  z = np.load(path)
  rows_, cols_ = z["shape"]
  cc = analysis.cross_corr(z["test_true"], z["test_coupled"])
  _, match = analysis.matched_score(cc)
  n_show = min(3, z["truth"].shape[1])
  fig, ax = plt.subplots(n_show, 5, figsize=(15, 2.2 * n_show), squeeze=False)
  for i in range(n_show):
    a = int(match[i])
    panels = [("networks", z["labels"]), (f"planted {i}, subj 0", z["truth"][0, i]),
              (f"planted {i}, subj 1", z["truth"][1, i]),
              (f"coupled atom {a} (r={cc[i, a]:.2f}), subj 0", z["coupled"][0, a]),
              (f"coupled atom {a}, subj 1", z["coupled"][1, a])]
    for j, (title, m) in enumerate(panels):
      g = np.asarray(m).reshape(2, rows_, cols_)
      img = np.concatenate([g[0], np.full((rows_, 1), np.nan), g[1]], axis=1)
      ax[i, j].imshow(img, cmap="tab10" if j == 0 else "RdBu_r",
                      vmin=None if j == 0 else -np.nanmax(np.abs(img)),
                      vmax=None if j == 0 else np.nanmax(np.abs(img)))
      ax[i, j].set_title(title, fontsize=8)
      ax[i, j].axis("off")
  plt.tight_layout()
  fig.savefig(os.path.join(workdir, "coupled_sae_maps.png"), dpi=100)
  plt.close(fig)
