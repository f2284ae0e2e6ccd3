"""Held-out bpb of part 3's chosen-LR (3e-3) continuations at their checkpoints of steps 250
and 500 (the study evaluates only the last step): the held-out curve of the continuation.

  python jaxpapers/papers/llops/results/convert_heldout_250_500.py /tmp/ll37f/conv
writes <workdir>/curve250.json ({map: {step: [(val_bpb, test_bpb) per seed]}}); the
500-step values equal the study's rows (a check that the right members are read)."""
import json, os, sys
import numpy as np, jax
import orbax.checkpoint as ocp
from jaxpapers.core import config as config_lib
from jaxpapers.data import text as text_lib
from jaxpapers.nn import lm_experiment
from jaxpapers.papers.llops import model as model_lib
cfg = config_lib.load("configs/llops.py")
data = lm_experiment.load_data(cfg)
w = text_lib.eval_windows(data.val, cfg.data.seq_len, cfg.eval.max_windows or None)
n = len(w) // 2
val_w, test_w = w[:n], w[n:]
root = os.path.join(sys.argv[1], "convert")
out = {}
for name in cfg.convert.maps:
  model, _, _ = model_lib.build(cfg, data.vocab_size, name)
  fn = lm_experiment.nats_fn(model)
  for seed in range(3):
    d = f"{root}/taylor_to_{name}/" + ("s0_lr0.001+0.003+0.01" if seed == 0 else f"s{seed}_lr0.003")
    i = 1 if seed == 0 else 0
    mgr = ocp.CheckpointManager(os.path.abspath(d + "/checkpoints"))
    for step in (250, 500):
      st = mgr.restore(step, args=ocp.args.StandardRestore())
      p = jax.tree.map(lambda x: np.asarray(x)[i], st["members"]["params"])
      out.setdefault(name, {}).setdefault(step, []).append(
          (lm_experiment.bpb(fn, p, val_w, data.token_bytes), lm_experiment.bpb(fn, p, test_w, data.token_bytes)))
    mgr.close()
  r = {s: np.mean(v, axis=0).round(4).tolist() for s, v in out[name].items()}
  print(name, r, flush=True)
json.dump(out, open(os.path.join(sys.argv[1], "curve250.json"), "w"))
