"""StoMPP: the binarization rules, the schedule, the masks and the committed evaluation."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.data import sources
from jaxpapers.papers.stompp import binarize as bz
from jaxpapers.papers.stompp import experiment
from jaxpapers.papers.stompp import model as model_lib
from jaxpapers.papers.stompp import train_lib
from tests.test_configs_smoke import load_config, ROOT

CONFIG = f"{ROOT}/configs/stompp.py"


def test_mask_fraction_follows_schedule_exactly():
  ranks = bz.init_ranks(jax.random.PRNGKey(0), (7, 13))
  prev = jnp.zeros_like(ranks, bool)
  for p in np.linspace(0, 1, 11):
    m = bz.mask_from_ranks(ranks, p)
    assert int(m.sum()) == int(np.floor(p * ranks.size))
    assert bool(jnp.all(m | ~prev))  # nested: committed entries stay committed
    prev = m
  assert bool(bz.mask_from_ranks(ranks, 1.0).all())


@pytest.mark.parametrize("order", ["forward", "reverse", "all"])
def test_progress_schedule_orders(order):
  L, T = 4, 100
  p = jax.vmap(lambda s: bz.layer_progress(s, T, L, "stompp", order, 0.0, 0.8))(
      jnp.arange(T + 1))
  assert p.shape == (T + 1, L)
  assert bool(jnp.all(jnp.diff(p, axis=0) >= 0))  # monotone in time
  assert bool(jnp.all(p[0] == 0)) and bool(jnp.all(p[80:] == 1))
  mid = p[30]  # 30/80 of the window: forward has layer 0 done and layer 1 half-way
  if order == "forward":
    np.testing.assert_allclose(mid, [1.0, 0.5, 0.0, 0.0], atol=1e-6)
  elif order == "reverse":
    np.testing.assert_allclose(mid, [0.0, 0.0, 0.5, 1.0], atol=1e-6)
  else:
    np.testing.assert_allclose(mid, [0.375] * 4, atol=1e-6)


def test_soft_refresh_keeps_a_permutation_and_changes_only_a_fraction():
  ranks = bz.init_ranks(jax.random.PRNGKey(1), (50, 40))
  new = bz.soft_refresh(jax.random.PRNGKey(2), ranks, 0.1)
  assert sorted(np.asarray(new).ravel().tolist()) == list(range(ranks.size))
  changed = float((new != ranks).mean())
  assert 0.05 < changed <= 0.12  # ~10% re-drawn (a few keep their rank by chance)
  m_old, m_new = bz.mask_from_ranks(ranks, 0.3), bz.mask_from_ranks(new, 0.3)
  assert int(m_old.sum()) == int(m_new.sum())  # fraction on schedule after refresh
  assert bool(jnp.any(m_old != m_new))  # but the committed set moved


def test_tree_ranks_and_refresh_keep_each_tensor_a_permutation():
  """All tensors' ranks are drawn / refreshed by one segmented sort: each stays its own
  permutation, about `frac` of each one's entries move, and the fraction is per tensor."""
  tree = {"a": jnp.zeros((40, 30), jnp.int32), "b": {"w": jnp.zeros((3, 3, 8, 16)),
                                                     "x": jnp.zeros((7,))}}
  ranks = bz.init_ranks_tree(jax.random.PRNGKey(0), tree)
  for r in jax.tree.leaves(ranks):
    assert sorted(np.asarray(r).ravel().tolist()) == list(range(r.size))
  assert not np.array_equal(np.asarray(ranks["a"]).ravel()[:100], np.arange(100))
  new = bz.soft_refresh_tree(jax.random.PRNGKey(1), ranks, 0.2)
  for old, r in zip(jax.tree.leaves(ranks), jax.tree.leaves(new)):
    assert sorted(np.asarray(r).ravel().tolist()) == list(range(r.size))
    if r.size > 1000:
      assert 0.12 < float((old != r).mean()) <= 0.22
  alone = bz.soft_refresh_tree(jax.random.PRNGKey(1), {"a": ranks["a"]}, 0.0)
  np.testing.assert_array_equal(alone["a"], ranks["a"])  # frac 0: nothing moves


