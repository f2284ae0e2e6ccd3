"""Multisubject coupled SAE (abstract 1): the TopK sparse autoencoder and its coupling.

One shared TopK SAE (Gao et al. 2024, "Scaling and evaluating sparse autoencoders") over
TR-level LM features x: z = ReLU(TopK(W_enc (x - b_pre) + b_enc)), x_hat = z D + b_pre,
with unit-norm decoder rows D (normalized in the forward pass) and the encoder
initialized to the decoder's transpose. The coupling: every subject s predicts its voxels
from the FIR-delayed codes through its own atom-to-voxel map,
y_s(t) = sum_d z(t - d) M_s[d] + c_s (subjects with fewer voxels are zero-padded to the
widest and masked out of the loss), and the loss is
    FVU(x, x_hat) + beta * [mean_s MSE(y_s, y_hat_s) + alpha/T * mean_{s,v} |M_s[:, v]|^2],
trained jointly (encoder, decoder and all maps) with Adam on random minibatches of TRs.
beta = 0 is the plain SAE of the two-stage baseline (its maps are then fitted by ridge).
Training runs as one `lax.scan` over steps, vmapped over a grid of (lr, beta) and split
over the devices (`core.sharding.spread`), so the whole hyper-parameter grid of a seed
is one compiled program; every member sees the same
minibatches (drawn from fold_in(data_key, step)) and the same initialization.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import sharding


def topk_relu(pre_xA, k: int):
  """Keeps the k largest pre-activations of each row (ReLU after), zeros elsewhere."""
  vals, idx = jax.lax.top_k(pre_xA, k)
  onehot = jax.nn.one_hot(idx, pre_xA.shape[-1], dtype=pre_xA.dtype)
  return jnp.einsum("...k,...ka->...a", jax.nn.relu(vals), onehot)


def init_sae(key, d: int, n_atoms: int) -> dict:
  w = jax.random.normal(key, (n_atoms, d))
  w = w / jnp.linalg.norm(w, axis=1, keepdims=True)
  return {"w_enc": w.T, "b_enc": jnp.zeros((n_atoms,)), "w_dec": w, "b_pre": jnp.zeros((d,))}


def decoder(p):
  return p["w_dec"] / (jnp.linalg.norm(p["w_dec"], axis=1, keepdims=True) + 1e-8)


def _lead(v, ndim: int):
  """A bias with explicit leading unit axes (tests run with rank promotion 'raise')."""
  return v.reshape((1,) * (ndim - v.ndim) + v.shape)


def encode(p, x_xD, k: int):
  pre = (x_xD - _lead(p["b_pre"], x_xD.ndim)) @ p["w_enc"]
  return topk_relu(pre + _lead(p["b_enc"], pre.ndim), k)


def decode(p, z_xA):
  return z_xA @ decoder(p) + _lead(p["b_pre"], z_xA.ndim)


def delayed_codes(p, x_pad_TxD, prev_NxB, k: int):
  """(B, n_delays * A) codes at t - d for each delay d; zero before the story starts.

  `x_pad` has one extra all-zero row at index T; `prev[d, b]` is the row of TR b's d-th
  delay in the same story, or T when that falls before the story's start.
  """
  T = x_pad_TxD.shape[0] - 1
  z = encode(p, x_pad_TxD[prev_NxB], k)                        # (N, B, A)
  z = z * (prev_NxB < T)[..., None].astype(z.dtype)
  return jnp.moveaxis(z, 0, 1).reshape(prev_NxB.shape[1], -1)   # delay-major features


def predict_brain(maps, z_del_BxF):
  """maps = {"m": (S, F, V), "c": (S, V)} -> (S, B, V)."""
  return jnp.einsum("bf,sfv->sbv", z_del_BxF, maps["m"]) + maps["c"][:, None, :]


def init_maps(n_subjects: int, n_feat: int, n_vox: int) -> dict:
  return {"m": jnp.zeros((n_subjects, n_feat, n_vox)), "c": jnp.zeros((n_subjects, n_vox))}


@dataclasses.dataclass(frozen=True)
class TrainSpec:
  k: int
  steps: int
  batch: int
  coupled: bool      # False: reconstruction only (the SAE of the two-stage baseline)


def loss_fn(params, batch, beta, map_alpha, spec: TrainSpec):
  x, x_pad, prev, y, vmask, idx = batch
  xb = x[idx]
  z = encode(params["sae"], xb, spec.k)
  recon = jnp.mean((decode(params["sae"], z) - xb) ** 2) / (jnp.mean(xb ** 2) + 1e-8)
  out = {"recon_fvu": recon, "l0": jnp.mean(jnp.sum(z > 0, axis=-1))}
  total = recon
  if spec.coupled:
    zd = delayed_codes(params["sae"], x_pad, prev[:, idx], spec.k)
    pred = predict_brain(params["maps"], zd)
    # Subjects with fewer voxels than the widest are zero-padded; `vmask` (S, V) marks real
    # voxels, so a padded column gets no gradient (its map stays at its zero init) and the
    # means run over real voxels only: the loss is the one of the unpadded subjects.
    n_real = jnp.sum(vmask)
    brain = jnp.sum(vmask[:, None, :] * (pred - y[:, idx]) ** 2) / (idx.shape[0] * n_real)
    # Per voxel, brain + penalty is the minibatch estimate of the ridge objective
    # (|y - Z M|^2 + alpha |M|^2) / T, so `map_alpha` is on the scale of a ridge alpha.
    ridge = map_alpha / x.shape[0] * jnp.sum(
        vmask * jnp.sum(params["maps"]["m"] ** 2, axis=1)) / n_real
    total = total + beta * (brain + ridge)
    out["brain_mse"] = brain
  out["loss"] = total
  return total, out


def init_state(key, d: int, n_atoms: int, n_delays: int, n_subjects: int, n_vox: int,
               coupled: bool):
  params = {"sae": init_sae(key, d, n_atoms)}
  if coupled:
    params["maps"] = init_maps(n_subjects, n_delays * n_atoms, n_vox)
  return {"params": params, "opt": optax.scale_by_adam().init(params)}


def _one_step(spec: TrainSpec, adam):
  def one_step(state, lr, beta, data, data_key, map_alpha, step):
    x, x_pad, prev, y, vmask = data
    idx = jax.random.randint(jax.random.fold_in(data_key, step), (spec.batch,), 0,
                             x.shape[0])
    grads, m = jax.grad(loss_fn, has_aux=True)(state["params"],
                                              (x, x_pad, prev, y, vmask, idx),
                                              beta, map_alpha, spec)
    upd, opt = adam.update(grads, state["opt"], state["params"])
    params = jax.tree.map(lambda p, u: p - lr * u, state["params"], upd)
    return {"params": params, "opt": opt}, m
  return one_step


def member_run(spec: TrainSpec, n: int):
  """`run(state, lr, beta, data, data_key, map_alpha, start)` of ONE grid member.

  Steps start..start+n-1 in one scan; the minibatch of step s is drawn from
  fold_in(data_key, s), identically for every member, so a run split in chunks
  (checkpoint, resume) equals one long run. Returns (state, metrics with a leading step
  axis).
  """
  one_step = _one_step(spec, optax.scale_by_adam())

  def run(state, lr, beta, data, data_key, map_alpha, start):
    def body(state, step):
      return one_step(state, lr, beta, data, data_key, map_alpha, step)
    return jax.lax.scan(body, state, start + jnp.arange(n))
  return run


# The grid axis (states, lrs, betas) is mapped; data, key, penalty and start are shared.
GRID_AXES = (0, 0, 0, None, None, None, None)


@functools.lru_cache(maxsize=None)
def make_train(spec: TrainSpec, n: int):
  """Returns `run(states, lrs, betas, data, data_key, map_alpha, start)` over the grid.

  `states` carry a leading grid axis G; `lrs`, `betas` are (G,). The grid goes through
  `core.sharding.spread`: members are split over every device (one device: the plain
  `jax.vmap`), the data replicated. Metrics come back as (G, n) per key. The states are
  donated: each chunk's output states are the next chunk's input, so the new states
  reuse the old ones' memory (spread copies any states it did not return itself).
  """
  return sharding.spread(member_run(spec, n), in_axes=GRID_AXES, donate_argnums=(0,))


def prev_index(story_lengths, delays) -> np.ndarray:
  """(n_delays, T) row of t - d inside the same story, else T (the zero row)."""
  T = int(sum(story_lengths))
  out = np.full((len(delays), T), T, np.int32)
  start = 0
  for L in story_lengths:
    for i, d in enumerate(delays):
      t = np.arange(L)
      ok = (t - d >= 0) & (t - d < L)
      out[i, start + t[ok]] = start + t[ok] - d
    start += L
  return out


def pad_rows(x_TxD):
  return jnp.concatenate([x_TxD, jnp.zeros((1, x_TxD.shape[1]), x_TxD.dtype)], axis=0)


@functools.partial(jax.jit, static_argnums=3)
def codes_all(sae_params, x_TxD, prev_NxT, k: int):
  """Codes of every TR and their delayed stack, for evaluation (no minibatching)."""
  z = encode(sae_params, x_TxD, k)
  zd = delayed_codes(sae_params, pad_rows(x_TxD), prev_NxT, k)
  return z, zd


@functools.partial(jax.jit, static_argnums=3)
def predict_all(params, x_TxD, prev_NxT, k: int):
  """(codes (T, A), brain predictions (S, T, V)) of a coupled model on whole stories."""
  z, zd = codes_all(params["sae"], x_TxD, prev_NxT, k)
  return z, predict_brain(params["maps"], zd)


@functools.partial(jax.jit, static_argnums=2)
def reconstruct(sae_params, x_TxD, k: int):
  return decode(sae_params, encode(sae_params, x_TxD, k))
