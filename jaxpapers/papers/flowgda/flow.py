"""FlowGDA (abstract 10): flow matching between ordered domains in representation space.

The velocity field v(z, t) is one MLP over the whole path t in [0, 1]; domain k sits at
t_k = k / (D-1). It is learned by simulation-free regression (conditional flow matching,
Lipman et al. 2023; Tong et al. 2023) from three terms:

- left-to-right transport (`cons`): z_k ~ domain k, z_{k+1} ~ domain k+1 paired by
  minibatch OT, z_t = (1-s) z_k + s z_{k+1} + sigma eps at t = t_k + s / (D-1), target
  velocity (z_{k+1} - z_k) (D-1);
- source-anchored transport (`anchor`): labeled source z_0 paired by OT with domain k,
  z_t = (1-s) z_0 + s z_k at t = s t_k, target velocity (z_k - z_0) / t_k; the flow
  from the source then reaches every domain directly, so errors of consecutive steps do
  not accumulate along the path. Second reading (`anchor_flow`): the source points are
  carried by the current flow to t_{k-1} and paired with domain k there, the regression
  on that gap only, which agrees with the consecutive term instead of cutting the chord;
- semantic consistency (`sem`): on the anchored samples the flow's estimate of the
  source point, z_t - t v(z_t, t) (exact for the straight conditional path), must keep
  the label of its source partner under the frozen source head; a velocity field that
  carries points across class boundaries is penalised.

Two-stage sequential optimisation: stage 1 fits the regression terms alone (their
targets do not depend on the network, so this is stable from a random start); stage 2
adds the semantic term, whose gradient is only meaningful once v is roughly right.
The classifier is then adapted along the learned continuous trajectory: the labeled
source features are integrated through the flow (midpoint rule) and the head is trained
on the moving, labeled particles at every integration step.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxpapers.papers.flowgda import nets
from jaxpapers.papers.flowgda import ot_pairing

N_FREQ = 4  # sinusoidal time features: sin/cos(2^f pi t), f < N_FREQ


def denorm(z, stats):
  """Standardised features back to the encoder's scale (stats = source mean, std)."""
  return z * nets.lift(stats[1], z) + nets.lift(stats[0], z)


def time_features(t_B):
  f = (2.0 ** jnp.arange(N_FREQ)) * jnp.pi
  tf = t_B[:, None] * f[None, :]
  return jnp.concatenate([t_B[:, None], jnp.sin(tf), jnp.cos(tf)], -1)


def velocity_init(key, dim, hidden):
  return nets.mlp_init(key, (dim + 1 + 2 * N_FREQ, *hidden, dim))


def velocity(params, z_BxD, t_B):
  return nets.mlp_apply(params, jnp.concatenate([z_BxD, time_features(t_B)], -1),
                        act=jax.nn.silu)


def losses(params, key, zn_DxNxF, y_src_N, head0, stats, class_mask, hp, vel=None):
  """The three flow-matching terms on one minibatch; `hp` holds batch, sigma, epsilon,
  use_ot (0/1, traced). zn are features standardised by source statistics (`stats`).
  `vel(params, z, t)` is the velocity field (default: the MLP `velocity`; the tests pass
  a closed-form field)."""
  vel = velocity if vel is None else vel
  d, n, _ = zn_DxNxF.shape
  b = hp["batch"]
  ks = jax.random.split(key, 10)
  gap = 1.0 / (d - 1)

  # Left-to-right: a random consecutive pair of domains per minibatch.
  k = jax.random.randint(ks[0], (), 0, d - 1)
  x0 = zn_DxNxF[k][jax.random.choice(ks[1], n, (b,), replace=False)]
  x1 = zn_DxNxF[k + 1][jax.random.choice(ks[2], n, (b,), replace=False)]
  x1 = ot_pairing.pair(ks[3], x0, x1, hp["epsilon"], hp["use_ot"])
  s = jax.random.uniform(ks[4], (b,))
  zt = (1 - s[:, None]) * x0 + s[:, None] * x1 + hp["sigma"] * jax.random.normal(
      ks[5], x0.shape)
  u = (x1 - x0) / gap
  cons = ((vel(params, zt, (k + s) * gap) - u) ** 2).sum(-1).mean()

  # Source-anchored: labeled source points paired with a random later domain.
  j = jax.random.randint(ks[6], (), 1, d)
  ia = jax.random.choice(ks[7], n, (b,), replace=False)
  a0, ya = zn_DxNxF[0][ia], y_src_N[ia]
  a1 = zn_DxNxF[j][jax.random.choice(ks[8], n, (b,), replace=False)]
  a1 = ot_pairing.pair(ks[9], a0, a1, hp["epsilon"], hp["use_ot"])
  tj = j * gap
  s2 = jax.random.uniform(jax.random.fold_in(key, 1), (b,))
  at = (1 - s2[:, None]) * a0 + s2[:, None] * a1 + hp["sigma"] * jax.random.normal(
      jax.random.fold_in(key, 2), a0.shape)
  ta = s2 * tj
  va = vel(params, at, ta)
  chord = ((va - (a1 - a0) / tj) ** 2).sum(-1).mean()

  # Anchored on the integrated flow (`anchor_flow` = 1): the same source points carried by
  # the current flow (no gradient through it) to t_{j-1}, paired by OT with domain j and
  # regressed on that one gap like the consecutive term, so both terms ask for the same
  # velocity wherever the flow already lands on domain j-1.
  fk = lambda i: jax.random.fold_in(key, 3 + i)  # noqa: E731
  p0 = jax.lax.stop_gradient(
      carry_to(params, a0, j - 1, d, hp["anchor_substeps"], vel))
  p1 = zn_DxNxF[j][jax.random.choice(fk(0), n, (b,), replace=False)]
  p1 = ot_pairing.pair(fk(1), p0, p1, hp["epsilon"], hp["use_ot"])
  s3 = jax.random.uniform(fk(2), (b,))
  pt = (1 - s3[:, None]) * p0 + s3[:, None] * p1 + hp["sigma"] * jax.random.normal(
      fk(3), p0.shape)
  along = ((vel(params, pt, (j - 1 + s3) * gap) - (p1 - p0) / gap) ** 2).sum(-1).mean()
  m = hp["anchor_flow"]
  anchor = (1 - m) * chord + m * along

  # Semantic consistency: the flow's source estimate keeps its partner's label.
  src_hat = at - ta[:, None] * va
  sem = nets.xent(nets.head_logits(head0, denorm(src_hat, stats), class_mask), ya)
  return {"cons": cons, "anchor": anchor, "sem": sem}


