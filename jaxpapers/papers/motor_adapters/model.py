"""Motor primitives as adapters of a shared recurrent core (abstract 7): the networks.

Three controllers share one GRU core design (hidden size H) and one readout to the six
muscle excitations (sigmoid, as MotorNet's policies):

* `adapters`: the paper's model. A bank of K residual adapters perturbs the core's
  recurrent update, n = tanh(W_x x + r * (W_h h + b_hn) + b_n + h A_k + x B_k + c_k):
  adapter k adds a connectivity perturbation A_k (H x H) to the recurrence (plus an input
  perturbation B_k and bias c_k). No rank constraint; A, B, c start at zero so every
  adapter starts as the bare core. Which adapter runs is a discrete latent code: a
  learned table of logits per primitive, started non-informative (zero plus tiny noise,
  so every adapter is equally likely), sampled with straight-through Gumbel-softmax
  (Jang et al. 2017) with an annealed temperature in training (the forward pass is
  exactly one-hot) and the argmax at evaluation. A mixture-of-experts load-balancing
  term (`balance_loss`, after the Switch Transformer's, Fedus et al. 2021) keeps
  primitives from collapsing onto one adapter.
* `lowrank`: the same bank with [A_k; B_k] = U_k V_k of rank R (the explicit low-rank
  reference of low-rank RNN theory, Mastrogiuseppe & Ostojic 2018); V starts at zero.
* `multitask`: no adapters; the one-hot task input is appended to the core's input
  (Yang et al. 2019's rule inputs), same H.

The high-level policy (`policy_logits`) maps the stroke a segment should draw (its
target points) to logits over options: adapters for the adapter models, task inputs for
the multitask baseline. It is trained with the controller frozen (training.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

KINDS = ("adapters", "lowrank", "multitask")


def kind_id(kind: str) -> int:
  if kind not in KINDS:
    raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(KINDS)}")
  return KINDS.index(kind)


def init(key, kind: str, in_dim: int, hidden: int, n_adapters: int, n_tasks: int,
         rank: int, code_noise: float):
  """Parameters of one controller in the layout shared by all three kinds.

  All kinds carry the same pytree so that every (kind, seed, learning rate) lane runs in
  one vmapped program: a kind's unused leaves are zero (or multiply a zero input) and
  `grad_mask` keeps their gradient at zero, so they never move. The option input of the
  core (width K) is the task one-hot for `multitask` and zero otherwise.
  """
  kid = kind_id(kind)
  if n_tasks > n_adapters:
    raise ValueError(f"need at least as many adapters ({n_adapters}) as primitives "
                     f"({n_tasks}): the multitask baseline's task input shares that width")
  ks = jax.random.split(key, 8)
  d = in_dim + n_adapters
  glorot = lambda k, shape: (jax.random.normal(k, shape) *  # noqa: E731
                             jnp.sqrt(2.0 / (shape[-2] + shape[-1])))
  # Orthogonal recurrent init (per gate), the usual GRU choice.
  wh = jnp.concatenate([jax.nn.initializers.orthogonal()(k, (hidden, hidden))
                        for k in jax.random.split(ks[1], 3)], axis=1)
  p = {"core": {"wx": glorot(ks[0], (d, 3 * hidden)), "wh": wh,
                "b": jnp.zeros((3 * hidden,)), "bhn": jnp.zeros((hidden,))},
       # Small readout and a negative bias: the arm starts with low co-contraction.
       "out": {"w": 0.1 * glorot(ks[2], (hidden, 6)), "b": jnp.full((6,), -2.0)},
       "bank": {"a": jnp.zeros((n_adapters, hidden, hidden)),
                "b": jnp.zeros((n_adapters, in_dim, hidden)),
                # c_k plays the role of the baseline's task-input embedding (same
                # scale as its rows of wx) so that adapters are told apart from step 0
                "c": glorot(ks[5], (d, 3 * hidden))[:n_adapters, :hidden]
                     * (kid != 2),
                # low-rank factors: U random, V zero (so U V starts at zero)
                "u": (jax.random.normal(ks[3], (n_adapters, hidden + in_dim, rank))
                      / jnp.sqrt(hidden + in_dim)) * (kid == 1),
                "v": jnp.zeros((n_adapters, rank, hidden))},
       # Code logits start non-informative: every adapter equally likely for every
       # primitive, up to noise of std `code_noise` that only breaks argmax ties. The
       # assignment is learned (straight-through gradient + load balancing, training.py).
       "code": code_noise * jax.random.normal(ks[6], (n_tasks, n_adapters))
               * (kid != 2)}
  return jax.tree.map(lambda x: x.astype(jnp.float32), p)


def grad_mask(params, kid):
  """Multipliers (0/1) that freeze the leaves a kind does not use (kid traced)."""
  kid = jnp.asarray(kid)
  full, low, mt = (kid == 0), (kid == 1), (kid == 2)
  one = lambda x, on: jnp.broadcast_to(on.astype(x.dtype), x.shape)  # noqa: E731
  core = jax.tree.map(lambda x: one(x, jnp.bool_(True)), params["core"])
  out = jax.tree.map(lambda x: one(x, jnp.bool_(True)), params["out"])
  bank = {"a": one(params["bank"]["a"], full), "b": one(params["bank"]["b"], full),
          "c": one(params["bank"]["c"], ~mt), "u": one(params["bank"]["u"], low),
          "v": one(params["bank"]["v"], low)}
  return {"core": core, "out": out, "bank": bank, "code": one(params["code"], ~mt)}


def adapter_matrices(params, in_dim: int):
  """(A (K, H, H), B (K, D, H)): each adapter's recurrent and input perturbation
  (the full-rank leaves plus the low-rank product; one of the two is zero)."""
  bank = params["bank"]
  hidden = bank["a"].shape[-1]
  low = jnp.einsum("kir,krh->kih", bank["u"], bank["v"])
  return bank["a"] + low[:, :hidden], bank["b"] + low[:, hidden:hidden + in_dim]


def segment_inputs(params, kid, option, in_dim: int):
  """What one segment's option does: (A_k, B_k, c_k, task input), contracted once per
  segment (the forward pass runs exactly one adapter when `option` is one-hot)."""
  a, b = adapter_matrices(params, in_dim)
  mt = jnp.asarray(kid == 2, option.dtype)
  return (jnp.einsum("k,kij->ij", option, a), jnp.einsum("k,kij->ij", option, b),
          option @ params["bank"]["c"], option * mt)


def option_mask(kid, n_options: int, n_tasks: int):
  """Additive logit mask: the multitask baseline's options are its n_tasks task inputs."""
  return jnp.where((kid == 2) & (jnp.arange(n_options) >= n_tasks), -1e9, 0.0)


