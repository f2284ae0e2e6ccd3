"""The Colab install cell every notebook in colabs/ starts with (one definition).

The notebook generators (`jaxpapers/papers/*/make_notebook.py`) write it first, and
tests/test_colabs.py checks every committed notebook starts with exactly this text.
`python -m jaxpapers.core.notebook colabs/<name>.ipynb` executes a notebook in place (its
full, non-smoke setting) so it is committed with its printout and figure.
"""

INSTALL_CELL = """# Colab / a fresh kernel: install jaxpapers when it is missing. Set JAXPAPERS_GIT to the
# repository's git URL; it is cloned to ./jaxpapers_repo and installed editable, so the
# configs/ folder is there too. A local checkout after `pip install -e .` needs nothing.
import importlib.util, os, subprocess, sys
if importlib.util.find_spec("jaxpapers") is None:
  url = os.environ.get("JAXPAPERS_GIT")
  if not url:
    raise RuntimeError("jaxpapers is not installed: set JAXPAPERS_GIT to the repository URL "
                       "(or run `pip install -e .` in a clone) and rerun this cell")
  if not os.path.isdir("jaxpapers_repo"):
    subprocess.check_call(["git", "clone", "--depth=1", url, "jaxpapers_repo"])
  subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-e",
                         "jaxpapers_repo[test]"])
  sys.path.insert(0, os.path.abspath("jaxpapers_repo"))"""



def execute_in_place(path: str, timeout: int = 900) -> float:
  """Runs every cell of `path` in a fresh kernel (in a scratch directory, so nothing is
  written beside the notebook) and saves it with its outputs; returns the seconds taken."""
  import tempfile
  import time

  import nbformat
  from nbclient import NotebookClient

  t0 = time.perf_counter()
  nb = nbformat.read(path, as_version=4)
  with tempfile.TemporaryDirectory(prefix="jaxpapers_nb_") as scratch:
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": scratch}}).execute()
  nbformat.write(nb, path)
  return time.perf_counter() - t0


if __name__ == "__main__":
  import sys

  for arg in sys.argv[1:]:
    print(f"{arg}: executed in {execute_in_place(arg):.0f} s", flush=True)
