"""Two-stage training of LMI-certified neural network observers: the study, in resumable
units.

Each unit (one plant of the systems x methods part, one width of the sweep, one X-29
ablation) is saved to `workdir/units/<unit>.json` with the commit stamped when the unit
started; a rerun on the same workdir skips finished units, so the study can be run in
parts of a few minutes (`:parts=systems,plants=pendulum+x29`, `:parts=widths`, ...) and
the tables are rebuilt from every finished unit each time.

- systems/<plant>: every method at config.model.width; each neural method's learning rate
  chosen from config.train.lrs on the first seed's validation split (same grid and budget
  for two-stage, direct LMI and unconstrained); classical baselines tuned on validation.
- widths/<w>: pendulum, two-stage vs direct LMI at width w with the learning rates chosen
  for the pendulum in systems/pendulum; widths >= config.study.wide_width use
  config.study.wide_seeds seeds (the SDP grows with the width).
- widths_long/<w>: pendulum, two-stage with a 3x longer stage 2 at width w (same rates
  as widths/<w>; its time to a certificate at matched accuracy is taken against direct
  LMI's row of the same width and seed).
- x29/nohinge, x29/noise, x29/long: X-29A (ND-UA) ablations: stage 1 without the hinge;
  measurement noise x config.study.x29_noise; a 3x longer stage 2 (tests the explanation
  "two-stage rarely certifies because stage 2 is too short").
- mismatch/<plant>, friction/<plant>: model mismatch (issue 46 item 2): every method and
  baseline of systems/<plant>, on data from plants.true_plant (physical parameters off by
  +-config.study.mismatch; or an unmodelled Coulomb friction of level
  config.study.friction, pendulum and flexible joint) with every observer on the nominal
  model; learning rates, L's decay and baseline hyper-parameters chosen again on that
  data's validation split (the same rule and budget as systems).
- widths_sdp/<w>: pendulum, direct LMI with the weights inside the SDP (direct_sdp.py,
  issue 46 item 4) at width w beside two-stage and direct LMI rerun in the same unit
  (rates and L of systems/pendulum); direct_sdp's learning rate chosen on validation at
  the model width (that unit runs first), reused at the other widths.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.neural_observer import experiment as ex
from jaxpapers.papers.neural_observer import plants as plants_lib


# (plant, width) -> train.Trainer: units of one process share compiled update chunks
# (data, seed, learning rate and noise level are arguments of the compiled functions).
_TRAINERS = {}


def _plant(config, plant, width, methods, seeds, **kw):
  # run_plant builds a new Trainer when the cached one was compiled for another gain L
  rows, tuning, trainer, chosen = ex.run_plant(config, plant, width, methods, seeds,
                                               trainer=_TRAINERS.get((plant, width)), **kw)
  _TRAINERS[(plant, width)] = trainer
  return rows, tuning, trainer, chosen


def _long_total(config):
  """Updates of the longer-stage-2 ablation: stage 1 + 3 x the usual stage 2."""
  return (config.train.stage1_steps
          + 3 * (config.train.total_steps - config.train.stage1_steps))


def _matched_long(rows):
  """time_to_matched of each two_stage_long row against direct LMI at the same width and
  seed: the first verified certificate at the worse of the two best certified val nmse."""
  direct = {(r["width"], r["seed"]): r for r in rows
            if r["method"] == "direct" and r["part"] in ("widths", "systems")
            and r["plant"] == "pendulum"}
  out = []
  for r in rows:
    d = direct.get((r["width"], r["seed"]))
    if r["method"] == "two_stage_long" and r["part"] == "widths_long" and d is not None:
      level = max(float(r["val_nmse"]), float(d["val_nmse"]))
      hits = [t for t, v in r.get("cert_trace", []) if v <= level]
      r = dict(r, time_to_matched=hits[0] if hits else np.nan)
    out.append(r)
  return out


def _unit_path(workdir, unit):
  return os.path.join(workdir, "units", unit.replace("/", "__") + ".json")


def _load(workdir, unit):
  path = _unit_path(workdir, unit)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def _save(workdir, unit, payload):
  path = _unit_path(workdir, unit)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path + ".tmp", "w") as f:
    json.dump(payload, f, indent=1, default=str)
  os.replace(path + ".tmp", path)  # a killed study leaves no half-written unit


def _chosen(workdir, plant):
  done = _load(workdir, f"systems/{plant}")
  if done is None:
    raise ValueError(f"the learning rates of {plant} come from unit systems/{plant}: run "
                     f"the study with :parts=systems,plants={plant} on this workdir first")
  return done["chosen_lr"]


def _units(config):
  s, out = config.study, []
  if "systems" in s.parts:
    out += [f"systems/{p}" for p in s.plants]
  if "widths" in s.parts:
    out += [f"widths/{w}" for w in s.widths if w != config.model.width]
  if "widths_long" in s.parts:
    out += [f"widths_long/{w}" for w in sorted({config.model.width, *s.widths})]
  if "x29" in s.parts:
    out += ["x29/nohinge", "x29/noise", "x29/long"]
  if "widths_sdp" in s.parts:  # the model width first: it tunes the learning rate
    out += [f"widths_sdp/{w}" for w in [config.model.width, *sorted(
        set(s.widths) - {config.model.width})]]
  if "mismatch" in s.parts:
    out += [f"mismatch/{p}" for p in s.plants]
  if "friction" in s.parts:
    out += [f"friction/{p}" for p in s.plants if p in plants_lib.FRICTION_STATE]
  return out


def _run_unit(config, workdir, unit):
  seeds = [config.seed + i for i in range(config.seeds)]
  width, kind, name = config.model.width, *unit.split("/")
  tuning, chosen, gain_rows = [], {}, []
  if kind == "systems":
    rows, tuning, _, chosen = _plant(config, name, width, config.study.methods, seeds,
                                     gain_rows=gain_rows)
  elif kind == "widths":
    w, ckpt_root = int(name), None
    if w >= config.study.wide_width:  # runs of about a minute: checkpointed, resumable
      seeds = seeds[:config.study.wide_seeds]
      ckpt_root = os.path.join(workdir, "run_checkpoints")
    pend = _chosen(workdir, "pendulum")
    lrs = {m: pend[m] for m in config.study.width_methods}
    rows, *_ = _plant(config, "pendulum", w, config.study.width_methods, seeds,
                      baselines=False, lrs=lrs, ckpt_root=ckpt_root,
                      gain_alpha=pend.get("gain_alpha", config.model.alpha_gain))
    rows = [r for r in rows if r["method"] != "linear_part"]
  elif kind == "widths_long":  # two-stage with a 3x longer stage 2 at width w
    w, ckpt_root = int(name), None
    if w >= config.study.wide_width:
      seeds = seeds[:config.study.wide_seeds]
      ckpt_root = os.path.join(workdir, "run_checkpoints")
    pend = _chosen(workdir, "pendulum")
    rows, *_ = _plant(config, "pendulum", w, ("two_stage",), seeds, baselines=False,
                      lrs={"two_stage": pend["two_stage"]},
                      total_steps=_long_total(config), ckpt_root=ckpt_root,
                      gain_alpha=pend.get("gain_alpha", config.model.alpha_gain))
    rows = [dict(r, method="two_stage_long") for r in rows if r["method"] != "linear_part"]
  elif kind == "widths_sdp":  # direct LMI with the weights in the SDP at width w
    w = int(name)
    if w >= config.study.wide_width:
      seeds = seeds[:config.study.wide_seeds]
    # two-stage and direct LMI rerun beside it in the same unit (same machine load), at
    # the rates and L of systems/pendulum as in widths/<w>
    pend = _chosen(workdir, "pendulum")
    lrs = {m: pend[m] for m in config.study.width_methods}
    if w != width:  # at the model width direct_sdp's own rate is chosen on validation
      first = _load(workdir, f"widths_sdp/{width}")
      if first is None:
        raise ValueError(f"the learning rate of direct_sdp comes from unit "
                         f"widths_sdp/{width}: run :parts=widths_sdp,widths={width} first")
      lrs["direct_sdp"] = first["chosen_lr"]["direct_sdp"]
    rows, tuning, _, chosen = _plant(config, "pendulum", w,
                                     (*config.study.width_methods, "direct_sdp"), seeds,
                                     baselines=False, lrs=lrs,
                                     gain_alpha=pend.get("gain_alpha",
                                                         config.model.alpha_gain))
    rows = [r for r in rows if r["method"] != "linear_part"]
  elif kind in ("mismatch", "friction"):
    # data from the true plant (parameters off by +-mismatch, or unmodelled friction),
    # every observer on the nominal model; every method's learning rate, L's decay and
    # the baselines' hyper-parameters chosen again on the true plant's validation split
    kw = (dict(mismatch=config.study.mismatch) if kind == "mismatch"
          else dict(friction=config.study.friction))
    rows, tuning, _, chosen = _plant(config, name, width, config.study.methods, seeds,
                                     gain_rows=gain_rows, **kw)
  else:
    lr = _chosen(workdir, "x29")
    g = lr.get("gain_alpha", config.model.alpha_gain)
    if name == "nohinge":
      rows, *_ = _plant(config, "x29", width, ("two_stage_nohinge",), seeds,
                        baselines=False, lrs={"two_stage_nohinge": lr["two_stage"]},
                        gain_alpha=g)
    elif name == "noise":
      rows, *_ = _plant(config, "x29", width, config.study.methods, seeds,
                        noise_scale=config.study.x29_noise,
                        lrs={m: lr[m] for m in config.study.methods}, gain_alpha=g)
    else:
      rows, *_ = _plant(config, "x29", width, ("two_stage",), seeds,
                        baselines=False, lrs={"two_stage": lr["two_stage"]},
                        total_steps=_long_total(config), gain_alpha=g)
      rows = [dict(r, method="two_stage_long") for r in rows if r["method"] != "linear_part"]
    rows = [r for r in rows if not (name == "nohinge" and r["method"] == "linear_part")]
  part = kind if kind != "x29" else f"x29_{name}"
  return dict(rows=[dict(r, part=part) for r in rows], lr_tuning=tuning, chosen_lr=chosen,
              gain_tuning=gain_rows)


def run_study(config, workdir):
  metrics_lib.write_config(workdir, config)
  t_start = time.perf_counter()
  for unit in _units(config):
    if _load(workdir, unit) is not None:
      print(f"[study] {unit}: done before, skipped", flush=True)
      continue
    commit = study_lib.git_commit(paths=ex.PATHS)  # stamped when the unit starts
    t0 = time.perf_counter()
    payload = _run_unit(config, workdir, unit)
    payload.update(unit=unit, commit=commit, elapsed_s=time.perf_counter() - t0)
    _save(workdir, unit, payload)
    print(f"[study] {unit} done in {payload['elapsed_s']:.0f}s (commit {commit}); "
          f"{time.perf_counter() - t_start:.0f}s so far", flush=True)
  return write_tables(workdir)


def write_tables(workdir):
  """Tables, raw rows and plot from every finished unit in the workdir."""
  units = sorted(os.listdir(os.path.join(workdir, "units")))
  done = [json.load(open(os.path.join(workdir, "units", u))) for u in units
          if u.endswith(".json")]
  rows = _matched_long([r for d in done for r in d["rows"]])
  tuning = [r for d in done for r in d["lr_tuning"]]
  commits = sorted({d["commit"] for d in done})
  elapsed = sum(d["elapsed_s"] for d in done)
  header = (f"commit(s) {', '.join(commits)}; units {len(done)}; summed unit wall-clock "
            f"{elapsed:.0f}s")
  sys_rows = [r for r in rows if r["part"] == "systems"]
  t1 = ex.aggregate(sys_rows, ["plant", "method"],
                    ["lr", "rmse_x", "rmse_d", "nmse", "certified", "margin",
                     "margin_capped", "time_to_cert", "time_to_matched", "total_s",
                     "local_radius", "violation", "violation_ub"])
  t0 = [dict(plant=r["plant"], setting=_setting(r), width=r["width"], method=r["method"],
             lr=r["lr"],
             criterion=("certified val nmse" if r["certified"] else
                        "best val nmse" if r["method"] == "unconstrained" else
                        "not certified; last val nmse"),
             val_nmse=(r["val_nmse"] if (r["certified"] or r["method"] == "unconstrained")
                       else r["last_val_nmse"]),
             total_s=r["total_s"], chosen="yes" if r["chosen"] else "")
        for r in tuning]
  w_rows = [r for r in rows if r["part"] in ("widths", "widths_long") or (
      r["part"] == "systems" and r["plant"] == "pendulum"
      and r["method"] in ("two_stage", "direct"))]
  t2 = ex.aggregate(w_rows, ["width", "method"],
                    ["time_to_cert", "time_to_matched", "total_s", "sdp_solves",
                     "certified", "capped", "margin", "nmse"])
  t2.sort(key=lambda r: (r["width"], r["method"]))
  a_rows = [r for r in rows if r["part"].startswith("x29_") or (
      r["part"] == "systems" and r["plant"] == "x29")]
  t3 = ex.aggregate(a_rows, ["part", "noise_scale", "method"],
                    ["rmse_x", "rmse_d", "nmse", "certified", "margin", "time_to_cert",
                     "total_s", "steps_done"])
  gains = [r for d in done for r in d.get("gain_tuning", [])]
  exact = lambda rs: [r for r in rs if _setting(r) == "exact"]  # noqa: E731
  sel = _selections(sys_rows, exact(tuning), exact(gains))
  for part in ("mismatch", "friction"):
    p_rows = [r for r in rows if r["part"] == part]
    if p_rows:
      sel += _selections(p_rows, [r for r in tuning if _setting(r) == _setting(p_rows[0])],
                         [r for r in gains if _setting(r) == _setting(p_rows[0])],
                         suffix=f" ({_setting(p_rows[0])})")
  sdp_tune = [r for r in tuning if r["method"] == "direct_sdp"]
  if sdp_tune:
    sel += _selections([], [], [], extra=[("pendulum", f"lr direct_sdp (width "
                                           f"{sdp_tune[0]['width']})", sdp_tune)])
  t4 = _mismatch_table(rows)
  t5 = _direct_sdp_table(rows)
  md = (study_lib.write_table(workdir, "selections", sel, header=header)
        + "\n" + study_lib.write_table(workdir, "lr_tuning", t0, header=header, digits=4)
        + "\n" + study_lib.write_table(workdir, "systems", t1, header=header)
        + "\n" + study_lib.write_table(workdir, "widths", t2, header=header)
        + "\n" + study_lib.write_table(workdir, "x29_ablations", t3, header=header)
        + "\n" + study_lib.write_table(workdir, "mismatch", t4, header=header)
        + "\n" + study_lib.write_table(workdir, "direct_sdp", t5, header=header))
  with open(os.path.join(workdir, "rows.json"), "w") as f:
    json.dump(dict(commits=commits, elapsed_s=elapsed,
                   units={d["unit"]: dict(commit=d["commit"], elapsed_s=d["elapsed_s"],
                                          chosen_lr=d["chosen_lr"]) for d in done},
                   rows=rows, lr_tuning=tuning), f, indent=1, default=str)
  _plot(workdir, w_rows, sys_rows)
  print(md)
  return rows


def _setting(r):
  """The data-generating plant of a row: the exact model, or which mismatch."""
  if r.get("mismatch", 0.0):
    return f"params +-{float(r['mismatch']):g}"
  if r.get("friction", 0.0):
    return f"friction {float(r['friction']):g}"
  return "exact"


def _mismatch_table(rows):
  """Test nmse per plant and method, mean ± std over seeds: the exact model (part
  systems) beside each model-mismatch setting (data from the true plant, observers
  nominal), with each method's rank within its plant and setting (1 = lowest mean nmse)
  and its certified seeds."""
  parts = [p for p in ("systems", "mismatch", "friction")
           if any(r["part"] == p for r in rows)]
  out, names = [], {}  # the same columns for every plant (n/a where not run)
  for part in parts:
    rs = [r for r in rows if r["part"] == part]
    names[part] = "exact" if part == "systems" else _setting(rs[0])
  for plant in sorted({r["plant"] for r in rows if r["part"] in parts[1:]}):
    cells = {}
    for part in parts:
      rs = [r for r in rows if r["part"] == part and r["plant"] == plant]
      for m in {r["method"] for r in rs}:
        v = [float(r.get("nmse", np.nan)) for r in rs if r["method"] == m]
        cells[(part, m)] = dict(mean=np.nanmean(v), std=np.nanstd(v), n=len(v),
                                cert=sum(bool(r.get("certified")) for r in rs
                                         if r["method"] == m))
      ms = sorted((m for (pp, m) in cells if pp == part),
                  key=lambda m: cells[(part, m)]["mean"])
      for i, m in enumerate(ms):
        cells[(part, m)]["rank"] = i + 1
    for m in sorted({m for (_, m) in cells}):
      row = dict(plant=plant, method=m)
      for part in parts:
        c = cells.get((part, m))
        key = names[part]
        row[f"nmse {key}"] = f"{c['mean']:.4g} ± {c['std']:.2g}" if c else "n/a"
        row[f"rank {key}"] = c["rank"] if c else "n/a"
        row[f"cert {key}"] = (f"{c['cert']}/{c['n']}" if c and m in ("two_stage", "direct")
                              else "")
      out.append(row)
  return out


def _direct_sdp_table(rows):
  """Pendulum width sweep (units widths_sdp/<w>): two-stage and the penalty `direct`
  method against direct LMI with the weights in the SDP, all three run in the same unit.
  time_to_matched_sdp: each method's first verified
  certificate at the worse of two-stage's and direct_sdp's best certified val nmse (same
  width and seed; nan where the method never reaches it)."""
  ws = [r for r in rows if r["part"] == "widths_sdp"]
  sdp = {(r["width"], r["seed"]): r for r in ws if r["method"] == "direct_sdp"}
  two = {(r["width"], r["seed"]): r for r in ws if r["method"] == "two_stage"}
  out = []
  for r in ws:
    k = (r["width"], r["seed"])
    if k not in sdp:
      continue
    r = dict(r)
    if k in two:
      level = max(float(sdp[k]["val_nmse"]), float(two[k]["val_nmse"]))
      hits = [t for t, v in r.get("cert_trace", []) if v <= level]
      r["time_to_matched_sdp"] = hits[0] if hits else np.nan
    out.append(r)
  for r in out:
    # where a run's wall-clock goes: stage 1 (two-stage only), every SDP solve, and the
    # rest (network updates between SDPs, with the LMI penalty for two-stage's stage 2
    # and for direct; plain updates for direct_sdp; validation and NumPy checks)
    r["sdp_s_per_solve"] = float(r.get("sdp_s", np.nan)) / max(int(r["sdp_solves"]), 1)
    r["stage1_s"] = float(r.get("stage1_s", 0.0))
    r["updates_s"] = float(r["total_s"]) - r["stage1_s"] - float(r.get("sdp_s", 0.0))
  t = ex.aggregate(out, ["width", "method"],
                   ["lr", "time_to_cert", "time_to_matched_sdp", "total_s", "sdp_solves",
                    "sdp_s_per_solve", "stage1_s", "sdp_s", "updates_s", "certified",
                    "nmse"])
  t.sort(key=lambda r: (r["width"], r["method"]))
  return t


def _selections(sys_rows, tuning, gain_rows, suffix="", extra=()):
  """Every hyper-parameter selection of the systems part with its grid: the chosen
  value(s) over seeds and whether any of them sits on an edge of the grid. extra:
  (plant, what, tuning rows) of other learning-rate selections."""
  out = []

  def add(plant, what, picks, grid):
    grid = sorted(float(g) for g in grid)
    edge = sorted({p for p in picks if p in (grid[0], grid[-1])})
    what = what + suffix
    out.append(dict(plant=plant, what=what, chosen=" ".join(f"{p:g}" for p in picks),
                    grid=" ".join(f"{g:g}" for g in grid),
                    edge=" ".join(f"{e:g}" for e in edge) or "no"))
  for plant in sorted({r["plant"] for r in sys_rows}):
    for m in ex.BASELINES:
      rs = sorted((r for r in sys_rows if r["plant"] == plant and r["method"] == m
                   and "grid" in r), key=lambda r: r["seed"])
      if rs:
        add(plant, m, [float(r["hparam"]) for r in rs], rs[0]["grid"])
    g = [r for r in gain_rows if r["plant"] == plant]
    if g:
      add(plant, "gain L decay (neural)", [r["gain_alpha"] for r in g if r["chosen"]],
          [r["gain_alpha"] for r in g if np.isfinite(r["val_nmse"])])
    for m in ("two_stage", "direct", "unconstrained"):
      t = [r for r in tuning if r["plant"] == plant and r["method"] == m]
      if t:
        add(plant, f"lr {m}", [float(r["lr"]) for r in t if r["chosen"]],
            [float(r["lr"]) for r in t])
  for plant, what, t in extra:
    add(plant, what, [float(r["lr"]) for r in t if r["chosen"]], [float(r["lr"]) for r in t])
  return out


def _plot(workdir, w_rows, sys_rows):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
  for m, c in (("two_stage", "C0"), ("direct", "C1"), ("two_stage_long", "C2")):
    for k, (key, ls) in enumerate((("time_to_matched", "o-"), ("total_s", "s--"))):
      ws = sorted({r["width"] for r in w_rows if r["method"] == m})
      ys = [np.nanmean([float(r.get(key, np.nan)) for r in w_rows
                        if r["method"] == m and r["width"] == w]) for w in ws]
      axes[k].plot(ws, ys, ls, color=c, label=m)
  for ax, t in zip(axes[:2], ("wall-clock to a verified certificate\nat matched accuracy [s]",
                              "wall-clock of the whole run [s]")):
    if not w_rows:  # this workdir holds no width-sweep runs (yet)
      continue
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("width")
    ax.set_ylabel(t, fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title("pendulum: two-stage vs direct LMI", fontsize=9)
  plants = sorted({r["plant"] for r in sys_rows})
  methods = ["linear_part", *ex.BASELINES, "unconstrained", "direct", "two_stage"]
  for j, m in enumerate(methods):
    vals = []
    for p in plants:
      v = [r.get("nmse", np.nan) for r in sys_rows if r["plant"] == p and r["method"] == m]
      vals.append(np.nanmean(v) if v and np.isfinite(v).any() else np.nan)
    axes[2].bar(np.arange(len(plants)) + 0.09 * j, vals, width=0.09, label=m)
  axes[2].set_xticks(np.arange(len(plants)) + 0.36, plants, fontsize=8)
  axes[2].set_yscale("log")
  axes[2].set_ylabel("test normalised MSE")
  axes[2].legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "study.png"), dpi=110)
  plt.close(fig)
