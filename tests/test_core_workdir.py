"""A workdir belongs to one run: resume config check, clean metrics, checkpoint fallback,
the one-launcher lock and one-line launcher errors."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from jaxpapers.core import loop
from jaxpapers.core import metrics
from jaxpapers.core import study
from jaxpapers.core import workdir as workdir_lib
from tests import _runs
from tests.test_core_loop import _config, _task

TIMING = ("steps_per_s", "eta_s")


def _rows(workdir):
  return [{k: v for k, v in r.items() if k not in TIMING}
          for r in metrics.read_metrics(str(workdir))]


def test_compare_refuses_computation_and_allows_bookkeeping():
  old = {"seed": 0, "model": {"width": 16}, "train": {"steps": 200, "log_every": 10},
         "study": {"seeds": 3}}
  new = {"seed": 0, "model": {"width": 32}, "train": {"steps": 300, "log_every": 5},
         "study": {"seeds": 5}}
  refused, allowed = workdir_lib.compare(old, new)
  assert refused == ["model.width: 16 -> 32"]
  assert allowed == ["study.seeds: 3 -> 5", "train.log_every: 10 -> 5",
                     "train.steps: 200 -> 300"]
  refused, _ = workdir_lib.compare(old, {**old, "train": {"steps": 100, "log_every": 10}})
  assert refused == ["train.steps: 200 -> 100"]
  # A config may declare another leaf that only extends training (a second stage).
  staged = {"train": {"steps": 10, "policy_steps": 5}, "resume_may_grow": ["train.policy_steps"]}
  more = {"train": {"steps": 10, "policy_steps": 8}, "resume_may_grow": ("train.policy_steps",)}
  assert workdir_lib.compare(staged, more) == ([], ["train.policy_steps: 5 -> 8"])
  assert workdir_lib.compare(more, staged)[0] == ["train.policy_steps: 8 -> 5"]
  assert workdir_lib.compare({k: v for k, v in staged.items() if k != "resume_may_grow"},
                             {"train": more["train"]})[0] == ["train.policy_steps: 5 -> 8"]
  # Tuples are stored as JSON lists: the same value, not a change.
  assert workdir_lib.compare({"a": [1, 2]}, {"a": (1, 2)}) == ([], [])


def test_resume_with_another_config_is_refused_naming_fields(tmp_path, monkeypatch):
  monkeypatch.delenv(workdir_lib.FORCE_ENV, raising=False)
  loop.train(_config(), str(tmp_path), _task())
  other = _config(steps=12)
  other.seed = 1
  with pytest.raises(workdir_lib.ResumeError, match=r"seed: 0 -> 1") as e:
    loop.train(other, str(tmp_path), _task())
  assert "train.steps" not in str(e.value)  # raised steps are allowed
  assert "\n" not in str(e.value)
  # Bookkeeping changes resume and are recorded.
  more = _config(steps=12)
  more.train.log_every = 2
  loop.train(more, str(tmp_path), _task())
  changes = [json.loads(l) for l in open(tmp_path / "config_changes.jsonl")]
  assert changes[-1]["changes"] == ["train.log_every: 1 -> 2", "train.steps: 6 -> 12"]
  # The expert escape accepts a computational change and records it as forced.
  monkeypatch.setenv(workdir_lib.FORCE_ENV, "1")
  loop.train(other, str(tmp_path / "x"), _task())  # fresh dir: nothing to compare
  workdir_lib.check_resume(str(tmp_path), {**json.load(open(tmp_path / "config.json")),
                                           "seed": 7})
  assert json.loads(open(tmp_path / "config_changes.jsonl").readlines()[-1])["forced"]


def test_lowering_steps_below_the_checkpoint_is_refused(tmp_path, monkeypatch):
  monkeypatch.setenv(workdir_lib.FORCE_ENV, "1")  # get past the config check
  loop.train(_config(steps=6), str(tmp_path), _task())
  with pytest.raises(ValueError, match="train.steps=3 is below the step 6"):
    loop.train(_config(steps=3), str(tmp_path), _task())


def test_resumed_metrics_hold_each_step_once(tmp_path):
  ref, killed = tmp_path / "ref", tmp_path / "killed"
  loop.train(_config(), str(ref), _task())
  loop.train(_config(), str(killed), _task())
  # A run killed after logging steps 4-6 but before its step-6 checkpoint landed.
  shutil.rmtree(killed / "checkpoints" / "6")
  with open(killed / "metrics.jsonl", "a") as f:
    f.write('{"step": 7, "spl')  # a line cut by the kill
  loop.train(_config(), str(killed), _task())
  assert _rows(killed) == _rows(ref)


def test_resuming_a_finished_run_does_not_repeat_its_final_eval(tmp_path):
  loop.train(_config(), str(tmp_path), _task())
  before = _rows(tmp_path)
  loop.train(_config(), str(tmp_path), _task())
  assert _rows(tmp_path) == before


@pytest.mark.parametrize("damage", ["truncate_arrays", "metadata"])
def test_unreadable_latest_checkpoint_falls_back(tmp_path, damage, capsys):
  ref, bad = tmp_path / "ref", tmp_path / "bad"
  ref_state, _ = loop.train(_config(), str(ref), _task())
  loop.train(_config(), str(bad), _task())
  latest = bad / "checkpoints" / "6"
  files = [os.path.join(d, f) for d, _, fs in os.walk(latest) for f in fs]
  if damage == "metadata":
    targets = [f for f in files if os.path.basename(f) == "_METADATA"]
  else:
    targets = [f for f in files if os.path.getsize(f) > 0
               and "METADATA" not in os.path.basename(f)]
  assert targets
  for f in targets:
    with open(f, "r+b") as h:
      h.truncate(max(os.path.getsize(f) // 3, 1) if damage != "metadata" else 5)
  state, _ = loop.train(_config(), str(bad), _task())
  out = capsys.readouterr().out
  assert "skipping checkpoint 6" in out and "resumed from step 3" in out
  np.testing.assert_array_equal(np.asarray(state["w"]), np.asarray(ref_state["w"]))
  assert _rows(bad) == _rows(ref)
  assert os.listdir(bad / "checkpoints_unreadable")


def test_validate_names_bad_batch_size(tmp_path):
  config = _config()
  config.train.batch_size = 12  # 8 forced devices
  with pytest.raises(ValueError, match="train.batch_size=12 must be divisible"):
    loop.train(config, str(tmp_path), _task())
  config.train.batch_size = 0
  with pytest.raises(ValueError, match="train.batch_size must be >= 1"):
    loop.train(config, str(tmp_path), _task())
  assert not (tmp_path / "checkpoints").exists()


def test_preflight_reads_a_data_file_by_its_first_bytes(tmp_path):
  """Real files of each format pass the shared pass; the same bytes under the wrong suffix,
  or a file where a directory belongs, fail naming the field (issue 36)."""
  import h5py
  import ml_collections
  from jaxpapers.core import validate
  np.savez(tmp_path / "ok.npz", x=np.ones(3))
  np.save(tmp_path / "ok.npy", np.ones(3))
  with h5py.File(tmp_path / "ok.h5", "w") as f:
    f["x"] = np.ones(3)
  (tmp_path / "ok.csv").write_text("statement,label\nParis is in France,1\n\u00e9t\u00e9,0\n")
  (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")  # corpora are read with replacement
  for name in ("ok.npz", "ok.npy", "ok.h5", "ok.csv", "latin1.txt"):
    validate.check_file("data.path", str(tmp_path / name))
  for source, suffix, why in (("ok.npy", ".npz", "not a NumPy .npz"),
                              ("ok.npz", ".npy", "not a NumPy .npy"),
                              ("ok.csv", ".h5", "not an HDF5 file"),
                              ("latin1.txt", ".csv", "not UTF-8")):
    wrong = tmp_path / ("wrong_" + source + suffix)
    shutil.copy(tmp_path / source, wrong)
    with pytest.raises(ValueError, match=f"config field data.path='{wrong}': {why}"):
      validate.check_file("data.path", str(wrong))
  config = ml_collections.ConfigDict({"data": {"npz_dir": str(tmp_path / "ok.npz")}})
  with pytest.raises(NotADirectoryError, match="data.npz_dir=.* is a file; expected a dir"):
    validate.check_config(config)
  config.data.npz_dir = str(tmp_path)
  validate.check_config(config)


def test_workdir_lock_refuses_a_second_holder(tmp_path):
  with workdir_lib.WorkdirLock(str(tmp_path)):
    with pytest.raises(workdir_lib.ResumeError, match=f"pid {os.getpid()}"):
      workdir_lib.WorkdirLock(str(tmp_path)).acquire()
  workdir_lib.WorkdirLock(str(tmp_path)).acquire().release()  # free again


def _launch(args, env):
  return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def test_launcher_errors_are_one_line_with_exit_1(tmp_path):
  env = _runs.env_with_devices(1)
  cases = {
      "--config.train.nosuch=3": "unknown config field 'nosuch' in --config.train.nosuch=3",
      # Refused by the shared pre-flight pass (core/validate.py), before anything compiles.
      "--config.train.batch_size=0": "config field train.batch_size=0 must be >= 1",
  }
  for flag, message in cases.items():
    out = _launch(_runs.train_cmd("stompp.py:smoke", tmp_path / "w", flag), env)
    assert out.returncode == 1, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr[-2000:]
  out = _launch(_runs.train_cmd("stompp.py:smoke,no_such_arg=1", tmp_path / "w"), env)
  assert out.returncode == 1 and "unknown config arg 'no_such_arg'" in out.stderr
  assert len(out.stderr.strip().splitlines()) == 1
  # A --workdir that is a file (issue 36): one line naming it, not a traceback.
  (tmp_path / "afile").write_text("x")
  out = _launch(_runs.train_cmd("stompp.py:smoke", tmp_path / "afile"), env)
  lines = out.stderr.strip().splitlines()
  assert out.returncode == 1 and len(lines) == 1, out.stderr[-2000:]
  assert "afile" in lines[0] and lines[0].startswith("error: "), lines


def test_launcher_refuses_a_live_workdir(tmp_path):
  env = _runs.env_with_devices(1)
  with workdir_lib.WorkdirLock(str(tmp_path)):
    out = _launch(_runs.train_cmd("stompp.py:smoke", tmp_path), env)
  assert out.returncode == 1
  assert f"in use by another run (pid {os.getpid()})" in out.stderr
  assert not (tmp_path / "metrics.jsonl").exists()


def _new_process():
  """What a fresh launcher process sees: no metrics file opened yet."""
  metrics._STALE.clear()


def test_own_loop_writer_replaces_rows_a_killed_run_wrote(tmp_path):
  """Papers with their own loops: rows recomputed after a resume replace the killed run's."""
  def run(upto, start=0):
    writer = metrics.MetricsWriter(str(tmp_path), verbose=False)
    for s in range(start, upto):
      writer.write(s, {"loss": float(s)})
      writer.write(s, {"acc": float(s), "cell": 0}, split="eval")
      writer.write(s, {"acc": float(s), "cell": 1}, split="eval")  # two rows, one key

  _new_process()
  run(5)                                    # killed after step 4, checkpoint at step 2
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 5, "spl')             # a line cut by the kill
  _new_process()
  run(6, start=5)                           # a job that checkpointed step 4 resumes
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 6, "spl')
  _new_process()
  run(8, start=3)                           # resumed from an older checkpoint: 3-5 again
  _new_process()
  run(8, start=7)                           # a rerun of the finished job repeats step 7
  rows = metrics.read_metrics(str(tmp_path))
  train = [r["step"] for r in rows if r["split"] == "train"]
  evals = [(r["step"], r["cell"]) for r in rows if r["split"] == "eval"]
  assert sorted(train) == list(range(8))
  assert sorted(evals) == [(s, c) for s in range(8) for c in (0, 1)]


