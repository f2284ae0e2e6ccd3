"""Motor primitives as adapters of a shared recurrent core (abstract 7): study table and
figure (adapter spectra, OOD error per model, letters drawn by each model)."""
from __future__ import annotations

import numpy as np

from jaxpapers.papers.motor_adapters import analysis

LABELS = {"adapters": "adapter bank (full rank)", "lowrank": "adapter bank (rank R)",
          "multitask": "multitask GRU (task inputs, same H)",
          "multitask_big": "multitask GRU (task inputs, parameter-matched H)"}


def _ms(values) -> str:
  v = np.asarray([x for x in values if x == x], np.float64)
  if v.size == 0:
    return "-"
  return f"{v.mean():.3g} +- {v.std():.2g}"


def _kinds(rows):
  return [k for k in LABELS if any(r["kind"] == k for r in rows)]


def tail_change(curve, key="err_cm", window=500) -> float:
  """Relative fall of a logged curve over its last `window` steps: (v(end - window) -
  v(end)) / v(end - window), the logged step nearest end - window (nan if too short)."""
  st = np.asarray(curve["step"])
  v = np.asarray(curve[key], np.float64)
  if len(st) < 2 or st[-1] - st[0] < window:
    return float("nan")
  a = v[int(np.argmin(np.abs(st - (st[-1] - window))))]
  return float((a - v[-1]) / a)


def mean_tail_change(rs, ck="curve", key="err_cm", window=200) -> float:
  """`tail_change` of the seed-mean curve (round 4's flatness rule: under 1% over the
  last 200 steps; the seeds' logged steps are the same)."""
  rs = [r for r in rs if ck in r and len(r[ck]["step"])]
  if not rs:
    return float("nan")
  return tail_change({"step": rs[0][ck]["step"],
                      key: np.mean([r[ck][key] for r in rs], 0)}, key, window)


def policy_grid_rows(rows) -> list[dict]:
  """Every policy learning rate's validation error (held-out random paths), mean +- std
  over seeds per kind, with the pick marked: shows whether the pick is interior."""
  out = []
  for k in _kinds(rows):
    rs = [r for r in rows if r["kind"] == k]
    grid = sorted(rs[0]["policy_val_all_lrs"], key=float)
    cells = {f"plr {g}": _ms([r["policy_val_all_lrs"][g] for r in rs]) for g in grid}
    out.append({"model": LABELS[k], "picked": f"{rs[0]['policy_lr']:g}", **cells})
  return out


def _control(rs, key) -> str:
  """The positive control's reading (mean +- std over seeds) for the planted-separate
  and the half-shared subspaces (`analysis.separated_control`)."""
  return " / ".join(_ms([r.get(f"ctl_{tag}_{key}", float("nan")) for r in rs])
                    for tag in ("sep", "half"))


def table_rows(rows, ref) -> list[dict]:
  """One row per model kind: mean +- std over seeds."""
  out = []
  for k in _kinds(rows):
    rs = [r for r in rows if r["kind"] == k]
    grid = sorted(float(x) for x in rs[0]["prim_val_all_lrs"])
    row = {"model": LABELS[k], "params": rs[0]["params"],
           "lr (grid)": f"{rs[0]['lr']:g} ({', '.join(f'{x:g}' for x in grid)})",
           "primitives test (cm)": _ms([r["prim_test_cm"] for r in rs]),
           "OOD val paths (cm)": _ms([r["seq_val_cm"] for r in rs]),
           "letters, learned policy (cm)": _ms([r["letters_cm"] for r in rs]),
           "letters, right code given (cm)": _ms([r["letters_oracle_cm"] for r in rs]),
           "policy picks own code": _ms([r["policy_correct"] for r in rs]),
           "right code: 1st stroke / later (cm)":
               f"{np.mean([r['letters_first_stroke_cm'] for r in rs]):.3g} / "
               f"{np.mean([r['letters_later_strokes_cm'] for r in rs]):.3g}",
           "stage-1 train error, fall over last 500 steps":
               _ms([tail_change(r["curve"]) for r in rs if "curve" in r]),
           "policy train error, fall over last 500 steps":
               _ms([tail_change(r["policy_curve"]) for r in rs if "policy_curve" in r]),
           "seed-mean fall over last 200 steps: stage 1 / policy":
               f"{mean_tail_change(rs):.2%} / {mean_tail_change(rs, 'policy_curve'):.2%}",
           "options used": _ms([r["options_used"] for r in rs]),
           "core dW PR": _ms([r.get("dw_pr", float("nan")) for r in rs]),
           "core dW rank@90%": _ms([r.get("dw_rank90", float("nan")) for r in rs]),
           "activity overlap": _ms([r.get("act_overlap", float("nan")) for r in rs]),
           "activity overlap, readout out":
               _ms([r.get("act_overlap_noreadout", float("nan")) for r in rs]),
           "activity PR": _ms([r.get("act_pr", float("nan")) for r in rs]),
           "control, activity overlap readout out: separate / half shared "
           "(planted 0 / 0.25)": _control(rs, "act_overlap_noreadout")}
    if k in ("adapters", "lowrank"):
      row.update({"code: primitives moved from init": _ms([r["code_changed"] for r in rs]),
                  "code: last change (step)": _ms([r["code_last_move"] for r in rs]),
                  "adapter PR": _ms([r["geo_pr"] for r in rs]),
                  "adapter rank@90%": _ms([r["geo_rank90"] for r in rs]),
                  "subspace overlap": _ms([r["geo_overlap"] for r in rs]),
                  "subspace in readout span": _ms([r["geo_readout_frac"] for r in rs]),
                  "subspace overlap, readout out":
                      _ms([r["geo_overlap_noreadout"] for r in rs]),
                  "control, subspace overlap readout out: separate / half shared "
                  "(planted 0 / 0.25)": _control(rs, "overlap_noreadout")})
    out.append(row)
  hidden = rows[0]["act_overlap_chance"] and 2 / rows[0]["act_overlap_chance"]
  out.append({"model": f"reference: Gaussian {len(ref['prs'])} x HxH", "params": "",
              "adapter PR": f"{ref['pr']:.3g}", "adapter rank@90%": f"{ref['rank90']:.3g}",
              "core dW PR": f"{ref['pr']:.3g}",
              "subspace overlap": f"{ref['overlap']:.3g} (chance r/H "
                                  f"{ref['overlap_chance']:.3g})",
              "subspace in readout span": f"chance 6/H {6 / hidden:.3g}",
              "subspace overlap, readout out": f"chance r/(H-6) {2 / (hidden - 6):.3g}",
              "activity overlap": f"chance r/H {2 / hidden:.3g}"})
  return out


