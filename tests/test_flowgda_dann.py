"""flowgda's DANN against an independent textbook DANN (issue 44).

`textbook_dann` below is written from Ganin & Lempitsky (2015), not from
`baselines.dann`: feature extractor + label classifier + domain classifier, the domain
classifier behind a gradient-reversal layer (here the stop-gradient identity, not a
custom VJP), one optimizer on all three, loss = source cross-entropy + domain binary
cross-entropy (source 1, target 0), lambda_p = 2 / (1 + exp(-10 p)) - 1, the network
started fresh and the discriminator shown the source and the target only.

What the two share on purpose (so that they are one computation and can be compared
exactly): the initial weights (`nets` He-normal init from the same keys) and the
minibatch indices (drawn from the same key stream). Everything that is DANN (the
reversal, the losses, the schedule, which domains the discriminator sees, where training
starts, the update) is written here independently. The first study's DANN started from
the shared source model and pooled every unlabeled domain on the discriminator's target
side; it fails `test_dann_is_the_textbook_dann`.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.papers.flowgda import baselines
from jaxpapers.papers.flowgda import data
from jaxpapers.papers.flowgda import nets


def _mlp(layers, h):
  for k, (w, b) in enumerate(layers):
    h = h @ w + b[None, :]  # explicit broadcast (rank promotion is an error in tests)
    if k < len(layers) - 1:
      h = jax.nn.relu(h)
  return h


def _reverse(z, lam):
  """Gradient reversal: the value of z, gradient -lam times the incoming one."""
  return jax.lax.stop_gradient(z) - lam * (z - jax.lax.stop_gradient(z))


def textbook_dann(net, disc, x_src, y_src, x_tgt, num_classes, lr, steps, batch, k_run):
  """Ganin & Lempitsky (2015) with Adam; net = {"enc": MLP, "head": MLP}, disc an MLP
  with one output (logit of "source"). Returns the trained net."""
  opt = optax.adam(lr)

  def loss(p, xs, ys, xt, lam):
    fs, ft = _mlp(p["net"]["enc"], xs), _mlp(p["net"]["enc"], xt)
    logits = _mlp(p["net"]["head"], fs)[:, :num_classes]
    label = optax.softmax_cross_entropy_with_integer_labels(logits, ys).mean()
    dom_logit = _mlp(p["disc"], _reverse(jnp.concatenate([fs, ft]), lam))[:, 0]
    dom = jnp.concatenate([jnp.ones(len(xs)), jnp.zeros(len(xt))])
    return label + optax.sigmoid_binary_cross_entropy(dom_logit, dom).mean()

  def step(carry, t):
    p, s = carry
    ks, kt = jax.random.split(jax.random.fold_in(k_run, t))
    i = jax.random.choice(ks, x_src.shape[0], (batch,), replace=False)
    j = jax.random.choice(kt, x_tgt.shape[0], (batch,), replace=False)
    prog = t / steps
    lam = 2.0 / (1.0 + jnp.exp(-10.0 * prog)) - 1.0
    g = jax.grad(loss)(p, x_src[i], y_src[i], x_tgt[j], lam)
    u, s = opt.update(g, s, p)
    return (optax.apply_updates(p, u), s), None

  p = {"net": net, "disc": disc}
  (p, _), _ = jax.lax.scan(step, (p, opt.init(p)), jnp.arange(steps))
  return p["net"]


def _setup():
  # The study's Gaussian-shift generator at smoke size: D = 4 domains of 64 points.
  g = data.make("gauss", n_inter=2, n=64, seed=0)
  mask = jnp.arange(10) < g.num_classes  # classes padded to 10, as in the study
  init = lambda k: nets.classifier_init(k, g.x.shape[-1], (32,), 8, 16, 10)  # noqa: E731
  hp = {"steps_per_round": 10, "batch": 16, "dann_lambda": 1.0, "dann_disc_hidden": 16}
  return g, mask, init, hp


def test_dann_is_the_textbook_dann():
  g, mask, init, hp = _setup()
  key, lr = jax.random.key(3), 3e-3
  steps = (g.num_domains - 1) * hp["steps_per_round"]  # DANN's budget in the study
  # a trained source model would be passed here; DANN must not start from it
  source_model = init(jax.random.key(99))
  ours = jax.jit(lambda: baselines.dann(key, source_model, jnp.asarray(g.x),
                                        jnp.asarray(g.y[0]), mask, lr, hp, init))()
  k_net, k_disc, k_run = jax.random.split(key, 3)
  ref = jax.jit(lambda: textbook_dann(
      init(k_net), nets.mlp_init(k_disc, (8, hp["dann_disc_hidden"], 1)),
      jnp.asarray(g.x[0]), jnp.asarray(g.y[0]), jnp.asarray(g.x[-1]), g.num_classes, lr,
      steps, hp["batch"], k_run))()
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
  pa = np.asarray(nets.logits(ours, jnp.asarray(g.x_test), mask).argmax(-1))
  pb = np.asarray(_mlp(ref["head"], _mlp(ref["enc"], g.x_test))[:, :g.num_classes].argmax(-1))
  np.testing.assert_array_equal(pa, pb)
  # the weights moved from their fresh init (a run that did nothing would also "match")
  assert not np.allclose(np.asarray(ours["enc"][0][0]), np.asarray(init(k_net)["enc"][0][0]))


def test_dann_config_defaults_to_the_textbook_and_refuses_unknown_options():
  def get_config(arg):
    return config_lib.load("configs/flowgda.py:" + arg)

  a = get_config("smoke=true").adapt
  assert (a.dann_init, a.dann_domains) == ("fresh", "target")
  for bad in ("dann_init=teacher", "dann_domains=all"):
    with pytest.raises(ValueError, match="dann_init"):
      get_config(bad)
