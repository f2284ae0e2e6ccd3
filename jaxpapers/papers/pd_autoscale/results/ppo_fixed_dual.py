"""pd39b: the main PPO variant retrained with the mean-tracking dual step (ppo.dual_update
as now in the repo), 3 seeds at the step size the study selected (3e-4; selected there with
the old step), 120 iterations x 4 envs, validation every 20 (the study's defaults), then the
test traces both modes at the study's evaluation seed (3) and the sampled mode at 11-14.
Resumable (workdir /tmp/pd39b/ppo_fixed)."""
import sys, time, json, os
import numpy as np, jax
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 4, "configs"))
WORKDIR = sys.argv[1] if len(sys.argv) > 1 else "/tmp/pd39b/ppo_fixed"
import pd_autoscale as cfgmod
from jaxpapers.papers.pd_autoscale import experiment as ex, policy, episode

config = cfgmod.get_config()
spec, ps, pp = ex.setup(config)
print("dual", pp.lam_lr, pp.step_cap, pp.lam_max, flush=True)
members = ex.member_grid(config, [ex.main_variant(config)], list(range(config.rl.seeds)), [3e-4])
t0 = time.time()
out = ex.train_policy(config, WORKDIR, members, tag="rl")
print(f"trained in {time.time() - t0:.0f} s", flush=True)
print("val score", {m: np.asarray(out["score"][m]).tolist() for m in ex.EVAL_MODES},
      "chosen", ex.pick_mode(out["score"]), flush=True)
test = ex.make_traces(config, "test", config.data.test_seeds)
ft = [t[0] for t in test]
res = {}
for mode, seeds in (("sampled", (3, 11, 12, 13, 14)), ("greedy", (3,))):
  ctrl = policy.controller(spec, ps, greedy=mode == "greedy")
  params = dict(net=out["best"][mode], flags=out["flags"])
  for seed in seeds:
    summ, _ = ex.run_clusters(config, spec, ctrl, params, test, seed=seed)
    for fam in config.data.families:
      ss = [summ[g][t] for g in range(len(members)) for t, f in enumerate(ft) if f == fam]
      g = [s["gpus"] for s in ss]
      line = (f"{mode} seed {seed} {fam}: meets {sum(episode.meets(spec, s) for s in ss)}/{len(ss)} "
              f"gpus {np.mean(g):.2f}±{np.std(g):.2f} p/d {np.mean([s['prefill_gpus'] for s in ss]):.2f}/"
              f"{np.mean([s['decode_gpus'] for s in ss]):.2f} p99ttft {np.mean([s['p99_ttft'] for s in ss]):.2f} "
              f"p99tpot {1e3*np.mean([s['p99_tpot'] for s in ss]):.0f} att {np.mean([s['attainment'] for s in ss]):.3f} "
              f"events {np.mean([s['scaling_events'] for s in ss]):.1f}")
      print(line, flush=True)
# the multipliers and violating fractions per 20 iterations (training rows)
rows = [json.loads(l) for l in open(f"{WORKDIR}/metrics.jsonl")]
rows = [r for r in rows if r.get("split") == "train" and "rl/gpus" in r]
fams = list(config.rl.train_families)
for a in range(0, 120, 20):
  blk = [r for r in rows if a < r["step"] <= a + 20]
  s = f"it {a+1}-{a+20}: gpus " + " ".join(f"{np.mean([r[f'rl/gpus/m{j}'] for r in blk]):.1f}" for j in range(3) if f"rl/gpus/m{j}" in blk[0])
  for fi, f in enumerate(fams):
    v = [r.get(f"rl/viol/{f}/m{j}") for r in blk for j in range(3)]
    l = [blk[-1].get(f"rl/lam/{f}/m{j}") for j in range(3)]
    s += f" | {f} viol mean {np.nanmean([x for x in v if x is not None]):.3f} lam_end {l}"
  print(s, flush=True)
