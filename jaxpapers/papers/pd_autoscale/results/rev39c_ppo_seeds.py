# Review rev39c's script, copied from /tmp/team/rev39c/ppo_seeds.py (its paths made arguments, the restore through experiment.restore_policy; these two comment
# lines added). Its commands and output: rev39c_controls.md.
"""rev39c: restore a COPY of the study's ppo_grid checkpoint (iteration 120) and re-evaluate
the selected members (lr 1e-3, members 6..8) on the study's test traces, seed 3, both modes."""
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
state = ex.restore_policy(config, sys.argv[1] if len(sys.argv) > 1 else "/tmp/team/rev39c/ckpt_rl", members)
print("restored it", int(state["it"]), flush=True)
for m in ex.EVAL_MODES:
  print(m, "val scores", np.round(np.asarray(state["score"][m]), 2).tolist(), flush=True)
print("final lambdas", np.round(np.asarray(state["ts"].lam), 2).tolist())
test = ex.make_traces(config, "test", config.data.test_seeds)
ft = [t[0] for t in test]
js = [6, 7, 8]
assert all(members[j][0] == "ppo" and members[j][3] == 1e-3 for j in js), [members[j] for j in js]
for mode, seed in (("sampled", 11), ("sampled", 12), ("sampled", 13)):
  ctrl = policy.controller(spec, ps, greedy=mode == "greedy")
  params = dict(net=jax.tree.map(lambda x: np.asarray(x)[js], state["best"][mode]),
                flags=jax.tree.map(lambda x: np.asarray(x)[js], state["ts"].flags))
  t0 = time.time()
  summ, _ = ex.run_clusters(config, spec, ctrl, params, test, seed=seed)
  for fam in ("conversation", "diurnal"):
    ss = [summ[g][t] for g in range(3) for t, f in enumerate(ft) if f == fam]
    g = [s['gpus'] for s in ss]
    print(f"{mode} seed {seed} {fam}: meets {sum(episode.meets(spec, s) for s in ss)}/9 gpus "
          f"{np.mean(g):.3f}±{np.std(g):.3f} per-ep {np.round(g,1).tolist()} ({time.time()-t0:.0f} s)", flush=True)
