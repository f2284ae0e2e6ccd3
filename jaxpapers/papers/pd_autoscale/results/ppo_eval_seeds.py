"""pd39b (from rev39 ppo_eval.py): restore the study's PPO grid checkpoint (a copy) and re-evaluate the selected
members (lr 3e-4, members 3..5) on the study's test traces with the study's seed (3),
both modes; then the sampled mode at other evaluation seeds (noise of the sampled row);
and a deterministic 'expected delta' readout is not attempted (would need new code)."""
import sys, time, os
import numpy as np, jax
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 4, "configs"))
import pd_autoscale as cfgmod
from jaxpapers.papers.pd_autoscale import experiment as ex, policy, episode

config = cfgmod.get_config()
spec, ps, pp = ex.setup(config)
r = config.rl
main = ex.main_variant(config)
members = ex.member_grid(config, [main], list(range(r.seeds)), sorted(config.study.lrs))
abl = [("no_recurrence", policy.flags(False, True, True)), ("no_masks", policy.flags(True, False, True)),
       ("no_cooldowns", policy.flags(True, True, False))]
members += ex.member_grid(config, abl, list(range(config.study.ablation_seeds)), [r.lr])
state = ex.restore_policy(config, sys.argv[1] if len(sys.argv) > 1 else "/tmp/pd39b/study/ppo_grid/rl", members)
print("restored it", int(state["it"]), "score sampled", np.asarray(state["score"]["sampled"])[3:6], flush=True)
test = ex.make_traces(config, "test", config.data.test_seeds)
ft = [t[0] for t in test]
js = [3, 4, 5]
assert all(members[j][0] == "ppo" and members[j][3] == 3e-4 for j in js), [members[j] for j in js]
for mode, seeds in (("sampled", (3, 11, 12, 13, 14)),):
  ctrl = policy.controller(spec, ps, greedy=mode == "greedy")
  params = dict(net=jax.tree.map(lambda x: np.asarray(x)[js], state["best"][mode]),
                flags=jax.tree.map(lambda x: np.asarray(x)[js], state["ts"].flags))
  for seed in seeds:
    t0 = time.time()
    summ, _ = ex.run_clusters(config, spec, ctrl, params, test, seed=seed)
    for fam in ("conversation", "diurnal"):
      ss = [summ[g][t] for g in range(3) for t, f in enumerate(ft) if f == fam]
      print(f"{mode} seed {seed} {fam}: meets {sum(episode.meets(spec, s) for s in ss)}/9 gpus "
            f"{np.mean([s['gpus'] for s in ss]):.2f}±{np.std([s['gpus'] for s in ss]):.2f} "
            f"events {np.mean([s['scaling_events'] for s in ss]):.1f} ({time.time()-t0:.0f} s)", flush=True)
