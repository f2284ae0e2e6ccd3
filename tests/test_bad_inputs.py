"""Every config, a list of bad inputs: each stops before training with one line and exit 1.

One subprocess per config runs the train launcher's own parse and entry (`launch/_common`)
once per bad input, so the whole matrix costs one JAX start per config. "Before training"
is checked on the workdir: no metrics, no checkpoint. New configs must add their row to
ARGS (the test fails for a config it does not know).
"""
import glob
import json
import os
import subprocess
import sys

import pytest

from tests import _runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Per config: the config args that set its run length, its batch, a float that must not be
# NaN (its learning rate where it has one) and its user-data path; None where it has none.
ARGS = {
    "bfmnet": ("steps", "batch", "lr", None),
    "coupled_sae": ("steps", "batch", "lrs", "path"),
    "drift_ident": ("horizon", None, "noise", "cmapss_dir"),
    "flowgda": ("flow_steps", "batch", None, "path"),
    "hybrid_mup": ("steps", "batch_size", "lr", "path"),
    "latent_debate": ("mlp_steps", "batch", "mlp_lrs", "csv"),
    "lgs": ("steps", "batch_size", "lr", "real_path"),
    "lhdlm": ("steps", "batch_size", "lr", "path"),
    "lie_bases": ("steps", None, "lrs", "data_path"),
    "llops": ("steps", "batch_size", "lr", "path"),
    "lm": ("steps", "batch_size", "lr", "path"),
    "lora_lr": ("steps", "batch", "lr", None),
    "lpr": ("steps", None, None, "npz_dir"),
    "motor_adapters": ("steps", "batch", "lrs", "drawings"),
    "neural_observer": ("steps", None, "lr", "csv_path"),
    "pd_autoscale": ("iterations", "envs", "lr", "trace"),
    "perturbed_eg": ("t_max", None, "sigma", None),
    "stgib": ("steps", "batch", "lr", "path"),
    "stompp": ("steps", "batch_size", "lr", "data_path"),
    "visitation_reward": ("iterations", "num_envs", "lr", None),
}
CONFIGS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "*.py")))

DRIVER = r"""
import contextlib, io, json, os, sys
sys.path.insert(0, os.path.join({root!r}, "launch"))
import _common
from absl import flags
main = _common.main_for("train_and_evaluate")
out = []
for argv in json.loads(sys.argv[1]):
  err = io.StringIO()
  code = 0
  with contextlib.redirect_stderr(err):
    try:
      flags.FLAGS.unparse_flags()
      main(_common.parse_flags(["train.py"] + argv))
    except SystemExit as e:
      code = e.code
    except BaseException:  # what the launcher would print as a traceback
      import traceback
      code, _ = "uncaught", traceback.print_exc(file=err)
  out.append({{"argv": argv, "code": code, "stderr": err.getvalue()}})
print("RESULT " + json.dumps(out))
"""


def bad_inputs(name, tmp_path):
  steps, batch, number, path = ARGS[name]
  spec = f"--config=configs/{name}.py:smoke"
  afile = tmp_path / "a_file"
  afile.write_text("not a directory")
  cases = {
      "unknown arg": spec + ",no_such_arg=1",
      "wrong type": spec + f",{steps}=abc",
      "zero steps": spec + f",{steps}=0",
      "negative steps": spec + f",{steps}=-3",
      "workdir is a file": spec,
  }
  if batch:
    cases["zero batch"] = spec + f",{batch}=0"
    cases["negative batch"] = spec + f",{batch}=-1"
  if number:
    cases["nan"] = spec + f",{number}=nan"
  if path:
    cases["missing data path"] = spec + f",{path}={tmp_path / 'no_such_data'}"
  # Each case its own workdir, so a case that trains shows in its own directory.
  return {what: [arg, f"--workdir={afile if what == 'workdir is a file' else tmp_path / what}"]
          for what, arg in cases.items()}


@pytest.mark.parametrize("name", CONFIGS)
def test_bad_input_is_one_line_before_training(name, tmp_path):
  assert name in ARGS, f"configs/{name}.py: add its row to ARGS in {__file__}"
  cases = bad_inputs(name, tmp_path)
  r = subprocess.run([sys.executable, "-c", DRIVER.format(root=ROOT),
                      json.dumps(list(cases.values()))], cwd=ROOT, capture_output=True,
                     text=True, timeout=600, env=_runs.env_with_devices(1))
  assert "RESULT " in r.stdout, r.stderr[-3000:]
  results = json.loads(r.stdout.split("RESULT ", 1)[1])
  for what, res in zip(cases, results):
    lines = res["stderr"].strip().splitlines()
    assert res["code"] == 1, (what, res)
    assert 1 <= len(lines) <= 3 and "Traceback" not in res["stderr"], (what, res)
    assert lines[-1].startswith("error: "), (what, res)
    trained = [p for p in ("metrics.jsonl", "checkpoints") if (tmp_path / what / p).exists()]
    assert not trained, (what, f"{name} started training before refusing", trained)
