"""Tests for drift_ident: projection, step rules, regret, drift generators, RLS, C-MAPSS."""
import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jaxpapers.papers.drift_ident import cmapss
from jaxpapers.papers.drift_ident import drift
from jaxpapers.papers.drift_ident import estimators
from jaxpapers.papers.drift_ident import health
from jaxpapers.papers.drift_ident import simulate
from jaxpapers.papers.drift_ident import systems

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(arg="smoke=true"):
  path = os.path.join(ROOT, "configs", "drift_ident.py")
  spec = importlib.util.spec_from_file_location("drift_ident_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_projection_onto_ball():
  c = jnp.array([1.0, -1.0, 0.5])
  inside = c + jnp.array([0.1, 0.2, -0.1])
  np.testing.assert_allclose(estimators.project_ball(inside, c, 1.0), inside, rtol=1e-6)
  rng = np.random.default_rng(0)
  for _ in range(20):
    x = jnp.asarray(rng.normal(size=3) * 5)
    px = estimators.project_ball(x, c, 1.0)
    assert float(jnp.linalg.norm(px - c)) <= 1.0 + 1e-5
    # Variational inequality of the Euclidean projection: <x - Px, y - Px> <= 0.
    y = estimators.project_ball(jnp.asarray(rng.normal(size=3)), c, 1.0)
    assert float(jnp.dot(x - px, y - px)) <= 1e-5


def test_oracle_and_adaptive_step_rules():
  v, t, r, g = 50.0, 10000.0, 1.0, 2.0
  eta = float(estimators.oracle_step(v, t, r, g))
  w = float(estimators.oracle_window(v, t, r))
  # eta* = 2D / (G sqrt(W*)) with W* = (D T / V)^(2/3): the two optimisations agree.
  np.testing.assert_allclose(eta, 2 * r / (g * np.sqrt(w)), rtol=1e-5)
  # Doubling V multiplies the oracle step by 2^(1/3).
  np.testing.assert_allclose(float(estimators.oracle_step(2 * v, t, r, g)) / eta,
                             2 ** (1 / 3), rtol=1e-5)
  # The adaptive rule is the oracle formula with V/T replaced by Vhat_t / t.
  ada = estimators.adaptive_step(jnp.float32(v * 0.3), jnp.float32(t * 0.3), r, g,
                                 1e-4, 10.0)
  np.testing.assert_allclose(float(ada), eta, rtol=1e-5)
  assert float(estimators.adaptive_step(0.0, 10.0, r, g, 1e-3, 0.5)) == pytest.approx(1e-3)
  assert float(estimators.adaptive_step(1e6, 1.0, r, g, 1e-3, 0.5)) == pytest.approx(0.5)
  hp = dict(window_scale=1.0, grad_bound=g, min_window=1.0, max_window=1e9)
  assert int(estimators.block_length(jnp.float32(eta), r, hp)) == int(np.ceil(w - 1e-3))


@pytest.mark.parametrize("kind", drift.KINDS)
def test_generators_hit_target_variation(kind):
  horizon, target = 3000, 17.3
  thetas = drift.path(jax.random.PRNGKey(1), drift.kind_index(kind), target, horizon, 4,
                      jnp.zeros(4), 0.5)
  assert thetas.shape == (horizon, 4)
  np.testing.assert_allclose(float(drift.path_variation(thetas)), target, rtol=2e-3)
  # theta* stays on the drift sphere, inside the projection ball.
  np.testing.assert_allclose(np.linalg.norm(thetas, axis=1), 0.5, rtol=1e-4)
  moves = np.linalg.norm(np.diff(np.asarray(thetas), axis=0), axis=1)
  if kind == "switch":
    k = int(drift.num_switches(target, 0.5, 4))
    assert int(np.sum(moves > 1e-6)) == k
  else:
    assert np.all(moves > 0)


def _small(noise=0.3):
  system = ml_collections.ConfigDict(dict(name="regression", dim=3, radius=0.5,
                                          noise=noise, state_dim=3, input_dim=2))
  steps = ml_collections.ConfigDict(dict(
      radius=1.0, grad_bound=2.0, eta_fixed=0.2, eta_min=1e-4, eta_max=0.5,
      window_scale=4.0, min_window=16, max_window=4096, rls_lambda=0.95, rls_delta=1.0))
  return system, steps


def test_regret_matches_brute_force_reference():
  system, steps = _small()
  horizon, variation = 48, 2.0
  hp = simulate.make_hp(system, steps, variation, horizon, 0.3)
  rng = jax.random.PRNGKey(3)
  out = jax.jit(lambda r: simulate.run(system, horizon, horizon, r, 0, variation, 0.3,
                                       hp))(rng)
  # Rebuild the stream step by step and the fixed-step OGD in plain numpy.
  r_init, r_stream = jax.random.split(rng)
  state = systems.init(r_init, system)
  dparams = drift.make_params(0, variation, horizon, system.radius)
  theta_hat = np.zeros(3)
  # Independent NumPy references of two baselines (issue 16): restarted OGD (Besbes et
  # al. 2015: back to the centre every `restart_len` steps, eta_s = (2D/G)/sqrt(s+1)
  # capped) and the random-walk Kalman filter (predict P + qI, update with gain
  # P Phi^T (Phi P Phi^T + r I)^-1).
  restart_len, q, r_var = int(hp["restart_len"]), float(hp["kalman_q"]), float(hp["kalman_r"])
  th_rs, th_k, p_k = np.zeros(3), np.zeros(3), np.eye(3) * float(hp["kalman_p0"])
  i_rs, i_k = estimators.METHODS.index("restart"), estimators.METHODS.index("kalman")
  regret = pseudo = 0.0
  for t in range(horizon):
    draws = jax.tree.map(lambda a: a[0], systems.draw(jax.random.fold_in(r_stream, t),
                                                      system, 1))
    state, (phi, y, theta, _) = systems.step(state, system, dparams, draws, t, 0.3)
    phi, y, theta = map(np.asarray, (phi, y, theta))
    loss = lambda th: 0.5 * float(np.sum((y - phi @ th) ** 2))  # noqa: E731
    regret += loss(theta_hat) - loss(theta)
    pseudo += 0.5 * float(np.sum((phi @ (theta_hat - theta)) ** 2))
    theta_hat = theta_hat + 0.2 * phi.T @ (y - phi @ theta_hat)
    if np.linalg.norm(theta_hat) > 1.0:
      theta_hat = theta_hat / np.linalg.norm(theta_hat)
    np.testing.assert_allclose(out["theta"][t, 0], theta_hat, rtol=1e-4, atol=1e-5)
    s_t = t % restart_len
    eta_s = min(2.0 * 1.0 / 2.0 / np.sqrt(s_t + 1.0), 0.5)
    th_rs = th_rs + eta_s * phi.T @ (y - phi @ th_rs)
    if np.linalg.norm(th_rs) > 1.0:
      th_rs = th_rs / np.linalg.norm(th_rs)
    if s_t == restart_len - 1:
      th_rs = np.zeros(3)
    p_k = p_k + q * np.eye(3)
    gain = p_k @ phi.T @ np.linalg.inv(phi @ p_k @ phi.T + r_var * np.eye(len(y)))
    th_k = th_k + gain @ (y - phi @ th_k)
    p_k = p_k - gain @ phi @ p_k
    np.testing.assert_allclose(out["theta"][t, i_rs], th_rs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["theta"][t, i_k], th_k, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(out["regret"][t, 0], regret, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["pseudo"][t, 0], pseudo, rtol=1e-4, atol=1e-4)
  # The path variation accumulated inside the scan is the target V_T.
  np.testing.assert_allclose(out["variation"][-1], variation, rtol=1e-3)
  assert np.all(np.isfinite(out["pseudo"])) and out["pseudo"].shape == (horizon, 6)


def test_rls_with_unit_forgetting_is_regularised_least_squares():
  rng = np.random.default_rng(0)
  d, n, delta = 4, 30, 0.5
  phis = rng.normal(size=(n, 2, d)).astype(np.float32)  # vector observations, p = 2
  ys = rng.normal(size=(n, 2)).astype(np.float32)
  theta0 = rng.normal(size=d).astype(np.float32)
  theta, p_mat = jnp.asarray(theta0), jnp.eye(d) / delta
  for t in range(n):
    theta, p_mat = estimators._rls(theta, p_mat, phis[t], ys[t], 1.0)
  a = delta * np.eye(d) + np.einsum("tpi,tpj->ij", phis, phis)
  b = delta * theta0 + np.einsum("tpi,tp->i", phis, ys)
  np.testing.assert_allclose(theta, np.linalg.solve(a, b), rtol=2e-3, atol=2e-4)
  np.testing.assert_allclose(p_mat, np.linalg.inv(a), rtol=2e-3, atol=2e-4)


def test_proxy_tracks_drift_without_noise_and_overestimates_with_noise():
  system, steps = _small(noise=0.0)
  out = simulate.run_batch(system, steps, 4000, 1, [0, 0], [0, 0], [0.5, 0.5],
                           [0.0, 3.0], 1.0)
  v = out["variation"][:, -1]
  vhat = out["vhat"][:, -1] - steps.radius  # Vhat starts at D
  # Noise-free smooth drift: the residual proxy recovers V_T.
  assert 0.6 < vhat[0] / v[0] < 1.4
  # Heavy noise: the proxy's overhead dominates (the failure regime).
  assert vhat[1] / v[1] > 2.0


def _write_synthetic_cmapss(directory, engines=12, degrade=True, seed=0):
  rng = np.random.default_rng(seed)
  rows = []
  for unit in range(1, engines + 1):
    life = int(rng.integers(120, 220))
    gains = rng.normal(size=21)
    const = [0, 4, 9, 15, 17, 18]  # s1, s5, s10, s16, s18, s19: constant on FD001
    gains[const + [5]] = 0.0
    for cycle in range(1, life + 1):
      settings = rng.normal(size=3) * [0.002, 0.0003, 0.0]
      # Wear grows exponentially over the second half of life, as in C-MAPSS.
      wear = np.exp(5.0 * (cycle / life - 1.0)) if degrade else 0.0
      sensors = 500 + 3 * gains * wear + rng.normal(size=21) * 0.3
      sensors[const] = [518.67, 14.62, 1.30, 0.03, 2388, 100.0]
      sensors[5] = 21.61 if rng.uniform() < 0.97 else 21.60  # s6 takes two values on FD001
      rows.append([unit, cycle, *(settings + [0, 0, 100]), *sensors])
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "train_FD001.txt"), "w") as f:
    for r in rows:
      f.write(" ".join(f"{v:.4f}" for v in r) + " \n")
  return len(rows)


