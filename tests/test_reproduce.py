"""One command reruns every study; the README papers table is generated from verdicts."""
import ast
import io
import json
import os

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

# paper -> the suite's test that runs its whole declared study at smoke size (its
# `run_study` on configs/<name>.py:smoke), so a broken study cannot land (issue 36), or
# "not in the suite: <measured cost and why>" until its smoke study is small enough.
# Wall seconds of each smoke study in one `python launch/reproduce.py --smoke` run (all 19
# done, exit 0; commit d1adc8d-dirty, 2 shared CPU cores under the heavy-job lock, one
# process: later papers reuse JAX's warm start). Not in the suite: together ~560 s of
# wall, and the suite (~18.5 of its ~19 minutes) has no room; the lead runs the command.
SMOKE_STUDY_S = {
    "coupled_sae": 7, "hybrid_mup": 12, "lora_lr": 17, "neural_observer": 16,
    "visitation_reward": 12, "lie_bases": 14, "motor_adapters": 19, "bfmnet": 43,
    "lhdlm": 24, "flowgda": 91, "drift_ident": 9, "pd_autoscale": 38, "stgib": 26,
    "llops": 14, "stompp": 67, "lpr": 11, "lgs": 138}
STUDY_TESTS = {
    "latent_debate": "tests/test_latent_debate.py::test_smoke_study_writes_table_and_verdicts",
    "perturbed_eg": "tests/test_reproduce.py::test_smoke_reproduction_resumes_per_paper",
    **{name: (f"not in the suite: its smoke study took {s} s (`launch/reproduce.py "
              "--smoke`); no room in the suite's time budget")
       for name, s in SMOKE_STUDY_S.items()},
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
