"""Every paper's study in one command, and the README papers table from committed verdicts.

  python launch/reproduce.py --workdir=/tmp/all              # every study, resumable
  python launch/reproduce.py --workdir=/tmp/all --papers=stompp,lpr
  python launch/reproduce.py --workdir=/tmp/all_smoke --smoke  # every study at smoke size
  python launch/reproduce.py --workdir=/tmp/s --smoke --shard=0/2  # half of them (.ci/run)
  python launch/reproduce.py --table                          # rewrite README's table
  python launch/reproduce.py --plans [--papers=a,b]           # replan :paper -> scale.json
  python launch/reproduce.py --quickstart                     # rerun the quick start

A finished paper is skipped on restart (workdir/<name>/DONE.json); each paper prints one
progress line with its wall time. The table is rebuilt from the `verdicts.json` beside
each paper's README; a paper's verdicts are updated by hand from its study's table, with
the command and commit that produced it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from jaxpapers.core import reproduce  # noqa: E402

WORKDIR = flags.DEFINE_string("workdir", None, "Directory for every paper's study.")
PAPERS = flags.DEFINE_list("papers", None, "Subset of papers (default: all implemented).")
SMOKE = flags.DEFINE_bool("smoke", False, "Run every study at its smoke size.")
SHARD = flags.DEFINE_string("shard", None, "i/n: only every n-th paper from the i-th "
                            "(0-based), so n processes split the papers between them.")
TABLE = flags.DEFINE_bool("table", False, "Rewrite README.md's papers table and exit.")
PLANS = flags.DEFINE_bool("plans", False, "Plan every paper's :paper config on 8 devices "
                          "and 1 (H100), write each scale.json, then rewrite the table.")
QUICKSTART = flags.DEFINE_bool("quickstart", False, "Rerun the README's quick start and "
                               "record its final number (jaxpapers/papers/stompp/quickstart.json).")


def main(argv):
  del argv
  try:
    if PLANS.value:
      reproduce.plans(PAPERS.value)
    if QUICKSTART.value:
      reproduce.quickstart()
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  if TABLE.value or PLANS.value or QUICKSTART.value:
    path = os.path.join(reproduce.ROOT, "README.md")
    try:
      with open(path) as f:
        text = reproduce.readme_with_table(f.read())
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(1)
    with open(path, "w") as f:
      f.write(text)
    print(f"wrote the papers table into {path}")
    return
  if not WORKDIR.value:
    print("error: --workdir is required (or --table)", file=sys.stderr)
    sys.exit(1)
  try:
    papers = PAPERS.value
    if SHARD.value:
      papers = reproduce.shard(papers or reproduce.available(), SHARD.value)
    status = reproduce.run(WORKDIR.value, papers, SMOKE.value)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  failed = {k: v for k, v in status.items() if v not in ("done", "skipped")}
  if failed:
    print(f"{len(failed)} of {len(status)} studies failed: {', '.join(failed)}",
          file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