def gumbel_straight_through(key, logits, temperature: float):
  """One-hot sample in the forward pass, softmax((logits + g) / T) gradient."""
  g = jax.random.gumbel(key, logits.shape)
  soft = jax.nn.softmax((logits + g) / temperature, axis=-1)
  hard = jax.nn.one_hot(jnp.argmax(soft, axis=-1), logits.shape[-1], dtype=soft.dtype)
  return hard + soft - jax.lax.stop_gradient(soft)


def balance_loss(logits):
  """Load balancing of the code in the form of the Switch Transformer's auxiliary loss
  (Fedus et al. 2021, eq. 4: K * sum_k f_k P_k) with an expert capacity of one
  primitive per adapter: f_k is the fraction of primitives *over* adapter k's capacity,
  max(n_k - 1, 0) / N with n_k the primitives whose code (argmax) is k (no gradient),
  and P_k the mean probability softmax(logits)_k over primitives. logits (N, K).

  Its gradient lowers the probability of crowded adapters (mass moves to each crowded
  primitive's next choices) and is exactly zero once no two primitives share an
  adapter: with K > N the plain Switch form keeps pulling every primitive towards the
  idle adapters, and the code never settled in our runs (README)."""
  k = logits.shape[-1]
  count = jax.nn.one_hot(jnp.argmax(logits, -1), k).sum(0)
  over = jax.lax.stop_gradient(jnp.maximum(count - 1.0, 0.0) / logits.shape[0])
  p = jax.nn.softmax(logits, axis=-1).mean(0)
  return k * jnp.sum(over * p)


def hard_code(logits):
  """The evaluation code: exactly one-hot (argmax)."""
  return jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1])


def gru_step(core, h, x, pert):
  """GRU update; `pert` (H,) is added to the candidate pre-activation."""
  hidden = h.shape[-1]
  gx = x @ core["wx"] + core["b"]
  gh = h @ core["wh"]
  r = jax.nn.sigmoid(gx[:hidden] + gh[:hidden])
  z = jax.nn.sigmoid(gx[hidden:2 * hidden] + gh[hidden:2 * hidden])
  n = jnp.tanh(gx[2 * hidden:] + r * (gh[2 * hidden:] + core["bhn"]) + pert)
  return (1 - z) * n + z * h


def controller_step(params, seg, h, x):
  """One network step with the segment's (A_k, B_k, c_k, task input). -> (h', u)."""
  a_k, b_k, c_k, task_in = seg
  h = gru_step(params["core"], h, jnp.concatenate([x, task_in]), h @ a_k + x @ b_k + c_k)
  u = jax.nn.sigmoid(h @ params["out"]["w"] + params["out"]["b"])
  return h, u


def policy_init(key, in_dim: int, hidden: int, n_out: int):
  k1, k2 = jax.random.split(key)
  return {"w1": jax.random.normal(k1, (in_dim, hidden)) / jnp.sqrt(in_dim),
          "b1": jnp.zeros((hidden,)),
          "w2": 0.01 * jax.random.normal(k2, (hidden, n_out)),
          "b2": jnp.zeros((n_out,))}


def policy_logits(pp, features):
  lead = (1,) * (features.ndim - 1)
  hid = jnp.tanh(features @ pp["w1"] + pp["b1"].reshape(lead + (-1,)))
  return hid @ pp["w2"] + pp["b2"].reshape(lead + (-1,))


def used_param_count(params, kind: str, n_tasks: int, in_dim: int) -> int:
  """Parameters a kind actually uses (not the shared padded layout)."""
  h = params["core"]["wh"].shape[0]
  k = params["bank"]["a"].shape[0]
  r = params["bank"]["u"].shape[-1]
  core = 3 * h * (in_dim + h) + 3 * h + h + h * 6 + 6
  if kind == "multitask":
    return core + 3 * h * n_tasks
  bank = k * (h * h + in_dim * h + h) if kind == "adapters" else k * ((h + in_dim) * r + r * h + h)
  return core + bank + n_tasks * k
