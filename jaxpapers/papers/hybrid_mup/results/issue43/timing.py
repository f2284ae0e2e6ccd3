"""Per member-step cost of the issue-43 width sweep's training (8 x 64 windows, 'MA')."""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))))
import jax
from jaxpapers.core import config as config_lib
from jaxpapers.data import text as text_lib
from jaxpapers.papers.hybrid_mup import experiment, model as model_lib, sweep
P = 6
for w, steps in ((64, 40), (128, 40), (256, 20)):
  c = config_lib.load(f"configs/hybrid_mup.py:dim={w},base_width=32,pattern=MA,seq_len=64,batch_size=8,steps={steps},scan=sequential")
  data = experiment.load_data(c)
  h = model_lib.build(c, data.vocab_size)
  wins = text_lib.eval_windows(data.val, 64, 16)
  members = [{"seed": i % 3, "lr": 1e-2, "num": model_lib.numerics(v, "adamw", w, 32, 2, d_state=16, base_state=16)} for i, v in enumerate(["sp", "mup"] * 3)]
  ts = []
  for steps_run in (steps // 2, steps):
    cc = config_lib.override(c, {"train.steps": steps_run})
    t0 = time.time()
    sweep.train_members(cc, data, h, members, {"val": wins[:8], "test": wins[8:16]})
    ts.append(time.time() - t0)
  # two programs of different lengths: (t2 - t1) / (steps/2) per step of P members
  per = (ts[1] - ts[0]) / (steps - steps // 2) / P
  print(f"d={w}: {ts[0]:.1f} s ({steps//2} steps), {ts[1]:.1f} s ({steps} steps): {per*1e3:.1f} ms per member-step", flush=True)