def _grad(rule, x, mask):
  return jax.grad(lambda v: (bz.binarize(v, mask, rule, True) * jnp.arange(1.0, 7.0)).sum())(x)


def test_gradient_rules():
  x = jnp.array([-1.5, -0.5, 0.2, 0.7, 1.2, -0.1])
  mask = jnp.array([True, True, True, False, False, False])
  up = jnp.arange(1.0, 7.0)
  inside = (jnp.abs(x) <= 1).astype(jnp.float32)
  # STE: sign forward, clipped identity backward.
  np.testing.assert_array_equal(bz.binarize(x, mask, "ste", True), jnp.sign(x))
  np.testing.assert_array_equal(_grad("ste", x, mask), up * inside)
  # STE-free StoMPP: committed entries are hard and get exactly zero gradient.
  out = bz.binarize(x, mask, "stompp", True)
  np.testing.assert_array_equal(out[:3], jnp.sign(x[:3]))
  np.testing.assert_array_equal(out[3:], jnp.clip(x[3:], -1, 1))
  g = _grad("stompp", x, mask)
  assert bool(jnp.all(g[:3] == 0.0))
  np.testing.assert_array_equal(g[3:], (up * inside)[3:])
  # StoMPP + STE on frozen entries: same forward, committed entries get the STE gradient.
  np.testing.assert_array_equal(bz.binarize(x, mask, "stompp_ste", True), out)
  np.testing.assert_array_equal(_grad("stompp_ste", x, mask), up * inside)


def test_committed_activation_blocks_upstream_gradient():
  """The gradient blockade: a fully committed activation passes nothing upstream."""
  w = jnp.array([0.3, -0.2])
  def f(w, p):
    a = jnp.tanh(w * 2.0)  # upstream computation
    m = bz.mask_from_ranks(jnp.array([0, 1]), p)
    return (bz.binarize(a, m, "stompp", False) * jnp.array([1.0, 2.0])).sum()
  assert bool(jnp.all(jax.grad(f)(w, 1.0) == 0.0))
  assert bool(jnp.all(jax.grad(f)(w, 0.0) != 0.0))
  g_half = jax.grad(f)(w, 0.5)  # entry 0 committed, entry 1 not
  assert g_half[0] == 0.0 and g_half[1] != 0.0


@pytest.mark.parametrize("arch,n_binary", [("resnet18", 16), ("resnet34", 32),
                                           ("resnet50", 48)])
def test_resnet_layouts(arch, n_binary):
  config = load_config(CONFIG, f"model={arch},width=2")
  model = model_lib.build(config, 10)
  assert model.num_binary == n_binary
  x = jnp.zeros((2, 16, 16, 3))
  p = jnp.zeros((n_binary,))
  out, _ = jax.eval_shape(lambda: model.init_with_output(
      {"params": jax.random.PRNGKey(0), "ranks": jax.random.PRNGKey(1)}, x, p))
  chex.assert_shape(out, (2, 10))


def _np_bn(x, p, s, eps=1e-5):
  return (x - s["mean"]) / np.sqrt(s["var"] + eps) * p["scale"] + p["bias"]


@pytest.mark.parametrize("rule,p", [("stompp", 1.0), ("stompp", 0.5), ("ste", 1.0),
                                    ("stompp_ste", 0.3),
                                    ("fp", 1.0)])
