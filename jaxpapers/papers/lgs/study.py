"""LGS (arXiv 2602.11229) study: every model on the same corpus, seeds and budget.

1. PhyVAE per seed; every split encoded by its own seed's VAE.
2. Every dynamics model (PFlowFT, latent MSE, latent DPOT-style, pixel flow matching,
   FNO, U-Net): the lr grid on seed 0, selection by the validation rollout L2RE
   (mean over families and the first `val_steps` steps), then the other seeds at the
   chosen lr; test L2RE per family at 1/5/10/20 steps; persistence as the trivial model.
3. FLOPs of one dynamics step (batch 1) from XLA's cost analysis, every model.
4. Context noise level at inference (PFlowFT), the ablation of the "noise" explanation.
5. Fine-tuning on the held-out Kolmogorov flow at 2x resolution for `ft_epochs` epochs:
   PFlowFT (with its PhyVAE) vs FNO and U-Net, 1-step L2RE before and after.
"""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.core import planner
from jaxpapers.core import study as study_lib
from jaxpapers.papers.lgs import experiment as E
from jaxpapers.papers.lgs import train as T

NAMES = dict(lgs="LGS (PFlowFT)", latent_mse="latent MSE", latent_dpot="latent DPOT-noise",
             pixel_fm="pixel flow matching", fno="FNO", unet="U-Net", persistence="persistence")


def _pick(tree, idx):
  return jax.tree.map(lambda a: a[np.asarray(idx)], tree)


def _cat(*trees):
  return jax.tree.map(lambda *a: jnp.concatenate(a), *trees)


def dynamics_flops(config, kind, shape, vae_params=None):
  """XLA cost-analysis FLOPs of one dynamics step at batch 1 (and of the decode)."""
  sp = E.spec(config, kind)
  p = jax.eval_shape(lambda: T.init_params(sp, jax.random.PRNGKey(0), shape))
  ctx = jax.ShapeDtypeStruct((1, sp.context) + shape, jnp.float32)
  mask = jax.ShapeDtypeStruct((1, 2), jnp.float32)
  key = jax.ShapeDtypeStruct((2,), jnp.uint32)
  fn = jax.jit(lambda pp, c, m, k: T.dynamics_step(sp, pp, c, m, k, 1.0))
  out = dict(step=planner.compiled_costs(fn, (p, ctx, mask, key))["flops_per_device"])
  if kind in T.LATENT:
    vsp = E.spec(config, "vae")
    z = jax.ShapeDtypeStruct((1,) + shape, jnp.float32)
    dec = jax.jit(lambda vp, zz: T.decode(vsp, vp, zz))
    out["decode"] = planner.compiled_costs(dec, (vae_params, z))["flops_per_device"]
  return out


class Paused(Exception):
  """The study's time budget ran out before a cell: the same command resumes it."""


def _cells(workdir, budget_s, t_start, log):
  """cell(name, fn): fn()'s JSON result, stored in <workdir>/cells/<name>.json and read
  back on the next run; a cell is not started once `budget_s` has passed (0: no limit)."""
  root = os.path.join(workdir, "cells")
  os.makedirs(root, exist_ok=True)

  def cell(name, fn):
    path = os.path.join(root, f"{name}.json")
    if os.path.exists(path):
      with open(path) as f:
        return json.load(f)
    el = time.perf_counter() - t_start
    if budget_s and el > budget_s:
      raise Paused(f"{name} not started: {el:.0f} s > study.budget_s={budget_s:g}")
    t0 = time.perf_counter()
    out = fn()
    out["cell_s"] = time.perf_counter() - t0
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
      json.dump(out, f)
    os.replace(tmp, path)
    log(f"[cell {name}] done in {out['cell_s']:.0f} s")
    return out
  return cell


def _round(a, d=5):
  return np.round(np.asarray(a, np.float64), d).tolist()


def run(config, workdir, commit="unknown"):
  """The study in resumable cells (PhyVAE, one per dynamics model, fine-tuning): each
  finished cell is stored in <workdir>/cells; with study.budget_s the run stops before a
  new cell once the budget is spent and the same command continues it."""
  t_start = time.perf_counter()
  log = lambda *a: print(*a, flush=True)
  cell = _cells(workdir, config.study.budget_s, t_start, log)
  try:
    return _run(config, workdir, commit, cell, log, t_start)
  except Paused as e:
    log(f"[study] paused ({e}); rerun the same command to continue")
    return {}


def lr_grid(config, kind):
  own = tuple(getattr(config.study, f"lrs_{kind}", ()))
  return list(own or config.study.lrs)


