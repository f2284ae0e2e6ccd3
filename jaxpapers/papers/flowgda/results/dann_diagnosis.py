"""Issue 44: where our DANN was handicapped (README "DANN, textbook", diagnosis runs).

Runs `pipeline.run` with methods source_only + dann on one benchmark for seeds
0 .. S-1, once per config-arg string, and prints DANN's target accuracy under both rules
with its lane means. `--old FILE` swaps in the `dann` of an older `baselines.py` (e.g.
`git show 2d2ec7d:jaxpapers/papers/flowgda/baselines.py > /tmp/old.py`: the first
study's DANN) for the first arg string. Heavy: run it through the team's core runner.

  python jaxpapers/papers/flowgda/results/dann_diagnosis.py moons 10 \
      --old /tmp/old.py "dann_init=source,dann_domains=pooled" \
      "dann_init=source,dann_domains=pooled" ""
  python jaxpapers/papers/flowgda/results/dann_diagnosis.py gauss 3 "hidden=64,feat=64"
"""
import argparse
import importlib.util
import os
import time

from jaxpapers.papers.flowgda import baselines
from jaxpapers.papers.flowgda import pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))))


def _load(name, path):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def main():
  p = argparse.ArgumentParser()
  p.add_argument("bench")
  p.add_argument("seeds", type=int)
  p.add_argument("args", nargs="+", help="config-arg strings, one run each")
  p.add_argument("--old", default="", help="older baselines.py for the first run")
  a = p.parse_args()
  config = _load("flowgda_config", os.path.join(ROOT, "configs", "flowgda.py"))
  new = baselines.dann
  for i, arg in enumerate(a.args):
    if i == 0 and a.old:  # the old signature had no init_fn
      old = _load("old_baselines", a.old).dann
      baselines.dann = lambda k, p_, x, y, m, lr, hp, init_fn=None, old=old: old(
          k, p_, x, y, m, lr, hp)
    else:
      baselines.dann = new
    pipeline._PROGRAMS.clear()  # noqa: SLF001  (a swapped dann needs a fresh program)
    t = time.time()
    out = pipeline.run(config.get_config(arg), a.bench, list(range(a.seeds)),
                       methods=("source_only", "dann"), log=lambda s: None)
    d, s = out["dann"], out["source_only"]
    tag = ("old code, " if i == 0 and a.old else "") + (arg or "default (textbook)")
    print(f"{a.bench} {tag}: DANN [proxy] {d['test'].mean():.3f} +- {d['test'].std():.3f}"
          f", [rv] {d['test_rv'].mean():.3f} +- {d['test_rv'].std():.3f}; lane means "
          f"{d['lanes']['test'].mean(0).round(3)}; source-only {s['test'].mean():.3f} +- "
          f"{s['test'].std():.3f} ({time.time() - t:.0f} s)", flush=True)


if __name__ == "__main__":
  main()
