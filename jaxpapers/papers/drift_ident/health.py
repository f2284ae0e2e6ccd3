"""Online identification under parameter drift: C-MAPSS health indicators and their scores.

The paper uses the residual proxy of online OGD identification as an unsupervised health
indicator (HI) on C-MAPSS. A trend is only "clear" against baselines, so every engine
gets five HIs on the same normalised sensors (see `cmapss.normalise`), each a value per
block of W cycles:
  proxy:       the residual proxy P_k of `cmapss.residual_proxy` (the paper's method);
  deviation:   block mean of (1/p) sum_j (z_tj - m_j)^2, z the standardised sensors and
               m_j this engine's own early-life mean (first `baseline_cycles`): the
               trivial indicator;
  mahalanobis: block mean of (z_t - mu)^T Sigma^{-1} (z_t - mu), mu and Sigma from the
               pooled healthy baseline of the training engines (the PCA/Hotelling T^2
               health index with every component kept);
  rls:         block mean of ||z_t - theta_{t-1}||^2 / p, the one-step residual of RLS
               level tracking with forgetting lambda (`estimators._rls`, Phi = I_p);
  kalman:      the same with the innovation of a random-walk Kalman filter
               (`estimators._kalman`, process noise q, observation noise 1).
Scores: per training engine, the Spearman correlation of the HI blocks with cycle (the
trend); on the truncated test engines, the Spearman correlation between the HI at the
last observed cycles (last complete block) and minus the true RUL from RUL_FDxxx.txt
(positive = a higher HI flags an engine closer to failure).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxpapers.core import sharding
from jaxpapers.papers.drift_ident import cmapss
from jaxpapers.papers.drift_ident import estimators

INDICATORS = ("proxy", "deviation", "mahalanobis", "rls", "kalman")


def _blocks(per_cycle: np.ndarray, window: int) -> np.ndarray:
  """Means over complete blocks of `window` cycles (the last partial block dropped)."""
  k = len(per_cycle) // window
  return per_cycle[:k * window].reshape(k, window).mean(1)


def filter_residuals(z, mask, lam: float, q: float):
  """Squared one-step residuals per cycle of RLS and Kalman level tracking [n, 2].

  One engine, padded to n cycles (`mask` = real cycle; padded steps keep the state).
  """
  p = z.shape[1]
  eye = jnp.eye(p)

  def step(carry, inputs):
    y, valid = inputs
    (th_r, p_r), (th_k, p_k) = carry
    res = jnp.stack([jnp.sum((y - th_r) ** 2), jnp.sum((y - th_k) ** 2)]) / p
    new = (estimators._rls(th_r, p_r, eye, y, lam),  # pylint: disable=protected-access
           estimators._kalman(th_k, p_k, eye, y, q, 1.0))  # pylint: disable=protected-access
    carry = jax.tree.map(lambda a, b: jnp.where(valid, a, b), new, carry)
    return carry, res

  # Start at the healthy model (z = 0 on the baseline) with unit prior variance.
  init = ((jnp.zeros(p), eye), (jnp.zeros(p), eye))
  _, out = jax.lax.scan(step, init, (z, mask))
  return out


def indicators(engines, base_stats, cfg) -> list[dict]:
  """Per-engine HI blocks for every indicator; `engines` are already normalised."""
  window, base = cfg.window, cfg.baseline_cycles
  mu, cov = base_stats
  prec = np.linalg.pinv(cov)
  settings, sensors, mask = cmapss._pad(engines)  # pylint: disable=protected-access
  # Engines are independent: the padded engine axis is split over the devices.
  proxy_fn = sharding.spread(lambda a, b, c: cmapss.residual_proxy(
      a, b, c, window, cfg.eta, cfg.radius, False))
  proxies = np.asarray(proxy_fn(settings, sensors, mask))
  filt = sharding.spread(lambda z, m: filter_residuals(z, m, cfg.rls_lambda,
                                                      cfg.kalman_q))
  residuals = np.asarray(filt(sensors, mask))
  out = []
  for i, (unit, cycles, _, z) in enumerate(engines):
    n = len(cycles)
    dev = np.mean((z - z[:base].mean(0)) ** 2, axis=1)
    diff = z - mu
    maha = np.einsum("ti,ij,tj->t", diff, prec, diff)
    res = residuals[i, :n]
    p = proxies[i][:n]
    hi = dict(proxy=p[~np.isnan(p)], deviation=_blocks(dev, window),
              mahalanobis=_blocks(maha, window), rls=_blocks(res[:, 0], window),
              kalman=_blocks(res[:, 1], window))
    k = min(len(v) for v in hi.values())
    out.append(dict(unit=unit, cycles=n, block_cycle=cycles[window - 1::window][:k],
                    hi={m: v[:k] for m, v in hi.items()}))
  return out


def baseline_stats(engines, baseline_cycles: int):
  """Mean and covariance of the pooled healthy baseline (normalised sensors)."""
  base = np.concatenate([e[3][:baseline_cycles] for e in engines])
  return base.mean(0), np.cov(base, rowvar=False)


def trend_scores(rows) -> list[dict]:
  """Per indicator: median Spearman(HI, cycle) over engines and fractions > 0, > 0.5."""
  out = []
  for m in INDICATORS:
    rho = np.array([stats.spearmanr(r["block_cycle"], r["hi"][m]).statistic
                    if len(r["hi"][m]) >= 3 else np.nan for r in rows])
    rho = rho[~np.isnan(rho)]
    out.append(dict(indicator=m, engines=len(rho), median_spearman=float(np.median(rho)),
                    frac_positive=float(np.mean(rho > 0)),
                    frac_above_half=float(np.mean(rho > 0.5))))
  return out


def rul_scores(rows, rul) -> dict:
  """Spearman(HI at the last complete block, -RUL) over test engines, per indicator."""
  if len(rows) != len(rul):
    raise ValueError(f"{len(rows)} test engines but {len(rul)} RUL values")
  keep = [i for i, r in enumerate(rows) if len(r["hi"]["proxy"]) >= 1]
  out = {}
  for m in INDICATORS:
    last = np.array([rows[i]["hi"][m][-1] for i in keep])
    out[m] = float(stats.spearmanr(last, -np.asarray(rul)[keep]).statistic)
  out["engines"] = len(keep)
  return out


def run(directory: str, subset: str, cfg, test: bool = True) -> dict:
  """Loads a subset, normalises it, computes every HI and scores them."""
  train = cmapss.split_engines(cmapss.load(directory, subset, "train"))
  n_reg = cfg.regimes if cfg.regimes > 0 else (6 if subset in cmapss.MULTI_CONDITION else 1)
  regimes = cmapss.fit_regimes(train, n_reg)
  sensors = cmapss.select_sensors(train, cfg.sensors, regimes)
  train_z, norm = cmapss.normalise(train, sensors, cfg.baseline_cycles, regimes)
  base = baseline_stats(train_z, cfg.baseline_cycles)
  train_rows = indicators(train_z, base, cfg)
  out = dict(subset=subset, regimes=n_reg, sensors=[f"s{j + 1}" for j in sensors],
             train=trend_scores(train_rows), train_rows=train_rows)
  if test:
    engines = cmapss.split_engines(cmapss.load(directory, subset, "test"))
    test_z, _ = cmapss.normalise(engines, sensors, cfg.baseline_cycles, regimes, norm)
    out["test"] = rul_scores(indicators(test_z, base, cfg), cmapss.load_rul(directory, subset))
  return out
