"""Curves until flat (issue 39, review rev39 S1): the study's selected PPO members (main
variant, the selected step size, 3 seeds) continued from their iteration-120 state to
`iterations` (argv[2], default 240) on the same training stream, validation every 20;
then the validation-selected snapshots (both modes, best over all iterations) on the test
traces (evaluation seed 3, as the study). Reads a COPY of the study's ppo_grid checkpoint:

  cp -a STUDY/ppo_grid/rl /tmp/pda_longer_src
  PYTHONPATH=. python jaxpapers/papers/pd_autoscale/results/ppo_longer.py /tmp/pda_longer_src 240 LR

Member j's rollout key differs from the study's (the keys are split per member count),
so iterations 121+ are a continuation, not a part of the study."""
import os, sys, json
import numpy as np, jax, jax.numpy as jnp
sys.path.insert(0, "configs")  # run from the repository root
import pd_autoscale as cfgmod
from jaxpapers.core import checkpoint as checkpoint_lib, population
from jaxpapers.papers.pd_autoscale import experiment as ex, policy, ppo, episode

src, total, lr = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
out_dir = "/tmp/pda_longer"
config = cfgmod.get_config(f"iterations={total}")
spec, ps, pp = ex.setup(config)
main = ex.main_variant(config)
seeds = list(range(config.rl.seeds))
allm = ex.member_grid(config, [main], seeds, sorted(config.study.lrs))
js = [j for j, m in enumerate(allm) if m[3] == lr]
sel = [allm[j] for j in js]
if not os.path.exists(os.path.join(out_dir, "rl")):
  M = len(allm)
  keys = [jax.random.PRNGKey(config.seed * 1000 + s) for _, _, s, _ in allm]
  ts = population.stack([ppo.init_member(k, l, fl, ps, pp) for k, (_, fl, _, l) in zip(keys, allm)])
  state = dict(ts=ts, best={m: ts.params for m in ex.EVAL_MODES},
               score={m: jnp.full((M, 2), -1e9) for m in ex.EVAL_MODES}, it=jnp.int32(0))
  state, _ = checkpoint_lib.Checkpointer(src, keep=2).restore_or(state)
  it = int(state["it"])
  print("restored iteration", it, "members", js, flush=True)
  take = lambda x: x[np.asarray(js)] if getattr(x, "ndim", 0) and x.shape[0] == M else x
  sub = dict(ts=jax.tree.map(take, state["ts"]), best=jax.tree.map(take, state["best"]),
             score=jax.tree.map(take, state["score"]), it=state["it"])
  ck = checkpoint_lib.Checkpointer(os.path.join(out_dir, "rl"), keep=2)
  ck.save(it, sub)
  ck.close()
out = ex.train_policy(config, out_dir, sel, tag="rl")
print("val score", {m: np.asarray(out["score"][m]).tolist() for m in ex.EVAL_MODES}, flush=True)
rows = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl"))]
rows = {r["step"]: r for r in rows if r.get("split") == "train" and "rl/gpus" in r}
fams = list(config.rl.train_families)
for a in range(min(rows) - 1, total, 20):
  blk = [rows[s] for s in range(a + 1, a + 21) if s in rows]
  line = f"it {a + 1}-{a + 20}: gpus {np.mean([r['rl/gpus'] for r in blk]):.2f}"
  for f in fams:
    v = [r[f"rl/viol/{f}"] for r in blk if f"rl/viol/{f}" in r]
    g = [r[f"rl/gpus/{f}"] for r in blk if f"rl/gpus/{f}" in r]
    line += f" | {f} viol {np.mean(v):.4f} gpus {np.mean(g):.2f} lam_end {blk[-1][f'rl/lam/{f}']:.2f}"
  print(line, flush=True)
  r = blk[-1]
  if "rl/val_feasible/m0" in r:
    print("  val (greedy | sampled) " + " ".join(
        f"({r[f'rl/val_feasible/m{j}']:.0f}, {r[f'rl/val_gpus/m{j}']:.1f} | "
        f"{r[f'rl/val_feasible_sampled/m{j}']:.0f}, {r[f'rl/val_gpus_sampled/m{j}']:.1f})"
        for j in range(len(sel))), flush=True)
test = ex.make_traces(config, "test", config.data.test_seeds)
ft = [t[0] for t in test]
for mode in ex.EVAL_MODES:
  ctrl = policy.controller(spec, ps, greedy=mode == "greedy")
  summ, _ = ex.run_clusters(config, spec, ctrl, dict(net=out["best"][mode], flags=out["flags"]),
                            test, seed=3)
  for fam in config.data.families:
    ss = [summ[g][t] for g in range(len(sel)) for t, f in enumerate(ft) if f == fam]
    g = [s["gpus"] for s in ss]
    print(f"test {mode} {fam}: meets {sum(episode.meets(spec, s) for s in ss)}/{len(ss)} "
          f"gpus {np.mean(g):.2f} +- {np.std(g):.2f} p99 ttft "
          f"{np.mean([s['p99_ttft'] for s in ss]):.2f} s tpot "
          f"{1e3 * np.mean([s['p99_tpot'] for s in ss]):.0f} ms", flush=True)
