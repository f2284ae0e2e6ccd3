"""The README's two set-up commands are what CI runs and what a newcomer types."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_commands():
  text = open(os.path.join(ROOT, "README.md")).read()
  return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def test_ci_runs_the_readme_test_command_verbatim():
  test_cmd = [c for c in _readme_commands() if "pytest" in c]
  assert len(test_cmd) == 1
  ci = open(os.path.join(ROOT, ".ci", "run")).read().splitlines()
  assert test_cmd[0].strip() in [line.strip() for line in ci]


def test_quick_start_trains_on_embedded_data():
  first = _readme_commands()[0]
  assert "launch/train.py --config=configs/" in first and "pip install -e ." in first
