"""BFMNet: truthful budget-feasible procurement menus -- builds colabs/bfmnet.ipynb.

Run: python jaxpapers/papers/bfmnet/make_notebook.py, then execute it in place with
`python -m jaxpapers.core.notebook colabs/bfmnet.ipynb` so it is committed with outputs.
The notebook trains a small BFMNet on one cell with the same functions the launcher uses,
opens one market (raw menu prices, prices after the budget transformation, who is
procured), sweeps a seller's own bid to show its price does not move, and compares the
buyer's value with Singer's proportional-share mechanism and the optimum.
"""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# BFMNet: one procurement market, menu by menu

A buyer with budget B buys from n sellers with private costs. BFMNet gives seller i a
posted price t_i computed from the *other* sellers' bids only (so truth-telling is a
dominant strategy), then the ex-post budget transformation caps each price so that total
payments never exceed B (proof in `jaxpapers/papers/bfmnet/mechanism.py`). This notebook
trains a small BFMNet, opens one market, and compares it with Singer's proportional share.
With `JAXPAPERS_SMOKE=1` (set by the tests) it uses the config's tiny `smoke` setting."""

SETUP = """import os
import jax, jax.numpy as jnp, numpy as np
import matplotlib.pyplot as plt

from jaxpapers.core import config as config_lib
from jaxpapers.papers.bfmnet import classical, experiment, markets, mechanism, menus

SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"
cfg = config_lib.load("configs/bfmnet.py:smoke" if SMOKE
                      else "configs/bfmnet.py:n=10,steps=200")
print("n =", cfg.market.n, "training steps =", cfg.optim.steps,
      "instances per step =", cfg.optim.batch)"""

TRAIN = """ids = markets.cell_ids("additive", "uniform")[None]          # one cell
model, params, info = experiment.train(cfg, "bfmnet", ids)
params = jax.tree.map(lambda x: x[0], params)


@jax.jit  # one compiled program for the market below (op by op compiles every op)
def open_market(params, key):
  market = jax.tree.map(lambda x: x[0], markets.sample_markets(
      key, 1, cfg.market.n, ids[0], cfg.market.budget_per_seller))
  bids = market["costs"]                                   # truthful: a dominant strategy
  raw = menus.raw_price_fn(model, params, market)
  t, t0, cap = mechanism.prices(raw, market["budget"], bids)
  win = bids <= t
  x_s, p_s = classical.singer(market, bids)
  # A seller cannot move its own price: seller 0's bid swept, its price recomputed.
  t_sweep = jax.vmap(lambda b: mechanism.price_one(
      raw, market["budget"], bids.at[0].set(b), 0)[0])(jnp.linspace(0, 1, 11))
  return (market, bids, t, t0, win, x_s, p_s, markets.value(market, win),
          markets.value(market, x_s), t_sweep)


(market, bids, t, t0, win, x_s, p_s, v_bfm, v_singer,
 t_sweep) = open_market(params, jax.random.PRNGKey(42))
opt = markets.optimum(market)[0]
print(f"budget {float(market['budget']):.3f}")
print(f"BFMNet spend {float(jnp.sum(t * win)):.3f}  value {float(v_bfm):.3f}")
print(f"Singer spend {float(jnp.sum(p_s)):.3f}  value {float(v_singer):.3f}")
print(f"optimum (true costs) value {opt:.3f}")"""

SWEEP = """# A seller cannot move its own price: seller 0's price over 11 of its own bids
# (t_sweep above: seller 0's bid swept from 0 to 1, its price recomputed).
print("seller 0's price over 11 own bids:", np.unique(np.asarray(t_sweep)))"""

PLOT = """n = cfg.market.n
fig, ax = plt.subplots(1, 2, figsize=(11, 3.5))
idx = np.arange(n)
ax[0].bar(idx - 0.2, np.asarray(t0), 0.4, label="raw menu price t0_i", alpha=0.5)
ax[0].bar(idx + 0.2, np.asarray(t), 0.4, label="after budget transform t_i")
ax[0].scatter(idx, np.asarray(bids), color="k", zorder=3, label="cost (= bid)")
ax[0].scatter(idx[np.asarray(win)], np.asarray(bids)[np.asarray(win)], color="r", zorder=4,
              label="procured")
ax[0].set_xlabel("seller"); ax[0].set_ylabel("price / cost"); ax[0].legend(fontsize=7)
ax[0].set_title(f"one market, B = {float(market['budget']):.2f}")
vals = [float(v_bfm), float(v_singer), opt]
ax[1].bar(["BFMNet", "Singer PS", "optimum"], vals, color=["C1", "C2", "C7"])
ax[1].set_ylabel("buyer value")
plt.tight_layout(); plt.show()"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = ([nbformat.v4.new_markdown_cell(INTRO),
               nbformat.v4.new_code_cell(notebook.INSTALL_CELL)]
              + [nbformat.v4.new_code_cell(c) for c in (SETUP, TRAIN, SWEEP, PLOT)])
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "bfmnet.ipynb"))


if __name__ == "__main__":
  main()
