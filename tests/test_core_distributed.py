"""Two processes x 2 CPU devices end a short run like one process x 4 devices."""
import subprocess

import numpy as np

from tests import _runs

ARGS = ("--config.train.steps=12",)


def test_two_processes_match_one_process(tmp_path):
  single, multi = tmp_path / "single", tmp_path / "multi"
  _runs.run(_runs.train_cmd("stompp.py:smoke", single, *ARGS), _runs.env_with_devices(4))

  port = _runs.free_port()
  env = _runs.env_with_devices(2)
  procs = [subprocess.Popen(
      _runs.train_cmd("stompp.py:smoke", multi, *ARGS,
                      f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                      f"--process_id={i}"),
      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
      for i in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]

  _, a = _runs.final_state(single)
  _, b = _runs.final_state(multi)
  fa, fb = _runs.flat(a["params"]), _runs.flat(b["params"])
  assert fa.keys() == fb.keys()
  for k in fa:
    np.testing.assert_allclose(fa[k], fb[k], rtol=1e-4, atol=1e-5, err_msg=k)
  # Only process 0 wrote the metrics: one line per logged step, not two.
  lines = (multi / "metrics.jsonl").read_text().splitlines()
  assert len([l for l in lines if '"step": 12, "split": "test"' in l]) == 1