def carry_to(params, z_BxF, k, d, sub, vel=None):
  """Midpoint integration of the flow from t = 0 over the first k of the d - 1 domain gaps
  (`sub` steps per gap); k may be traced: steps past it leave z unchanged."""
  vel = velocity if vel is None else vel
  h = 1.0 / ((d - 1) * sub)

  def body(i, z):
    tb = jnp.full(z.shape[:1], i * h)
    zm = z + 0.5 * h * vel(params, z, tb)
    return jnp.where(i < k * sub, z + h * vel(params, zm, tb + 0.5 * h), z)

  return jax.lax.fori_loop(0, (d - 2) * sub, body, z_BxF)


def velocity_update(params, state, t, run_key, zn_DxNxF, y_src_N, head0, stats,
                    class_mask, weights, hp):
  """One two-stage Adam update of v at step t (the body of `train_velocity`'s scan)."""
  opt = optax.adam(hp["lr"])
  hpw = dict(hp, use_ot=weights["use_ot"], anchor_flow=weights["anchor_flow"])

  def loss_fn(p):
    parts = losses(p, jax.random.fold_in(run_key, t), zn_DxNxF, y_src_N, head0, stats,
                   class_mask, hpw)
    on2 = (t >= weights["stage2_start"]).astype(jnp.float32)
    total = (weights["cons"] * parts["cons"] + weights["anchor"] * parts["anchor"]
             + on2 * weights["sem"] * parts["sem"])
    return total, parts
  (loss, parts), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
  upd, state = opt.update(g, state, params)
  return optax.apply_updates(params, upd), state, dict(parts, loss=loss)


def velocity_start(key, feat, hp):
  """(initial params, Adam state, the key of the run's minibatches) of `train_velocity`."""
  init_key, run_key = jax.random.split(key)
  params = velocity_init(init_key, feat, hp["hidden"])
  return params, optax.adam(hp["lr"]).init(params), run_key


def train_velocity(key, zn_DxNxF, y_src_N, head0, stats, class_mask, weights, hp):
  """Trains v with the two-stage scheme; `weights` = (w_cons, w_anchor, w_sem, use_ot,
  stage2_start) as traced values so ablations are lanes of one vmapped program."""
  params, state, run_key = velocity_start(key, zn_DxNxF.shape[-1], hp)

  def step(carry, t):
    params, state, hist = velocity_update(*carry, t, run_key, zn_DxNxF, y_src_N, head0,
                                          stats, class_mask, weights, hp)
    return (params, state), hist

  (params, _), hist = jax.lax.scan(step, (params, state), jnp.arange(hp["steps"]))
  return params, hist


def integrate(params, z_NxF, t0, t1, n_steps):
  """Midpoint-rule ODE integration of dz/dt = v(z, t) from t0 to t1; returns all states."""
  h = (t1 - t0) / n_steps

  def step(z, i):
    t = t0 + i * h
    tb = jnp.full(z.shape[:1], t)
    zm = z + 0.5 * h * velocity(params, z, tb)
    z = z + h * velocity(params, zm, tb + 0.5 * h)
    return z, z

  _, zs = jax.lax.scan(step, z_NxF, jnp.arange(n_steps))
  return zs


def adapt_head(key, vparams, zn_src_NxF, y_src_N, head0, stats, class_mask, lr,
               n_int, steps_per_int, batch):
  """Trains the head on source particles carried along the flow (labels preserved).

  n_int midpoint steps cover t in [0, 1]; after each, `steps_per_int` Adam steps on
  minibatches of the moved particles. The optimiser state persists along the path.
  """
  zs = integrate(vparams, zn_src_NxF, 0.0, 1.0, n_int)  # (n_int, N, F)
  zs = denorm(zs, stats)
  opt = nets.adam(lr)
  state = opt.init(head0)
  n = zn_src_NxF.shape[0]

  def outer(carry, inp):
    i, z = inp
    def inner(carry, j):
      head, state = carry
      idx = jax.random.choice(jax.random.fold_in(key, i * 100003 + j), n, (batch,),
                              replace=False)
      g = jax.grad(lambda h: nets.xent(nets.head_logits(h, z[idx], class_mask),
                                       y_src_N[idx]))(head)
      upd, state = opt.update(g, state, head)
      return (optax.apply_updates(head, upd), state), None
    carry, _ = jax.lax.scan(inner, carry, jnp.arange(steps_per_int))
    return carry, None

  (head, _), _ = jax.lax.scan(outer, (head0, state), (jnp.arange(n_int), zs))
  return head, zs
