"""core.population: member i equals its run alone; a killed population resumes bitwise."""
import dataclasses
import importlib.util
import os
import time

import jax
import numpy as np
import pytest

from jaxpapers.core import checkpoint, loop, population
from jaxpapers.nn import lm, lm_experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lm_config(arg=""):
  spec = importlib.util.spec_from_file_location("lm_cfg", os.path.join(ROOT, "configs", "lm.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  base = "smoke,steps=4,dim=8,pattern=A,seq_len=8,eval_windows=8,log_every=1,eval_every=4,max_chars=20000"
  return mod.get_config(base + ("," + arg if arg else ""))


@pytest.fixture(scope="module")
def setup():
  config = lm_config()
  data = lm_experiment.load_data(config)
  _, lm_model = lm_experiment.build_model(config, data.vocab_size)
  return config, data, lm_model


def make(config, data, lm_model):
  return lambda seed, hp: lm.make_task(config, data, lm_model, seed=seed, hparams=hp)


def flat(tree):
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_grid_and_member_checks():
  g = population.grid([0, 1], lr=[1e-3, 1e-2])
  assert g == [{"seed": 0, "lr": 1e-3}, {"seed": 1, "lr": 1e-3},
               {"seed": 0, "lr": 1e-2}, {"seed": 1, "lr": 1e-2}]
  with pytest.raises(ValueError, match="member 1 has keys"):
    population.population_task(lambda s, h: None, [{"seed": 0, "lr": 1.0}, {"seed": 1}])


def test_stack_puts_members_on_a_leading_axis_with_their_dtypes():
  import jax.numpy as jnp
  trees = [{"w": np.full((2, 3), i, np.float32), "h": jnp.full(4, i, jnp.bfloat16),
            "lr": 0.1 * i, "on": i % 2 == 0, "key": jax.random.PRNGKey(i)} for i in range(3)]
  out = population.stack(trees)
  np.testing.assert_array_equal(out["w"], np.stack([t["w"] for t in trees]))
  np.testing.assert_array_equal(out["key"], np.stack([np.asarray(t["key"]) for t in trees]))
  np.testing.assert_allclose(out["lr"], [0.0, 0.1, 0.2], rtol=1e-7)
  assert out["h"].dtype == jnp.bfloat16 and out["on"].dtype == jnp.bool_
  # a Python float stays weakly typed, as an eager jnp.stack leaves it: a stacked LR must not
  # promote the float32/bf16 arithmetic it enters
  assert out["lr"].weak_type and not out["w"].weak_type
  for i in range(3):  # member i reads back bit for bit (the float32 LR checked above)
    for k in ("w", "h", "on", "key"):
      np.testing.assert_array_equal(np.asarray(out[k])[i], np.asarray(trees[i][k]))


def test_member_equals_its_run_alone_and_a_diverging_member_is_frozen(setup, tmp_path):
  config, data, lm_model = setup
  members = [{"seed": 0, "lr": 1e-2}, {"seed": 1, "lr": 3e-3}, {"seed": 0, "lr": 1e9}]
  task = population.population_task(make(config, data, lm_model), members)
  state, final = loop.train(config, str(tmp_path / "pop"), task)
  per = population.unstack(final, len(members))
  for i, m in enumerate(members[:2]):
    alone_cfg = config.copy_and_resolve_references()
    alone_cfg.seed = m["seed"]
    alone_cfg.optim.lr = m["lr"]
    alone_state, alone_final = loop.train(alone_cfg, str(tmp_path / f"alone{i}"),
                                          lm.make_task(alone_cfg, data, lm_model))
    a, b = flat(population.member(state, i)), flat(alone_state)
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=2e-5, atol=2e-6, err_msg=k)
    assert per[i]["bpb"] == pytest.approx(alone_final["bpb"], rel=1e-5)
  # The two members really differ (seed and LR change the parameters).
  p0, p1 = flat(population.member(state, 0)), flat(population.member(state, 1))
  assert not np.allclose(p0["['params']['unembed']"], p1["['params']['unembed']"])
  # lr=1e9 diverges: frozen at its last finite state, flagged, its eval NaN; the others
  # were unaffected (they matched their runs alone above).
  # Padded to the 8 devices with copies of the last member; the real ones lead.
  assert list(np.asarray(state["diverged"])[:3]) == [False, False, True]
  assert np.isnan(final["bpb/2"])
  for v in jax.tree.leaves(population.member(state, 2)["params"]):
    assert np.isfinite(np.asarray(v)).all()


class Killed(Exception):
  pass


def test_killed_population_resumes_bitwise(setup, tmp_path, capsys):
  config, data, _ = setup
  config = lm_config("steps=6,eval_every=6")
  config.train.checkpoint_every = 3
  _, lm_model = lm_experiment.build_model(config, data.vocab_size)
  members = population.grid([0, 1], lr=[3e-3, 1e-2])
  task = population.population_task(make(config, data, lm_model), members)
  ref_state, _ = loop.train(config, str(tmp_path / "ref"), task)

  def dying_batch(step, rows):
    if step >= 4:  # the 5th step's batch: the checkpoint of step 3 is written by then
      raise Killed(step)
    return task.train_batch(step, rows)

  dying = dataclasses.replace(task, train_batch=dying_batch)  # same placement on the mesh
  with pytest.raises(Killed):
    loop.train(config, str(tmp_path / "run"), dying)
  ckpt = checkpoint.Checkpointer(str(tmp_path / "run"))
  deadline = time.time() + 60  # orbax finalizes the async save of step 3 in the background
  while ckpt.latest_step() != 3 and time.time() < deadline:
    time.sleep(0.2)
    ckpt = checkpoint.Checkpointer(str(tmp_path / "run"))
  assert ckpt.latest_step() == 3
  ckpt.close()
  capsys.readouterr()
  state, _ = loop.train(config, str(tmp_path / "run"), task)
  assert "resumed from step 3" in capsys.readouterr().out
  a, b = flat(ref_state), flat(state)
  assert a.keys() == b.keys()
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
