"""Flags shared by the launchers: --config, --workdir and multi-host start."""
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
flags.mark_flags_as_required(["config", "workdir"])


def start():
  """Joins a multi-process run when coordinator flags (or the cluster env) say so."""
  # Orbax logs every checkpoint phase at INFO; keep stdout for our progress lines.
  logging.set_verbosity(logging.WARNING)
  mesh.initialize_distributed(COORDINATOR.value, NUM_PROCESSES.value, PROCESS_ID.value)
  return CONFIG.value, WORKDIR.value


def run_entry(entry: str):
  """Starts the run and calls the paper module's `entry(config, workdir)`."""
  from jaxpapers.core import experiment
  config, workdir = start()
  return experiment.load(config, entry)(config, workdir)


def main_for(entry: str):
  """An absl main that runs `entry` and exits 0 (absl would exit with a returned value)."""
  def main(argv):
    del argv
    run_entry(entry)
  return main