def test_cmapss_loader_and_health_indicator(tmp_path):
  n = _write_synthetic_cmapss(str(tmp_path / "deg"))
  data = cmapss.load(str(tmp_path / "deg"), "FD001", "train")
  assert data.shape == (n, 26)
  engines = cmapss.split_engines(data)
  assert len(engines) == 12 and engines[0][3].shape[1] == 21
  assert np.all(np.diff(engines[0][1]) == 1)
  rows, keep = cmapss.health_indicator(engines, 16, 0.05, 10.0, 30, False)
  assert len(keep) == 15  # the 6 constant sensors are dropped (s6 is not constant)
  deg = cmapss.summarise(rows)
  _write_synthetic_cmapss(str(tmp_path / "flat"), degrade=False)
  flat = cmapss.summarise(cmapss.health_indicator(
      cmapss.split_engines(cmapss.load(str(tmp_path / "flat"))), 16, 0.05, 10.0, 30, False)[0])
  assert deg["median_spearman"] > 0.5
  assert abs(flat["median_spearman"]) < 0.4


def test_cmapss_errors_name_path_and_source(tmp_path):
  with pytest.raises(FileNotFoundError, match="train_FD001.txt") as err:
    cmapss.load(str(tmp_path / "nowhere"))
  assert "nowhere" in str(err.value) and "NASA" in str(err.value)
  bad = tmp_path / "bad"
  bad.mkdir()
  (bad / "train_FD001.txt").write_text("1 1 0.1 0.2\n")
  with pytest.raises(ValueError, match="26 columns"):
    cmapss.load(str(bad))


