"""Motor primitives as adapters of a shared recurrent core (abstract 7): study table and
figure (adapter spectra, OOD error per model, letters drawn by each model)."""
from __future__ import annotations

import numpy as np

from jaxpapers.papers.motor_adapters import analysis

LABELS = {"adapters": "adapter bank (full rank)", "lowrank": "adapter bank (rank R)",
          "multitask": "multitask GRU (task inputs)"}


def _ms(values) -> str:
  v = np.asarray([x for x in values if x == x], np.float64)
  if v.size == 0:
    return "-"
  return f"{v.mean():.3g} +- {v.std():.2g}"


def table_rows(rows, ref) -> list[dict]:
  """One row per model kind: mean +- std over seeds."""
  out = []
  kinds = [k for k in ("adapters", "lowrank", "multitask") if any(r["kind"] == k for r in rows)]
  mt = {r["seed"]: r["letters_cm"] for r in rows if r["kind"] == "multitask"}
  mto = {r["seed"]: r["letters_oracle_cm"] for r in rows if r["kind"] == "multitask"}
  for k in kinds:
    rs = [r for r in rows if r["kind"] == k]
    row = {"model": LABELS[k], "params": rs[0]["params"],
           "primitives test (cm)": _ms([r["prim_test_cm"] for r in rs]),
           "OOD val paths (cm)": _ms([r["seq_val_cm"] for r in rs]),
           "OOD letters (cm)": _ms([r["letters_cm"] for r in rs]),
           "multitask / this (letters)": _ms([mt[r["seed"]] / r["letters_cm"]
                                              for r in rs if r["seed"] in mt]),
           "policy picks own code": _ms([r["policy_correct"] for r in rs]),
           "letters, oracle options (cm)": _ms([r["letters_oracle_cm"] for r in rs]),
           "multitask / this (oracle)": _ms([mto[r["seed"]] / r["letters_oracle_cm"]
                                             for r in rs if r["seed"] in mto]),
           "oracle: 1st stroke / later (cm)":
               f"{np.mean([r['letters_first_stroke_cm'] for r in rs]):.3g} / "
               f"{np.mean([r['letters_later_strokes_cm'] for r in rs]):.3g}",
           "options used": _ms([r["options_used"] for r in rs])}
    if k != "multitask":
      row.update({"code: primitives moved from init": _ms([r["code_changed"] for r in rs]),
                  "code: last change (step)": _ms([r["code_last_move"] for r in rs]),
                  "adapter PR": _ms([r["geo_pr"] for r in rs]),
                  "adapter rank@90%": _ms([r["geo_rank90"] for r in rs]),
                  "subspace overlap": _ms([r["geo_overlap"] for r in rs])})
    out.append(row)
  out.append({"model": f"reference: Gaussian {len(ref['prs'])} x HxH", "params": "",
              "adapter PR": f"{ref['pr']:.3g}", "adapter rank@90%": f"{ref['rank90']:.3g}",
              "subspace overlap": f"{ref['overlap']:.3g} (chance r/H "
                                  f"{ref['overlap_chance']:.3g})"})
  return out


def study_figure(path, rows, a_mats, letters_npz):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  z = np.load(letters_npz)
  fig, axes = plt.subplots(2, 3, figsize=(14, 8))
  ax = axes[0, 0]
  for j, r in enumerate(rows):
    if r["kind"] == "multitask":
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
  kinds = [k for k in ("adapters", "lowrank", "multitask") if any(r["kind"] == k for r in rows)]
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
