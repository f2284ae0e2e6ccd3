"""Builds colabs/llops.ipynb (run: python jaxpapers/papers/llops/make_notebook.py)."""
import os

import nbformat

from jaxpapers.core import notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

INTRO = """# llops: learnable low-rank polynomial sketches for linear attention

Two pictures. (1) Error of linear attention against exact degree-4 polynomial attention
as the per-head state grows, for the random PolySketch, Performer and LLoPS (the random
sketch's matrices trained by distillation on the kernel), on anisotropic synthetic
queries and keys (the full study uses SmolLM2-135M's and our own LMs' q/k). (2) The speed
of block-causal linear attention against exact polynomial and softmax attention as the
sequence grows.

`JAXPAPERS_SMOKE=1` gives a seconds-long run (the tests use it). Full study:
`python launch/study.py --config=configs/llops.py` (README of the paper)."""

SETUP = """import os, time
import numpy as np
import jax, jax.numpy as jnp
import matplotlib.pyplot as plt
from jaxpapers.papers.llops import approx, features, linear
from jaxpapers.nn import attention as attn_lib

SMOKE = os.environ.get("JAXPAPERS_SMOKE") == "1"
STATES = (16,) if SMOKE else (16, 64)
STEPS = 3 if SMOKE else 60
LENGTHS = (64, 128) if SMOKE else (256, 512, 1024, 2048)
rng = np.random.default_rng(0)
d, N, T = 16, 12, 32
mix = rng.standard_normal((d, d)) * np.linspace(2.0, 0.2, d)[:, None]  # anisotropic heads
q, k = (jnp.asarray(rng.standard_normal((N, T, d)) @ mix, jnp.float32) for _ in range(2))
v = jnp.asarray(rng.standard_normal((N, T, d)), jnp.float32)
tr, te = slice(0, 8), slice(8, 12)"""

APPROX = """res = {}
for name in ("polysketch_gauss", "performer", "llops"):
  for state in STATES:
    mp = features.make_map(name, state, 4, d)
    errs = []
    for seed in range(3):
      fn = jax.jit(approx.member_fn(mp, 4, STEPS if mp.learned else 0, 4))
      out = fn(0, seed, 3e-2, q[tr], k[tr], v[tr], q[te], k[te], v[te], q[te], k[te], v[te])
      errs.append(float(out["test"]["out_err"]))
    res[(name, mp.state)] = (np.mean(errs), np.std(errs))
    print(f"{name:18s} state {mp.state:4d}: attention-output error {np.mean(errs):.3f} +- {np.std(errs):.3f}")"""

SPEED = """mp = features.llops(8, 2)
p = mp.init(jax.random.PRNGKey(0), 64)
lin = linear.feature_kernel(lambda x: mp.phi(p, features.layer_norm(x)), "poly", 64)
ops = {"block-causal LLoPS": lambda a, b, c: lin(a, b, c, None, mask_kind="causal"),
       "exact poly (T^2)": lambda a, b, c: features.polynomial_attention(a, b, c, attn_lib.causal_mask(a.shape[1])),
       "softmax (T^2)": lambda a, b, c: attn_lib.softmax_attention(a, b, c, attn_lib.causal_mask(a.shape[1]))}
speed = {n: [] for n in ops}
for L in LENGTHS:
  x = jnp.asarray(np.random.default_rng(L).standard_normal((1, L, 2, 64)), jnp.float32)
  for n, op in ops.items():
    f = jax.jit(op); jax.block_until_ready(f(x, x, x))
    t0 = time.perf_counter(); jax.block_until_ready(f(x, x, x)); speed[n].append(time.perf_counter() - t0)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for name in ("polysketch_gauss", "performer", "llops"):
  st = [s for (n, s) in res if n == name]
  axes[0].errorbar(st, [res[(name, s)][0] for s in st], yerr=[res[(name, s)][1] for s in st], marker="o", label=name)
axes[0].set(xscale="log", yscale="log", xlabel="state size", ylabel="rel. error vs exact degree-4 attention")
axes[0].legend()
for n, ts in speed.items():
  axes[1].plot(LENGTHS, np.array(ts) * 1e3, "o-", label=n)
axes[1].set(xscale="log", yscale="log", xlabel="sequence length", ylabel="forward ms (1 x 2 heads x 64)")
axes[1].legend(); plt.tight_layout(); plt.show()"""


def main():
  nb = nbformat.v4.new_notebook()
  nb.cells = [nbformat.v4.new_markdown_cell(INTRO),
              nbformat.v4.new_code_cell(notebook.INSTALL_CELL)]
  nb.cells += [nbformat.v4.new_code_cell(c) for c in (SETUP, APPROX, SPEED)]
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  nbformat.write(nb, os.path.join(ROOT, "colabs", "llops.ipynb"))


if __name__ == "__main__":
  main()