def test_hand_built_two_layer_net_matches_numpy_sign_network(rule, p):
  """Binary stem (real input, sign weights) -> BN -> binary hidden layer (sign of the
  activation, sign weights) -> BN -> hardtanh -> real head, against NumPy with random
  parameters and BatchNorm statistics; p < 1 mixes signs and clipped reals by the masks."""
  model = model_lib.BinaryMLP(num_classes=3, depth=1, width=5, rule=rule,
                              first_real=False, last_real=True)
  x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
  progress = jnp.full((model.num_binary,), p)
  # jitted: one small compile each instead of hundreds of eager dispatches
  variables = jax.jit(model.init)({"params": jax.random.PRNGKey(0),
                                   "ranks": jax.random.PRNGKey(1)}, x, progress)
  rng = np.random.default_rng(1)
  rand = lambda t: jax.tree.map(lambda a: rng.normal(size=a.shape).astype(np.float32), t)
  params = rand(variables["params"])
  stats = jax.tree.map(lambda a: np.abs(a) + 0.5, rand(variables["batch_stats"]))
  ranks = jax.tree.map(np.asarray, jax.jit(bz.init_ranks_tree)(jax.random.PRNGKey(2),
                                                              variables["ranks"]))
  out = jax.jit(model.apply)({"params": params, "batch_stats": stats, "ranks": ranks}, x,
                             progress)

  sgn = lambda v: np.where(v >= 0, 1.0, -1.0)
  def b(v, rank):  # NumPy binarization: committed entries sign, the rest clipped
    if rule == "fp":
      return v
    committed = rank < np.floor(p * rank.size)
    return np.where(committed, sgn(v), np.clip(v, -1, 1))
  w0 = b(params["bin0"]["kernel"], ranks["bin0"]["w"])
  h = _np_bn(x @ w0, params["BatchNorm_0"], stats["BatchNorm_0"])
  a = np.clip(h, -1, 1) if rule == "fp" else b(h, ranks["bin1"]["a"][None])
  w1 = b(params["bin1"]["kernel"], ranks["bin1"]["w"])
  h = _np_bn(a @ w1, params["BatchNorm_1"], stats["BatchNorm_1"])
  ref = np.clip(h, -1, 1) @ params["head"]["kernel"] + params["head"]["bias"]
  np.testing.assert_allclose(np.asarray(out), ref, rtol=2e-5, atol=2e-5)
  if rule != "fp" and p == 1.0:  # the committed network's weights are signs
    assert set(np.unique(w0)) <= {-1.0, 1.0}


# The rows of the two ResNet tests below: the study's program trained one row after
# another (its CPU path) and all at once split over the 8 devices; trained once per module.
_RESNET_ROWS = [("stompp_fwd", 0.01, 0), ("ste", 0.01, 0), ("stompp_fwd", 0.003, 1)]


@pytest.fixture(scope="module")
def resnet_runs():
  from jaxpapers.papers.stompp import study_resnet
  # T = 25: every p_l n stays off an integer (p in steps of 0.4, no size a multiple of
  # 5), so float32 vs float64 floors cannot differ.
  config = load_config(CONFIG, "smoke,resnet_steps=25,chunk=25,resnet_width=4,"
                       "refresh_every=3,lr=0.01,batch_size=32")
  cfg = config_lib.override(config, {"train.steps": 25})
  data = study_resnet.split_validation(sources.normalize(sources.digits()), 200)
  quiet = lambda *a, **k: None
  # evaluate=False: the evaluation program is shared by both paths (compiles ~2x slower)
  return {sequential: study_resnet.train_arch(cfg, "resnet10", 4, _RESNET_ROWS, data, 10,
                                              log=quiet, keep_states=True, evaluate=False,
                                              sequential=sequential)
          for sequential in (True, False)}


