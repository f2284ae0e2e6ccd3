"""hybrid_mup, issue 43's width sweep analysis (width_sweep.py) on synthetic curves whose
answer is known: the quadratic optimum in log2 LR, the re-selecting seed bootstrap, the
drift and its interval, the transfer gap, the plan, the SP alias at the base width, the
update-to-weight ratio against NumPy. NumPy only (no model is compiled): well under 1 s."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.papers.hybrid_mup import sweep
from jaxpapers.papers.hybrid_mup import width_sweep as ws


def test_fit_optimum_recovers_a_quadratic_vertex_and_flags_edges():
  ks = np.arange(-3, 4)
  k, best, fitted = ws.fit_optimum(ks, 0.1 * (ks - 0.7) ** 2 + 2.0)
  assert fitted and best == 1 and abs(k - 0.7) < 1e-9
  # only the best point and its neighbours within 2 steps are fitted: far points that do
  # not follow the parabola do not move the vertex
  vals = 0.1 * (ks - 0.7) ** 2 + 2.0
  vals[0] = 10.0
  assert abs(ws.fit_optimum(ks, vals)[0] - 0.7) < 1e-9
  # a monotone curve: the best point is the edge, no vertex inside the range
  k, best, fitted = ws.fit_optimum(ks, -ks.astype(float))
  assert (k, best, fitted) == (3.0, 3, False)
  # diverged points (inf) are left out
  vals = 0.1 * (ks + 1.2) ** 2
  vals[-1] = np.inf
  assert abs(ws.fit_optimum(ks, vals)[0] + 1.2) < 1e-9


def _rows(opt_by_width, noise, seeds=3, ks=range(-5, 6), method="mup", seed=0):
  r = np.random.default_rng(seed)
  rows = []
  for w, k0 in opt_by_width.items():
    for s in range(seeds):
      off = r.normal(0, noise, size=2)   # per seed: the optimum and level move a little
      for k in ks:
        v = 0.05 * (k - k0 - off[0]) ** 2 + 3.0 + off[1]
        rows.append({"method": method, "dim": w, "k": k, "lr": ws.lr_of(method, k), "seed": s,
                     "val_bpb": v, "test_bpb": v + 0.01, "diverged": False,
                     "upd": {"mamba_in": [1.0] * len(ws.PHASES)}, "loss_bins": [3.0, 2.5]})
  return rows


def test_drift_estimate_interval_and_detectable_shift_on_known_curves():
  # 12 seeds whose optimum moves N(0, 0.3^2) in k (half-octaves) per seed around the
  # truth; equal curvature, so the seed-mean curve's vertex is the mean of the seeds'
  # vertices: the drift's sampling sd is 0.5 * 0.3 * sqrt(2 / 12) = 0.0612 octaves
  n, noise = 12, 0.3
  rows = _rows({32: 0.3, 64: -0.7, 128: -1.7, 256: 0.3}, noise=noise, seeds=n)
  res = ws.analyse(rows, 32, n_boot=1000)
  t = {r["width"]: r for r in res["table"]}
  assert t[32]["drift_log2"] is None and t[32]["fitted"]
  sd = 0.5 * noise * math.sqrt(2 / n)
  for w, true in ((64, -0.5), (128, -1.0), (256, 0.0)):   # (k0(w) - k0(32)) / 2 octaves
    assert abs(t[w]["drift_log2"] - true) < 3 * sd, (w, t[w]["drift_log2"])
    lo, hi = t[w]["drift_ci95"]
    assert lo < t[w]["drift_log2"] < hi
    # 1.96 x the (corrected) bootstrap sd against 1.96 x the true sd (12 draws: within 2x)
    assert 0.5 < t[w]["detectable_log2"] / (1.96 * sd) < 2.0, t[w]["detectable_log2"]
  assert t[128]["drift_ci95"][1] < 0     # a one-octave drift is detected at this noise
  # the gap on test: the base's best grid point (k = 0) against the width's own best point
  assert t[128]["best_k"] in (-2, -1) and t[128]["transferred_lr"] == ws.lr_of("mup", 0)
  assert t[128]["gap"] > 0 and abs(t[256]["gap"]) < 0.05
  assert t[256]["gap"] == pytest.approx(
      np.mean([r["test_bpb"] for r in rows if r["dim"] == 256 and r["k"] == 0])
      - np.mean([r["test_bpb"] for r in rows if r["dim"] == 256 and r["k"] == t[256]["best_k"]]))


def test_drift_slope_over_three_widths_on_known_curves():
  # the optimum falls 1 grid step (half an octave) per width doubling: slope -0.5; the
  # seeds' optima scatter N(0, 0.3^2) in k, independently per width, so the slope's
  # sampling sd is 0.5 * 0.3 / sqrt(12) / sqrt(sum (x - mean x)^2 = 2) = 0.0306 octaves
  n, noise = 12, 0.3
  exact = ws.analyse(_rows({32: 0.3, 64: -0.7, 128: -1.7}, noise=0.0), 32, n_boot=50)
  assert exact["drift_slopes"][0]["slope"] == pytest.approx(-0.5, abs=1e-9)
  res = ws.analyse(_rows({32: 0.3, 64: -0.7, 128: -1.7}, noise=noise, seeds=n), 32,
                   n_boot=1000)
  (d,) = res["drift_slopes"]
  sd = 0.5 * noise / math.sqrt(n) / math.sqrt(2)
  assert d["method"] == "mup" and d["widths"] == [32, 64, 128]
  assert abs(d["slope"] + 0.5) < 3 * sd and d["slope_ci95"][0] < d["slope"] < d["slope_ci95"][1]
  assert 0.5 < d["detectable"] / (1.96 * sd) < 2.0, d["detectable"]
  # two widths: the slope is the drift over log2 of the width ratio
  two = ws.analyse(_rows({32: 0.3, 128: -1.7}, noise=noise), 32, n_boot=200)
  t = {r["width"]: r for r in two["table"]}
  assert two["drift_slopes"][0]["slope"] == pytest.approx(t[128]["drift_log2"] / 2)


def test_bootstrap_reselects_the_grid_point_per_resample():
  # seed 0's curve is best at k = -2, seeds 1 and 2 at k = +2 (no parabola through both):
  # resamples drawing seed 0 mostly pick k near -2, the others near +2, so the bootstrap
  # spread covers both while the seed-mean's estimate sits at +2
  ks = list(range(-4, 5))
  rows = []
  for s, k0 in ((0, -2.0), (1, 2.0), (2, 2.0)):
    for k in ks:
      v = 0.05 * (k - k0) ** 2 + (2.0 if s else 2.3)
      rows.append({"method": "mup", "dim": 32, "k": k, "seed": s, "val_bpb": v,
                   "test_bpb": v, "diverged": False})
  boots = ws.bootstrap_optima(ws._curves(rows, "mup"), n_boot=500)[32]
  assert boots.min() < -1.0 and boots.max() > 1.5


def test_plan_alias_and_update_ratios():
  assert ws.parse_plan(("mup:32:-1:1", "sp:64:0:0", "mup:32:1:2")) == [
      ("mup", 32, -1), ("mup", 32, 0), ("mup", 32, 1), ("sp", 64, 0), ("mup", 32, 2)]
  with pytest.raises(ValueError, match="bad width.plan entry"):
    ws.parse_plan(("adam:32:0:1",))
  assert math.isclose(ws.lr_of("mup", -2), 5e-3) and math.isclose(ws.lr_of("mup_sgd", 2), 2.0)
  rows = _rows({32: 0.0, 64: 0.0}, noise=0.1)
  out = ws.alias_sp_base(rows, 32)
  sp = [r for r in out if r["method"] == "sp"]
  assert len(sp) == 33 and len(out) == len(rows) + 33 and {r["dim"] for r in sp} == {32} and all(r["alias_of"] == "mup" for r in sp)
  # ||dW||_F / ||W||_F per group against NumPy
  r = np.random.default_rng(0)
  old = {"a": r.normal(size=(3, 4)), "b": r.normal(size=5), "c": r.normal(size=2)}
  new = {k: v + r.normal(size=v.shape) * 0.1 for k, v in old.items()}
  got = sweep.update_ratios(jax_tree(new), jax_tree(old), {"ab": ["['a']", "['b']"], "c": ["['c']"]})
  want_ab = math.sqrt((np.sum((new["a"] - old["a"]) ** 2) + np.sum((new["b"] - old["b"]) ** 2))
                      / (np.sum(old["a"] ** 2) + np.sum(old["b"] ** 2)))
  assert math.isclose(float(got["upd/ab"]), want_ab, rel_tol=1e-5)
  assert math.isclose(float(got["upd/c"]),
                      np.linalg.norm(new["c"] - old["c"]) / np.linalg.norm(old["c"]), rel_tol=1e-5)


def test_spectral_update_ratio_against_numpy():
  """'spec/<group>' = the mean over the group's matrices of ||dW||_2 / ||W||_2 (largest
  singular values, NumPy's SVD), a leaf's leading repeat axis giving one matrix per slice;
  off unless asked (the sweep's default stats are unchanged)."""
  r = np.random.default_rng(1)
  old = {"a": r.normal(size=(2, 5, 3)), "b": r.normal(size=(4, 6))}
  # a rank-1 update on b: its spectral ratio is its Frobenius ratio times ||W||_F / ||W||_2
  new = {"a": old["a"] + 0.1 * r.normal(size=(2, 5, 3)),
         "b": old["b"] + 0.05 * np.outer(r.normal(size=4), r.normal(size=6))}
  groups = {"ab": ["['a']", "['b']"], "b": ["['b']"]}
  assert not any(k.startswith("spec/") for k in sweep.update_ratios(
      jax_tree(new), jax_tree(old), groups))
  got = sweep.update_ratios(jax_tree(new), jax_tree(old), groups, spectral=True)
  s2 = lambda m: np.linalg.svd(m, compute_uv=False)[0]
  per = [s2(new["a"][i] - old["a"][i]) / s2(old["a"][i]) for i in range(2)]
  per.append(s2(new["b"] - old["b"]) / s2(old["b"]))
  assert math.isclose(float(got["spec/ab"]), np.mean(per), rel_tol=1e-5)
  assert math.isclose(float(got["spec/b"]), per[-1], rel_tol=1e-5)
  fro = np.linalg.norm(new["b"] - old["b"]) / np.linalg.norm(old["b"])
  assert math.isclose(per[-1], fro * np.linalg.norm(old["b"]) / s2(old["b"]), rel_tol=1e-9)


def jax_tree(d):
  return {k: jnp.asarray(v, jnp.float32) for k, v in d.items()}


def test_committed_width_summary_is_rebuilt_from_its_rows():
  import json, os  # pylint: disable=g-import-not-at-top,multiple-imports
  d = os.path.join(os.path.dirname(__file__), "..", "jaxpapers", "papers", "hybrid_mup",
                   "results", "width")
  with open(os.path.join(d, "width_rows.json")) as f:
    saved = json.load(f)
  with open(os.path.join(d, "width_summary.json")) as f:
    summary = json.load(f)
  res = ws.analyse(ws.alias_sp_base(saved["rows"], 32), 32, sched=saved["sched"])
  assert len(res["table"]) == len(summary)
  # claim 3's ablations are in the committed rows (widths 32, 64 and 128, >= 7 LRs each,
  # the best point inside its grid; SGD also without decay) and item 5's optimizer
  # contrast is rebuilt from them
  # SP, muP, global Adam and SGD (with decay) at 32-256 (8x; width 256 completed to 7
  # points); SGD without decay at 32-128
  for m in ("mup_sgd", "mup_adam_global", "mup_sgd_wd0", "sp", "mup"):
    got = {r["width"]: r for r in summary if r["method"] == m}
    assert set(got) >= ({32, 64, 128} if m == "mup_sgd_wd0" else {32, 64, 128, 256}), m
    for r in got.values():
      lo, hi = map(int, r["grid_k"].split(".."))
      n_k = len({q["k"] for q in saved["rows"] if (q["method"], q["dim"]) == (m, r["width"])}
                 ) if r["width"] != 32 or m != "sp" else hi - lo + 1   # SP at 32: muP's alias
      assert hi - lo >= 6 and n_k == hi - lo + 1 and not r["edge"], r
  with open(os.path.join(d, "width_drift_slopes.json")) as f:
    slopes = json.load(f)
  assert [(r["method"], r["widths"]) for r in res["drift_slopes"]] == [
      (r["method"], r["widths"]) for r in slopes]
  for got, want in zip(res["drift_slopes"], slopes):
    assert got["slope"] == pytest.approx(want["slope"], rel=1e-9, abs=1e-9)
    assert got["slope_ci95"] == want["slope_ci95"]
  with open(os.path.join(d, "width_update_contrast.json")) as f:
    contrast = json.load(f)
  assert len(res["upd_contrast"]) == len(contrast)
  for got, want in zip(res["upd_contrast"], contrast):
    assert (got["method"], got["group"], got["phase"], got["widths"]) == (
        want["method"], want["group"], want["phase"], want["widths"])
    assert got["slope"] == pytest.approx(want["slope"], rel=1e-9, abs=1e-9)
    assert got["decay_only"] == want["decay_only"]
  for got, want in zip(res["table"], summary):
    assert (got["method"], got["width"], got["best_k"], got["edge"]) == (
        want["method"], want["width"], want["best_k"], want["edge"])
    for k in ("log2_lr_opt", "best_val", "best_test", "drift_log2", "detectable_log2", "gap"):
      if want[k] is None:
        assert got[k] is None, k
      else:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9), (k, got, want)
    if want["drift_ci95"] is not None:
      assert got["drift_ci95"] == want["drift_ci95"]
  # the bigram baseline and the best runs: the acceptance bar (test < 3.0) and the margin
  assert saved["bigram"]["test_bpb"] > 3.5
  assert min(r["best_test"] for r in summary) < 3.0


