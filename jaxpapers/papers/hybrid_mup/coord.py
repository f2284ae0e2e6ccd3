"""hybrid_mup (LR transfer in Transformer + SSM hybrids under muP): the coordinate check.

microsoft/mup's protocol (`mup.coord_check.get_coord_data`, Tensor Programs V, arXiv
2203.03466, Sec. 4 and Fig. 5): models of several widths start from `seeds` inits, train
a few steps on ONE fixed batch at a constant LR (no warm-up, no schedule, no clipping, no
weight decay), and the scale of every activation is recorded in the forward pass of each
step t = 1..steps (t = 1 is the initialization, t = k the forward after k - 1 updates).
Statistics: the mean absolute coordinate (l1, microsoft/mup's default) and the RMS, per
activation role, averaged over the blocks of that role. Under a correct muP they stay
flat in width at every t; under SP the updated activations grow with width.

Roles: the embedding output; per Mamba block the in-projections (x and gate z), the conv
output (after SiLU), Delta, B, C, the scan output y (before the gate), the gated output
and the out-projection (the block's residual contribution); per Transformer layer the
attention and MLP sublayers' residual contributions; the logits.

All members of one width (parametrizations x seeds) train in one compiled, vmapped
program with the parametrization as traced numbers, as the LR sweeps do (`sweep.py`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import sharding
from jaxpapers.papers.hybrid_mup import sweep

MEASURES = ("rms", "l1")


def run_members(hybrid, members: list[dict], tokens_BxT1, *, lr: float, steps: int,
                b1: float, b2: float, eps: float, mapper=sharding.spread) -> dict:
  """members: [{'seed', 'num'}]; returns {'stats': {name: (P, steps)}, 'loss': (P, steps)}.

  Every member sees the same batch `tokens_BxT1` at every step; Adam(W) without decay or
  clipping at the constant LR `lr` (times each parameter's LR multiplier)."""
  toks = jnp.asarray(tokens_BxT1)

  def one(key, num):
    params = hybrid.init(jax.random.split(key)[0], num)
    mults = hybrid.lr_mults(num)
    mask = jax.tree.map(lambda _: False, hybrid.decay_mask)

    def step(carry, _):
      params, opt = carry

      def loss_fn(p):
        logits, stats = hybrid.forward(p, toks[:, :-1], num, measures=MEASURES)
        nats = sweep.optax_xent(logits, toks[:, 1:])
        return jnp.mean(nats), stats

      (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
      params, opt, _ = sweep.unified_update(
          grads, opt, params, kind=0, lr_t=lr, mults=mults, mask=mask, b1=b1, b2=b2,
          eps=eps, weight_decay=0.0, clip_norm=0.0)
      return (params, opt), (loss, stats)

    _, (loss, stats) = jax.lax.scan(step, (params, sweep.unified_init(params)), None,
                                    length=steps)
    return loss, stats

  keys = jnp.stack([jax.random.PRNGKey(m["seed"]) for m in members])
  loss, stats = jax.device_get(mapper(one)(keys, sweep.stack_numerics(
      [m["num"] for m in members])))
  return {"loss": np.asarray(loss), "stats": {k: np.asarray(v) for k, v in stats.items()}}


def slopes(rows: list[dict], tol: float) -> list[dict]:
  """Log-log slope of each statistic against width, per (method, name, t).

  rows: one per (method, width, seed) with row['stats'][name] = [value at t = 1..steps].
  The slope is fitted to the seed-mean at each width; the per-seed slopes give its
  spread. 'flat' when |slope| <= tol, else 'grows' / 'shrinks'."""
  out = []
  methods = sorted({r["method"] for r in rows})
  for method in methods:
    rs = [r for r in rows if r["method"] == method]
    widths = sorted({r["dim"] for r in rs})
    seeds = sorted({r["seed"] for r in rs})
    if len(widths) < 2:
      continue
    x = np.log2(widths)
    by = {(r["dim"], r["seed"]): r for r in rs}
    for name in rs[0]["stats"]:
      n_t = len(rs[0]["stats"][name])
      for t in range(n_t):
        vals = np.array([[by[(w, s)]["stats"][name][t] for w in widths] for s in seeds])
        y = np.log2(np.maximum(vals.mean(0), 1e-30))
        slope = float(np.polyfit(x, y, 1)[0])
        per_seed = [float(np.polyfit(x, np.log2(np.maximum(v, 1e-30)), 1)[0]) for v in vals]
        stat, _, kind = name.partition("/")
        out.append({"method": method, "activation": stat, "measure": kind or "rms",
                    "t": t + 1, "slope": slope, "slope_min": min(per_seed),
                    "slope_max": max(per_seed),
                    "ratio_max_min_width": float(vals.mean(0)[-1] / max(vals.mean(0)[0], 1e-30)),
                    "verdict": ("flat" if abs(slope) <= tol else
                                "grows" if slope > 0 else "shrinks")})
  return out


def summary(table: list[dict], tol: float) -> list[dict]:
  """One row per (method, activation): the l1 slope at every t, the largest |slope| of
  either measure over t, and the verdict over all t ('flat' only if every slope of both
  measures is within tol)."""
  out = {}
  for r in table:
    row = out.setdefault((r["method"], r["activation"]),
                         {"method": r["method"], "activation": r["activation"]})
    if r["measure"] == "l1":
      row[f"l1 t={r['t']}"] = r["slope"]
    row.setdefault("_all", []).append(r["slope"])
  rows = []
  for row in out.values():
    s = row.pop("_all")
    worst = max(s, key=abs)
    row["max |slope|"] = abs(worst)
    row["verdict"] = ("flat" if abs(worst) <= tol else
                      "grows" if max(s) > tol else "shrinks")
    rows.append(row)
  return rows
