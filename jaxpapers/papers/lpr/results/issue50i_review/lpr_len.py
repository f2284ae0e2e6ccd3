"""Test AUROC of AE-family with/without LPR at the committed pick's steps, 2x and 4x (same
capacity, code, rate; eval_steps snapshots of one run). Also checks the value at the pick
equals the committed per-seed AUROCs (a rerun of those cells)."""
import dataclasses, json, sys, time
import numpy as np
from configs import lpr as C
from jaxpapers.papers.lpr import experiment as E, selection as S, detectors as Dt
kinds = sys.argv[2].split("+")
sets = sys.argv[1].split("+")
mult = tuple(int(m) for m in (sys.argv[6] if len(sys.argv) > 6 else "1+2+4").split("+"))
SEL = sys.argv[4] if len(sys.argv) > 4 else "jaxpapers/papers/lpr/results/issue50h_code_selection.json"
PS = sys.argv[5] if len(sys.argv) > 5 else "jaxpapers/papers/lpr/results/issue50h_auroc_per_seed.json"
config = C.get_config("parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64,select_steps=1600")
sel = {r["dataset"]: r for r in json.load(open(SEL))}
ps = json.load(open(PS))["auroc"]
config.data.datasets = tuple(sets)
data = {d.name: d for d in E.load_datasets(config)}
seeds = list(range(5))
groups, bits_grid = E.lpr_grid(config)
out = {}
for kind in kinds:
  cfg0 = E.detector_config(config, kind, groups=groups)
  for n in sets:
    t0 = time.time()
    r = dict(sel[n]); r.setdefault("steps", 400); r.setdefault("lr", 1e-3); s0 = int(r["steps"])
    d = data[n]
    stacked = Dt.pad_stack([d], E.visible_labels(kind, [d], config), [r["code"]], [r["lr"]])
    cfg = dataclasses.replace(S.arch_config(cfg0, r["arch"]), steps=mult[-1] * s0,
                              eval_steps=tuple(m * s0 for m in mult[:-1]))
    ds, sd, bi = [a.ravel() for a in np.meshgrid([0], seeds, [0, 1], indexing="ij")]
    o = Dt.fit(cfg, stacked, ds, sd, np.asarray(bits_grid, np.float32)[bi])
    at = np.concatenate([np.asarray(o["auroc_at"]), np.asarray(o["auroc"])[:, None]], 1) * 100
    at = at.reshape(len(seeds), 2, len(mult))  # seed, lpr, snapshot
    ref = np.array([ps[kind][n], ps[kind + "+lpr"][n]]).T if 1 in mult else None  # seed, lpr
    gain = at[:, 1] - at[:, 0]
    rec = {"steps": [m * s0 for m in mult], "lr": r["lr"],
           "off": at[:, 0].mean(0).tolist(), "on": at[:, 1].mean(0).tolist(),
           "gain": gain.mean(0).tolist(), "gain_seed_se": (gain.std(0, ddof=1) / np.sqrt(5)).tolist(),
           "max_abs_diff_vs_committed_at_pick": float(np.abs(at[:, :, mult.index(1)] - ref).max()) if ref is not None else None,
           "sec": time.time() - t0}
    out[f"{kind}/{n}"] = rec
    print(kind, n, json.dumps({k: (np.round(v, 2).tolist() if isinstance(v, list) else v) for k, v in rec.items()}), flush=True)
json.dump(out, open(sys.argv[3], "w"), indent=1)