def test_study_commit_stamp_is_dirty_for_code_not_for_outputs(tmp_path):
  def git(*a):
    subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
  git("init", "-q")
  (tmp_path / "paper").mkdir()
  (tmp_path / "paper" / "model.py").write_text("x = 1\n")
  (tmp_path / "paper" / "README.md").write_text("table\n")
  git("add", "-A")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
  clean = study.git_commit(("paper",), cwd=str(tmp_path))
  assert clean and not clean.endswith("-dirty") and clean != "unknown"
  (tmp_path / "paper" / "README.md").write_text("new table\n")
  (tmp_path / "paper" / "notes.md").write_text("untracked notes\n")
  (tmp_path / "paper" / "results").mkdir()
  (tmp_path / "paper" / "results" / "part1.json").write_text("{}\n")  # an earlier part's output
  (tmp_path / "paper" / "plot.png").write_bytes(b"png")
  (tmp_path / "paper" / "study_rows.json").write_text("[]\n")
  assert study.git_commit(("paper",), cwd=str(tmp_path)) == clean
  (tmp_path / "paper" / "inputs.json").write_text("{}\n")  # other JSON may be an input
  assert study.git_commit(("paper",), cwd=str(tmp_path)) == clean + "-dirty"
  (tmp_path / "paper" / "inputs.json").unlink()
  (tmp_path / "paper" / "model.py").write_text("x = 2\n")
  assert study.git_commit(("paper",), cwd=str(tmp_path)) == clean + "-dirty"


