"""Every paper's `:paper` config plans on 8 devices (shapes only, nothing trained), fits an
H100 per device, and agrees with its committed scale.json, which its README quotes; the
quick-start number quoted in the READMEs is what the quick-start command prints today."""
import os

import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.core import experiment, planner, reproduce

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Papers whose `:paper` step does not fit 80 GB per device yet, and why (an open gap, not
# an exemption: the test fails once one fits, so the entry is removed with the fix).
DOES_NOT_FIT: dict[str, str] = {}


@pytest.mark.parametrize("name", reproduce.available())
def test_paper_config_plans_on_8_devices_and_matches_its_record(name):
  config = config_lib.load(f"configs/{name}.py:paper")
  plan = experiment.load(config, "plan")(config)
  got = planner.estimate(plan, devices=reproduce.PLAN_DEVICES,
                         platform=reproduce.PLAN_PLATFORM)
  assert got["flops_per_step"] > 0 and got["steps"] > 0
  if name in DOES_NOT_FIT:
    assert not got["fits"], f"{name}:paper fits now: remove it from DOES_NOT_FIT"
  else:
    assert got["fits"], (f"{name}:paper needs {got['bytes_per_device'] / 1e9:.1f} GB per "
                         f"device on {reproduce.PLAN_DEVICES} devices, over the "
                         f"{got['device_memory_bytes'] / 1e9:.0f} GB of an H100")
  record = reproduce.load_scale(name)
  assert record is not None, (f"jaxpapers/papers/{name}/scale.json is missing: run "
                              f"`python launch/reproduce.py --plans --papers={name}`")
  stale = f"{name}'s scale.json is stale: run `python launch/reproduce.py --plans --papers={name}`"
  assert record["label"] == got["label"], stale
  assert record["steps"] == got["steps"], stale
  # XLA's cost and buffer analyses are deterministic for a given jax version; the slack
  # covers a patch release that fuses differently, not a changed model.
  assert got["flops_per_step"] == pytest.approx(record["flops_per_step"], rel=0.02), stale
  assert got["bytes_per_device"] == pytest.approx(record["bytes_per_device"], rel=0.1), stale
  assert record["device_hours"] == pytest.approx(record["run_hours"] * record["devices"])


# Papers whose README does not yet quote its current scale.json report, and why (an open
# gap like DOES_NOT_FIT: the test fails once the README quotes it, so the entry goes).
README_PLAN_PENDING: dict[str, str] = {}


@pytest.mark.parametrize("name", reproduce.available())
def test_paper_readme_quotes_its_plan_command_and_output(name):
  """Issue 51 item 1: the paper README gives the `:paper` plan command and its output, as
  recorded in scale.json (which the test above checks against a fresh plan), so a replan
  that changes the numbers fails here until the README quotes the new report."""
  record = reproduce.load_scale(name)
  assert record is not None, f"jaxpapers/papers/{name}/scale.json is missing"
  with open(os.path.join(ROOT, "jaxpapers", "papers", name, "README.md")) as f:
    text = " ".join(f.read().split())
  lines = [" ".join(line.split()) for line in record["report"].splitlines() if line.strip()]
  assert len(lines) >= 5 and lines[0].startswith("plan: ")
  missing = [line for line in lines if line not in text]
  assert " ".join(record["command"].split()) in text, (
      f"{name}'s README lacks the plan command {record['command']!r}")
  if name in README_PLAN_PENDING:
    assert missing, f"{name}'s README quotes its plan now: remove it from README_PLAN_PENDING"
  else:
    assert not missing, (f"{name}'s README does not quote its scale.json report (from "
                         f"{record['commit']}); missing lines: {missing}")


def test_quick_start_number_is_current(tmp_path):
  """Reruns the top README's quick-start command (the full run, a few minutes) and checks
  the record and every place that quotes it."""
  q = reproduce.load_quickstart()
  assert q["command"] == reproduce.quickstart_command(), (
      "the README's quick-start command changed: run `python launch/reproduce.py --quickstart`")
  quotes = {
      "README.md": reproduce.quickstart_sentence(),
      "jaxpapers/papers/stompp/README.md": f"test accuracy {q['final_test_accuracy']}",
      "configs/stompp.py": f"test accuracy {q['final_test_accuracy']}",
  }
  for path, quote in quotes.items():
    with open(os.path.join(ROOT, path)) as f:
      text = " ".join(f.read().split())
    assert " ".join(quote.split()) in text and q["commit"] in text, (
        f"{path} does not quote the quick-start record ({quote!r} at {q['commit']})")
  acc, _ = reproduce.run_quickstart(str(tmp_path / "run"))
  # The number measured on this CPU model, if one was recorded: the quoted one (the
  # record's own CPU) or another model's in `by_cpu` ({model: accuracy}, same commit).
  # On a recorded model XLA's CPU code is the same, the run is bit for bit, and a stale
  # number fails however close it is (0.9387 vs 0.9359 is one test digit of 360).
  cpu = reproduce.cpu_model()
  expected = q["final_test_accuracy"] if cpu == q["cpu"] else q.get("by_cpu", {}).get(cpu)
  if expected is not None:
    assert f"{acc:.4f}" == expected, (
        f"the quick start now ends at {acc:.4f} on {cpu}, the record says {expected}: "
        "run `python launch/reproduce.py --quickstart`")
  else:
    # Another CPU model compiles other vector code; a binarised network may flip a few
    # of the 360 test digits, no more.
    assert abs(acc - float(q["final_test_accuracy"])) < 0.02, (acc, q)
