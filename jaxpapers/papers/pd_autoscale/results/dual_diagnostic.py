"""The dual-step diagnostic (issue 39; README, Controller; output in dual_diagnostic.md). The main PPO
variant, 1 seed (0), Adam lr 3e-4 (the previous study's pick), trained on conversation +
diurnal only, 40 iterations x 4 envs (2 episodes per family per iteration), validation at
20 and 40, for one dual rule: argv = lam_lr [linear or log] [iterations (40)] [dual_cap (100)]:

  PYTHONPATH=. python jaxpapers/papers/pd_autoscale/results/dual_diagnostic.py 0.1 log 80 20
"""
import sys, time, json
import numpy as np
sys.path.insert(0, "configs")  # run from the repository root
import pd_autoscale as cfgmod
from jaxpapers.papers.pd_autoscale import experiment as ex

lam_lr = float(sys.argv[1])
config = cfgmod.get_config(f"seeds=1,iterations={int(sys.argv[3]) if len(sys.argv) > 3 else 40},eval_every=20,lam_lr={lam_lr},dual={sys.argv[2] if len(sys.argv) > 2 else 'linear'},dual_cap={sys.argv[4] if len(sys.argv) > 4 else 100}")
config.data.families = ("conversation", "diurnal")
config.rl.train_families = ("conversation", "diurnal")
spec, ps, pp = ex.setup(config)
print("dual", pp.lam_lr, pp.step_cap, "families", config.rl.train_families, flush=True)
wd = f"/tmp/pda_dual_diag/{config.rl.dual}{lam_lr:g}_cap{config.rl.dual_cap:g}_it{config.rl.iterations}"
members = ex.member_grid(config, [ex.main_variant(config)], [0], [3e-4])
t0 = time.time()
out = ex.train_policy(config, wd, members, tag="rl")
print(f"trained in {time.time() - t0:.0f} s", flush=True)
print("val score", {m: np.asarray(out["score"][m]).tolist() for m in ex.EVAL_MODES}, flush=True)
rows = [json.loads(l) for l in open(f"{wd}/metrics.jsonl")]
rows = {r["step"]: r for r in rows if r.get("split") == "train" and "rl/gpus" in r}
for a in range(0, config.rl.iterations, 10):
  blk = [rows[s] for s in range(a + 1, a + 11) if s in rows]
  s = f"it {a+1}-{a+10}: gpus {np.mean([r['rl/gpus'] for r in blk]):.2f}"
  for f in config.rl.train_families:
    v = [r[f"rl/viol/{f}"] for r in blk if f"rl/viol/{f}" in r]
    g = [r[f"rl/gpus/{f}"] for r in blk if f"rl/gpus/{f}" in r]
    s += (f" | {f} viol {np.mean(v):.4f} gpus {np.mean(g):.2f} lam {blk[0][f'rl/lam/{f}']:.2f}"
          f"->{blk[-1][f'rl/lam/{f}']:.2f}")
  print(s, flush=True)
for s in range(20, config.rl.iterations + 1, 20):
  r = rows[s]
  print(f"val it {s}: greedy ({r['rl/val_feasible/m0']:.0f}, {r['rl/val_gpus/m0']:.2f}) sampled "
        f"({r['rl/val_feasible_sampled/m0']:.0f}, {r['rl/val_gpus_sampled/m0']:.2f})", flush=True)