INFLIGHT = r"""
import os, sys
sys.path.insert(0, os.path.join({root!r}, "launch"))
import _common
import jax.numpy as jnp
from jaxpapers.core import checkpoint

def entry(_):
  state = {{"w": jnp.ones((2048, 2048)), "v": jnp.arange(10.0)}}  # JAX started first
  ckpt = checkpoint.Checkpointer({wd!r})
  if {save!r}:
    ckpt.save(1, state)
  else:  # a resume that restores nothing: orbax's clean-up of the tmp dirs still running
    ckpt.restore_or(state)
  raise ValueError("train.lr became NaN at step 2")  # while the async write is in flight

_common.parse_flags(["train.py", "--config=configs/stompp.py:smoke", "--workdir=" + {wd!r}])
_common.run_entry = entry
_common.main_for("train_and_evaluate")([])
"""


@pytest.mark.parametrize("save", [True, False], ids=["write_in_flight", "tmp_cleanup"])
def test_error_during_an_inflight_checkpoint_is_one_line(tmp_path, save):
  """The write finishes before the one line is printed: no orbax traceback at exit, and
  the checkpoint is whole (orbax's temporary directory renamed), so a rerun resumes.

  Without a save, a killed run's temporary directories (20 here, so the clean-up is
  still running when the error comes) are removed before the line: orbax's background
  clean-up thread died at interpreter exit with ~50 lines of traceback (issue 36).
  """
  if not save:
    for step in range(20):
      (tmp_path / "checkpoints" / f"{step}.orbax-checkpoint-tmp").mkdir(parents=True)
  script = INFLIGHT.format(root=_runs.ROOT, wd=str(tmp_path), save=save)
  r = subprocess.run(["python", "-c", script], capture_output=True, text=True, timeout=300,
                     cwd=_runs.ROOT, env=_runs.env_with_devices(1))
  assert r.returncode == 1
  assert r.stderr.strip().splitlines() == [
      "error: ValueError: train.lr became NaN at step 2 (--verbose for the traceback)"], r.stderr
  assert os.listdir(tmp_path / "checkpoints") == (["1"] if save else [])