def test_restore_writes_committed_points_of_the_same_setting_only(tmp_path):
  import json, types  # pylint: disable=g-import-not-at-top,multiple-imports
  s = types.SimpleNamespace(steps=400, batch_size=8, seq_len=64, seeds=3, pattern="MA",
                            base_width=32, eval_windows=512,
                            plan=("mup:32:0:1", "mup_sgd:32:0:0"))
  header = ("hybrid_mup width sweep on x: pattern MA, widths [32] (muP base 32), 400 steps of "
            "8 x 64, 3 seeds, LR = ..., decay rule lr, 256 val / 256 test windows. Points "
            "computed at commit(s) ['abc']; analysis at abc.")
  rows = [{"method": "mup", "dim": 32, "k": k, "seed": i} for k in (0, 1, 2) for i in range(3)]
  rows.append({"method": "sp", "dim": 32, "k": 0, "seed": 0, "alias_of": "mup"})
  src = tmp_path / "width_rows.json"
  src.write_text(json.dumps({"header": header, "rows": rows}))
  path = lambda m, w, k: str(tmp_path / f"{m}_d{w}_k{k}.json")
  (tmp_path / "mup_d32_k1.json").write_text("{}")   # a saved point is never overwritten
  ws.restore(str(src), s, "lr", {"K": 1}, path)
  got = json.loads((tmp_path / "mup_d32_k0.json").read_text())
  assert got["key"] == {"K": 1} and len(got["rows"]) == 3 and "['abc']" in got["commit"]
  assert (tmp_path / "mup_d32_k1.json").read_text() == "{}"
  assert not (tmp_path / "mup_d32_k2.json").exists()       # not planned
  assert not (tmp_path / "mup_sgd_d32_k0.json").exists()   # planned, not in the rows
  with pytest.raises(ValueError, match="another setting"):
    ws.restore(str(src), s, "lr_mult", {"K": 1}, path)


