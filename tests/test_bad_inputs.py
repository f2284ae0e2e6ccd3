"""Every config, every bad input: each stops before anything compiles, in one line, exit 1.

One subprocess per config runs the train launcher's own parse and entry (`launch/_common`)
once per bad input, so the whole matrix costs one JAX start per config. "Before training"
is checked twice: the case compiled no XLA program (JAX's compile events, counted after
the paper module is imported), and its workdir holds no metrics and no checkpoint. New
configs must add their row to ARGS (the test fails for a config it does not know).
"""
import glob
import json
import os
import subprocess
import sys

import pytest

from tests import _runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Per config, the fields a bad input goes into: its run length, its batch (the examples,
# points, streams or environments processed together), a float that must not be NaN (its
# learning rate where it has one) and its user-data path. A name is a config arg
# (`:name=value`); "config.a.b" is a flag override (`--config.a.b=value`), for a field the
# config's args do not expose. None: the config has no such field (no user data).
ARGS = {
    "bfmnet": ("steps", "batch", "lr", None),  # markets are sampled, never read
    "coupled_sae": ("steps", "batch", "lrs", "path"),
    "drift_ident": ("horizon", "seeds", "config.steps.eta_fixed", "cmapss_dir"),
    "flowgda": ("flow_steps", "batch", "config.flow.lr", "path"),
    "hybrid_mup": ("steps", "batch_size", "lr", "path"),
    "latent_debate": ("mlp_steps", "batch", "mlp_lrs", "csv"),
    "lgs": ("steps", "batch_size", "lr", "real_path"),
    "lhdlm": ("steps", "batch_size", "lr", "path"),
    "lie_bases": ("steps", "n_train", "lrs", "data_path"),
    "llops": ("steps", "batch_size", "lr", "path"),
    "lm": ("steps", "batch_size", "lr", "path"),
    "lora_lr": ("steps", "batch", "lr", None),  # tasks are generated; the GGUF is a package
    "lpr": ("steps", "config.optim.batch", "config.optim.lr", "npz_dir"),
    "motor_adapters": ("steps", "batch", "lrs", "drawings"),
    "neural_observer": ("steps", "n_points", "lr", "csv_path"),
    "pd_autoscale": ("iterations", "envs", "lr", "trace"),
    "perturbed_eg": ("t_max", "seeds", "sigma", None),  # games are generated
    "stgib": ("steps", "batch", "lr", "path"),
    "stompp": ("steps", "batch_size", "lr", "data_path"),
    "visitation_reward": ("iterations", "num_envs", "lr", "demos"),
}
# The arg that sets a config's loop chunk (steps per scanned or checkpointed piece), where
# it has one: a chunk of 0 divided by zero inside a config or never advanced a loop
# (visitation_reward hung), so it is refused before training like any other count.
CHUNK = {"lgs": "chunk", "lie_bases": "chunk", "lora_lr": "pretrain_chunk",
         "motor_adapters": "chunk", "pd_autoscale": "chunk", "stompp": "chunk",
         "visitation_reward": "chunk"}
# An arg that must hold at least one entry, where an empty one used to surface as an
# internal error (max() of an empty sequence, a map over no learning rates).
EMPTY = {"lpr": "datasets", "motor_adapters": "lrs"}
# The args under which a config reads its data path (default `<path>=FILE`), for the
# file that exists but does not parse: a path the chosen source does not read is no test.
READ = {
    "coupled_sae": "source=lebel,path={file}",
    "drift_ident": "task=cmapss,cmapss_dir={file}",
    "flowgda": "benchmark=npz,path={file}",
    "lie_bases": "target=file,data_path={file}",
    "lpr": "datasets=npz:{file}",
    "stgib": "source=csv,path={file}",
    "stompp": "data=fashion_mnist,data_path={file}",
}
# The suffix of the data file each config reads (default .npz); a directory takes a file.
SUFFIX = {"lgs": ".hdf5", "latent_debate": ".csv", "neural_observer": ".csv",
          "pd_autoscale": ".csv", "stgib": ".csv"}
# Plain-text corpora: any bytes are text (read with replacement), so none is unreadable.
TEXT = ("hybrid_mup", "lm", "llops", "lhdlm")
CONFIGS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "*.py")))
# A bad input may take this long: the paper module's import, the config and the checks.
# A bound against training (the late failure of issue 36 came after 124 s), not a speed goal.
CASE_S = 60