def ratio_rows(rows, letter_names) -> list[dict]:
  """Letters: baseline / adapter-model error, for each adapter kind and each multitask
  baseline, with the learned policy and with the right code given: the ratio of the
  seed means, the per-seed ratio, and per letter (seed-mean ratio): the largest, the
  smallest and how many letters the adapter model wins; 'max paired' is the largest
  ratio of one letter in one seed."""
  out = []
  for k in ("adapters", "lowrank"):
    for base in ("multitask", "multitask_big"):
      a = {r["seed"]: r for r in rows if r["kind"] == k}
      b = {r["seed"]: r for r in rows if r["kind"] == base}
      seeds = sorted(set(a) & set(b))
      if not seeds:
        continue
      for how, key, per in (("learned policy", "letters_cm", "letters_per_drawing"),
                            ("right code given", "letters_oracle_cm",
                             "letters_oracle_per_drawing")):
        ma = np.mean([a[s][key] for s in seeds])
        mb = np.mean([b[s][key] for s in seeds])
        pa = np.array([a[s][per] for s in seeds])  # (seeds, letters)
        pb = np.array([b[s][per] for s in seeds])
        per_letter = pb.mean(0) / pa.mean(0)
        out.append({"model": LABELS[k], "baseline": LABELS[base], "letters": how,
                    "ratio of means": f"{mb / ma:.3g}",
                    "per-seed ratio": _ms([b[s][key] / a[s][key] for s in seeds]),
                    "per-letter max": f"{per_letter.max():.3g} "
                                      f"({letter_names[int(per_letter.argmax())]})",
                    "per-letter min": f"{per_letter.min():.3g} "
                                      f"({letter_names[int(per_letter.argmin())]})",
                    "letters won": f"{int((per_letter > 1).sum())} of {len(per_letter)}",
                    "max paired (letter, seed)": f"{(pb / pa).max():.3g}"})
  return out


def _at(curve, key, steps):
  st = np.asarray(curve["step"])
  v = np.asarray(curve[key], np.float64)
  return [float(v[np.argmin(np.abs(st - s))]) if len(st) else float("nan") for s in steps]