def test_decay_only_ratio_is_lr_times_decay_over_the_schedule():
  base = {"steps": 400, "warmup_frac": 0.1, "min_lr_frac": 0.1, "weight_decay": 0.1,
          "decay_rule": "lr"}
  # after the warm-up (40 steps) a constant schedule decays by lr x wd every step
  assert ws.decay_only_ratio(0.5, {**base, "schedule": "constant"})[2:] == pytest.approx(
      [0.05] * 3, rel=1e-12)
  got = ws.decay_only_ratio(0.5, {**base, "schedule": "cosine"})
  assert got[0] == pytest.approx(0.05 * np.mean(np.arange(10) / 40))   # steps 0-9 of warm-up
  # steps 300-399: cosine from frac 260/360 to 359/360, floor 0.1
  f = (np.arange(300, 400) - 40) / 360
  assert got[4] == pytest.approx(0.05 * np.mean(0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * f))))


def test_member_weight_decay_scale_in_the_unified_update():
  """Issue 43's decay confound: a member's traced wd_scale (mup_sgd_wd0: 0) switches its
  decay off inside a shared program. Zero gradients: the step is the decay alone,
  p (1 - lr wd s) under MuAdamW's rule; with gradients, s = 0 equals weight_decay = 0."""
  import jax  # pylint: disable=g-import-not-at-top
  p = {"w": jnp.full((3, 2), 2.0), "v": jnp.full((2,), 2.0)}
  mults, mask = {"w": 0.25, "v": 4.0}, {"w": True, "v": False}
  lr, wd = 0.1, 0.5
  kw = dict(kind=2, lr_t=lr, mults=mults, mask=mask, b1=0.9, b2=0.95, eps=1e-8,
            clip_norm=1.0, decay_rule="lr")

  def step(g, s):
    return sweep.unified_update(g, sweep.unified_init(p), p, weight_decay=wd, wd_scale=s,
                                **kw)[0]
  zero = jax.tree.map(jnp.zeros_like, p)
  got = jax.vmap(step, in_axes=(None, 0))(zero, jnp.asarray([1.0, 0.5, 0.0]))
  np.testing.assert_allclose(np.asarray(got["w"][:, 0, 0]),
                             [2 - lr * wd * 2, 2 - lr * wd * 0.5 * 2, 2.0], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(got["v"]), 2.0)   # not decayed (mask)
  g = {"w": jnp.arange(6.0).reshape(3, 2) / 10, "v": jnp.asarray([0.3, -0.2])}
  off = sweep.unified_update(g, sweep.unified_init(p), p, weight_decay=0.0, **kw)[0]
  for k in p:
    np.testing.assert_allclose(np.asarray(step(g, jnp.float32(0.0))[k]), np.asarray(off[k]),
                               rtol=1e-7)
  assert ws.WD_SCALE["mup_sgd_wd0"] == 0.0 and ws.METHODS["mup_sgd_wd0"] == ("mup", "sgd")