def test_few_step_resnet_learns_and_commits_on_schedule(resnet_runs):
  """A binary ResNet-10 layout (StoMPP forward, STE-free) trained 25 steps through the
  study's program (rows one after another, as the study runs on a CPU): loss decreases, and the committed fraction of every layer's
  weight and activation masks (counted from the ranks, after soft refreshes) equals
  floor(p_l n) / n with p_l from the forward schedule written out in NumPy."""
  res = resnet_runs[True]  # rows 0 (StoMPP forward) and 1 (STE), lr 0.01, seed 0
  assert [r[:2] for r in _RESNET_ROWS[:2]] == [("stompp_fwd", 0.01), ("ste", 0.01)]
  loss = res["loss"][:, :2]  # [T, R]
  assert np.all(loss[-6:].mean(0) < loss[:6].mean(0) - 0.1), loss
  L, T = res["num_binary"], 25
  assert L == 8
  sizes = {name: [r[0].size for r in res["states"]["ranks"][name].values()]
           for name in model_lib.binary_layer_names(L)}
  for t in range(T):
    p_np = np.clip(t / (0.8 * T) * L - np.arange(L), 0, 1)  # forward slots in [0, 0.8T]
    want = [sum(np.floor(p_np[l] * n) for n in sizes[f"bin{l}"]) / sum(sizes[f"bin{l}"])
            for l in range(L)]
    np.testing.assert_allclose(res["committed"][t, 0], want, atol=1e-6, err_msg=str(t))
    np.testing.assert_array_equal(res["committed"][t, 1], np.ones(L))  # STE: all, always
  # After training every layer is committed; the ranks are still permutations.
  states = res["states"]
  for name in model_lib.binary_layer_names(L):
    for r in states["ranks"][name].values():
      r0 = np.asarray(r[0])
      assert sorted(r0.ravel().tolist()) == list(range(r0.size))
  assert res["final_progress"][0] == 1.0


def test_validation_split_is_disjoint_and_lr_is_selected_on_shared_seeds():
  """The study's validation images are held out of training (disjoint, together the
  whole training split) and never test images; the lr is chosen on validation over the
  seeds trained at EVERY lr, not over whatever extra seeds the chosen lr later got."""
  from jaxpapers.papers.stompp import study_resnet
  ids = lambda a, b: np.arange(a, b, dtype=np.float32)[:, None, None, None]  # image = id
  ds = sources.Dataset("ids", sources.ArraySplit(ids(0, 100), np.arange(100) % 10),
                       sources.ArraySplit(ids(1000, 1030), np.arange(30) % 10),
                       (1, 1, 1), 10)
  (trx, try_), (vax, vay), (tex, _) = study_resnet.split_validation(ds, 17)
  tr, va = trx.ravel().astype(int), vax.ravel().astype(int)
  assert len(va) == 17 and len(tr) == 83
  assert not set(tr) & set(va) and set(tr) | set(va) == set(range(100))
  np.testing.assert_array_equal(try_, tr % 10)  # labels follow their images
  np.testing.assert_array_equal(vay, va % 10)
  np.testing.assert_array_equal(tex.ravel(), np.arange(1000, 1030))
  with pytest.raises(ValueError, match="val_size"):
    study_resnet.split_validation(ds, 100)
  row = lambda lr, seed, val, test: {"arch": "a", "variant": "v", "lr": lr, "seed": seed,
                                     "val acc": val, "test acc": test, "final loss": 1.0,
                                     "loss by tenth": [1.0] * 10,
                                     "committed at last step": 1.0}
  # Grid on seed 0: lr 3e-3 wins (0.75 vs 0.70). Seeds 1, 2 exist only at 1e-2 and are
  # lucky: a mean over all seeds would pick 1e-2 (0.89); selection must not.
  raw = [row(3e-3, 0, 0.75, 0.74), row(1e-2, 0, 0.70, 0.69), row(1e-2, 1, 0.99, 0.98),
         row(1e-2, 2, 0.99, 0.98)]
  lr, common, val = study_resnet.select_lr(raw)
  assert lr == 3e-3 and common == [0] and val == {3e-3: 0.75, 1e-2: 0.70}
  (t,) = study_resnet.summarize(raw + [row(3e-3, 3, 0.6, 0.5)])
  assert t["lr (val-selected)"] == 3e-3 and t["seeds"] == 2
  np.testing.assert_allclose(t["test acc"], 0.62)  # test at the chosen lr, both seeds


