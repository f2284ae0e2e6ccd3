"""One command reruns every study; the README papers table is generated from verdicts."""
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


# One fast smoke study (each costs about a minute of CPU); every paper's smoke *config* runs
# in test_configs_smoke.
SMOKE_PAPERS = ["perturbed_eg"]