def test_width_pattern_reaches_the_cell_model_and_scales_the_cost():
  """Claim 1's depth half: `width_pattern` is the sweep's model (4 blocks for 'MAMA'),
  the default stays 'MA' (depth 2's saved cells keep their key), and the packing cost
  doubles with the blocks. No compile."""
  from jaxpapers.core import config as config_lib  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.hybrid_mup import model as model_lib  # pylint: disable=g-import-not-at-top
  assert config_lib.load("configs/hybrid_mup.py").width.pattern == "MA"
  n = {}
  for pat in ("MA", "MAMA"):
    c = config_lib.load(f"configs/hybrid_mup.py:smoke,width_pattern={pat}")
    cc = ws._cell_config(c, 32)   # pylint: disable=protected-access
    assert cc.model.pattern == pat and cc.model.dim == 32
    n[pat] = model_lib.n_params(model_lib.build(cc, 256))
  emb = 2 * 256 * 32   # embedding and unembedding (untied)
  assert n["MAMA"] - emb == pytest.approx(2 * (n["MA"] - emb), rel=0.02)
  assert ws.cost_s(128, "MAMA") == pytest.approx(2 * ws.cost_s(128, "MA"))
  assert ws.cost_s(128, "MAMAMAMA") == pytest.approx(4 * ws.COST_S[128])


