"""Helpers for studies: run config variants, collect rows, write markdown tables.

A paper's `run_study(config, workdir)` builds its grid (vmapped inside one program where
the model is tiny, sequential runs otherwise), then uses these helpers so every study
writes the same kind of artefacts: `<name>.md` (table) and `<name>.json` (raw rows).
"""
from __future__ import annotations

import json
import os
import subprocess

from jaxpapers.core import metrics as metrics_lib


# Study outputs, not code: they never mark a run dirty (see git_commit).
_OUTPUTS = (":(exclude)*.md", ":(exclude)*.png", ":(exclude)*_rows.json",
            ":(exclude,glob)**/results/**", ":(exclude,glob)**/scale.json",
            ":(exclude,glob)**/quickstart.json")


def git_commit(paths=("jaxpapers", "configs", "launch"), cwd: str | None = None) -> str:
  """The commit that produced a table, '-dirty' if `paths` have uncommitted changes.

  Pass the paper's own paths so that unrelated work in progress elsewhere in the tree
  does not mark a paper's table as dirty. Only code marks a run dirty: markdown (READMEs,
  tables), plots (*.png), raw rows (*_rows.json), the plan and quick-start records
  (scale.json, quickstart.json) and anything under a `results/` folder are a study's
  outputs, and an earlier part's uncommitted outputs must not mark the next part
  dirty. 'unknown' outside a git checkout.
  """
  here = cwd or os.path.dirname(os.path.abspath(__file__))
  try:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=here, timeout=10)
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                         text=True, cwd=here, timeout=10).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths, *_OUTPUTS],
                           capture_output=True, text=True, cwd=top or here, timeout=10)
    commit = out.stdout.strip() or "unknown"
    return commit + ("-dirty" if dirty.stdout.strip() else "")
  except (OSError, subprocess.SubprocessError):
    return "unknown"


def _fmt(v, digits: int) -> str:
  if isinstance(v, float):
    return f"{v:.{digits}f}"
  return str(v)


def markdown_table(rows: list[dict], columns: list[str] | None = None,
                   digits: int = 3) -> str:
  """Renders rows (dicts) as a GitHub markdown table, columns in the given order."""
  if not rows:
    return "(no rows)\n"
  columns = columns or list(rows[0])
  lines = ["| " + " | ".join(columns) + " |",
           "|" + "|".join("---" for _ in columns) + "|"]
  for r in rows:
    lines.append("| " + " | ".join(_fmt(r.get(c, ""), digits) for c in columns) + " |")
  return "\n".join(lines) + "\n"


def write_table(workdir: str, name: str, rows: list[dict], columns=None,
                header: str = "", digits: int = 3) -> str:
  """Writes `<name>.md` and `<name>.json` into the workdir (process 0) and returns the md."""
  md = (header.rstrip() + "\n\n" if header else "") + markdown_table(rows, columns, digits)
  if metrics_lib.is_writer():
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, f"{name}.md"), "w") as f:
      f.write(md)
    with open(os.path.join(workdir, f"{name}.json"), "w") as f:
      json.dump(rows, f, indent=1, default=str)
  return md
