"""Helpers for tests that start the real launcher in subprocesses, and for resume tests."""
import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import orbax.checkpoint as ocp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "launch", "train.py")


def env_with_devices(n: int) -> dict:
  env = dict(os.environ)
  # The session's other XLA flags (conftest's fast-compile ones) stay; the count is ours.
  kept = [f for f in env.get("XLA_FLAGS", "").split()
          if not f.startswith("--xla_force_host_platform_device_count")]
  env["XLA_FLAGS"] = " ".join(kept + [f"--xla_force_host_platform_device_count={n}"])
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return env


def train_cmd(config_arg: str, workdir, *extra) -> list:
  return [sys.executable, TRAIN, f"--config={ROOT}/configs/{config_arg}",
          f"--workdir={workdir}", *extra]


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run(cmd, env, timeout=300):
  out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  return out


def final_state(workdir):
  """(step, state) of the latest checkpoint of a run, as numpy arrays on the host.

  Read as numpy so a checkpoint written on another device topology can be compared.
  """
  import jax
  directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
  step = max(int(d) for d in os.listdir(directory) if d.isdigit())
  path = os.path.join(directory, str(step), "default")
  ckptr = ocp.PyTreeCheckpointer()
  meta = ckptr.metadata(path)
  tree = meta.item_metadata.tree if hasattr(meta, "item_metadata") else meta
  args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
  return step, ckptr.restore(path, restore_args=args)


def flat(tree) -> dict:
  import jax
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(p): np.asarray(v) for p, v in leaves}


# Metric names measured on the wall clock (the writer's progress keys `steps_per_s` and
# `eta_s`, the papers' `seconds`, `.../seconds`, `time_s`, `wall_s`, `*_per_s`): the
# only values a resumed run may write differently from an uninterrupted one. Matched on
# the last '/'-separated part of the name.
_TIMING = re.compile(r"(seconds|per_s|^eta_s|time_s|wall_s\w*|elapsed\w*|sec_per_step)$")


def metrics_rows(workdir) -> list:
  """The rows of `workdir/metrics.jsonl` in file order, timing keys dropped."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if not _TIMING.search(k.rsplit("/", 1)[-1])}
          for r in rows]


def assert_same_metrics(resumed, uninterrupted, keep=None) -> None:
  """A resumed run's metrics.jsonl equals the uninterrupted run's, row for row.

  Each argument is a workdir or rows from `metrics_rows` (a snapshot taken before the
  same workdir was resumed). `keep(row)` compares a subset (e.g. one model's rows when
  the uninterrupted run also trained others). Timing keys aside, nothing may differ: a
  row lost, duplicated, reordered or changed fails with the first differing row.
  """
  rows = lambda x: metrics_rows(x) if isinstance(x, (str, os.PathLike)) else list(x)  # noqa: E731
  a, b = rows(resumed), rows(uninterrupted)
  if keep is not None:
    a, b = [r for r in a if keep(r)], [r for r in b if keep(r)]
  assert b, f"{uninterrupted}: no metrics rows to compare"
  for i, (ra, rb) in enumerate(zip(a, b)):
    assert ra == rb, f"metrics row {i} differs after resume:\n  resumed {ra}\n  full    {rb}"
  assert len(a) == len(b), (
      f"{len(a)} metrics rows after resume, {len(b)} uninterrupted; first extra: "
      f"{(a if len(a) > len(b) else b)[min(len(a), len(b))]}")