def grid_rows(last_rows, prim_val=None) -> list[dict]:
  """Every stage-1 lane at the last step, mean over seeds per (kind, lr): training
  error, the effective rank of the recurrent weight change (W_hn - init) and of the used
  adapters (the low-rank null: compare kinds at the same learning rate). last_rows:
  {kind label: the last 'primitives' metrics row of its run}; prim_val: {kind: {lr:
  validation error}} (mean over seeds) where known."""
  out = []
  for kind, row in last_rows.items():
    cells = {}
    for key, v in row.items():
      parts = key.split("/")
      if len(parts) != 5 or parts[0] != "primitives":
        continue
      _, k, _, lr, metric = parts
      cells.setdefault((k, float(lr[2:])), {}).setdefault(metric, []).append(v)
    for (k, lr), m in sorted(cells.items()):
      name = kind if k == "multitask" else k
      r = {"model": LABELS[name], "lr": f"{lr:g}",
           "train error, last chunk (cm)": f"{np.mean(m['err_cm']):.3g}"}
      if prim_val and name in prim_val and f"{lr:g}" in prim_val[name]:
        r["validation error (cm)"] = f"{prim_val[name][f'{lr:g}']:.3g}"
      r["core dW PR"] = _ms(m["pr_dw"])
      if "pr_adapter" in m:
        r["adapter PR"] = _ms(m["pr_adapter"])
      out.append(r)
  return out


def _pick(logged, fracs):
  """The logged steps nearest to these fractions of the last one."""
  logged = np.asarray(logged)
  return sorted(set(int(logged[np.argmin(np.abs(logged - f * logged.max()))])
                    for f in fracs))


def curve_rows(rows) -> list[dict]:
  """Training curves of the selected lanes, mean over seeds, at a few steps: stage-1
  training error (a chunk's mean over its sampled batches), the effective rank of the
  recurrent weight change and of the adapters over training, the policy's error."""
  out = []
  for k in _kinds(rows):
    rs = [r for r in rows if r["kind"] == k and "curve" in r]
    if not rs:
      continue
    steps = _pick(rs[0]["curve"]["step"], (0.05, 0.1, 0.25, 0.5, 0.75, 1.0))
    psteps = _pick(rs[0]["policy_curve"]["step"], (0.1, 0.25, 0.5, 0.75, 1.0))
    series = [("stage 1 train error (cm)", "curve", "err_cm", steps),
              ("core dW PR", "curve", "pr_dw", steps),
              ("adapter PR", "curve", "pr_adapter", steps),
              ("policy train error (cm)", "policy_curve", "err_cm", psteps)]
    for name, ck, key, at in series:
      if key not in rs[0][ck]:
        continue
      vals = np.mean([_at(r[ck], key, at) for r in rs], 0)
      out.append({"model": LABELS[k], "series": name,
                  "values at steps": ", ".join(f"{s}: {v:.3g}" for s, v in zip(at, vals))})
  return out


def study_figure(path, rows, a_mats, letters_npz):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  z = np.load(letters_npz)
  fig, axes = plt.subplots(2, 3, figsize=(14, 8))
  ax = axes[0, 0]
  for j, r in enumerate(rows):
    if r["kind"] not in ("adapters", "lowrank"):  # rows of the adapter banks come first
      continue
    used = sorted(set(r["task_to_option"]))
    for k in used:
      s = analysis.singular_values(a_mats[j][k])
      ax.semilogy(np.arange(1, len(s) + 1), s / s[0] if s[0] > 0 else s,
                  color="C0" if r["kind"] == "adapters" else "C1", alpha=0.3)
  ax.set_xlim(1, 20)
  ax.set_title("adapter A_k singular values / max\n(C0 full rank, C1 rank R)")
  ax.set_xlabel("index")
  ax = axes[0, 1]
  kinds = [k for k in LABELS if any(r["kind"] == k for r in rows)]
  for i, k in enumerate(kinds):
    v = [r["letters_cm"] for r in rows if r["kind"] == k]
    w = [r["prim_test_cm"] for r in rows if r["kind"] == k]
    ax.scatter(np.full(len(v), i) + 0.1, v, color="C3", label="letters (OOD)" if i == 0 else None)
    ax.scatter(np.full(len(w), i) - 0.1, w, color="C2", label="primitives" if i == 0 else None)
  ax.set_xticks(range(len(kinds)), kinds)
  ax.set_ylabel("mean hand-target distance (cm)")
  ax.legend()
  ax.set_title("tracking error per seed")
  hand, target, kk = z["hand"], z["target"], z["kinds"]
  names, mask, seg = z["names"], z["mask"], int(z["steps_per_segment"])
  panels = [axes[0, 2]] + list(axes[1])
  shown = []
  for k in kinds:
    idx = [j for j in range(len(kk)) if kk[j] == k]
    if idx:
      shown.append((k, idx[0]))
  for ax, (k, j) in zip(panels, shown):
    for li in range(len(names)):
      n = int(mask[li].sum()) * seg
      off = np.array([0.3 * (li % 5), -0.25 * (li // 5)])
      ax.plot(*(target[j, li, :n] + off).T, "k-", lw=0.8)
      ax.plot(*(hand[j, li, :n] + off).T, color="C0", lw=1.0)
    ax.set_aspect("equal")
    ax.set_title(f"{LABELS[k]} (seed {rows[j]['seed']}): letters")
  for ax in panels[len(shown):]:
    ax.axis("off")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
