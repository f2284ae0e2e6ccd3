"""Two-stage training of LMI-certified neural network observers: user trajectories.

A CSV with a header row: `t`, the inputs `u0..u{nu-1}`, the measurements
`y0..y{ny-1}` and optionally the true extended state `z0..z{nz-1}` (states then
disturbances) for scoring; rows sampled every dt (the observer's RK4 step). The certified
observer runs on it from zhat_0 = pinv(Cbar) y_0.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.papers.neural_observer import observer


def load_csv(path: str, plant, dt: float) -> dict:
  if not os.path.exists(path):
    raise FileNotFoundError(f"trajectory CSV {path} not found; write one with columns "
                            f"t,u0..,y0..[,z0..] (see the neural_observer README)")
  with open(path) as f:
    header = [h.strip() for h in f.readline().strip().split(",")]
  data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
  if data.shape[1] != len(header):
    raise ValueError(f"{path}: {data.shape[1]} columns but {len(header)} header names")
  col = {h: i for i, h in enumerate(header)}
  need = ["t"] + [f"u{i}" for i in range(plant.nu)] + [f"y{i}" for i in range(plant.ny)]
  missing = [h for h in need if h not in col]
  if missing:
    raise ValueError(f"{path}: missing columns {', '.join(missing)} for plant "
                     f"{plant.name} (needs {', '.join(need)})")
  if not np.all(np.isfinite(data)):
    raise ValueError(f"{path}: non-finite values in the trajectory")
  t = data[:, col["t"]]
  if len(t) > 1 and not np.allclose(np.diff(t), dt, rtol=1e-3, atol=1e-9):
    raise ValueError(f"{path}: rows must be sampled every dt={dt} (the observer step)")
  out = dict(t=t, u=data[:, [col[f"u{i}"] for i in range(plant.nu)]],
             y=data[:, [col[f"y{i}"] for i in range(plant.ny)]])
  if all(f"z{i}" in col for i in range(plant.nz)):
    out["z"] = data[:, [col[f"z{i}"] for i in range(plant.nz)]]
  return out


def write_csv(path: str, t, u, y, z=None) -> None:
  cols = [t[:, None], u, y] + ([z] if z is not None else [])
  names = (["t"] + [f"u{i}" for i in range(u.shape[1])] + [f"y{i}" for i in range(y.shape[1])]
           + ([f"z{i}" for i in range(z.shape[1])] if z is not None else []))
  np.savetxt(path, np.concatenate(cols, 1), delimiter=",", header=",".join(names),
             comments="")


def estimate(prob, trainer, params, traj) -> dict:
  plant = prob.plant
  zhat0 = jnp.asarray(np.linalg.pinv(plant.Cbar) @ traj["y"][0], jnp.float32)
  f = observer.field(plant, prob.L, params, prob.s_z, prob.s_y)
  zhat = jax.jit(lambda z0, u, y: observer.rollout(f, z0, u, y, prob.dt))(
      zhat0, jnp.asarray(traj["u"], jnp.float32), jnp.asarray(traj["y"], jnp.float32))
  out = dict(zhat=np.asarray(zhat))
  if "z" in traj:
    err = out["zhat"] - traj["z"]
    out["rmse_x"] = float(np.sqrt(np.mean(err[:, :plant.nx] ** 2)))
    out["rmse_d"] = float(np.sqrt(np.mean(err[:, plant.nx:] ** 2)))
  return out


def write_estimates(path: str, traj, zhat) -> None:
  names = ["t"] + [f"zhat{i}" for i in range(zhat.shape[1])]
  np.savetxt(path, np.concatenate([traj["t"][:, None], zhat], 1), delimiter=",",
             header=",".join(names), comments="")