def test_table_refuses_rows_of_another_stem_batch_or_step_count():
  """The table averages rows of ONE protocol: rows of its architectures trained with
  another step count, stem or batch size (e.g. a 600-step check left in the workdir)
  raise an error naming them; other architectures and widths are simply not tabled."""
  from jaxpapers.papers.stompp import study_resnet
  cfg = load_config(CONFIG, "study=resnet,stem=cifar_s2,batch_size=64,resnet_steps=300")
  cfg = config_lib.override(cfg, {"train.steps": 300})
  key = lambda arch, w, stem, b, t, lr: f"{arch}|w{w}|{stem}|b{b}|T{t}|ste|lr{lr}|s0"
  row = lambda arch, w: {"arch": arch, "width": w}
  rows = {key("resnet18", 8, "cifar_s2", 64, 300, 0.03): row("resnet18", 8),
          key("resnet18", 16, "cifar_s2", 64, 600, 0.03): row("resnet18", 16),  # other width
          key("resnet50", 8, "cifar", 64, 600, 0.03): row("resnet50", 8)}  # other arch
  width_of = {"resnet18": 8, "resnet34": 8}
  assert study_resnet.table_rows(rows, width_of, cfg) == [row("resnet18", 8)]
  for bad, what in [(("resnet18", 8, "cifar_s2", 64, 600), "steps 600"),
                    (("resnet34", 8, "cifar", 64, 300), "stem cifar"),
                    (("resnet18", 8, "cifar_s2", 128, 300), "batch 128")]:
    with pytest.raises(ValueError, match=what):
      study_resnet.table_rows({**rows, key(*bad, 0.01): row(*bad[:2])}, width_of, cfg)


def test_committed_fraction_of_masks_is_floor_pn_at_every_step():
  """The masks a layer uses at progress p commit exactly floor(p n) entries, also after
  soft refreshes (checked on the ranks the training run evolved)."""
  ranks = bz.init_ranks(jax.random.PRNGKey(3), (3, 3, 4, 8))
  for i in range(5):
    ranks = bz.soft_refresh(jax.random.PRNGKey(10 + i), ranks, 0.3)
    for p in (0.0, 0.13, 0.5, 0.99, 1.0):
      assert int(bz.mask_from_ranks(ranks, p).sum()) == int(np.floor(p * ranks.size))


def test_augmented_run_resumes_exactly_and_reports_the_committed_network(tmp_path):
  """Random crop + flip come from (seed, step): a run restarted from its step-3 checkpoint
  replays steps 4..6 bitwise. The run ends fully committed and reports the hard-sign
  network's test accuracy."""
  import shutil
  from tests import _runs
  arg = "smoke,crop_pad=1,flip=true,normalize=true,checkpoint_every=3,eval_every=6"
  config = load_config(CONFIG, arg)
  state, final = experiment.train_and_evaluate(config, str(tmp_path))
  state = jax.device_get(state)
  ds = experiment.load_data(config)
  model = model_lib.build(config, ds.num_classes)
  assert experiment.committed_fraction(config, model, state, config.train.steps) == 1.0
  logits = train_lib.logits_hard(model, state, ds.test.images)
  assert abs(float((logits.argmax(-1) == ds.test.labels).mean()) - final["accuracy"]) < 1e-6
  step, full = _runs.final_state(tmp_path)
  assert step == 6
  rows = _runs.metrics_rows(tmp_path)  # the uninterrupted run's rows
  shutil.rmtree(tmp_path / "checkpoints" / "6")
  experiment.train_and_evaluate(config, str(tmp_path))
  _runs.assert_same_metrics(tmp_path, rows)
  step, again = _runs.final_state(tmp_path)
  fa, fb = _runs.flat(full), _runs.flat(again)
  assert step == 6 and fa.keys() == fb.keys()
  for k in fa:
    np.testing.assert_array_equal(fa[k], fb[k], err_msg=k)


