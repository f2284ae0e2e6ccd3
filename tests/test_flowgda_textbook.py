"""FlowGDA (issue 44): our fresh-student GST held against a textbook GST and a stated
accuracy on the study's Gaussian shift.

The textbook GST is written here from Kumar et al. (2020) with scikit-learn, sharing no
code with `baselines`: a fresh `LogisticRegression` (sklearn's defaults, C = 1) fitted on
the source, then per intermediate domain and the target in order the current model
pseudo-labels the domain, the 10% least confident rows are dropped, and a *new* model is
fitted to the rest. Ours is `baselines.gst_from_source` with the study's MLP
(input -> 128 -> 64 -> 16 -> 32 -> classes), L2 weight decay and early stopping.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from jaxpapers.papers.flowgda import baselines
from jaxpapers.papers.flowgda import data
from jaxpapers.papers.flowgda import nets


def _textbook_gst(x_DxNxP, y_src, x_test, y_test, drop=0.1):
  clf = LogisticRegression(max_iter=2000).fit(x_DxNxP[0], y_src)
  for x in x_DxNxP[1:]:
    prob = clf.predict_proba(x)
    conf = prob.max(1)
    keep = conf >= np.quantile(conf, drop)
    clf = LogisticRegression(max_iter=2000).fit(x[keep], clf.classes_[prob.argmax(1)][keep])
  return (clf.predict(x_test) == y_test).mean()


def test_fresh_gst_beats_the_source_and_holds_level_with_a_textbook_gst_on_the_gaussian_shift():
  # The study's Gaussian-shift generator at the study's size (6 intermediate domains, 400
  # points, seed 0) and the study's fresh-GST recipe (400 Adam steps per round, early
  # stopping every 20 on 20% held out, batch 128) at one lane of its grid (lr 1e-3,
  # wd 1e-2), 3 training keys vmapped. Measured (commit 6fa1c1d + this change): source
  # models 0.748 / 0.572 / 0.582 (mean 0.634), our GST 0.820 / 0.866 / 0.822 (mean
  # 0.836), the textbook logistic GST 0.808. Bounds with margin: our mean above 0.76
  # (the bar is a GST that adapts; 0.76 is the measured mean less about 2 of its
  # per-key stds, 0.021), above the source models by 0.10, and no more than 0.05 below
  # the textbook GST. A GST that does not adapt, or a handicapped one that a 10-line
  # textbook version beats clearly, fails.
  g = data.make("gauss", n_inter=6, n=400, seed=0)
  hp = {"holdout": 0.2, "eval_every": 20, "retrain_steps": 400, "batch": 128, "drop": 0.1}
  mask = jnp.arange(10) < g.num_classes
  init = lambda k: nets.classifier_init(k, g.x.shape[-1], (128, 64), 16, 32, 10)  # noqa: E731
  apply = lambda p, x: nets.logits(p, x, mask)  # noqa: E731
  x, y0, xt = jnp.asarray(g.x), jnp.asarray(g.y[0]), jnp.asarray(g.x_test)

  @jax.jit
  @jax.vmap
  def run(key):
    src = baselines.fit_fresh(jax.random.fold_in(key, 1), init, apply, x[0], y0,
                              jnp.ones(y0.shape), 1e-3, 1e-2, hp)
    st = baselines.gst_from_source(key, init, apply, x[0], y0, x[1:], 1e-3, 1e-2, hp)
    return nets.accuracy(apply(src, xt), g.y_test), nets.accuracy(apply(st, xt), g.y_test)

  src, ours = (np.asarray(v) for v in run(jnp.stack([jax.random.key(k) for k in range(3)])))
  textbook = _textbook_gst(g.x, g.y[0], g.x_test, g.y_test)
  assert 0.75 < textbook < 0.87, textbook  # measured 0.808: the reference itself adapts
  assert ours.mean() > 0.76, ours
  assert ours.mean() > src.mean() + 0.10, (src, ours)
  assert ours.mean() > textbook - 0.05, (ours, textbook)


def test_identity_encoder_is_the_inputs_and_the_majority_row():
  # encoder=identity (the input-space lane): no encoder layers, so the features are the
  # inputs and the logits are the head MLP applied to them (checked against NumPy).
  from jaxpapers.core import config as config_lib
  from jaxpapers.papers.flowgda import pipeline
  from jaxpapers.papers.flowgda import study
  cfg = config_lib.load("configs/flowgda.py:smoke=true,encoder=identity")
  arch = pipeline.arch_of(cfg)
  p = nets.classifier_init(jax.random.key(0), 5, arch["hidden"], arch["feat"],
                           arch["head_hidden"], 10)
  x = np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(nets.encode(p, x)), x)
  (w1, b1), (w2, b2) = (tuple(np.asarray(a) for a in layer) for layer in p["head"])
  ref = np.maximum(x @ w1 + b1, 0) @ w2 + b2
  mask = jnp.arange(10) < 10
  np.testing.assert_allclose(np.asarray(nets.logits(p, x, mask)), ref, rtol=1e-5,
                             atol=1e-5)
  with pytest.raises(ValueError, match="encoder"):
    config_lib.load("configs/flowgda.py:encoder=conv")
  # The majority-class row: the source's most frequent label, scored on the target
  # test set, counted by hand from the generated data (both rules report it).
  row = study.majority_row(cfg, "moons", [0])
  g = data.make("moons", cfg.data.n_inter, cfg.data.n, seed=0)
  maj = np.bincount(g.y[0]).argmax()
  assert np.isclose(row["target acc"], (g.y_test == maj).mean())
  assert row["target acc rv"] == row["target acc"]
