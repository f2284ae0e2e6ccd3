"""Exact resume: a run SIGKILLed mid-training and restarted ends bitwise identical."""
import os
import signal
import subprocess
import time

import numpy as np

from tests import _runs

ARGS = ("--config.train.steps=300", "--config.train.checkpoint_every=20",
        "--config.train.log_every=1", "--config.train.eval_every=100")


def test_sigkill_then_resume_is_bitwise_exact(tmp_path):
  env = _runs.env_with_devices(2)
  ref, killed = tmp_path / "ref", tmp_path / "killed"
  _runs.run(_runs.train_cmd("stompp.py:smoke", ref, *ARGS), env)

  proc = subprocess.Popen(_runs.train_cmd("stompp.py:smoke", killed, *ARGS), env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  ckpts = killed / "checkpoints"
  deadline = time.time() + 240
  while time.time() < deadline and proc.poll() is None:
    if ckpts.exists() and any(d.isdigit() and int(d) >= 40 for d in os.listdir(ckpts)):
      break
    time.sleep(0.01)
  assert proc.poll() is None, "run finished before it could be killed"
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  steps = [int(d) for d in os.listdir(ckpts) if d.isdigit()]
  assert max(steps) < 300, "killed too late to test resume"

  out = _runs.run(_runs.train_cmd("stompp.py:smoke", killed, *ARGS), env)
  assert "resumed from step" in out.stdout

  step_a, a = _runs.final_state(ref)
  step_b, b = _runs.final_state(killed)
  assert step_a == step_b == 300
  fa, fb = _runs.flat(a), _runs.flat(b)
  assert fa.keys() == fb.keys()
  for k in fa:
    np.testing.assert_array_equal(fa[k], fb[k], err_msg=k)
  # metrics.jsonl holds each step once, with the uninterrupted run's values.
  _runs.assert_same_metrics(killed, ref)
