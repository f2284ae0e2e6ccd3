"""Helpers for tests that start the real launcher in subprocesses."""
import os
import socket
import subprocess
import sys

import numpy as np
import orbax.checkpoint as ocp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "launch", "train.py")


def env_with_devices(n: int) -> dict:
  env = dict(os.environ)
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n}"
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
