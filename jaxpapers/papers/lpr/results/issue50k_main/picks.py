"""Steps/rate picks of the plain AE and of AE+LPR from a study's code_selection.json (no training).
usage: python picks.py <code_selection.json> <out.json>"""
import json, sys
import numpy as np
LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2); STEPS = (100, 200, 400, 800, 1600, 3200, 6400)
sel = json.load(open(sys.argv[1])); rows = []
def val(tv, grid, lr, steps):
  v = tv.get(str(lr)) or tv.get(repr(lr))
  if v is None:
    return None
  return v[grid.index(steps)] if steps in grid[:len(v)] else None
for r in sel:
  l = r["lpr_training"]
  own = val(l["train_val"], l["steps_grid"], l["lr"], l["steps"])
  at_ae = val(l["train_val"], l["steps_grid"], r["lr"], r["steps"])
  ae = val(r["train_val"], r["steps_grid"], r["lr"], r["steps"])
  rows.append({"dataset": r["dataset"], "pick": f"{r['arch']} {r['code']}",
               "ae_steps": r["steps"], "ae_lr": r["lr"], "ae_val": ae,
               "ae_lr_edge": r["lr"] in (LRS[0], LRS[-1]), "ae_steps_edge": r["steps"] in (STEPS[0], STEPS[-1]),
               "ae_lr_grid": r["lr_grid"], "ae_steps_grid": r["steps_grid"],
               "lpr_steps": l["steps"], "lpr_lr": l["lr"], "lpr_val_own": own, "lpr_val_at_ae_pick": at_ae,
               "lpr_lr_edge": l["lr"] in (LRS[0], LRS[-1]), "lpr_steps_edge": l["steps"] in (STEPS[0], STEPS[-1]),
               "lpr_lr_grid": l["lr_grid"], "lpr_steps_grid": l["steps_grid"]})
d = np.array([x["lpr_val_own"] - x["ae_val"] for x in rows])
summary = {"n_sets": len(rows), "mean_ae_val": float(np.mean([x["ae_val"] for x in rows])),
           "mean_lpr_val_own": float(np.mean([x["lpr_val_own"] for x in rows])),
           "own_minus_ae_mean": float(d.mean()), "own_minus_ae_se": float(d.std(ddof=1) / np.sqrt(len(d))),
           "lpr_edge_sets": [x["dataset"] for x in rows if x["lpr_lr_edge"] or x["lpr_steps_edge"]],
           "ae_edge_sets": [x["dataset"] for x in rows if x["ae_lr_edge"] or x["ae_steps_edge"]]}
json.dump({"rows": rows, "summary": summary}, open(sys.argv[2], "w"), indent=1)
print("| set | pick | AE: steps, lr -> val. | edge | AE+LPR at the AE's pick | AE+LPR own: steps, lr -> val. | edge | own - AE |")
print("|---|---|---|---|---|---|---|---|")
f = lambda v: "-" if v is None else f"{v:.2f}"
for x in rows:
  e1 = ", ".join(n for n, b in (("steps", x["ae_steps_edge"]), ("rate", x["ae_lr_edge"])) if b) or "inside"
  e2 = ", ".join(n for n, b in (("steps", x["lpr_steps_edge"]), ("rate", x["lpr_lr_edge"])) if b) or "inside"
  print(f"| {x['dataset']} | {x['pick']} | {x['ae_steps']}, {x['ae_lr']:g} -> {f(x['ae_val'])} | {e1} | {f(x['lpr_val_at_ae_pick'])} | {x['lpr_steps']}, {x['lpr_lr']:g} -> {f(x['lpr_val_own'])} | {e2} | {x['lpr_val_own']-x['ae_val']:+.2f} |")
print(summary)
