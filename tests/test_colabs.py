"""Executes every notebook in colabs/ headlessly on its tiny setting (JAXPAPERS_SMOKE=1)."""
import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "colabs", "*.ipynb")))


@pytest.mark.parametrize("path", NOTEBOOKS,
                         ids=[os.path.basename(p)[:-6] for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
  nb = nbformat.read(path, as_version=4)
  env_path = os.environ.get("PYTHONPATH", "")
  os.environ["PYTHONPATH"] = ROOT + (os.pathsep + env_path if env_path else "")
  os.environ["JAXPAPERS_SMOKE"] = "1"
  client = NotebookClient(nb, timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": str(tmp_path)}})
  client.execute()
  errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]
  assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS,
                         ids=[os.path.basename(p)[:-6] for p in NOTEBOOKS])
def test_notebook_installs_the_package_first(path):
  """Colab: the first code cell installs jaxpapers when it is missing (and only then)."""
  nb = nbformat.read(path, as_version=4)
  first = next(c for c in nb.cells if c.cell_type == "code").source
  assert first == notebook.INSTALL_CELL
  assert 'importlib.util.find_spec("jaxpapers") is None' in first and "pip" in first


@pytest.mark.parametrize("path", NOTEBOOKS,
                         ids=[os.path.basename(p)[:-6] for p in NOTEBOOKS])
def test_notebook_is_committed_with_its_results(path):
  """A reader sees the small run's printout and figure on the repository page (issue 26):
  the committed notebook was executed to the end, without errors, and shows a figure."""
  nb = nbformat.read(path, as_version=4)
  code = [c for c in nb.cells if c.cell_type == "code"]
  runs = [c for c in code[1:] if c.source.strip()]  # the install cell prints nothing
  assert runs and all(c.get("execution_count") for c in runs), (
      f"{os.path.basename(path)}: execute it and commit the outputs "
      "with `python -m jaxpapers.core.notebook colabs/<name>.ipynb`")
  outputs = [o for c in runs for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  assert any("image/png" in o.get("data", {}) for o in outputs), "no figure in the outputs"