@pytest.mark.parametrize("stem,hw", [("cifar", 16), ("imagenet", 4), ("cifar_s2", 8)])
def test_stems(stem, hw):
  config = load_config(CONFIG, f"model=resnet10,width=2,stem={stem}")
  model = model_lib.build(config, 10)
  x = jnp.zeros((2, 16, 16, 3))
  p = jnp.zeros((model.num_binary,))
  v = jax.eval_shape(lambda: model.init(
      {"params": jax.random.PRNGKey(0), "ranks": jax.random.PRNGKey(1)}, x, p))
  k = v["params"]["stem"]["kernel"].shape
  assert k == ((7, 7, 3, 2) if stem == "imagenet" else (3, 3, 3, 2))
  # The first block's activation mask has the stem's output map: 16x16, 4x4 after
  # the 7x7 stride-2 conv and the 3x3 stride-2 max-pool, 8x8 after the 3x3 stride-2 conv.
  assert v["ranks"]["bin0"]["a"].shape == (hw, hw, 2)


def test_mobilenetv2_layout_and_depthwise_binary_conv():
  config = load_config(CONFIG, "model=mobilenetv2,width=8")
  model = model_lib.build(config, 10)
  assert model.num_binary == 2 + 16 * 3 + 1
  x = jnp.ones((2, 28, 28, 1))
  p = jnp.zeros((model.num_binary,))
  v = jax.eval_shape(lambda: model.init(
      {"params": jax.random.PRNGKey(0), "ranks": jax.random.PRNGKey(1)}, x, p))
  assert v["params"]["bin0"]["kernel"].shape == (3, 3, 1, 8)  # depthwise, t=1 block
  assert v["params"]["bin2"]["kernel"].shape == (1, 1, 8, 48)  # expansion x6
  # Stride 1 in the second stage for the small-image stems: the last binary conv's
  # input map is 4x4 (cifar stem) or 2x2 (cifar_s2) on 28x28, as in the ResNets here.
  last = f"bin{model.num_binary - 1}"
  assert v["ranks"][last]["a"].shape == (4, 4, 80)
  m2 = model_lib.build(load_config(CONFIG, "model=mobilenetv2,width=8,stem=cifar_s2"), 10)
  v2 = jax.eval_shape(lambda: m2.init(
      {"params": jax.random.PRNGKey(0), "ranks": jax.random.PRNGKey(1)}, x, p))
  assert v2["ranks"][last]["a"].shape == (2, 2, 80)
  # A depthwise binary conv equals per-channel NumPy correlation with sign weights.
  conv = model_lib.BinaryConv(index=0, features=3, kernel_size=3, depthwise=True)
  xs = np.random.default_rng(0).normal(size=(1, 5, 5, 3)).astype(np.float32)
  vv = conv.init({"params": jax.random.PRNGKey(0), "ranks": jax.random.PRNGKey(1)}, xs,
                 jnp.ones((1,)), bz.knobs("stompp"))
  out = np.asarray(conv.apply(vv, xs, jnp.ones((1,)), bz.knobs("stompp")))
  w = np.where(np.asarray(vv["params"]["kernel"]) >= 0, 1.0, -1.0)[:, :, 0, :]
  a = np.pad(np.where(xs >= 0, 1.0, -1.0), ((0, 0), (1, 1), (1, 1), (0, 0)))
  ref = np.zeros_like(out)
  for i in range(5):
    for j in range(5):
      ref[0, i, j] = (a[0, i:i + 3, j:j + 3] * w).sum((0, 1))
  np.testing.assert_allclose(out, ref, atol=1e-5)
  # The shift-and-add depthwise conv equals XLA's grouped conv, stride 1 and 2.
  for stride, hw in ((1, 7), (2, 7), (2, 8)):
    xx = np.random.default_rng(stride + hw).normal(size=(2, hw, hw, 4)).astype(np.float32)
    ww = np.random.default_rng(1).normal(size=(3, 3, 1, 4)).astype(np.float32)
    ref = jax.lax.conv_general_dilated(xx, ww, (stride, stride), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                       feature_group_count=4)
    np.testing.assert_allclose(model_lib.depthwise_conv(xx, ww[:, :, 0], stride), ref,
                               rtol=1e-5, atol=1e-5)