DRIVER = r"""
import contextlib, importlib, io, json, os, sys, time
sys.path.insert(0, os.path.join({root!r}, "launch"))
import _common
from absl import flags
from jax import monitoring
from jaxpapers.core import config as config_lib
# The paper module first: what its import computes is not training.
importlib.import_module(config_lib.load("configs/{name}.py:smoke").experiment)
compiles = []
monitoring.register_event_duration_secs_listener(lambda event, _, **kw: (
    compiles.append(event) if event.endswith("backend_compile_duration") else None))
main = _common.main_for("train_and_evaluate")
out = []
for argv in json.loads(sys.argv[1]):
  err = io.StringIO()
  code, t0, n0 = 0, time.perf_counter(), len(compiles)
  with contextlib.redirect_stderr(err):
    try:
      flags.FLAGS.unparse_flags()
      sys.argv = ["train.py"] + argv  # ml_collections finds --config.a.b overrides here
      main(_common.parse_flags(sys.argv))
    except SystemExit as e:
      code = e.code
    except BaseException:  # what the launcher would print as a traceback
      import traceback
      code, _ = "uncaught", traceback.print_exc(file=err)
  for f in [f for f in flags.FLAGS if f.startswith("config.")]:  # the next case's own
    delattr(flags.FLAGS, f)
  out.append({{"argv": argv, "code": code, "stderr": err.getvalue(),
              "seconds": time.perf_counter() - t0, "compiles": len(compiles) - n0}})
print("RESULT " + json.dumps(out))
"""


# What the one line must mention for the cases whose input has a name of its own.
NAMES = {"unknown arg": "no_such_arg", "wrong type": "abc", "nan": "nan",
         "workdir is a file": "workdir", "missing data path": "no_such_data",
         "unreadable data file": "garbage", "zero chunk": "chunk", "empty list": "empty"}


def _set(spec, field, value):
  """The argv that sets `field` (a config arg or "config.a.b") to `value`."""
  if field.startswith("config."):
    return [spec, f"--{field}={value}"]
  return [spec + f",{field}={value}"]


def bad_inputs(name, tmp_path):
  steps, batch, number, path = ARGS[name]
  spec = f"--config=configs/{name}.py:smoke"
  afile = tmp_path / "a_file"
  afile.write_text("not a directory")
  cases = {
      "unknown arg": [spec + ",no_such_arg=1"],
      "wrong type": _set(spec, steps, "abc"),
      "zero steps": _set(spec, steps, 0),
      "negative steps": _set(spec, steps, -3),
      "zero batch": _set(spec, batch, 0),
      "negative batch": _set(spec, batch, -1),
      "nan": _set(spec, number, "nan"),
      "workdir is a file": [spec],
  }
  if name in CHUNK:
    cases["zero chunk"] = _set(spec, CHUNK[name], 0)
  if name in EMPTY:
    cases["empty list"] = _set(spec, EMPTY[name], "")
  if path:
    cases["missing data path"] = _set(spec, path, tmp_path / "no_such_data")
  if path and name not in TEXT:
    garbage = tmp_path / ("garbage" + SUFFIX.get(name, ".npz"))
    garbage.write_bytes(b"\x00\xffthese bytes parse as no data format\n")
    read = READ.get(name, path + "={file}").format(file=garbage)
    cases["unreadable data file"] = [spec + "," + read]
  # Each case its own workdir, so a case that trains shows in its own directory.
  workdir = {what: tmp_path / what for what in cases} | {"workdir is a file": afile}
  return {what: argv + [f"--workdir={workdir[what]}"] for what, argv in cases.items()}


def test_every_config_has_a_row():
  assert sorted(ARGS) == CONFIGS, f"add a row to ARGS in {__file__} for each new config"


@pytest.mark.parametrize("name", CONFIGS)
def test_bad_input_is_one_line_before_training(name, tmp_path):
  assert name in ARGS, f"configs/{name}.py: add its row to ARGS in {__file__}"
  cases = bad_inputs(name, tmp_path)
  r = subprocess.run([sys.executable, "-c", DRIVER.format(root=ROOT, name=name),
                      json.dumps(list(cases.values()))], cwd=ROOT, capture_output=True,
                     text=True, timeout=600, env=_runs.env_with_devices(1))
  assert "RESULT " in r.stdout, r.stderr[-3000:]
  results = json.loads(r.stdout.split("RESULT ", 1)[1])
  for what, res in zip(cases, results):
    lines = res["stderr"].strip().splitlines()
    assert res["code"] == 1, (what, res)
    assert 1 <= len(lines) <= 3 and "Traceback" not in res["stderr"], (what, res)
    assert lines[-1].startswith("error: "), (what, res)
    # The line is about this case's input, not about how the test passed it.
    assert "Unknown command line flag" not in res["stderr"], (what, res)
    assert NAMES.get(what, "").lower() in res["stderr"].lower(), (what, res)
    trained = [p for p in ("metrics.jsonl", "checkpoints") if (tmp_path / what / p).exists()]
    assert not trained, (what, f"{name} started training before refusing", trained)
    assert res["compiles"] == 0, (what, f"{name} compiled before refusing", res)
    assert res["seconds"] < CASE_S, (what, res)
