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
from jaxpapers.papers.drift_ident import health  # noqa: E402
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
    out = health.run(c.dir, c.subset, c)
    md.append(study_lib.write_table(
        workdir, "cmapss", [dict(r, test_spearman_hi_vs_minus_rul=out["test"][r["indicator"]])
                            for r in out["train"]],
        header=f"### C-MAPSS {c.subset}: health indicators (Spearman with cycle per "
               "training engine; last-block HI vs -RUL on the test engines)"))
  else:
    md.append("### C-MAPSS: not run in the study (no `cmapss_dir`); the command of its "
              "own is `task=cmapss` (see README)\n")
  md.append(f"Study wall time {time.perf_counter() - t_start:.0f}s.\n")
  text = "\n".join(md)
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write(text)
  print(text, flush=True)
  return text


def large_t_rows(config, meta, res, noise):
  """Adaptive/oracle regret ratio at every T and oracle/adaptive slopes over the top 3 T."""
  horizons = sorted(res)
  top = horizons[-3:]
  rows = []
  o, a = METHODS.index("oracle"), METHODS.index("adaptive")
  for beta in sorted(set(meta["beta"].tolist())):
    for k, kind in enumerate(config.drift.kinds):
      sel = (meta["beta"] == beta) & (meta["noise"] == noise) & (meta["kind"] == k)
      reg = np.stack([_mean_final(res, t, sel) for t in horizons])
      row = dict(beta=beta, drift=kind, predicted=2 / 3 + beta / 3)
      for i, t in enumerate(horizons):
        row[f"ad/or@{t // 1000}k"] = float(reg[i, a] / reg[i, o])
      row["oracle_slope_top3"] = slope(top, reg[-3:, o])
      row["adaptive_slope_top3"] = slope(top, reg[-3:, a])
      row["vhat/v@max"] = float((res[horizons[-1]]["vhat"][sel, -1]
                                 / res[horizons[-1]]["variation"][sel, -1]).mean())
      rows.append(row)
  return rows


def run_large_t(config, workdir, commit):
  """The slope check at large T (study=large_t): one noise level, all betas and kinds."""
  t_start = time.perf_counter()
  os.makedirs(workdir, exist_ok=True)
  st = config.study
  noise = config.system.noise
  meta, res = sweep(config, config.system, st.large_horizons, st.betas, (noise,),
                    st.large_seeds)
  text = study_lib.write_table(
      workdir, "large_t", large_t_rows(config, meta, res, noise),
      header=f"### Large T: adaptive/oracle regret ratio per T, slopes over the top three "
             f"T (commit {commit}; regression d={config.system.dim}, noise {noise}, "
             f"{st.large_seeds} seeds per drift kind, T = "
             f"{', '.join(map(str, st.large_horizons))})")
  plot_regret(meta, res, noise, os.path.join(workdir, "large_t_regret_vs_T.png"),
              f"regression, noise {noise}, up to T={max(st.large_horizons)}")
  text += f"\nStudy wall time {time.perf_counter() - t_start:.0f}s.\n"
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write(text)
  print(text, flush=True)
  return text
