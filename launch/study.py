"""Runs a paper's declared study: python launch/study.py --config=configs/<name>.py:study=NAME --workdir=DIR.

The study writes its markdown table (and plot) into the workdir; the paper README keeps
the latest one with this command and the commit.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common  # noqa: E402

if __name__ == "__main__":
  _common.run_app(_common.main_for("run_study"))
