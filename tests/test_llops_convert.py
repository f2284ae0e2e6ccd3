"""llops part 3 (conversion): the parameter transfer between a source LM and a target map
keeps every shared leaf bit for bit, adds only the new map's leaves, and the converted LM
gives a finite loss; the continuation reads the source's data stream where it stopped."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.nn import lm
from jaxpapers.nn import lm_experiment
from jaxpapers.papers.llops import convert
from jaxpapers.papers.llops import model as model_lib

V = 256


def _leaves(tree):
  return {jax.tree_util.keystr(p): np.asarray(x)
          for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize("source,target", [("taylor", "llops"), ("softmax", "hedgehog")])
def test_transfer_keeps_shared_parameters_and_loss_is_finite(source, target):
  cfg = config_lib.load("configs/llops.py:smoke")
  _, src_lm, _ = model_lib.build(cfg, V, source)
  tgt_model, tgt_lm, mp = model_lib.build(cfg, V, target)
  src = src_lm.init(jax.random.PRNGKey(1))
  dst = tgt_lm.init(jax.random.PRNGKey(2))
  out, copied, fresh, dropped = convert.transfer(src, dst)
  s, d, o = _leaves(src), _leaves(dst), _leaves(out)
  assert set(o) == set(d)                        # the target's structure, nothing else
  for k in copied:                               # shared: the source's bits and dtype
    assert o[k].dtype == s[k].dtype and np.array_equal(o[k], s[k]), k
  assert copied and set(copied) == set(s) & set(d)
  # The new leaves are exactly the target map's parameters, at the target's own init.
  assert fresh and all("fm_" in k for k in fresh)
  assert {k.split("'")[-2][3:] for k in fresh} == set(mp.init(jax.random.PRNGKey(0), 8))
  for k in fresh:
    assert np.array_equal(o[k], d[k])
  # The source's own map parameters (Taylor's projection) are the only ones dropped.
  assert all("fm_" in k for k in dropped) and bool(dropped) == (source == "taylor")
  # Every shared weight differs between the two inits, so the copy is visible.
  assert all(not np.array_equal(s[k], d[k]) for k in copied if s[k].std() > 0)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, V, (2, cfg.data.seq_len + 1)))
  loss = float(jax.jit(lambda p: jnp.mean(lm.next_token_nats(tgt_model.apply, p, tokens, None)))(out))
  assert np.isfinite(loss) and 0 < loss < 3 * np.log(V)


def test_transfer_to_the_same_map_is_the_identity_and_refuses_other_sizes():
  cfg = config_lib.load("configs/llops.py:smoke")
  model, lm_model, _ = model_lib.build(cfg, V, "taylor")
  src = lm_model.init(jax.random.PRNGKey(1))
  out, _, fresh, dropped = convert.transfer(src, lm_model.init(jax.random.PRNGKey(2)))
  assert not fresh and not dropped
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, V, (2, cfg.data.seq_len)))
  apply = jax.jit(model.apply)
  np.testing.assert_array_equal(apply(out, tokens), apply(src, tokens))
  big = config_lib.load("configs/llops.py:smoke,dim=32")
  _, big_lm, _ = model_lib.build(big, V, "llops")
  with pytest.raises(ValueError, match="cannot transfer"):
    convert.transfer(src, big_lm.init(jax.random.PRNGKey(0)))


def test_continuation_reads_the_stream_where_the_source_stopped():
  cfg = config_lib.load("configs/llops.py:smoke")
  data = lm_experiment.load_data(cfg)
  _, lm_model, _ = model_lib.build(cfg, V, "llops")
  task = lm.make_task(cfg, data, lm_model, seed=3)
  cont = convert.continued_task(task, 7)
  rows = slice(None)
  np.testing.assert_array_equal(cont.train_batch(0, rows)["tokens"],
                                task.train_batch(7, rows)["tokens"])
  assert not np.array_equal(cont.train_batch(0, rows)["tokens"],
                            task.train_batch(0, rows)["tokens"])


def test_bad_convert_config_is_one_line():
  from jaxpapers.papers.llops import experiment
  for bad, msg in (("convert_maps=window", "convert has 'window'"),
                   ("convert_source=nope", "convert has 'nope'"),
                   ("convert_steps=0", "convert.steps")):
    with pytest.raises(ValueError, match=msg):
      experiment.validate(config_lib.load(f"configs/llops.py:smoke,{bad}"))
