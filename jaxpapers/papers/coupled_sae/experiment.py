"""Multisubject coupled sparse autoencoder for language encoding models (abstract 1).

Entry points for `launch/train.py` (one seed, checkpointed) and `launch/study.py` (every
headline claim over seeds). The pipeline: word-aligned LM features of stories ->
Lanczos resampling to the TR grid -> simulated (or real, LeBel et al.) multi-subject
responses -> the coupled TopK SAE and the ridge baselines -> held-out prediction,
planted-atom recovery, cross-subject map reproducibility, network alignment, low-data
transfer to a held-out subject and the top text segments per atom.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.core import study as study_lib
from jaxpapers.papers.coupled_sae import analysis
from jaxpapers.papers.coupled_sae import data as data_lib
from jaxpapers.papers.coupled_sae import methods
from jaxpapers.papers.coupled_sae import simulate as sim_lib

PATHS = ("jaxpapers/papers/coupled_sae", "configs/coupled_sae.py")


def summarize(config, feats, resp, fit, seed: int):
  """Scalar metrics of one seed (dict) and the arrays the plots need."""
  m, e = config.model, config.eval
  tr, va, te = fit["splits"]
  n_fit, nd = fit["n_fit"], fit["n_delays"]
  sim = resp.sim
  out = {"seed": seed}
  if sim is not None:
    test_sig = [data_lib.stack(s, feats.split["test"]) for s in sim.signals]
    ceil = [sim_lib.noise_ceiling(test_sig[s], te.ys(s)) for s in range(len(resp.y))]
  else:  # real data: no noise ceiling, every voxel counts (subjects' own voxel counts)
    ceil = [np.ones(v) for v in te.n_vox]
  mask = [c >= e.ceiling_min for c in ceil]
  out["predictable_frac"] = float(np.concatenate(mask[:n_fit]).mean())
  out["ceiling_mean"] = float(np.concatenate([c[k] for c, k in zip(ceil[:n_fit],
                                                                  mask[:n_fit])]).mean())

  def score(r):  # mean test correlation over predictable voxels of the fitted subjects
    return float(np.mean([r[s][mask[s]].mean() for s in range(n_fit)]))

  methods_r = {"coupled": fit["joint"]["test_r"], "coupled_refit": fit["joint_refit"]["test_r"],
               "two_stage": fit["two_stage"]["test_r"],
               "pca": fit["pca"]["test_r"], "pca_tuned": fit["pca_tuned"]["test_r"],
               "dense": fit["dense"]["test_r"]}
  if "oracle" in fit:
    methods_r["oracle"] = fit["oracle"]["test_r"]
  for name, r in methods_r.items():
    out[f"r_{name}"] = score(r)
  for name in methods_r:
    out[f"pct_dense_{name}"] = 100.0 * out[f"r_{name}"] / out["r_dense"]
  out["sae_grid"] = [{"lr": g["lr"], "val_fvu": g["val_fvu"],
                      "pct_dense": 100.0 * score(g["test_r"]) / out["r_dense"]}
                     for g in fit["sae_grid"]]
  out["pca_k"] = fit["pca_tuned"]["k"]
  out["pca_grid"] = [{"k": g["k"], "val_r": g["val_r"],
                      "pct_dense": 100.0 * score(g["test_r"]) / out["r_dense"]}
                     for g in fit["pca_tuned"]["grid"]]
  out["coupled_lr"], out["coupled_beta"] = fit["joint"]["lr"], fit["joint"]["beta"]
  out["two_stage_lr"] = fit["two_stage"]["lr"]
  out["map_alpha"] = fit["map_alpha"]
  out["recon_fvu_coupled"] = fit["joint"]["recon_fvu"]
  out["recon_fvu_two_stage"] = fit["two_stage"]["recon_fvu"]
  z_joint = fit["joint"]["test_codes"]
  z_two = fit["two_stage"]["test_codes"]
  out["dead_coupled"] = int((z_joint.max(0) <= 0).sum())
  out["dead_two_stage"] = int((z_two.max(0) <= 0).sum())
  out["l0_coupled"] = float((z_joint > 0).sum(1).mean())

  # Cortical maps: (S_fit, units, V), delay-summed. The coupled maps are zero-padded to
  # the widest subject; the other methods' maps are stacked only when every subject has
  # the same voxels (a common surface: the simulator), which the map analyses need.
  maps = {"coupled": methods.delay_sum_maps(
              np.asarray(fit["joint"]["params"]["maps"]["m"]), nd)}
  if len(set(te.n_vox)) == 1:
    maps["coupled_refit"] = methods.delay_sum_maps(fit["joint_refit"]["weights"], nd)
    maps["two_stage"] = methods.delay_sum_maps(fit["two_stage"]["weights"][:n_fit], nd)
    _, maps["posthoc_pca"] = analysis.posthoc_pca_maps(fit["dense"]["weights"][:n_fit], nd,
                                                        e.n_top_units)
  arts = {"maps": maps, "mask": mask, "ceil": ceil}
  if sim is not None:
    maps["truth"] = sim.maps[:n_fit]
    true_te = data_lib.stack(sim.codes, feats.split["test"])
    from jaxpapers.papers.coupled_sae import model  # pylint: disable=g-import-not-at-top
    dirs = {"coupled": np.asarray(model.decoder(fit["joint"]["params"]["sae"])),
            "two_stage": np.asarray(model.decoder(fit["two_stage"]["sae"])),
            "pca": fit["pca"]["comps"]}
    codes = {"coupled": z_joint, "two_stage": z_two, "pca": fit["pca"]["test_codes"]}
    for name in dirs:
      out[f"recovery_{name}"] = analysis.recovery_timecourse(true_te, codes[name])
      out[f"recovery_dir_{name}"] = analysis.recovery_direction(sim.atoms.directions,
                                                                dirs[name])
    grid = []
    for row in fit["grid"]:
      grid.append({"lr": row["lr"], "beta": row["beta"], "val_r": row["val_r"],
                   "pct_dense": 100.0 * score(row["test_r"]) / out["r_dense"],
                   "recovery": analysis.recovery_timecourse(true_te, row["test_codes"]),
                   "recon_fvu": row["recon_fvu"]})
    out["grid"] = grid
    rng = np.random.default_rng([seed, 5])
    n_networks = len(sim_lib.NETWORKS)
    for name, mp in maps.items():
      units = (np.arange(mp.shape[1]) if name == "truth"
               else analysis.top_units(mp, e.n_top_units))
      out[f"repro_{name}"] = analysis.reproducibility(mp, units)
      out[f"align_{name}"] = analysis.network_alignment(mp[:, units].mean(0), sim.surface,
                                                        n_networks, rng)
    held = len(resp.y) - 1
    if n_fit < len(resp.y):
      hmask = mask[held]
      out["transfer"] = [{"n_trs": row["n_trs"],
                          "coupled": float(row["coupled"][hmask].mean()),
                          "dense": float(row["dense"][hmask].mean())}
                         for row in methods.transfer(config, fit, held)]
    arts["surface"] = sim.surface
  # Top text segments of the coupled model's most brain-relevant atoms (all stories).
  from jaxpapers.papers.coupled_sae import model  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  sae = fit["joint"]["params"]["sae"]
  all_idx = feats.split["train"] + feats.split["val"] + feats.split["test"]
  x_all = data_lib.stack(feats.x, all_idx)
  z_all = np.asarray(model.codes_all(sae, jnp.asarray(x_all), jnp.full((1, len(x_all)), len(x_all), jnp.int32), m.k)[0])
  words = [w for i in all_idx for w in feats.words_tr[i]]
  units = analysis.top_units(maps["coupled"], min(e.n_segment_units, m.n_atoms))
  out["top_segments"] = analysis.top_segments(z_all, words, units, n_top=3)
  return out, arts


def _jsonable(d):
  return json.loads(json.dumps(d, default=lambda o: o.tolist() if hasattr(o, "tolist")
                               else str(o)))


def train_and_evaluate(config, workdir: str):
  """One seed: features (cached), responses, every method (checkpointed), metrics."""
  metrics_lib.write_config(workdir, config)
  writer = metrics_lib.MetricsWriter(workdir, config.train.steps)
  t0 = time.time()
  feats = data_lib.for_seed(data_lib.features_for(config, os.path.join(workdir, "cache")),
                           config, config.seed)
  resp = data_lib.responses_for(feats, config, config.seed)
  fit = methods.fit_all(config, feats, resp, config.seed,
                        ckpt_dir=os.path.join(workdir, f"seed{config.seed}"), writer=writer)
  out, _ = summarize(config, feats, resp, fit, config.seed)
  out["seconds"] = time.time() - t0
  scalars = {k: v for k, v in out.items() if isinstance(v, (int, float))}
  writer.write(config.train.steps, scalars, split="eval")
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(_jsonable(out), f, indent=1)
  print(" ".join(f"{k}={v:.4g}" for k, v in scalars.items() if isinstance(v, float)))
  return out


def plan(config):
  """The coupled grid's training step at the configured sizes, for `launch/plan.py`.

  The coupled (lr, beta) grid is the compute that grows with the paper's scale (every
  step predicts S x batch x V voxels through (S, n_delays * atoms, V) maps); the SAE
  grid is the same program without the maps, and the ridge baselines run in himalaya on
  the host. One step is planned (a scan of length 1: XLA counts a while loop's body
  once), and `steps` = the run's steps times the study's seeds (`study.run` trains one
  seed's grid after another, each the same program). Nothing is allocated.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jaxpapers.core import planner, sharding  # pylint: disable=g-import-not-at-top
  from jaxpapers.papers.coupled_sae import model  # pylint: disable=g-import-not-at-top
  m, t, sim = config.model, config.train, config.sim
  lrs, betas, _ = methods.grids(config)
  G, nd = len(lrs), len(config.data.delays)
  T, D, V = config.scale.train_trs, config.scale.feature_dim, 2 * sim.rows * sim.cols
  S = sim.n_subjects - 1 if (config.eval.hold_out_subject and sim.n_subjects > 1) else (
      sim.n_subjects)
  f32 = lambda *shape, dt=jnp.float32: jax.ShapeDtypeStruct(shape, dt)
  state = jax.eval_shape(lambda: model.init_state(jax.random.PRNGKey(0), D, m.n_atoms,
                                                  nd, S, V, True))
  states = jax.tree.map(lambda a: f32(G, *a.shape, dt=a.dtype), state)
  data = (f32(T, D), f32(T + 1, D), f32(nd, T, dt=jnp.int32), f32(S, T, V), f32(S, V))
  spec = model.TrainSpec(m.k, t.steps, t.batch, True)
  fn, args = sharding.spread_plan(
      model.member_run(spec, 1), states, f32(G), f32(G), data,
      jax.eval_shape(lambda: jax.random.PRNGKey(0)), f32(), f32(dt=jnp.int32),
      in_axes=model.GRID_AXES, donate_argnums=(0,))
  n_seeds = len(config.study.seeds)
  label = (f"coupled SAE grid step: {G} (lr, beta) members, {S} subjects x {V} voxels, "
           f"{T} TRs x {D} features, {m.n_atoms} atoms k={m.k}, batch {t.batch}; "
           f"{t.steps} steps x {n_seeds} seeds")
  return planner.Plan(fn, args, steps=t.steps * n_seeds, label=label)


def run_study(config, workdir: str):
  from jaxpapers.papers.coupled_sae import study  # pylint: disable=g-import-not-at-top
  return study.run(config, workdir)
