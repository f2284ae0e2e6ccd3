"""Builds colabs/pd_autoscale.ipynb (run: python jaxpapers/papers/pd_autoscale/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# Learned autoscaling of PD-disaggregated LLM serving (abstract 12)

A JAX simulator of a prefill/decode-disaggregated cluster (DistServe's fitted OPT-13B /
A100 latency model, KV transfer, KV memory per decode GPU, 60 s pod start-up) runs
closed-loop episodes of autoscalers, vmapped over clusters. Here: an Azure-2023-like
diurnal trace, the AIBrix-style KPA autoscaler and the offline oracle, both pools
following the load, and their P99 TTFT / TPOT. The study (PPO controller, every baseline
grid-searched) is `python launch/study.py --config=configs/pd_autoscale.py`.
`JAXPAPERS_SMOKE=1` runs a tiny setting."""

SETUP = """import os
import jax, jax.numpy as jnp, numpy as np
import matplotlib.pyplot as plt
from jaxpapers.core import config as config_lib
from jaxpapers.papers.pd_autoscale import baselines, experiment, workloads
SMOKE = os.environ.get('JAXPAPERS_SMOKE') == '1'
config = config_lib.load('configs/pd_autoscale.py:' + ('smoke,duration=120,families=diurnal'
                                                       if SMOKE else 'families=diurnal'))
spec, _, _ = experiment.setup(config)
trace = experiment.make_traces(config, 'test', 1)
print({k: round(v, 2) for k, v in workloads.describe(*trace[0][2]).items()})"""

RUN = """runs = {}
# The study's diurnal selections (results/selections.md).
for name, point in [('kpa', dict(target_p=2.0, target_d=10.0, delay=0.0)),
                    ('oracle', dict(h_p=1.0, h_d=0.85))]:
  ctrl = baselines.make(name, spec, config.study.start_hold_s)  # KPA with the start guard
  params = {k: jnp.asarray([v], jnp.float32) for k, v in point.items()}
  summ, (st, rows) = experiment.run_clusters(config, spec, ctrl, params, trace,
                                             oracle=name == 'oracle')
  runs[name] = jax.tree.map(lambda x: np.asarray(x[0]), rows)
  s = summ[0][0]
  print(f"{name:7s} GPUs {s['gpus']:.2f}  P99 TTFT {s['p99_ttft']:.2f} s  "
        f"P99 TPOT {1e3 * s['p99_tpot']:.0f} ms  attainment {s['attainment']:.3f}  "
        f"scaling events {s['scaling_events']}")"""

PLOT = """fig, axes = plt.subplots(1, 2, figsize=(13, 3.5), sharey=True)
for ax, (name, r) in zip(axes, runs.items()):
  t = np.arange(len(r['gpus'])) * spec.epoch_s
  ax.step(t, r['prefill_gpus'], label='prefill GPUs')
  ax.step(t, r['decode_gpus'], label='decode GPUs')
  ax2 = ax.twinx()
  ax2.plot(t, r['arrivals'] / spec.epoch_s, color='gray', lw=0.8)
  ax2.set_ylabel('requests/s (gray)')
  ax.set_title(name); ax.set_xlabel('s'); ax.legend(loc='upper left', fontsize=8)
fig.tight_layout(); plt.show()"""


def build():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL),
              nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(RUN),
              nbformat.v4.new_code_cell(PLOT)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "pd_autoscale.ipynb"))


if __name__ == "__main__":
  build()
