"""One command reruns every study; the README papers table is generated from verdicts."""
import ast
import io
import json
import os
import re

import pytest

from jaxpapers.core import reproduce

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_papers_table_is_the_generated_one():
  with open(os.path.join(ROOT, "README.md")) as f:
    text = f.read()
  assert reproduce.readme_with_table(text) == text, (
      "README.md's papers table is stale: run `python launch/reproduce.py --table`")


@pytest.mark.parametrize("name", reproduce.available())
def test_every_implemented_paper_has_valid_verdicts(name):
  v = reproduce.load_verdicts(name)
  assert v is not None, f"jaxpapers/papers/{name}/verdicts.json is missing"
  assert v["claims"] and v["commit"] and "launch/" in v["command"]


def test_bad_verdict_is_refused(tmp_path, monkeypatch):
  paper = tmp_path / "jaxpapers" / "papers" / "x"
  paper.mkdir(parents=True)
  (paper / "verdicts.json").write_text(json.dumps(
      {"status": "implemented", "command": "python launch/study.py", "commit": "abc",
       "claims": [{"claim": "c", "ours": "1", "verdict": "mostly"}]}))
  monkeypatch.setattr(reproduce, "ROOT", str(tmp_path))
  with pytest.raises(ValueError, match="'mostly' not one of"):
    reproduce.load_verdicts("x")


def test_smoke_reproduction_resumes_per_paper(tmp_path):
  out = io.StringIO()
  status = reproduce.run(str(tmp_path), papers=SMOKE_PAPERS, smoke=True, out=out)
  assert status == {p: "done" for p in SMOKE_PAPERS}, out.getvalue()
  assert len(out.getvalue().strip().splitlines()) == len(SMOKE_PAPERS)
  out = io.StringIO()
  assert reproduce.run(str(tmp_path), papers=SMOKE_PAPERS, smoke=True, out=out) == {
      p: "skipped" for p in SMOKE_PAPERS}
  with pytest.raises(ValueError, match="unknown or unimplemented papers"):
    reproduce.run(str(tmp_path), papers=["no_such_paper"])


# One smoke study (26 s in the run below); every paper's smoke *config* runs in
# test_configs_smoke.
SMOKE_PAPERS = ["perturbed_eg"]

# Cold seconds of each paper's smoke study (its `run_study` on configs/<name>.py:smoke, as
# `launch/reproduce.py --smoke` runs it), measured for issue 36 (commit c5e64bb-dirty, one
# core of the shared 2-core CPU, other jobs on the other core) as the suite runs it:
# `python -m pytest -n 0 tests/test_reproduce.py -k test_smoke_study_writes_its_table
# --durations=0` with JAXPAPERS_TEST_CACHE_DIR a new, empty directory (tests/conftest.py:
# 8 forced CPU devices, LLVM -O1, nothing cached; a second run on that filled cache took
# 3.6 s (drift_ident) to 16.7 s (motor_adapters), 89.5 s for the nine). bfmnet,
# flowgda, pd_autoscale, stompp: `python launch/reproduce.py --smoke --papers=<name>`, a
# fresh process, no cache. lhdlm, llops, lpr, lgs: one `launch/reproduce.py --smoke` run
# of all 19 (commit d1adc8d-dirty; later papers reuse JAX's warm start).
SMOKE_STUDY_S = {
    "coupled_sae": 12, "hybrid_mup": 30, "lora_lr": 33, "neural_observer": 30,
    "visitation_reward": 23, "lie_bases": 26, "motor_adapters": 40, "bfmnet": 95,
    "lhdlm": 24, "flowgda": 146, "drift_ident": 15, "pd_autoscale": 64, "stgib": 192,
    "llops": 45, "stompp": 91, "lpr": 11, "lgs": 138}
