"""nn.params: parameter classes, per-class init scales and LR multipliers through optax."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers.nn import params, stack


def model(dim):
  return stack.build(stack.StackConfig(vocab_size=64, dim=dim, pattern="AA", n_heads=4))


def test_classes_of_the_stack():
  cls = params.classes(model(32).specs)
  assert cls["embed"] == "embedding" and cls["unembed"] == "output"
  assert cls["final_norm"] == "vector" and cls["layers"][0]["attn_norm"] == "vector"
  assert {cls["layers"][0][k] for k in ("q", "k", "v", "o", "gate", "up", "down")} == {"hidden"}


def test_mup_init_std_and_lr_multipliers_scale_with_width():
  base = 32
  for width in (32, 128):
    m = model(width)
    par = params.mup(width, base, std=0.02)
    p = m.init(jax.random.PRNGKey(0), par)
    r = base / width
    # Empirical std of a large matrix against the rule (hidden: 0.02 sqrt(r), output: 0.02 r).
    assert float(jnp.std(p["layers"][0]["up"])) == pytest.approx(0.02 * np.sqrt(r), rel=0.05)
    assert float(jnp.std(p["unembed"])) == pytest.approx(0.02 * r, rel=0.05)
    assert float(jnp.std(p["embed"])) == pytest.approx(0.02, rel=0.05)
    mults = params.lr_multipliers(m.specs, par)
    assert mults["layers"][0]["q"] == pytest.approx(r)
    assert mults["unembed"] == pytest.approx(r)
    assert mults["embed"] == 1.0 and mults["final_norm"] == 1.0
  # At the base width muP is SP.
  sp, mp = params.standard(0.02), params.mup(32, 32, 0.02)
  leaves = jax.tree.leaves(model(32).specs, is_leaf=params.is_spec)
  assert [sp.init_std(s) for s in leaves] == [mp.init_std(s) for s in leaves]


def test_per_class_multipliers_equal_adamw_with_scaled_lr():
  """adamw(multipliers) on a two-leaf tree == optax.adamw run per leaf at lr * m."""
  p = {"w": jnp.asarray(np.random.default_rng(0).standard_normal((3, 4)), jnp.float32),
       "b": jnp.asarray(np.random.default_rng(1).standard_normal((4,)), jnp.float32)}
  g = jax.tree.map(lambda x: jnp.sin(3 * x) + 0.1, p)
  mults = {"w": 0.25, "b": 1.0}
  mask = {"w": True, "b": False}
  lr, wd = 0.1, 0.01
  ours = params.adamw(lambda n: lr, b1=0.9, b2=0.95, weight_decay=wd, multipliers=mults,
                      mask=mask)
  s = ours.init(p)
  for _ in range(3):
    u, s = ours.update(g, s, p)
  for k in p:
    ref = optax.adamw(lr * mults[k], b1=0.9, b2=0.95, weight_decay=wd if mask[k] else 0.0)
    rs = ref.init(p[k])
    for _ in range(3):
      ru, rs = ref.update(g[k], rs, p[k])
    np.testing.assert_allclose(np.asarray(u[k]), np.asarray(ru), rtol=1e-6, atol=1e-8)


def test_bad_class_names_raise():
  with pytest.raises(ValueError, match="unknown parameter class 'embeding'"):
    params.per_class({"embeding": 0.1}, {})
  with pytest.raises(ValueError, match="unknown parameter class"):
    params.ParamSpec((2,), "weights")
