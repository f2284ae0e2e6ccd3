"""StoMPP: the binarization rules, the schedule, the masks and the committed evaluation."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def _trained_smoke(tmp_path, arg="smoke"):
  config = load_config(CONFIG, arg)
  state, final = experiment.train_and_evaluate(config, str(tmp_path))
  return config, jax.device_get(state), final


def test_end_of_training_is_fully_committed_and_reported(tmp_path):
  config, state, final = _trained_smoke(tmp_path)
  ds = sources.load("digits")
  model = model_lib.build(config, ds.num_classes)
  assert experiment.committed_fraction(config, model, state, config.train.steps) == 1.0
  # The training-path forward at the final step's masks equals the hard-sign network.
  progress = train_lib.progress_at(config, model.num_binary, config.train.steps)
  assert bool(jnp.all(progress == 1.0))
  variables = {k: state[k] for k in ("params", "batch_stats", "ranks")}
  x = ds.test.images[:64]
  np.testing.assert_array_equal(model.apply(variables, x, progress, train=False),
                                train_lib.logits_hard(model, state, x))
  # Every binary weight the committed network uses is exactly +-1.
  kernel = state["params"]["bin0"]["kernel"]
  assert set(np.unique(np.asarray(bz.hard_sign(kernel)))) <= {-1.0, 1.0}
  # The reported accuracy is the hard network's accuracy on the test split.
  logits = train_lib.logits_hard(model, state, ds.test.images)
  acc = float((logits.argmax(-1) == ds.test.labels).mean())
  assert abs(acc - final["accuracy"]) < 1e-6


def test_stompp_step_gives_committed_weights_zero_gradient():
  config = load_config(CONFIG, "smoke")
  ds = sources.load("digits")
  model = model_lib.build(config, ds.num_classes)
  opt = train_lib.make_optimizer(config)
  state = train_lib.init_state(config, model, opt, ds.input_shape, jax.random.PRNGKey(0))
  batch = sources.train_batch(ds, 0, 0, 16)
  progress = jnp.array([0.5] * model.num_binary)

  def loss(params):
    logits, _ = model.apply({"params": params, "batch_stats": state["batch_stats"],
                             "ranks": state["ranks"]}, batch["image"], progress,
                            train=True, mutable=["batch_stats"])
    return logits.sum()
  grads = jax.grad(loss)(state["params"])
  for name in ("bin0", "bin1"):
    mask = bz.mask_from_ranks(state["ranks"][name]["w"], 0.5)
    g = grads[name]["kernel"]
    assert bool(jnp.all(g[mask] == 0.0))
    assert bool(jnp.any(g[~mask] != 0.0))


def test_missing_fashion_mnist_names_path_and_fix(tmp_path):
  config = load_config(CONFIG, f"smoke,data=fashion_mnist,data_path={tmp_path}/nope")
  with pytest.raises(FileNotFoundError, match=r"nope.*apt-get install dataset-fashion-mnist"):
    experiment.train_and_evaluate(config, str(tmp_path / "wd"))
