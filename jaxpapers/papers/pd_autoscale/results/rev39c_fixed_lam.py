# Review rev39c's script, copied from /tmp/team/rev39c/fixed_lam.py (its paths made arguments, these two comment
# lines added). Its commands and output: rev39c_controls.md.
"""rev39c: learner controls. The study's main PPO variant (lr 1e-3, seeds 0-2, the study's
training stream) with the multiplier FIXED at L (lam_init = lam_min = lam_max = L: a fixed
penalty, no dual ascent), N iterations, validation every 20; best validation snapshot per
mode evaluated on the study's test traces (seed 3).
usage: rev39c_fixed_lam.py L N [WORKDIR]"""
import sys, time, os
import numpy as np, jax
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 4, "configs"))
import pd_autoscale as cfgmod
from jaxpapers.papers.pd_autoscale import experiment as ex, policy, episode
L, N = float(sys.argv[1]), int(sys.argv[2])
config = cfgmod.get_config()
config.rl.iterations = N
config.rl.eval_every = 20
_orig = ex.setup
def _setup(c):
  s, ps, pp = _orig(c)
  return s, ps, pp._replace(lam_init=L, lam_min=L, lam_max=L)
ex.setup = _setup
main = ex.main_variant(config)
members = ex.member_grid(config, [main], [0, 1, 2], [1e-3])
t0 = time.time()
out = ex.train_policy(config, (sys.argv[3] if len(sys.argv) > 3 else f"/tmp/team/rev39c/fixed_{L:g}_{N}"), members, tag="rl",
                      log=lambda s: print(s, flush=True) if ("/" in s and int(s.split("/")[0].split()[-1]) % 5 == 0) else None)
print("train wall", time.time() - t0, flush=True)
spec, ps, pp = ex.setup(config)
for m in ex.EVAL_MODES:
  print(m, "val", np.round(out["score"][m], 2).tolist())
test = ex.make_traces(config, "test", config.data.test_seeds)
ft = [t[0] for t in test]
for mode in ("sampled", "greedy"):
  ctrl = policy.controller(spec, ps, greedy=mode == "greedy")
  params = dict(net=jax.device_get(out["best"][mode]), flags=jax.device_get(out["flags"]))
  summ, _ = ex.run_clusters(config, spec, ctrl, params, test, seed=3)
  for fam in ("conversation", "diurnal"):
    ss = [summ[g][t] for g in range(3) for t, f in enumerate(ft) if f == fam]
    g = [s["gpus"] for s in ss]
    print(f"test {mode} {fam}: meets {sum(episode.meets(spec, s) for s in ss)}/9 gpus "
          f"{np.mean(g):.2f}±{np.std(g):.2f} per-ep {np.round(g, 1).tolist()} "
          f"p99 tpot {np.round([s['p99_tpot'] for s in ss], 3).tolist()}", flush=True)
