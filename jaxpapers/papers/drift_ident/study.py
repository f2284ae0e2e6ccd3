"""Online identification under parameter drift: the regret-vs-T study.

For every horizon T of the grid one vmapped scan runs all estimators on streams with
V_T = scale * T^beta for every (beta, drift kind, noise level, seed). From the final
pseudo-regrets it fits log-log slopes (least squares of log mean regret on log T) and
compares them with the oracle rate's 2/3 + beta/3, compares the adaptive step with the
oracle, fixed step and baselines, and measures the proxy's overhead (sum_k |P_k - S_k|,
and Vhat_T / V_T) to locate the failure regime. Tables and plots go to the workdir.
"""
from __future__ import annotations

import os
import time

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jaxpapers.core import study as study_lib  # noqa: E402
from jaxpapers.papers.drift_ident import cmapss  # noqa: E402
from jaxpapers.papers.drift_ident import estimators  # noqa: E402
from jaxpapers.papers.drift_ident import simulate  # noqa: E402

METHODS = estimators.METHODS


def slope(ts, values):
  return float(np.polyfit(np.log(ts), np.log(values), 1)[0])


def sweep(config, system, horizons, betas, noises, seeds):
  """Runs the grid at every T. Returns (meta arrays, {T: records})."""
  from jaxpapers.papers.drift_ident import experiment
  seed_l, kind_l, beta_l, noise_l = experiment.grid(config, betas, noises, seeds)
  meta = dict(kind=np.asarray(kind_l), beta=np.asarray(beta_l), noise=np.asarray(noise_l))
  res = {}
  for t in horizons:
    t0 = time.perf_counter()
    res[t] = simulate.run_batch(system, config.steps, t, config.run.records, seed_l,
                                kind_l, beta_l, noise_l, config.drift.scale)
    print(f"[study] {system.name} T={t}: {len(seed_l)} runs in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)
  return meta, res


def _mean_final(res, t, sel, key="pseudo"):
  return res[t][key][sel, -1].mean(0)


def slope_rows(config, meta, res, noise):
  horizons = sorted(res)
  rows = []
  kinds = list(config.drift.kinds) + ["pooled"]
  for beta in sorted(set(meta["beta"].tolist())):
    for k, kind in enumerate(kinds):
      sel = (meta["beta"] == beta) & (meta["noise"] == noise)
      if kind != "pooled":
        sel &= meta["kind"] == k
      regret = np.stack([_mean_final(res, t, sel) for t in horizons])  # T x M
      row = dict(beta=beta, drift=kind, predicted=2 / 3 + beta / 3)
      for j, m in enumerate(METHODS):
        row[m] = slope(horizons, regret[:, j])
      # Local slopes over the three largest T, where the O(1/eta) start-up transient
      # (growing only like T^((1-beta)/3)) has faded.
      if len(horizons) > 3:
        for j in (1, 2):
          row[f"{METHODS[j]}@top3"] = slope(horizons[-3:], regret[-3:, j])
      rows.append(row)
  return rows


def compare_rows(config, meta, res, noise):
  t = max(res)
  rows = []
  for beta in sorted(set(meta["beta"].tolist())):
    for k, kind in enumerate(config.drift.kinds):
      sel = (meta["beta"] == beta) & (meta["noise"] == noise) & (meta["kind"] == k)
      regret = _mean_final(res, t, sel)
      v = res[t]["variation"][sel, -1].mean()
      row = dict(beta=beta, drift=kind, V_T=float(v), R_oracle=float(regret[1]))
      for j, m in enumerate(METHODS):
        if m != "oracle":
          row[f"{m}/oracle"] = float(regret[j] / regret[1])
      row["Vhat/V"] = float(res[t]["vhat"][sel, -1].mean() / v)
      row["eta_ad/eta_or"] = float(res[t]["eta"][sel, -1].mean()
                                   / res[t]["eta_oracle"][sel].mean())
      rows.append(row)
  return rows


def failure_rows(meta, res):
  horizons = sorted(res)
  t = max(horizons)
  rows = []
  for beta in sorted(set(meta["beta"].tolist())):
    for noise in sorted(set(meta["noise"].tolist())):
      sel = (meta["beta"] == beta) & (meta["noise"] == noise)
      v = res[t]["variation"][sel, -1].mean()
      over = res[t]["overhead"][sel, -1].mean()
      reg = np.stack([_mean_final(res, s, sel) for s in horizons])
      ratio = reg[-1, 2] / reg[-1, 1]
      rows.append(dict(
          beta=beta, noise=noise, V_T=float(v), **{"overhead/V": float(over / v),
          "Vhat/V": float(res[t]["vhat"][sel, -1].mean() / v),
          "adaptive/oracle": float(ratio),
          "slope_oracle": slope(horizons, reg[:, 1]),
          "slope_adaptive": slope(horizons, reg[:, 2]),
          "regime": "overhead-dominated" if over > v else "matched"}))
  return rows


def plot_regret(meta, res, noise, path, title):
  horizons = np.array(sorted(res))
  betas = sorted(set(meta["beta"].tolist()))
  fig, axes = plt.subplots(1, len(betas), figsize=(4 * len(betas), 3.6), squeeze=False)
  for ax, beta in zip(axes[0], betas):
    sel = (meta["beta"] == beta) & (meta["noise"] == noise)
    reg = np.stack([_mean_final(res, t, sel) for t in horizons])
    for j, m in enumerate(METHODS):
      ax.loglog(horizons, reg[:, j], "o-", ms=3, label=m)
    ref = reg[0, 1] * (horizons / horizons[0]) ** (2 / 3 + beta / 3)
    ax.loglog(horizons, ref, "k--", lw=1, label="slope 2/3+beta/3")
    ax.set_title(f"beta={beta}")
    ax.set_xlabel("T")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks(horizons, [f"{t / 1000:g}k" for t in horizons])
  axes[0][0].set_ylabel("dynamic regret (pseudo)")
  axes[0][-1].legend(fontsize=7)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_steps(meta, res, noise, path):
  t = max(res)
  betas = sorted(set(meta["beta"].tolist()))
  fig, ax = plt.subplots(figsize=(5.5, 3.6))
  for i, beta in enumerate(betas):
    sel = np.where((meta["beta"] == beta) & (meta["noise"] == noise)
                   & (meta["kind"] == 0))[0]
    ts = res[t]["t"][sel[0]]
    ax.semilogy(ts, res[t]["eta"][sel].mean(0), color=f"C{i}", label=f"adaptive b={beta}")
    ax.axhline(res[t]["eta_oracle"][sel].mean(), color=f"C{i}", ls="--", lw=1)
  ax.set_xlabel("t")
  ax.set_ylabel("step size (dashed: oracle)")
  ax.set_title(f"adaptive step vs oracle, smooth drift, T={t}")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_failure(rows, path):
  fig, ax = plt.subplots(figsize=(5, 3.6))
  for r in rows:
    ax.scatter(r["overhead/V"], r["adaptive/oracle"], c="C3" if r["overhead/V"] > 1 else "C0")
    ax.annotate(f"b={r['beta']},s={r['noise']}", (r["overhead/V"], r["adaptive/oracle"]),
                fontsize=6)
  ax.axvline(1.0, color="k", ls=":", lw=1)
  ax.set_xscale("log")
  ax.set_xlabel("proxy overhead / V_T")
  ax.set_ylabel("regret adaptive / oracle")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def run(config, workdir, commit):
  t_start = time.perf_counter()
  os.makedirs(workdir, exist_ok=True)
  st = config.study
  main_noise = config.system.noise
  meta, res = sweep(config, config.system, st.horizons, st.betas, st.noises,
                    config.run.seeds)
  head = f"commit {commit}; regression d={config.system.dim}, noise {main_noise}, " \
         f"{config.run.seeds} seeds x 3 drift kinds, T = {', '.join(map(str, st.horizons))}"
  md = []
  md.append(study_lib.write_table(
      workdir, "slopes", slope_rows(config, meta, res, main_noise),
      header="### Fitted log-log slopes of dynamic regret vs T (" + head + ")"))
  md.append(study_lib.write_table(
      workdir, "compare", compare_rows(config, meta, res, main_noise),
      header=f"### Regret at T={max(st.horizons)} relative to the oracle step "
             f"(noise {main_noise})"))
  frows = failure_rows(meta, res)
  md.append(study_lib.write_table(
      workdir, "failure", frows,
      header="### Proxy overhead and the failure regime (pooled over drift kinds)"))
  plot_regret(meta, res, main_noise, os.path.join(workdir, "regret_vs_T.png"),
              f"regression, noise {main_noise}")
  plot_steps(meta, res, main_noise, os.path.join(workdir, "steps.png"))
  plot_failure(frows, os.path.join(workdir, "failure.png"))

  lds = config.system.copy_and_resolve_references()
  lds.name, lds.radius = "lds", 0.3
  lds_cfg = config.copy_and_resolve_references()
  lds_cfg.steps.radius, lds_cfg.steps.grad_bound = 0.5, 4.0
  lds_cfg.steps.eta_fixed, lds_cfg.steps.eta_max = 0.02, 0.1
  lmeta, lres = sweep(lds_cfg, lds, st.lds_horizons, st.lds_betas, (main_noise,),
                      st.lds_seeds)
  md.append(study_lib.write_table(
      workdir, "lds_slopes", slope_rows(lds_cfg, lmeta, lres, main_noise),
      header=f"### LDS x_(t+1) = A_t x_t + B_t u_t + w_t (n=3, m=2, d=15): slopes, "
             f"T = {', '.join(map(str, st.lds_horizons))}"))
  md.append(study_lib.write_table(
      workdir, "lds_compare", compare_rows(lds_cfg, lmeta, lres, main_noise),
      header=f"### LDS regret at T={max(st.lds_horizons)} relative to the oracle"))
  plot_regret(lmeta, lres, main_noise, os.path.join(workdir, "lds_regret_vs_T.png"),
              "LDS (n=3, m=2)")

  if config.cmapss.dir:
    c = config.cmapss
    engines = cmapss.split_engines(cmapss.load(c.dir, c.subset, "train"))
    rows, keep = cmapss.health_indicator(engines, c.window, c.eta, c.radius,
                                         c.baseline_cycles, c.use_settings)
    summary = cmapss.summarise(rows)
    md.append(study_lib.write_table(
        workdir, "cmapss", [dict(subset=c.subset, sensors=len(keep), **summary)],
        header=f"### C-MAPSS {c.subset}: residual proxy as health indicator "
               "(Spearman with cycle, per engine)"))
  else:
    md.append("### C-MAPSS: not run (no `cmapss_dir` given; see README)\n")
  md.append(f"Study wall time {time.perf_counter() - t_start:.0f}s.\n")
  text = "\n".join(md)
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write(text)
  print(text, flush=True)
  return text