def test_across_depth_shift_on_known_curves():
  """The optimum at one width over depths: a known shift of -1 grid step (-0.5 octave)
  from depth 2 to 4 and none to 8 is recovered within its bootstrap interval."""
  rows = {2: _rows({32: 0.0}, noise=0.2, seeds=12, seed=1),
          4: _rows({32: -1.0}, noise=0.2, seeds=12, seed=2),
          8: _rows({32: 0.0}, noise=0.2, seeds=12, seed=3)}
  got = {r["depth"]: r for r in ws.across_depth(rows, 32, "mup", n_boot=300)}
  assert got[2]["shift_log2"] is None and set(got) == {2, 4, 8}
  for d, want in ((4, -0.5), (8, 0.0)):
    lo, hi = got[d]["shift_ci95"]
    assert abs(got[d]["shift_log2"] - want) < 0.15 and lo <= got[d]["shift_log2"] <= hi
    assert 0 < got[d]["detectable_log2"] < 0.5
  assert got[4]["shift_ci95"][1] < 0     # half an octave is resolved with 12 seeds


def test_committed_depth_sweeps_are_rebuilt_from_their_rows():
  """Claim 1's depth half: the committed depth-4 and depth-8 width sweeps and the depth
  summary (drift per depth, shift across depths) are rebuilt exactly from their committed
  rows; depth 4 has >= 7 LR points per (method, width) and depth 8 at width 128 >= 5, every
  best point there inside its grid."""
  import json, os  # pylint: disable=g-import-not-at-top,multiple-imports
  res_dir = os.path.join(os.path.dirname(__file__), "..", "jaxpapers", "papers", "hybrid_mup",
                         "results")
  by_depth = {}
  for depth, name in ((2, "width"), (4, "width_d4"), (8, "width_d8")):
    d = os.path.join(res_dir, name)
    with open(os.path.join(d, "width_rows.json")) as f:
      saved = json.load(f)
    by_depth[depth] = saved["rows"]
    if depth == 2:
      continue
    assert f"pattern {'MA' * (depth // 2)}, " in saved["header"]
    with open(os.path.join(d, "width_summary.json")) as f:
      summary = json.load(f)
    res = ws.analyse(ws.alias_sp_base(saved["rows"], 32), 32, sched=saved["sched"])
    assert len(res["table"]) == len(summary)
    for got, want in zip(res["table"], summary):
      assert (got["method"], got["width"], got["best_k"], got["edge"]) == (
          want["method"], want["width"], want["best_k"], want["edge"])
      for k in ("log2_lr_opt", "best_test", "drift_log2", "detectable_log2", "gap"):
        assert (got[k] is None) == (want[k] is None), k
        if want[k] is not None:
          assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9), (k, got, want)
      assert got["drift_ci95"] == want["drift_ci95"]
      lo, hi = map(int, got["grid_k"].split(".."))
      if depth == 4:
        assert hi - lo >= 6 and not got["edge"], got
      if depth == 8 and got["width"] == 128:   # depth 8 at 128: 5 points, the best inside
        assert hi - lo >= 4 and not got["edge"], got
    assert min(r["best_test"] for r in summary) < 3.0 < saved["bigram"]["test_bpb"]
  with open(os.path.join(res_dir, "width_depth", "depth_summary.json")) as f:
    want = json.load(f)
  both = ws.depth_summary(by_depth, 32)
  got = both["table"]
  assert [(r["depth"], r["method"], r["width"]) for r in got] == [
      (r["depth"], r["method"], r["width"]) for r in want]
  for g, w in zip(got, want):
    assert (g["drift_log2"] is None) == (w["drift_log2"] is None)
    if w["drift_log2"] is not None:
      assert g["drift_log2"] == pytest.approx(w["drift_log2"], rel=1e-9, abs=1e-9)
      assert g["drift_ci95"] == w["drift_ci95"]
  assert {(r["depth"], r["width"]) for r in got} == {(d, w) for d in (2, 4, 8) for w in (32, 128)}
  with open(os.path.join(res_dir, "width_depth", "depth_across.json")) as f:
    want = json.load(f)
  got = both["across_depth"]
  assert [(r["method"], r["width"], r["depth"]) for r in got] == [
      (r["method"], r["width"], r["depth"]) for r in want]
  for g, w in zip(got, want):
    assert g["shift_ci95"] == w["shift_ci95"] and g["opt_ci95"] == w["opt_ci95"]