def test_smoke_config_runs_and_logs(tmp_path):
  from jaxpapers.papers.drift_ident import experiment
  config = _config()
  final = experiment.train_and_evaluate(config, str(tmp_path))
  rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  train = [r for r in rows if r["split"] == "train"]
  assert len(train) == config.run.records
  assert all(np.isfinite(r["regret/adaptive"]) for r in train)
  # Cumulative regret curves are recorded in time order.
  assert train[-1]["step"] == config.run.horizon
  assert all(np.isfinite(v) for v in final.values())


def test_unknown_arg_is_named():
  with pytest.raises(ValueError, match="no_such_key"):
    _config("no_such_key=1")


def test_generated_files_have_the_nasa_format_and_sensor_sets(tmp_path):
  d = cmapss.write_synthetic(str(tmp_path), "FD001", train_engines=5, test_engines=4)
  for split in ("train", "test"):
    lines = open(os.path.join(d, f"{split}_FD001.txt")).read().splitlines()
    fields = lines[0].split()
    assert len(fields) == 26 and fields[0] == "1" and fields[1] == "1"
    assert fields[4] == "100.0" and fields[5] == "518.67" and fields[22] == "2388"
    assert len(fields[2].split(".")[1]) == 4 and len(fields[24].split(".")[1]) == 2
  train = cmapss.split_engines(cmapss.load(d, "FD001", "train"))
  test = cmapss.split_engines(cmapss.load(d, "FD001", "test"))
  rul = cmapss.load_rul(d, "FD001")
  assert len(train) == 5 and len(test) == len(rul) == 4 and np.all(rul >= 0)
  # s6 is two-valued (not constant): `auto` drops it with the 6 constant sensors and
  # keeps exactly the usual 14.
  s6 = np.concatenate([e[3][:, 5] for e in train])
  assert len(np.unique(s6)) == 2
  np.testing.assert_array_equal(cmapss.select_sensors(train, "auto"),
                                np.asarray(cmapss.LIT14) - 1)
  with pytest.raises(ValueError, match="sensor set"):
    cmapss.select_sensors(train, "all21")


