"""The supervised loop's contracts: NaN guard naming the step, metrics, config.json."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.core import loop
from jaxpapers.core import metrics


def _config(steps=6):
  c = config_lib.parse_arg("", seed=0)
  c.mesh = [("data", -1)]
  c.train = config_lib.parse_arg("", steps=steps, batch_size=8, log_every=1, eval_every=3,
                                 checkpoint_every=3, keep_checkpoints=2)
  c.eval = config_lib.parse_arg("", batch_size=8)
  return c


def _task(nan_at=None):
  """Linear regression; the target becomes NaN at step `nan_at`."""
  def train_batch(step, rows):
    x = np.random.default_rng(step).normal(size=(8, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    if step == nan_at:
      y[0] = np.nan
    return {"x": x[rows], "y": y[rows]}

  def train_step(state, batch, rng, step):
    loss_fn = lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2)
    loss, g = jax.value_and_grad(loss_fn)(state["w"])
    return {"w": state["w"] - 0.1 * g}, {"loss": loss, "grad_norm": jnp.linalg.norm(g)}

  def eval_step(state, batch):
    err = (batch["x"] @ state["w"] - batch["y"]) ** 2
    return {"mse": (err * batch["mask"]).sum(), "count": batch["mask"].sum()}

  def eval_batches(rows):
    b = train_batch(1000, slice(None))
    yield {"x": b["x"][rows], "y": b["y"][rows], "mask": np.ones(8, np.float32)[rows]}

  return loop.Task(init=lambda rng: {"w": jnp.zeros(3)}, train_step=train_step,
                   eval_step=eval_step, train_batch=train_batch, eval_batches=eval_batches)


def test_loop_trains_and_writes_metrics_and_config(tmp_path):
  state, final = loop.train(_config(), str(tmp_path), _task())
  assert final["mse"] < 5.0
  rows = metrics.read_metrics(str(tmp_path))
  assert [r["step"] for r in rows if r["split"] == "train"] == [1, 2, 3, 4, 5, 6]
  assert "steps_per_s" in rows[-2] and "eta_s" in rows[-2]
  assert json.loads((tmp_path / "config.json").read_text())["train"]["steps"] == 6


def test_nan_loss_raises_naming_the_step(tmp_path):
  with pytest.raises(FloatingPointError, match="grad_norm, loss at step 5"):
    loop.train(_config(), str(tmp_path), _task(nan_at=4))  # batch 4 feeds step 5


def test_check_finite_names_inf_gradients():
  with pytest.raises(FloatingPointError, match="grad_norm at step 7"):
    metrics.check_finite(7, {"loss": 1.0, "grad_norm": np.inf})


def test_nan_at_a_checkpoint_step_is_never_checkpointed(tmp_path):
  config = _config()
  config.train.eval_every = 100  # step 3 is a checkpoint step but not an eval step
  with pytest.raises(FloatingPointError, match="at step 3"):
    loop.train(config, str(tmp_path), _task(nan_at=2))
  ckpts = tmp_path / "checkpoints"
  # No save of step 3 was even started (orbax writes "3.orbax-checkpoint-tmp" first).
  assert not ckpts.exists() or not any(p.name.startswith("3") for p in ckpts.iterdir())