def test_axis_shift_tells_a_shifting_control_from_a_fixed_optimum():
  """Claim 2's per-axis analysis on known curves (12 seeds): between the base cell and the
  axis cell SP's optimum moves -2 grid steps (-1 octave) and muP's stays; both are recovered
  within 3 sampling sds, inside their bootstrap intervals, SP's interval excludes zero, and
  SP's shift minus muP's is resolved; the gap is taken at the base's best grid point."""
  base = (_rows({64: -1.0}, noise=0.2, seeds=12, method="sp", seed=1)
          + _rows({64: 0.0}, noise=0.2, seeds=12, method="mup", seed=2))
  cell = (_rows({64: -3.0}, noise=0.2, seeds=12, method="sp", seed=3)
          + _rows({64: 0.0}, noise=0.2, seeds=12, method="mup", seed=4))
  got = {r["method"]: r for r in ws.axis_shift(base, cell, 64, n_boot=300)}
  assert set(got) == {"sp", "mup"}
  # each cell's 12 seed optima scatter N(0, 0.2^2) in k: the shift's sampling sd is
  # 0.5 * 0.2 * sqrt(2 / 12) = 0.041 octaves (a 95% interval misses the truth 1 in 20
  # times, so the truth is checked against 3 sampling sds instead)
  sd = 0.5 * 0.2 * math.sqrt(2 / 12)
  for m, want in (("sp", -1.0), ("mup", 0.0)):
    lo, hi = got[m]["shift_ci95"]
    assert abs(got[m]["shift_log2"] - want) < 3 * sd and lo <= got[m]["shift_log2"] <= hi
    assert 0.5 < got[m]["detectable_log2"] / (1.96 * sd) < 2.0
  assert got["sp"]["shift_ci95"][1] < 0
  assert got["sp"]["sp_minus_mup"] == pytest.approx(
      got["sp"]["shift_log2"] - got["mup"]["shift_log2"])
  assert got["sp"]["sp_minus_mup_ci95"][1] < 0
  # SP's transferred LR is the base's best grid point k = -1; its own best is near -3
  sp_cell = [r for r in cell if r["method"] == "sp"]
  kb = got["sp"]["best_k"]
  assert kb in (-4, -3, -2) and got["sp"]["gap"] == pytest.approx(
      np.mean([r["test_bpb"] for r in sp_cell if r["k"] == -1])
      - np.mean([r["test_bpb"] for r in sp_cell if r["k"] == kb]))
  assert got["sp"]["gap"] > 0 and got["sp"]["gap_at_k"] is None


def test_committed_axes_summary_is_rebuilt_from_its_rows():
  """Claim 2: the committed axis cells (`results/width_t32`, `width_b4`, `width_t32_mmma`,
  `width_t32_nemotron`, beside the committed `results/width` base; the same-depth ratio
  `width_t32_mama` -> `width_t32_mmma`) rebuild `results/width_axes/axes_summary.json`
  exactly; every cell has SP and muP at width 64 with >= 5 LR points each, its best
  points inside their grids, and beats the bigram."""
  import json, os  # pylint: disable=g-import-not-at-top,multiple-imports
  res_dir = os.path.join(os.path.dirname(__file__), "..", "jaxpapers", "papers", "hybrid_mup",
                         "results")
  load = lambda n: json.load(open(os.path.join(res_dir, n, "width_rows.json")))
  with open(os.path.join(res_dir, "width_axes", "axes_summary.json")) as f:
    want = json.load(f)
  assert {"width_t32", "width_b4"} <= {r["cell"] for r in want}
  # axis -> (base cell, axis cell); the ratio is read twice: from 'MA' (depth doubles too)
  # and from 'MAMA' (the same 4 blocks)
  cells_of = {"sequence": ("width", "width_t32"), "batch": ("width", "width_b4"),
              "ratio": ("width_t32", "width_t32_mmma"),
              "ratio_same_depth": ("width_t32_mama", "width_t32_mmma"),
              "nemotron": ("width_t32", "width_t32_nemotron")}
  got = []
  for axis in dict.fromkeys(r["axis"] for r in want):
    base, cell = cells_of[axis]
    b, c = load(base), load(cell)
    for x in (b, c):
      assert min(r["test_bpb"] for r in x["rows"]) < 3.0 < x["bigram"]["test_bpb"]
    got += [{"axis": axis, "cell": cell, **r} for r in ws.axis_shift(b["rows"], c["rows"], 64)]
  assert [(r["axis"], r["cell"], r["method"]) for r in got] == [
      (r["axis"], r["cell"], r["method"]) for r in want]
  for g, w in zip(got, want):
    lo, hi = map(int, g["grid_k"].split(".."))
    assert hi - lo >= 4 and not g["edge"] and g["best_k"] == w["best_k"], g
    for k in ("shift_log2", "detectable_log2", "gap", "sp_minus_mup", "best_test"):
      assert g[k] == pytest.approx(w[k], rel=1e-9, abs=1e-9), (k, g, w)
    assert g["shift_ci95"] == w["shift_ci95"] and g["sp_minus_mup_ci95"] == w["sp_minus_mup_ci95"]