def test_filter_residuals_match_scalar_numpy_recursions():
  rng = np.random.default_rng(0)
  z = rng.normal(size=(40, 3)).astype(np.float32) + np.linspace(0, 2, 40)[:, None]
  mask = np.ones(40, bool)
  mask[35:] = False  # padded tail: state frozen, residuals still reported
  lam, q = 0.9, 0.01
  out = np.asarray(health.filter_residuals(jnp.asarray(z), jnp.asarray(mask), lam, q))
  # With Phi = I the filters decouple per sensor: scalar recursions.
  th_r, p_r, th_k, p_k = np.zeros(3), np.ones(3), np.zeros(3), np.ones(3)
  for t in range(35):
    want = [np.mean((z[t] - th_r) ** 2), np.mean((z[t] - th_k) ** 2)]
    np.testing.assert_allclose(out[t], want, rtol=1e-4, atol=1e-6)
    k = p_r / (lam + p_r)
    th_r, p_r = th_r + k * (z[t] - th_r), (p_r - k * p_r) / lam
    p_k = p_k + q
    k = p_k / (1.0 + p_k)
    th_k, p_k = th_k + k * (z[t] - th_k), p_k - k * p_k


def test_per_regime_normalisation_recovers_the_trend_on_fd002_format(tmp_path):
  d = cmapss.write_synthetic(str(tmp_path), "FD002", train_engines=12, test_engines=6)
  cfg = _config("smoke").cmapss.copy_and_resolve_references()
  per_regime = health.run(d, "FD002", cfg)
  assert per_regime["regimes"] == 6
  cfg.regimes = 1
  pooled = health.run(d, "FD002", cfg, test=False)
  med = lambda out, m: [r for r in out["train"] if r["indicator"] == m][0]["median_spearman"]  # noqa: E731
  # Six operating conditions shift every sensor: without per-regime normalisation the
  # regime noise swamps the proxy's trend; with it both it and the trivial HI trend up.
  assert med(per_regime, "deviation") > 0.8
  assert med(per_regime, "proxy") > med(pooled, "proxy") + 0.2
  assert set(per_regime["test"]) >= set(health.INDICATORS)


def test_cmapss_task_runs_on_generated_files_and_needs_a_dir(tmp_path):
  from jaxpapers.papers.drift_ident import experiment
  final = experiment.train_and_evaluate(
      _config("smoke,task=cmapss,cmapss_synthetic=true"), str(tmp_path / "ok"))
  rows = json.load(open(tmp_path / "ok" / "cmapss.json"))
  assert [r["indicator"] for r in rows] == list(health.INDICATORS)
  assert final["train/deviation/median_spearman"] > 0.8
  with pytest.raises(FileNotFoundError, match="cmapss_dir"):
    experiment.train_and_evaluate(_config("smoke,task=cmapss"), str(tmp_path / "none"))


def test_runs_spread_over_8_devices_equal_one_device():
  """One study cell (5 runs over seeds x kinds x beta x noise, one per device on 5 of
  the 8 forced devices) gives the 1-device `jit(vmap)` numbers."""
  assert jax.device_count() == 8
  # The proxy test's program (same system, T, records, scale; 8 padded rows), so the
  # spread side reuses its compilation when both run.
  system, steps = _small(noise=0.0)
  args = (jnp.asarray([0, 1, 2, 3, 4], jnp.int32), jnp.asarray([0, 1, 2, 0, 1], jnp.int32),
          jnp.asarray([0.0, 0.5, 0.75, 0.25, 0.5], jnp.float32),
          jnp.asarray([0.3, 0.1, 1.0, 0.3, 0.3], jnp.float32))
  spread = simulate.batch_fn(system, steps, 4000, 1, 1.0)(*args)
  ref = jax.jit(jax.vmap(simulate.one_run(system, steps, 4000, 1, 1.0)))(*args)
  assert len(spread["pseudo"].sharding.device_set) == 5  # spread uses the first n devices
  assert len(ref["pseudo"].sharding.device_set) == 1
  assert spread["pseudo"].shape == (5, 1, len(estimators.METHODS))
  for k in ref:
    np.testing.assert_allclose(np.asarray(spread[k]), np.asarray(ref[k]), rtol=1e-5,
                               atol=1e-6, err_msg=k)
  assert not np.allclose(np.asarray(spread["pseudo"][0]), np.asarray(spread["pseudo"][1]))
