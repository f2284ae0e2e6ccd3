"""Flags shared by the launchers: --config, --workdir and multi-host start."""
import importlib
import os
import re
import sys

from absl import flags
from absl import logging
from ml_collections import config_flags

from jaxpapers.core import mesh

CONFIG = config_flags.DEFINE_config_file(
    "config", None, "configs/<name>.py[:key=value,...]", lock_config=True)
WORKDIR = flags.DEFINE_string("workdir", None, "Directory for every output of the run.")
COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0 for a multi-process run.")
NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
VERBOSE = flags.DEFINE_bool(
    "verbose", False, "On an error, print the full traceback instead of one line.")
FORCE_RESUME = flags.DEFINE_bool(
    "force_resume", False,
    "Resume a workdir even though the config changes the computation (experts only).")
flags.mark_flags_as_required(["config", "workdir"])


def start():
  """Joins a multi-process run when coordinator flags (or the cluster env) say so."""
  # Orbax logs every checkpoint phase at INFO; keep stdout for our progress lines.
  logging.set_verbosity(logging.WARNING)
  mesh.initialize_distributed(COORDINATOR.value, NUM_PROCESSES.value, PROCESS_ID.value)
  return CONFIG.value, WORKDIR.value


def run_entry(entry: str):
  """Starts the run and calls the paper module's `entry(config, workdir)`.

  Process 0 holds the workdir lock for the whole run, so a second launcher on the same
  workdir is refused instead of racing this one's checkpoints and metrics.
  """
  import jax
  from jaxpapers.core import experiment
  from jaxpapers.core import workdir as workdir_lib
  if FORCE_RESUME.value:
    os.environ[workdir_lib.FORCE_ENV] = "1"
  from jaxpapers.core import validate
  config, workdir = start()
  fn = experiment.load(config, entry)
  # Before anything compiles: one line naming a bad field, a missing file, a bad workdir.
  validate.preflight(config, workdir, importlib.import_module(config.experiment))
  lock = workdir_lib.WorkdirLock(workdir)
  if jax.process_index() == 0:
    lock.acquire()
  try:
    return fn(config, workdir)
  finally:
    lock.release()


# The project's own errors: bad config, missing data, refused resume, NaN, unreadable
# checkpoints. They end the run with one line on stderr; anything else is a bug and keeps
# its traceback.
def _expected_errors():
  from jaxpapers.core import checkpoint
  # FileExistsError / NotADirectoryError: a --workdir (or a path inside it) that is a file.
  return (ValueError, KeyError, FileNotFoundError, FileExistsError, NotADirectoryError,
          FloatingPointError, ImportError, checkpoint.CheckpointError)


def _one_line(e: BaseException) -> str:
  lines = str(e).strip().splitlines()
  msg = lines[0] if lines else type(e).__name__
  return msg.strip("'\"") if isinstance(e, (KeyError, AttributeError)) else msg


def parse_flags(argv):
  """absl's flag parser, but a bad --config (unknown key, bad value) is one line, exit 1.

  ml_collections applies `--config.a.b=v` while parsing, so its errors would otherwise
  surface as a 50-line traceback from inside absl.
  """
  # ml_collections reports a missing config file only when the config is first read.
  for a in argv[1:]:
    if a.startswith("--config="):
      path = a.split("=", 1)[1].split(":")[0]
      if not os.path.exists(path):
        print(f"error: config file {path} does not exist (paths are relative to the "
              "working directory, e.g. --config=configs/stompp.py)", file=sys.stderr,
              flush=True)
        sys.exit(1)
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    # ml_collections wraps a get_config error with its whole traceback: keep the flag
    # and the final "SomeError: message" line.
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    cause = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line)]
    flag = lines[0].split(": ")[0] if lines else ""
    text = f"{flag}: {cause[-1]}" if cause else " ".join(lines)
    print(f"error: {text}", file=sys.stderr, flush=True)
  except (AttributeError, KeyError) as e:
    bad = [a for a in argv[1:] if a.startswith("--config.")]
    key = _one_line(e)
    where = [a for a in bad if a.split("=")[0].endswith("." + key)] or bad
    print(f"error: unknown config field {key!r} in {', '.join(where)}", file=sys.stderr,
          flush=True)
  except (ValueError, TypeError) as e:
    print(f"error: bad --config: {type(e).__name__}: {_one_line(e)}", file=sys.stderr,
          flush=True)
  except ArithmeticError as e:  # a config's own arithmetic on an arg (`steps % chunk`)
    spec = [a for a in argv[1:] if a.startswith("--config=")]
    print(f"error: bad {spec[0] if spec else '--config'}: {type(e).__name__}: "
          f"{_one_line(e)}", file=sys.stderr, flush=True)
  sys.exit(1)


def run_app(main):
  """`app.run` with the one-line flag errors of `parse_flags`."""
  from absl import app
  app.run(main, flags_parser=parse_flags)


def main_for(entry: str, on_result=None):
  """An absl main that runs `entry`, exits 0, or 1 with one line naming the problem."""
  def main(argv):
    del argv
    try:
      result = run_entry(entry)
      if on_result is not None:
        on_result(result)
    except Exception as e:  # pylint: disable=broad-except
      # A checkpoint still being written finishes first, quietly: the line below (or a
      # bug's traceback) is the cause, not orbax's report of an interrupted write at exit.
      from jaxpapers.core import checkpoint
      checkpoint.close_all()
      if VERBOSE.value or not isinstance(e, _expected_errors()):
        raise
      print(f"error: {type(e).__name__}: {_one_line(e)} (--verbose for the traceback)",
            file=sys.stderr, flush=True)
      sys.exit(1)
  return main