def test_committed_spectral_table_is_rebuilt_from_its_rows():
  """Item 5's spectral ratio (`results/width_spectral`): the committed table is rebuilt
  from its committed rows by the script's `analyse`; those runs' Frobenius ratios equal
  the committed width sweep's for the same members (they are the same first 50 steps)."""
  import importlib.util, json, os  # pylint: disable=g-import-not-at-top,multiple-imports
  d = os.path.join(os.path.dirname(__file__), "..", "jaxpapers", "papers", "hybrid_mup",
                   "results")
  spec = importlib.util.spec_from_file_location(
      "hm_spectral", os.path.join(d, "width_spectral", "spectral.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  with open(os.path.join(d, "width_spectral", "spectral_rows.json")) as f:
    rows = json.load(f)["rows"]
  with open(os.path.join(d, "width_spectral", "spectral.json")) as f:
    want = json.load(f)
  with open(os.path.join(d, "width", "width_rows.json")) as f:
    committed = json.load(f)["rows"]
  got, diff, n = mod.analyse(rows, committed)
  assert n >= 400 and diff < 1e-3
  assert [(r["method"], r["group"], r["phase"]) for r in got] == [
      (r["method"], r["group"], r["phase"]) for r in want]
  for g, w in zip(got, want):
    assert g["spec_ratio"] == w["spec_ratio"] and g["upd_ratio"] == w["upd_ratio"]
    assert g["spec_slope"] == pytest.approx(w["spec_slope"], rel=1e-9, abs=1e-9)


def test_tail_drops_and_the_flat_rule_on_known_curves():
  """Training length: the drop over the last quarter / eighth of a known curve (32 bins,
  two bins per end), the 10-bin rows' fifth / tenth, and the flat verdict of
  `length_summary` (fixed thresholds) on a falling and a flat curve."""
  t = np.arange(32.0)
  seeds = np.array([[0.0], [0.003], [-0.003]])
  d = {x["frac"]: x for x in ws.tail_drops(2.0 - 0.01 * t + seeds, 800)}
  assert set(d) == {1 / 4, 1 / 8} and d[1 / 8]["steps"] == 100 and d[1 / 8]["avg_steps"] == 50
  assert d[1 / 4]["drop"] == pytest.approx(0.08) and d[1 / 8]["drop"] == pytest.approx(0.04)
  assert d[1 / 4]["std"] == pytest.approx(0.0, abs=1e-12)   # a level offset cancels
  noisy = np.array([[0.0] * 31 + [x] for x in (-0.01, 0.0, 0.01)])
  e = {x["frac"]: x for x in ws.tail_drops(noisy, 800)}[1 / 8]
  assert e["drop"] == pytest.approx(0.0, abs=1e-12) and e["se"] == pytest.approx(
      0.005 * np.sqrt(2 / 3) / np.sqrt(2))
  assert not ws.tail_drops(np.linspace(3, 2, 10)[None], 400)   # 10 bins: no quarter edge
  f = ws.tail_drops(np.linspace(3, 2, 10)[None], 400, (1 / 5, 1 / 10))
  assert [(x["frac"], x["steps"]) for x in f] == [(1 / 5, 80.0), (1 / 10, 40.0)]
  assert f[0]["drop"] == pytest.approx(2 / 9)

  def rows(slope):   # muP at 32 and 128, 3 seeds, optimum k = 0; loss falls `slope`/bin
    out = _rows({32: 0.0, 128: 0.0}, noise=0.1)
    for r in out:
      r["loss_bins"] = list(2.0 - slope * t)
    return out
  for slope, flat in ((0.002, False), (0.0005, True)):   # eighth 0.008 / 0.002 nats
    tab = ws.length_summary({800: rows(slope)}, 32, methods=("mup",), n_boot=50)["table"]
    assert [r["flat"] for r in tab] == [flat, flat], slope
  tab = ws.length_summary({400: _rows({32: 0.0, 128: 0.0}, noise=0.1)}, 32,
                          methods=("mup",), n_boot=50)["table"]
  assert [r["flat"] for r in tab] == [None, None]   # 2 bins: no quarter, no verdict


def test_length_summary_shift_with_run_length_on_known_curves():
  """The optimum's shift with the run length at each width: a known -1 grid step (-0.5
  octave) from 400 to 800 steps at width 32 and none at 128, recovered within the paired
  bootstrap's interval; each length's drift 32 -> 128 from `analyse`."""
  short = _rows({32: 0.0, 128: 0.0}, noise=0.2, seeds=12, seed=4)
  long = _rows({32: -1.0, 128: 0.0}, noise=0.2, seeds=12, seed=5)
  res = ws.length_summary({400: short, 800: long}, 32, methods=("mup",), n_boot=300)
  got = {(r["steps"], r["width"]): r for r in res["shift"]}
  assert got[(400, 32)]["shift_log2"] is None
  for w, want in ((32, -0.5), (128, 0.0)):
    r = got[(800, w)]
    lo, hi = r["shift_ci95"]
    assert abs(r["shift_log2"] - want) < 0.15 and lo <= r["shift_log2"] <= hi
  drift = {r["steps"]: r["drift_log2"] for r in res["table"] if r["width"] == 128}
  assert abs(drift[400]) < 0.15 and abs(drift[800] - 0.5) < 0.15


LENGTHS = {400: "width", 800: "width_s800", 1600: "width_s1600"}


@pytest.mark.parametrize("steps", [800, 1600])
def test_committed_long_sweep_is_rebuilt_from_its_rows(steps):
  """Training length: the committed 800- and 1600-step SP / muP sweeps (widths 32 and 128)
  are rebuilt exactly from their committed rows; every grid has >= 5 LR points with its
  best point inside, and the rows carry 32 loss bins."""
  import json, os  # pylint: disable=g-import-not-at-top,multiple-imports
  d = os.path.join(os.path.dirname(__file__), "..", "jaxpapers", "papers", "hybrid_mup",
                   "results", LENGTHS[steps])
  with open(os.path.join(d, "width_rows.json")) as f:
    saved = json.load(f)
  assert f"{steps} steps of 8 x 64, 3 seeds" in saved["header"]
  assert saved["sched"]["steps"] == steps
  assert {len(r["loss_bins"]) for r in saved["rows"]} == {32}
  with open(os.path.join(d, "width_summary.json")) as f:
    summary = json.load(f)
  res = ws.analyse(ws.alias_sp_base(saved["rows"], 32), 32, sched=saved["sched"])
  assert [(r["method"], r["width"]) for r in res["table"]] == [
      (r["method"], r["width"]) for r in summary] == [
      ("sp", 32), ("sp", 128), ("mup", 32), ("mup", 128)]
  for got, want in zip(res["table"], summary):
    assert (got["best_k"], got["edge"], got["grid_k"]) == (
        want["best_k"], want["edge"], want["grid_k"])
    for k in ("log2_lr_opt", "best_val", "best_test", "drift_log2", "detectable_log2", "gap"):
      assert (got[k] is None) == (want[k] is None), k
      if want[k] is not None:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9), (k, got, want)
    assert got["drift_ci95"] == want["drift_ci95"]
    n_k = len({q["k"] for q in saved["rows"] if q["dim"] == got["width"] and
               q["method"] == ("mup" if got["width"] == 32 else got["method"])})
    assert n_k >= 5 and not got["edge"], got


def test_committed_length_summary_is_rebuilt_from_its_rows():
  """Training length: the 400 / 800 / 1600-step tables of `results/width_s800/length.py`
  (`length_summary`, `length_shift` from 400 steps, `length_shift_step` from each length
  to the next) are rebuilt exactly from the committed rows; the flat verdicts exist for
  the 32-bin rows (800 and 1600 steps) only."""
  import json, os  # pylint: disable=g-import-not-at-top,multiple-imports
  res_dir = os.path.join(os.path.dirname(__file__), "..", "jaxpapers", "papers", "hybrid_mup",
                         "results")
  rows, _ = ws.load_committed_rows(res_dir, LENGTHS)
  assert set(rows) == set(LENGTHS)
  d = os.path.join(res_dir, "width_s800")
  want = {}
  for name in ("length_summary", "length_shift", "length_shift_step"):
    with open(os.path.join(d, name + ".json")) as f:
      want[name] = json.load(f)
  got = ws.length_summary(rows, 32)
  assert [(r["steps"], r["method"], r["width"]) for r in got["table"]] == [
      (r["steps"], r["method"], r["width"]) for r in want["length_summary"]]
  for g, w in zip(got["table"], want["length_summary"]):
    assert g["flat"] == w["flat"] and g["tail"] == w["tail"] and g["loss_bins"] == w["loss_bins"]
    assert g["log2_lr_opt"] == pytest.approx(w["log2_lr_opt"], rel=1e-9, abs=1e-9)
    assert (g["drift_ci95"], g["best_k"]) == (w["drift_ci95"], w["best_k"])
  assert [(r["steps"], r["method"], r["width"]) for r in got["shift"]] == [
      (r["steps"], r["method"], r["width"]) for r in want["length_shift"]]
  for g, w in zip(got["shift"], want["length_shift"]):
    assert g["shift_ci95"] == w["shift_ci95"]
  # the step from each length to the next (the paired bootstrap on two lengths alone)
  got_step = ws.length_shift_steps(rows, 32)
  assert [(r["from_steps"], r["steps"], r["method"], r["width"]) for r in got_step] == [
      (r["from_steps"], r["steps"], r["method"], r["width"]) for r in want["length_shift_step"]]
  for g, w in zip(got_step, want["length_shift_step"]):
    assert g["shift_log2"] == pytest.approx(w["shift_log2"], rel=1e-9, abs=1e-9)
    assert g["shift_ci95"] == w["shift_ci95"]
  assert {r["steps"] for r in got["table"] if r["flat"] is not None} == {800, 1600}