def test_vmapped_rules_equal_static_rules():
  """One program with the rule as numbers computes what the string rule does (forward
  and gradient), so the study's vmapped rows are the rules they claim to be."""
  x = jnp.array([-1.5, -0.5, 0.2, 0.7, 1.2, -0.1])
  mask = jnp.array([True, False, True, False, True, False])
  up = jnp.arange(1.0, 7.0)
  stacked = jax.tree.map(lambda *a: jnp.stack(a), *[bz.knobs(r) for r in bz.RULES])
  masks = jnp.stack([jnp.ones_like(mask) if r == "ste" else mask for r in bz.RULES])
  for w in (True, False):
    f = lambda v, m, k: (bz.binarize_k(v, m, k, w) * up).sum()
    vals = jax.vmap(lambda m, k: bz.binarize_k(x, m, k, w))(masks, stacked)
    grads = jax.vmap(lambda m, k: jax.grad(f)(x, m, k))(masks, stacked)
    for i, r in enumerate(bz.RULES):
      np.testing.assert_array_equal(vals[i], bz.binarize(x, mask, r, w), err_msg=r)
      g = jax.grad(lambda v: (bz.binarize(v, mask, r, w) * up).sum())(x)
      np.testing.assert_array_equal(grads[i], g, err_msg=f"{r} weight={w}")


def test_stompp_step_gives_committed_weights_zero_gradient():
  config = load_config(CONFIG, "smoke")
  ds = sources.load("digits")
  model = model_lib.build(config, ds.num_classes)
  opt = train_lib.make_optimizer(config)
  state = jax.jit(lambda r: train_lib.init_state(config, model, opt, ds.input_shape, r))(
      jax.random.PRNGKey(0))
  batch = sources.train_batch(ds, 0, 0, 16)
  progress = jnp.array([0.5] * model.num_binary)

  def loss(params):
    logits, _ = model.apply({"params": params, "batch_stats": state["batch_stats"],
                             "ranks": state["ranks"]}, batch["image"], progress,
                            train=True, mutable=["batch_stats"])
    return logits.sum()
  grads = jax.jit(jax.grad(loss))(state["params"])
  for name in ("bin0", "bin1"):
    mask = bz.mask_from_ranks(state["ranks"][name]["w"], 0.5)
    g = grads[name]["kernel"]
    assert bool(jnp.all(g[mask] == 0.0))
    assert bool(jnp.any(g[~mask] != 0.0))


def test_missing_fashion_mnist_names_path_and_fix(tmp_path):
  config = load_config(CONFIG, f"smoke,data=fashion_mnist,data_path={tmp_path}/nope")
  with pytest.raises(FileNotFoundError, match=r"nope.*apt-get install dataset-fashion-mnist"):
    experiment.train_and_evaluate(config, str(tmp_path / "wd"))


def test_bf16_step_tracks_float32_and_runs_its_convolutions_in_bf16():
  losses, dots = {}, {}
  for dtype in ("float32", "bfloat16"):
    config = config_lib.load(
        f"configs/stompp.py:smoke,model=resnet10,resnet_width=4,compute_dtype={dtype}")
    ds = experiment.load_data(config)
    _, task = experiment.make_task(config, ds)
    state = jax.jit(task.init)(jax.random.PRNGKey(0))
    batch = jax.tree.map(jnp.asarray, task.train_batch(0, slice(None)))
    text = str(jax.make_jaxpr(task.train_step)(state, batch, jax.random.PRNGKey(1),
                                               jnp.int32(0)))
    ops = [l for l in text.splitlines() if "conv_general_dilated" in l or "dot_general" in l]
    dots[dtype] = (len(ops), sum("bf16" in l for l in ops))
    step = jax.jit(task.train_step)
    losses[dtype] = []
    for i in range(4):
      state, m = step(state, jax.tree.map(jnp.asarray, task.train_batch(i, slice(None))),
                      jax.random.PRNGKey(i), jnp.int32(i))
      losses[dtype].append(float(m["loss"]))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state["params"]))
  assert dots["float32"][1] == 0 and dots["bfloat16"][1] == dots["bfloat16"][0] > 10
  # Same weights at step 0: bf16 rounds at 2^-8 relative, the loss agrees within 1%.
  rel = np.abs(np.subtract(losses["bfloat16"], losses["float32"])) / np.abs(losses["float32"])
  print("bf16 vs float32 loss, relative difference per step:", rel)
  np.testing.assert_allclose(losses["bfloat16"][0], losses["float32"][0], rtol=1e-2)
  # After updates the runs part faster than the LM's (12 steps within 1%): rounding flips
  # the sign of near-zero pre-activations, and a binary network passes on only signs.
  # Measured: within 14% over these 4 steps on ResNet-18, 16% on this ResNet-10 (the
  # smallest layout: half the compile); 25% bounds it.
  np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=0.25)