def _run(config, workdir, commit, cell, log, t_start):
  data, fams = E.corpus(config, workdir, log)
  mean, std = E.stats(data["train"], len(fams))
  xs = {s: E.normalize(v, mean, std) for s, v in data.items()}
  masks = {s: v["mask"] for s, v in data.items()}
  K, S, VS = config.model.context, config.eval.rollout_steps, config.eval.val_steps
  seeds = list(range(config.train.seeds))
  R = config.data.resolution
  n_s = len(seeds)

  # 1. PhyVAE (its checkpoint holds the parameters; a finished fit restores at once).
  vae, vcurve = E.train_vae(config, workdir, xs["train"], masks["train"], seeds, log=log)
  lat, z_std, res_lat = E.latents(config, vae["params"], xs)
  res_pix = E.residual_std(xs["train"])

  def vae_cell():
    # Reconstruction L2RE of the test frames: the floor under every latent model's error.
    rec_err = E.recon_errors(config, vae["params"], data["test"], xs["test"], mean, std)
    log(f"[vae] test reconstruction L2RE {rec_err.mean():.4f}")
    return dict(curve=vcurve, recon_l2re=float(rec_err.mean()),
                recon_per_family=[float(rec_err[:, data["test"]["fam"] == f].mean())
                                  for f in range(len(fams))])
  vres = cell("vae", vae_cell)

  def ctx_of(kind, split, idx):
    if kind in T.LATENT:
      return lat[split][np.asarray(idx)][:, :, :K]
    return np.broadcast_to(xs[split][None, :, :K], (len(idx),) + xs[split][:, :K].shape)
  def res_of(kind, idx):
    return res_lat[np.asarray(idx)] if kind in T.LATENT else np.full(len(idx), res_pix, np.float32)
  def vae_of(kind, idx):
    return (_pick(vae["params"], idx), z_std[np.asarray(idx)]) if kind in T.LATENT else None

  def train(kind):
    """All seeds x lrs in one vmapped program; member index = lr_index * n_seeds + seed."""
    lat_kind = kind in T.LATENT
    return E.train_dynamics(config, workdir, kind, lat["train"] if lat_kind else xs["train"],
                            masks["train"], res_lat if lat_kind else res_pix, seeds,
                            lr_grid(config, kind), tag=kind, log=log)

  def dyn_cell(kind):
    lrs = lr_grid(config, kind)
    state, curve, _ = train(kind)
    idx = [s for _ in lrs for s in seeds]
    pred = E.rollout_members(config, kind, state["params"], ctx_of(kind, "val", idx),
                             masks["val"], res_of(kind, idx), VS, vae=vae_of(kind, idx),
                             member_seeds=idx)
    val = E.errors(pred, data["val"], mean, std, K).mean(axis=(1, 2)).reshape(len(lrs), n_s)
    best = int(np.argmin(val.mean(axis=1)))
    edge = len(lrs) > 1 and best in (0, len(lrs) - 1)
    sel = dict(grid=lrs, val_l2re=val.mean(1).tolist(), val_per_seed=val.tolist(),
               chosen=lrs[best], edge=edge)
    log(f"[select {kind}] lr grid {lrs} -> val L2RE@1..{VS} (mean of {n_s} seeds) "
        f"{[round(float(v), 4) for v in val.mean(1)]}: chose {lrs[best]}"
        f"{'  (EDGE of the grid)' if edge else ''}")
    keep = np.arange(best * n_s, (best + 1) * n_s)
    def test_rollout(sig=None):
      p = E.rollout_members(config, kind, _pick(state["params"], keep),
                            ctx_of(kind, "test", seeds), masks["test"], res_of(kind, seeds),
                            S, vae=vae_of(kind, seeds), sigma_inf=sig, member_seeds=seeds)
      return E.errors(p, data["test"], mean, std, K)
    err = test_rollout()
    out = dict(selection=sel, curve=curve, errors=_round(err))
    if kind == "lgs":
      noise = {}
      for sig in sorted({0.0, config.model.sigma_inf, config.model.sigma_max}):
        e2 = err if sig == config.model.sigma_inf else test_rollout(float(sig))
        noise[f"{sig:g}"] = {f"l2re@{k}": float(e2[:, :, k - 1].mean())
                             for k in E.REPORT_STEPS if k <= S}
      log(f"[noise] {noise}")
      out["noise"] = noise
    shape = lat["train"].shape[-3:] if kind in T.LATENT else (R, R, 2)
    out["flops"] = dynamics_flops(config, kind, shape, _pick(vae["params"], 0))
    log(f"[{kind}] test L2RE@1/5/10/20 "
        f"{[round(float(err[:, :, k - 1].mean()), 4) for k in E.REPORT_STEPS if k <= S]}"
        f" FLOPs/step {out['flops']['step']:.3g} ({time.perf_counter() - t_start:.0f} s)")
    return out

  kinds = list(config.study.kinds)  # cells run in this order
  dyn = {k: cell(f"dyn_{k}", lambda k=k: dyn_cell(k)) for k in kinds}
  pers = E.errors(
      np.asarray(T.persistence(jnp.asarray(xs["test"][:, :K]), S))[None].repeat(n_s, 0),
      data["test"], mean, std, K)

  ft = {}
  if config.study.finetune and all(k in kinds for k in ("lgs", "fno", "unet")):
    def ft_cell():
      trained = {}
      for k in ("lgs", "fno", "unet"):
        state, _, _ = train(k)  # restored from the finished checkpoint
        best = lr_grid(config, k).index(dyn[k]["selection"]["chosen"])
        trained[k] = _pick(state["params"], np.arange(best * n_s, (best + 1) * n_s))
      chosen = {k: dyn[k]["selection"]["chosen"] for k in trained}
      return finetune(config, workdir, vae, trained, chosen, seeds, log)
    ft = cell("finetune", ft_cell)
    ft.pop("cell_s", None)

  rows_out = dict(commit=commit, families=fams, seeds=seeds, kinds=kinds,
                  selection={k: v["selection"] for k, v in dyn.items()},
                  curves=dict(vae=vres["curve"], **{k: v["curve"] for k, v in dyn.items()}),
                  errors=dict({k: v["errors"] for k, v in dyn.items()},
                              persistence=_round(pers)),
                  flops={k: v["flops"] for k, v in dyn.items()},
                  noise=dyn.get("lgs", {}).get("noise", {}), finetune=ft,
                  vae_recon_l2re=vres["recon_l2re"],
                  vae_recon_per_family=vres["recon_per_family"],
                  test_fam=data["test"]["fam"].tolist(),
                  cell_s={k: v["cell_s"] for k, v in dict(dyn, vae=vres).items()},
                  wall_s=time.perf_counter() - t_start)
  with open(os.path.join(workdir, "lgs_rows.json"), "w") as f:
    json.dump(rows_out, f)
  return report(rows_out, workdir, config)


