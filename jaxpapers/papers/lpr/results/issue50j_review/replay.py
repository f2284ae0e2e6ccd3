"""The selection as far as the stopped study got: replays selection.select from the
study's partial file (no training: a run not in the file is answered with -1 and its set
marked pending). Usage: replay.py workdir out.json"""
import json, shutil, sys
import numpy as np
sys.path.insert(0, "/work/main")
from configs import lpr as cfg_lib
from jaxpapers.papers.lpr import experiment, selection
arg = "parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64,select_steps=1600"
config = cfg_lib.get_config(arg)
data = experiment.load_datasets(config)
keeps = experiment.column_masks(data)
seeds = [config.seed + i for i in range(config.train.seeds)]
part = "/tmp/lpr50j/replay_partial.json"
shutil.copy(f"{sys.argv[1]}/code_selection_partial.json", part)
calls = []
def fake(cfg, stacked, ds, sd, bits, opt_level):
  calls.append((cfg.steps, float(np.max(bits)), len(ds)))
  r = len(ds)
  out = {"auroc": -np.ones(r), "losses": np.zeros((r, cfg.steps))}
  if cfg.eval_steps:
    out["auroc_at"] = -np.ones((r, len(cfg.eval_steps)))
  return out
rows = selection.select(experiment.detector_config(config, "ae"), data, seeds, keeps, config.seed,
                        -1, tuple(config.model.select_archs), part, config.model.select_extend,
                        fit=fake, max_steps=1600, lrs=tuple(config.model.select_lrs), lpr_bits=2.0)
saved = json.load(open(f"{sys.argv[1]}/code_selection_partial.json"))["train"]
now = json.load(open(part))["train"]
pending = sorted({k.split("/")[0] for k in now if k not in saved})
assert all(b > 0 for _, b, _ in calls), calls  # only the LPR stage is unfinished
for r in rows:
  r["lpr_training_pending"] = r["dataset"] in pending
json.dump(rows, open(sys.argv[2], "w"), indent=1)
print("pending (LPR stage unfinished):", pending)
for r in rows:
  l = r["lpr_training"]
  print(r["dataset"], r["arch"], r["code"], r["steps"], r["lr"], "| lpr", l["steps"], l["lr"],
        "PENDING" if r["lpr_training_pending"] else "")
