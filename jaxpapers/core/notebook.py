"""The Colab install cell every notebook in colabs/ starts with (one definition).

The notebook generators (`jaxpapers/papers/*/make_notebook.py`) write it first, and
tests/test_colabs.py checks every committed notebook starts with exactly this text.
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