# paper -> the table its smoke study writes (checked by test_smoke_study_writes_its_table).
SMOKE_STUDY_TABLES = {
    "coupled_sae": "coupled_sae.md", "hybrid_mup": "transfer.md",
    "lora_lr": "lora_lr_study.md", "neural_observer": "systems.md",
    "visitation_reward": "visitation_reward_study.md", "lie_bases": "lie_bases_study.md",
    "motor_adapters": "motor_adapters_study.md", "bfmnet": "bfmnet_main.md",
    "flowgda": "flowgda_study.md", "drift_ident": "slopes.md", "pd_autoscale": "study.md",
    "stgib": "study.md", "stompp": "depth.md"}
# The suite (~19.4 of its 20 minutes on 2 cores) runs the smoke studies that cost at most
# this many cold seconds; raise it as the budget allows.
SUITE_SMOKE_STUDY_S = 16
IN_SUITE = [name for name in SMOKE_STUDY_TABLES if SMOKE_STUDY_S[name] <= SUITE_SMOKE_STUDY_S]


@pytest.mark.parametrize("name", IN_SUITE)
def test_smoke_study_writes_its_table(name, tmp_path):
  out = io.StringIO()
  status = reproduce.run(str(tmp_path), papers=[name], smoke=True, out=out)
  failed = tmp_path / name / "FAILED.txt"
  assert status == {name: "done"}, out.getvalue() + (
      failed.read_text() if failed.exists() else "")
  table = (tmp_path / name / SMOKE_STUDY_TABLES[name]).read_text()
  assert "|---" in table, table


# paper -> the suite's test that runs its whole declared study at smoke size (its
# `run_study` on configs/<name>.py:smoke), so a broken study cannot land (issue 36), or
# "not in the suite: <measured cost and why>" until its smoke study is small enough.
STUDY_TESTS = {
    "latent_debate": "tests/test_latent_debate.py::test_smoke_study_writes_table_and_verdicts",
    "perturbed_eg": "tests/test_reproduce.py::test_smoke_reproduction_resumes_per_paper",
    **{name: (f"not in the suite: its smoke study took {s} s (`launch/reproduce.py "
              "--smoke`), no room in the suite's time budget; .ci/run runs it after the "
              "suite (test_ci_runs_every_smoke_study)")
       for name, s in SMOKE_STUDY_S.items() if name not in IN_SUITE},
    **{name: "tests/test_reproduce.py::test_smoke_study_writes_its_table" for name in IN_SUITE},
}
RUNS_A_STUDY = ("run_study", "reproduce.run")


def _test_source(path, name):
  src = open(os.path.join(ROOT, path)).read()
  return next(ast.get_source_segment(src, n) for n in ast.walk(ast.parse(src))
              if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("name", reproduce.available())
def test_every_study_runs_at_smoke_size_in_the_suite(name):
  assert name in STUDY_TESTS, (
      f"{name}: name the test that runs its study at smoke size in STUDY_TESTS")
  entry = STUDY_TESTS[name]
  if entry.startswith("not in the suite:"):
    return
  path, _, test = entry.partition("::")
  assert any(word in _test_source(path, test) for word in RUNS_A_STUDY), (
      f"{entry} does not run a study ({' or '.join(RUNS_A_STUDY)})")


def test_shards_split_the_papers_disjointly_and_cover_them():
  names = reproduce.available()
  parts = [reproduce.shard(names, f"{i}/3") for i in range(3)]
  assert sorted(sum(parts, [])) == sorted(names)
  assert sum(len(p) for p in parts) == len(names)
  for bad in ("2/2", "x/2", "1"):
    with pytest.raises(ValueError, match="--shard"):
      reproduce.shard(names, bad)


def test_ci_runs_every_smoke_study():
  """The studies the suite leaves out (STUDY_TESTS) run in .ci/run after the suite: every
  shard i/n for one n, each with --smoke, and a failure fails CI (set -e, rc checked)."""
  ci = open(os.path.join(ROOT, ".ci", "run")).read()
  shards = re.findall(r"launch/reproduce\.py --smoke --shard=(\d+)/(\d+)", ci)
  assert shards, ".ci/run does not run launch/reproduce.py --smoke"
  ns = {int(n) for _, n in shards}
  assert len(ns) == 1 and sorted(int(i) for i, _ in shards) == list(range(ns.pop()))
  assert "set -euo pipefail" in ci and "exit 1" in ci