def _one_device():
  return jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))


def test_depth_study_cell_spread_over_8_devices_equals_one_device(monkeypatch):
  """A depth-study cell (3 seeds, one per device on 3 of the 8 forced devices, by
  core.sharding.spread) gives the numbers of the same cell on one device."""
  from jaxpapers.core import sharding
  from jaxpapers.papers.stompp import study
  assert jax.device_count() == 8
  placed = []  # devices holding each spread call's outputs (training, then accuracy)
  spread = sharding.spread  # the module attribute is patched below (monkeypatch undoes it)

  def spread_and_record(*a, **k):
    run = spread(*a, **k)

    def call(*args):
      out = run(*args)
      placed.append(len(jax.tree.leaves(out)[0].sharding.device_set))
      return out
    return call

  monkeypatch.setattr(study.sharding, "spread", spread_and_record)
  config = load_config(CONFIG, "smoke")
  cfg = config_lib.override(config, {"model.name": "mlp", "model.depth": 2,
                                     "model.width": 16, "train.steps": 6})
  ds = sources.digits()
  images, labels = jnp.asarray(ds.train.images), jnp.asarray(ds.train.labels)
  acc8, loss8, g8 = study.train_cell(cfg, ds, images, labels, [0, 1, 2])
  acc1, loss1, g1 = study.train_cell(cfg, ds, images, labels, [0, 1, 2], mesh=_one_device())
  assert placed == [3, 3, 1, 1], placed  # one seed per device, then all on one device
  assert loss8.shape == (3, 6) and g8.shape[:2] == (3, 6)
  assert len(set(loss8[:, -1].tolist())) == 3  # the seeds differ: no row was dropped
  np.testing.assert_allclose(loss8, loss1, rtol=1e-5)
  np.testing.assert_allclose(g8, g1, rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(acc8, acc1)  # counts of correct test images


def test_resnet_study_rows_spread_over_8_devices_equal_rows_one_at_a_time(resnet_runs):
  """The architecture study's vmapped rows, split over the 8 devices (3 rows on 3 of
  the 8), equal the same rows trained one after another on one device (its CPU path)."""
  spread, one = resnet_runs[False], resnet_runs[True]
  assert spread["loss"].shape == (25, 3)
  np.testing.assert_allclose(spread["loss"], one["loss"], rtol=1e-5)
  np.testing.assert_allclose(spread["gnorm"], one["gnorm"], rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(spread["committed"], one["committed"])
  chex.assert_trees_all_close(spread["states"]["params"], one["states"]["params"],
                              rtol=1e-5, atol=1e-6)


def test_paper_plan_needs_no_dataset_and_allocates_no_batch():
  config = load_config(CONFIG, "paper")
  ds = experiment.load_data(config)
  assert (ds.input_shape, ds.num_classes) == ((224, 224, 3), 1000)
  _, task = experiment.make_task(config, ds)
  batch = task.train_batch(0, slice(None))
  assert batch["image"].shape == (256, 224, 224, 3) and batch["image"].strides[0] == 0
  with pytest.raises(ValueError, match="shape-only"):
    experiment.train_and_evaluate(config, "/nonexistent")
  with pytest.raises(ValueError, match="shapes:cifar10"):
    experiment.load_data(config_lib.override(config, {"data.name": "shapes:mnist"}))
