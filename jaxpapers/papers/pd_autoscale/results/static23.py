"""pd39b: static 2 + 3 pools (the textbook Erlang-C sizing at conversation's known mean
rate, review rev39 S3) on the study's conversation validation and test traces."""
import sys, os
import numpy as np, jax.numpy as jnp
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 4, "configs"))
import pd_autoscale as cfgmod
from jaxpapers.papers.pd_autoscale import experiment as ex, baselines, episode
config = cfgmod.get_config(); config.data.families = ("conversation",)
spec, _, _ = ex.setup(config)
ctrl = baselines.make("static", spec)
params = {"p": jnp.asarray([2.0]), "d": jnp.asarray([3.0])}
for split, n, seed in (("val", config.data.val_seeds, 0), ("test", config.data.test_seeds, 5)):
  tr = ex.make_traces(config, split, n)
  summ, _ = ex.run_clusters(config, spec, ctrl, params, tr, seed=seed)
  ss = summ[0]
  print(split, f"meets {sum(episode.meets(spec, s) for s in ss)}/{len(ss)} gpus "
        f"{np.mean([s['gpus'] for s in ss]):.2f} p99 tpot ms "
        f"{[round(1e3 * s['p99_tpot']) for s in ss]} p99 ttft {[round(s['p99_ttft'], 2) for s in ss]}", flush=True)
