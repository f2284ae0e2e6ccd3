"""New (tenth-pass code) main table against the eighth pass's: per-set means, paired LPR gains.
usage: python compare.py <new workdir> <old workdir> <out.json>"""
import json, sys
import numpy as np
new, old, out = sys.argv[1:4]
A = json.load(open(f"{new}/auroc_per_seed.json"))["auroc"]
B = json.load(open(f"{old}/auroc_per_seed.json"))["auroc"]
PN = json.load(open(f"{new}/paired.json")); PO = json.load(open(f"{old}/paired.json"))
kinds = ["ae", "vae", "dae", "memae"]
sets = list(A["ae"].keys())
res = {"sets": sets, "per_set": {}, "means": {}}
print("| dataset | " + " | ".join(f"{k} old -> new" for k in kinds) + " | " + " | ".join(f"{k}+lpr old -> new" for k in kinds) + " |")
print("|---|" + "---|" * 8)
for s in sets:
  row = {}
  for c in kinds + [k + "+lpr" for k in kinds]:
    row[c] = [float(np.mean(B[c][s])), float(np.mean(A[c][s]))]
  res["per_set"][s] = row
  print(f"| {s} | " + " | ".join(f"{row[c][0]:.1f} -> {row[c][1]:.1f}" for c in kinds + [k + '+lpr' for k in kinds]) + " |")
for c in kinds + [k + "+lpr" for k in kinds] + [c for c in A if c not in kinds and not c.endswith("+lpr")]:
  if c in B:
    res["means"][c] = [float(np.mean([np.mean(B[c][s]) for s in sets])), float(np.mean([np.mean(A[c][s]) for s in sets]))]
print("| **mean** | " + " | ".join(f"{res['means'][c][0]:.2f} -> {res['means'][c][1]:.2f}" for c in kinds + [k + '+lpr' for k in kinds]) + " |")
print()
print("LPR gain (paired, mean over 5 seeds +- combined s.e.), eighth pass -> now")
print("| dataset | " + " | ".join(kinds) + " |"); print("|---|" + "---|" * 4)
f = lambda g: f"{g['diff']:+.2f} +- {g['se']:.2f}" + ("*" if abs(g["diff"]) > 2 * g["se"] else "")
res["gains"] = {}
for s in sets:
  res["gains"][s] = {k: [PO["per_set"][s][k]["lpr_gain"], PN["per_set"][s][k]["lpr_gain"]] for k in kinds}
  print(f"| {s} | " + " | ".join(f"{f(PO['per_set'][s][k]['lpr_gain'])} -> {f(PN['per_set'][s][k]['lpr_gain'])}" for k in kinds) + " |")
g = lambda o: f"{o['mean']:+.2f} +- {o['se']:.2f} ({o['sets_above_2se']} above, {o['sets_below_2se']} below)"
print("| **mean over sets** | " + " | ".join(f"{g(PO['over_sets'][k]['lpr_gain'])} -> {g(PN['over_sets'][k]['lpr_gain'])}" for k in kinds) + " |")
for t in ("lpr_gain", "minus_pca", "minus_trivial"):
  print(t, {k: (round(PO["over_sets"][k][t]["mean"], 2), "->", round(PN["over_sets"][k][t]["mean"], 2), round(PN["over_sets"][k][t]["se"], 2), PN["over_sets"][k][t]["sets_above_2se"], PN["over_sets"][k][t]["sets_below_2se"]) for k in kinds})
# largest per-set moves
moves = sorted(((abs(v[1] - v[0]), s, c, v) for s in sets for c, v in res["per_set"][s].items()), reverse=True)[:12]
print("largest moves:", [(s, c, round(v[0], 2), round(v[1], 2)) for _, s, c, v in moves])
same = [(s, c) for s in sets for c in kinds + [k + "+lpr" for k in kinds] if np.array_equal(np.asarray(A[c][s]), np.asarray(B[c][s]))]
print("bit-identical per-seed cells:", len(same), same)
res["bit_identical_cells"] = same
json.dump(res, open(out, "w"), indent=1)