def finetune(config, workdir, vae, trained, chosen, seeds, log):
  """1-step test L2RE on the held-out Kolmogorov flow before/after `ft_epochs` epochs."""
  K = config.model.context
  ft = E.finetune_corpus(config, workdir)
  mean, std = E.stats(ft["finetune"], 1)
  xf = {s: E.normalize(v, mean, std) for s, v in ft.items()}
  mk = {s: v["mask"] for s, v in ft.items()}
  n_ft, frames = xf["finetune"].shape[:2]
  bs = config.train.ft_batch
  ep_pairs = -(-n_ft * (frames - K) // bs)
  ep_frames = -(-n_ft * frames // bs)
  E_ = config.train.ft_epochs
  M = len(seeds)
  out = {}

  def one_step(kind, params, ctx, res, vae_):
    pred = E.rollout_members(config, kind, params, ctx, mk["ft_test"], res, 1, vae=vae_,
                             member_seeds=seeds)
    return E.errors(pred, ft["ft_test"], mean, std, K)[:, :, 0].mean(axis=1)

  def members(kind, params, lr):
    sp = E.spec(config, kind)
    tx = T.optimizer()
    return dict(params=params, opt=jax.vmap(tx.init)(params),
                key=jax.random.split(jax.random.PRNGKey(77), M),
                lr=jnp.full((M,), lr, jnp.float32), loss=jnp.zeros((M,)))

  res_pix = E.residual_std(xf["finetune"])
  for kind in ("fno", "unet"):
    ctx = np.broadcast_to(xf["ft_test"][None, :, :K], (M,) + xf["ft_test"][:, :K].shape)
    res = np.full(M, res_pix, np.float32)
    before = one_step(kind, trained[kind], ctx, res, None)
    m, curve, _ = E.train_dynamics(config, workdir, kind, xf["finetune"], mk["finetune"],
                                   res_pix, seeds, [chosen[kind]], tag=f"ft_{kind}", log=log,
                                   steps=E_ * ep_pairs, init=members(kind, trained[kind],
                                                                     chosen[kind]), batch=bs)
    after = one_step(kind, m["params"], ctx, res, None)
    out[kind] = dict(before=before.tolist(), after=after.tolist(), steps=E_ * ep_pairs)
    log(f"[finetune {kind}] 1-step L2RE {before.mean():.4f} -> {after.mean():.4f}")

  # LGS: the pretrained PhyVAE and PFlowFT zero-shot at 2x resolution, then 5 epochs of
  # VAE fine-tuning followed by 5 epochs of PFlowFT on the fine-tuned latents.
  latents = lambda vparams: E.latents(config, vparams, xf, train="finetune")
  lat, z_std0, res0 = latents(vae["params"])
  before = one_step("lgs", trained["lgs"], lat["ft_test"][:, :, :K], res0,
                    (vae["params"], z_std0))
  vmem = members("vae", vae["params"], config.train.vae_lr)
  vae_ft, _ = E.train_vae(config, workdir, xf["finetune"], mk["finetune"], seeds,
                          tag="ft_vae", log=log, steps=E_ * ep_frames, init=vmem, batch=bs)
  lat, z_std, res = latents(vae_ft["params"])
  m, _, _ = E.train_dynamics(config, workdir, "lgs", lat["finetune"], mk["finetune"], res,
                             seeds, [chosen["lgs"]], tag="ft_lgs", log=log,
                             steps=E_ * ep_pairs, batch=bs,
                             init=members("lgs", trained["lgs"], chosen["lgs"]))
  after = one_step("lgs", m["params"], lat["ft_test"][:, :, :K], res,
                   (vae_ft["params"], z_std))
  out["lgs"] = dict(before=before.tolist(), after=after.tolist(), steps=E_ * ep_pairs,
                    vae_steps=E_ * ep_frames)
  log(f"[finetune lgs] 1-step L2RE {before.mean():.4f} -> {after.mean():.4f}")
  return out


def _ms(v):
  v = np.asarray(v, np.float64)
  return f"{v.mean():.3f} ± {v.std():.3f}"


def flatness(curve, chosen_idx):
  """(loss at 50%, 75%, 100% of the steps, relative change over the last quarter) of the
  mean training loss of the members `chosen_idx` (the chosen lr's seeds)."""
  losses = np.array([np.mean(np.asarray(c[1])[chosen_idx]) for c in curve])
  n = len(losses)
  # each entry is a chunk's mean loss; average two chunks around each mark against noise
  at = lambda f: float(losses[max(int(round(f * n)) - 2, 0):max(int(round(f * n)), 1)].mean())
  a50, a75, a100 = at(0.5), at(0.75), at(1.0)
  return a50, a75, a100, (a100 - a75) / abs(a75)


def _chosen_members(r, kind):
  """Curve columns of the chosen lr's seeds (members are lr-major; the VAE: every seed)."""
  n_s = len(r["seeds"])
  if kind == "vae":
    return np.arange(n_s)
  b = r["selection"][kind]["grid"].index(r["selection"][kind]["chosen"])
  return np.arange(b * n_s, (b + 1) * n_s)


def lowest_counts(per_fam, kinds, steps):
  """{kind: {s: families on which `kind` has the lowest seed-mean L2RE at step s}} among
  `kinds` (the claim "lowest error on most systems", asked of every model, not only
  LGS). per_fam: {kind: [seeds, families, steps]}."""
  out = {k: {} for k in kinds}
  for s in steps:
    m = np.stack([np.asarray(per_fam[k])[:, :, s - 1].mean(axis=0) for k in kinds])
    best = m.argmin(axis=0)  # [families]
    for i, k in enumerate(kinds):
      out[k][s] = int((best == i).sum())
  return out


def report(r, workdir, config):
  """Tables (markdown), the plot and the verdict rows from the raw study rows."""
  fams = r["families"]
  fam_of = np.asarray(r["test_fam"])
  S = config.eval.rollout_steps
  steps = [k for k in (1, 5, 10, 20) if k <= S]
  dyn = list(r.get("kinds", T.DYNAMICS))
  kinds = dyn + ["persistence"]
  n_s = len(r["seeds"])
  err = {k: np.asarray(v) for k, v in r["errors"].items()}  # [M, B, S]
  per_fam = {k: np.stack([err[k][:, fam_of == f].mean(axis=1) for f in range(len(fams))], 1)
             for k in kinds}  # [M, F, S]
  rows = []
  for f, name in enumerate(fams):
    for k in kinds:
      row = dict(family=name, model=NAMES[k])
      for s in steps:
        row[f"L2RE@{s}"] = _ms(per_fam[k][:, f, s - 1])
      rows.append(row)
  summary = []
  lgs_flops = r["flops"].get("lgs", {}).get("step")
  for k in kinds:
    row = dict(model=NAMES[k])
    for s in steps:
      row[f"L2RE@{s}"] = _ms(per_fam[k][:, :, s - 1].mean(axis=1))
    if k in r["flops"]:
      fl = r["flops"][k]
      row["MFLOP/step"] = f"{fl['step'] / 1e6:.2f}"
      row["FLOPs / LGS"] = f"{fl['step'] / lgs_flops:.2f}" if lgs_flops else ""
      row["lr"] = r["selection"][k]["chosen"]
    summary.append(row)
  counts = lowest_counts(per_fam, dyn, steps)
  # Wins: families where LGS has the lowest mean L2RE among the trained models.
  wins = {s: counts["lgs"][s] for s in steps} if "lgs" in dyn and len(dyn) > 1 else {}
  lowest = [dict(model=NAMES[k], **{f"lowest @{s}": f"{counts[k][s]}/{len(fams)}"
                                    for s in steps}) for k in dyn]
  header = (f"### LGS study: test L2RE (mean ± std over {n_s} seeds), commit "
            f"{r['commit']}")
  md = study_lib.write_table(workdir, "lgs_summary", summary, header=header)
  md += "\n" + study_lib.write_table(workdir, "lgs_per_family", rows,
                                     header="### Per family")
  md += "\n" + study_lib.write_table(
      workdir, "lgs_lowest", lowest,
      header="### Families on which each trained model has the lowest test L2RE")
  sel = [dict(model=NAMES[k], grid=str(v["grid"]), val_l2re=str([round(x, 4) for x in v["val_l2re"]]),
              chosen=v["chosen"], edge=v["edge"]) for k, v in r["selection"].items()]
  md += "\n" + study_lib.write_table(workdir, "lgs_selection", sel,
                                     header="### Learning-rate selection (validation)")
  flat = []
  for k, c in r["curves"].items():
    a50, a75, a100, rel = flatness(c, _chosen_members(r, k))
    flat.append({"model": "PhyVAE" if k == "vae" else NAMES[k], "steps": c[-1][0],
                 "loss@50%": f"{a50:.4g}", "loss@75%": f"{a75:.4g}", "loss@100%": f"{a100:.4g}",
                 "change over last quarter": f"{100 * rel:+.1f}%"})
  md += "\n" + study_lib.write_table(
      workdir, "lgs_curves", flat,
      header="### Training curves (chosen lr, mean over seeds; 2-chunk means)")
  if r["finetune"]:
    ft = [dict(model=NAMES[k], before=_ms(v["before"]), after=_ms(v["after"]), steps=v["steps"])
          for k, v in r["finetune"].items()]
    md += "\n" + study_lib.write_table(
        workdir, "lgs_finetune", ft, header="### Held-out Kolmogorov, 2x resolution: 1-step L2RE")
  if r["noise"]:
    nz = [dict(sigma_inf=k, **v) for k, v in r["noise"].items()]
    md += "\n" + study_lib.write_table(workdir, "lgs_noise", nz,
                                       header="### PFlowFT context noise at inference")
  md += (f"\nLGS lowest among trained models on {', '.join(f'{wins[s]}/{len(fams)} @{s}' for s in wins)}"
         f" families. VAE test reconstruction L2RE {r['vae_recon_l2re']:.4f}. Wall of the "
         f"last (resumed) run {r['wall_s']:.0f} s; cells "
         f"{', '.join(f'{k} {v:.0f} s' for k, v in r['cell_s'].items())}.\n")
  with open(os.path.join(workdir, "lgs_study.md"), "w") as f:
    f.write(md)
  print(md, flush=True)
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    t = np.arange(1, S + 1)
    for k in kinds:
      m = per_fam[k].mean(axis=1)  # [M, S]
      ax[0].plot(t, m.mean(0), label=NAMES[k])
      ax[0].fill_between(t, m.min(0), m.max(0), alpha=0.15)
    ax[0].set_xlabel("rollout step"); ax[0].set_ylabel("L2RE (mean over families)")
    ax[0].set_yscale("log"); ax[0].legend(fontsize=7)
    for k, c in r["curves"].items():
      idx = _chosen_members(r, k)
      ax[1].plot([x[0] for x in c], [np.mean(np.asarray(x[1])[idx]) for x in c], label=k)
    ax[1].set_yscale("log"); ax[1].set_xlabel("step")
    ax[1].set_ylabel("train loss (chosen lr, mean of seeds)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, "lgs_study.png"), dpi=110)
    plt.close(fig)
  except ImportError:
    pass
  return dict(wins={str(k): v for k, v in wins.items()},
              mean_l2re={k: {str(s): float(per_fam[k][:, :, s - 1].mean()) for s in steps}
                         for k in kinds})
