"""FlowGDA (abstract 10): the source model and the baselines, as vmappable pure functions.

- source-only: encoder + head trained on the labeled source;
- gradual self-training (Kumar et al. 2020): for each domain in order, pseudo-label it
  with the current network, drop the least confident 10 %, retrain on the rest;
- direct target self-training: the same rounds, every one on the target;
- GOAT (He et al. 2023): in the source encoder's feature space, OT maps between
  consecutive given domains, `n_gen` generated domains on the straight lines
  z + a (T(z) - z), gradual self-training of the head through generated and given domains;
- GGF (Zhuang et al. 2024): source features moved by a Wasserstein gradient flow
  simulated with Langevin steps on a target score network (denoising score matching),
  plus a rectified-flow sample-based velocity and a classifier-based sign step that
  keeps labels, the head fine-tuned on pseudo-labeled particles every `alpha` steps;
- DANN (Ganin et al. 2016): a fresh network, source cross-entropy plus a domain
  discriminator (source vs target) on the features through a gradient-reversal layer
  (the min-max), lambda ramped 2 / (1 + exp(-10 p)) - 1; options: start from the source
  model, pool every unlabeled domain as the "target" side (the first study's reading).

Every adaptation method gets the same number of gradient steps on its classifier
(`rounds * steps_per_round`) and its learning rate from the same grid.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxpapers.papers.flowgda import flow
from jaxpapers.papers.flowgda import nets
from jaxpapers.papers.flowgda import ot_pairing


def _batch(key, n, b):
  return jax.random.choice(key, n, (b,), replace=False)


def train_source(key, x_NxP, y_N, class_mask, lr, arch, steps, batch):
  """Encoder + head on the labeled source (Adam, minibatches)."""
  init_key, run_key = jax.random.split(key)
  params = nets.classifier_init(init_key, x_NxP.shape[-1], arch["hidden"], arch["feat"],
                                arch["head_hidden"], class_mask.shape[-1],
                                arch.get("conv", ()))
  opt = nets.adam(lr)
  state = opt.init(params)

  def step(carry, t):
    params, state = carry
    idx = _batch(jax.random.fold_in(run_key, t), x_NxP.shape[0], batch)
    loss, g = jax.value_and_grad(lambda p: nets.xent(
        nets.logits(p, x_NxP[idx], class_mask), y_N[idx]))(params)
    upd, state = opt.update(g, state, params)
    return (optax.apply_updates(params, upd), state), loss

  (params, _), loss = jax.lax.scan(step, (params, state), jnp.arange(steps))
  return params, loss


def self_train(key, params, apply_fn, domains_RxNxP, lr, steps, batch, drop):
  """Gradual self-training over the ordered `domains` (R, N, ...): per domain, pseudo-label
  with the current model, keep the confident 1 - drop, Adam (fresh state) for `steps`."""
  opt = nets.adam(lr)
  n = domains_RxNxP.shape[1]

  def round_(params, inp):
    r, x = inp
    yhat, w = nets.pseudo_labels(apply_fn(params, x), drop)
    state = opt.init(params)

    def step(carry, t):
      params, state = carry
      idx = _batch(jax.random.fold_in(key, r * 100003 + t), n, batch)
      g = jax.grad(lambda p: nets.xent(apply_fn(p, x[idx]), yhat[idx], w[idx]))(params)
      upd, state = opt.update(g, state, params)
      return (optax.apply_updates(params, upd), state), None

    (params, _), _ = jax.lax.scan(step, (params, state), jnp.arange(steps))
    return params, None

  params, _ = jax.lax.scan(round_, params,
                           (jnp.arange(domains_RxNxP.shape[0]), domains_RxNxP))
  return params


def goat_domains(z_DxNxF, n_gen, epsilon):
  """Given domains with `n_gen` OT-interpolated domains inserted in every gap."""
  out = []
  for k in range(z_DxNxF.shape[0] - 1):
    tz = ot_pairing.barycentric_map(z_DxNxF[k], z_DxNxF[k + 1], epsilon)
    for j in range(1, n_gen + 1):
      a = j / (n_gen + 1)
      out.append(z_DxNxF[k] + a * (tz - z_DxNxF[k]))
    out.append(z_DxNxF[k + 1])
  return jnp.stack(out)


def goat(key, head, z_DxNxF, class_mask, lr, hp):
  seq = goat_domains(z_DxNxF, hp["goat_n_gen"], hp["goat_epsilon"])
  steps = max(1, hp["steps_per_round"] // (hp["goat_n_gen"] + 1))  # same total budget
  apply_fn = lambda h, z: nets.head_logits(h, z, class_mask)  # noqa: E731
  return self_train(key, head, apply_fn, seq, lr, steps, hp["batch"], hp["drop"])


# ------------------------------------------------------------------------------ GGF

def train_score(key, zn_NxF, hp):
  """Denoising score matching on target features: s(z) ~ grad log p_sigma(z)."""
  init_key, run_key = jax.random.split(key)
  params = nets.mlp_init(init_key, (zn_NxF.shape[-1], *hp["hidden"], zn_NxF.shape[-1]))
  opt = optax.adam(hp["lr"])
  state = opt.init(params)
  sig = hp["ggf_score_sigma"]

  def step(carry, t):
    params, state = carry
    k1, k2 = jax.random.split(jax.random.fold_in(run_key, t))
    z = zn_NxF[_batch(k1, zn_NxF.shape[0], hp["batch"])]
    eps = jax.random.normal(k2, z.shape)
    g = jax.grad(lambda p: ((nets.mlp_apply(p, z + sig * eps, jax.nn.silu) + eps / sig)
                            ** 2).sum(-1).mean())(params)
    upd, state = opt.update(g, state, params)
    return (optax.apply_updates(params, upd), state), None

  (params, _), _ = jax.lax.scan(step, (params, state), jnp.arange(hp["steps"]))
  return params


def train_rectified(key, zs_NxF, zt_NxF, hp):
  """1-rectified flow between source and target features (independent coupling)."""
  init_key, run_key = jax.random.split(key)
  params = flow.velocity_init(init_key, zs_NxF.shape[-1], hp["hidden"])
  opt = optax.adam(hp["lr"])
  state = opt.init(params)
  n = zs_NxF.shape[0]

  def step(carry, t):
    params, state = carry
    k1, k2, k3 = jax.random.split(jax.random.fold_in(run_key, t), 3)
    x0, x1 = zs_NxF[_batch(k1, n, hp["batch"])], zt_NxF[_batch(k2, n, hp["batch"])]
    s = jax.random.uniform(k3, (hp["batch"],))
    zt = (1 - s[:, None]) * x0 + s[:, None] * x1
    g = jax.grad(lambda p: ((flow.velocity(p, zt, s) - (x1 - x0)) ** 2).sum(-1).mean())(
        params)
    upd, state = opt.update(g, state, params)
    return (optax.apply_updates(params, upd), state), None

  (params, _), _ = jax.lax.scan(step, (params, state), jnp.arange(hp["steps"]))
  return params


def ggf(key, head, zn_DxNxF, y_src_N, stats, class_mask, lr, hp):
  """GGF particle dynamics from the source features, head fine-tuned on the particles."""
  ks = jax.random.split(key, 4)
  score = train_score(ks[0], zn_DxNxF[-1], hp)
  rect = train_rectified(ks[1], zn_DxNxF[0], zn_DxNxF[-1], hp)
  rounds = zn_DxNxF.shape[0] - 1
  alpha = hp["ggf_alpha"]
  total = rounds * alpha
  eta1, eta2 = hp["ggf_eta_langevin"], hp["ggf_eta_classifier"]
  opt = nets.adam(lr)
  n = zn_DxNxF.shape[1]
  denorm = lambda z: flow.denorm(z, stats)  # noqa: E731

  def move(carry, i):
    z, head = carry
    k = jax.random.fold_in(ks[2], i)
    z = z + 0.5 * eta1 * nets.mlp_apply(score, z, jax.nn.silu)
    z = z + jnp.sqrt(eta1) * jax.random.normal(k, z.shape)
    z = z + flow.velocity(rect, z, jnp.full(z.shape[:1], i / total)) / total
    gz = jax.grad(lambda zz: nets.xent(nets.head_logits(head, denorm(zz), class_mask),
                                       y_src_N))(z)
    return (z - eta2 * jnp.sign(gz), head), None

  def round_(carry, r):
    carry, _ = jax.lax.scan(move, carry, r * alpha + jnp.arange(alpha))
    z, head = carry
    zd = denorm(z)
    yhat, w = nets.pseudo_labels(nets.head_logits(head, zd, class_mask), hp["drop"])
    state = opt.init(head)

    def step(c, t):
      head, state = c
      idx = _batch(jax.random.fold_in(ks[3], r * 100003 + t), n, hp["batch"])
      g = jax.grad(lambda h: nets.xent(nets.head_logits(h, zd[idx], class_mask),
                                       yhat[idx], w[idx]))(head)
      upd, state = opt.update(g, state, head)
      return (optax.apply_updates(head, upd), state), None

    (head, _), _ = jax.lax.scan(step, (head, state), jnp.arange(hp["steps_per_round"]))
    return (z, head), None

  (_, head), _ = jax.lax.scan(round_, (zn_DxNxF[0], head), jnp.arange(rounds))
  return head


# ----------------------------------------------------------------------------- DANN

@jax.custom_vjp
def grad_reverse(x, lam):
  return x


def _gr_fwd(x, lam):
  return x, lam


def _gr_bwd(lam, g):
  return (-lam * g, jnp.zeros_like(lam))


grad_reverse.defvjp(_gr_fwd, _gr_bwd)


def dann(key, params, x_DxNxP, y_src_N, class_mask, lr, hp, init_fn=None):
  """DANN (Ganin & Lempitsky 2015): feature extractor + label classifier + domain
  classifier behind a gradient-reversal layer, trained jointly (one Adam on all three,
  loss = source cross-entropy + domain cross-entropy, the reversal scaling the domain
  gradient that reaches the features by -lambda_p, lambda_p = dann_lambda (2 / (1 +
  exp(-10 p)) - 1)).

  Textbook by default (issue 44): the network starts fresh (`init_fn(key)`) and the
  discriminator tells the labeled source from the target only. Two non-textbook options
  of the first study, kept off by default: `dann_init="source"` starts from `params` (the
  shared source model), `dann_domains="pooled"` puts every unlabeled domain (the
  intermediate ones and the target) on the discriminator's "target" side.
  """
  k_net, k_disc, k_run = jax.random.split(key, 3)
  if hp.get("dann_init", "fresh") == "fresh":
    params = init_fn(k_net)
  feat = params["head"][0][0].shape[0]
  disc = nets.mlp_init(k_disc, (feat, hp["dann_disc_hidden"], 1))
  both = {"net": params, "disc": disc}
  opt = nets.adam(lr)
  state = opt.init(both)
  total = (x_DxNxP.shape[0] - 1) * hp["steps_per_round"]
  if hp.get("dann_domains", "target") == "pooled":
    unlabeled = x_DxNxP[1:].reshape(-1, *x_DxNxP.shape[2:])
  else:
    unlabeled = x_DxNxP[-1]
  n, b = x_DxNxP.shape[1], hp["batch"]

  def step(carry, t):
    both, state = carry
    k1, k2 = jax.random.split(jax.random.fold_in(k_run, t))
    i, j = _batch(k1, n, b), _batch(k2, unlabeled.shape[0], b)
    p = t / total
    lam = hp["dann_lambda"] * (2.0 / (1.0 + jnp.exp(-10.0 * p)) - 1.0)

    def loss_fn(bp):
      zs = nets.encode(bp["net"], x_DxNxP[0][i])
      zu = nets.encode(bp["net"], unlabeled[j])
      cls = nets.xent(nets.head_logits(bp["net"]["head"], zs, class_mask), y_src_N[i])
      d_in = grad_reverse(jnp.concatenate([zs, zu]), lam)
      d_logit = nets.mlp_apply(bp["disc"], d_in)[:, 0]
      d_lab = jnp.concatenate([jnp.ones(b), jnp.zeros(b)])
      adv = optax.sigmoid_binary_cross_entropy(d_logit, d_lab).mean()
      return cls + adv

    g = jax.grad(loss_fn)(both)
    upd, state = opt.update(g, state, both)
    return (optax.apply_updates(both, upd), state), None

  (both, _), _ = jax.lax.scan(step, (both, state), jnp.arange(total))
  return both["net"]


# ------------------------------------------- GST with a fresh regularised student

def l2(params):
  """Sum of squared weight matrices (biases excluded) of a network pytree."""
  return sum((w ** 2).sum() for w, _ in jax.tree.leaves(
      params, is_leaf=lambda x: isinstance(x, tuple)))


def fit_fresh(key, init_fn, apply_fn, x_NxP, y_N, w_N, lr, wd, hp):
  """A fresh network trained on (possibly pseudo-) labels with L2 weight decay `wd` and
  early stopping on a held-out part of the same labelled data (Kumar et al.'s `retrain`).

  A random `holdout` share of the rows is never trained on; every `eval_every` Adam steps
  the (weighted) cross-entropy on it is measured and the parameters with the lowest so far
  are kept (Keras' EarlyStopping on val_loss with restore_best_weights). The loss, not
  the accuracy: held-out agreement with the teacher saturates at 1 within a few dozen
  steps, and keeping the first best would return a barely trained student. Weights `w_N`
  (0/1) drop unconfident pseudo-labels from both parts.
  """
  k_init, k_perm, k_run = jax.random.split(key, 3)
  n = x_NxP.shape[0]
  n_hold = max(1, int(n * hp["holdout"]))
  perm = jax.random.permutation(k_perm, n)
  hold, train = perm[:n_hold], perm[n_hold:]
  params = init_fn(k_init)
  opt = nets.adam(lr)
  every = hp["eval_every"]

  def hold_loss(p):
    return nets.xent(apply_fn(p, x_NxP[hold]), y_N[hold], w_N[hold])

  def chunk(carry, c):
    params, state, best, best_loss = carry

    def step(inner, t):
      params, state = inner
      idx = train[_batch(jax.random.fold_in(k_run, c * every + t), train.shape[0],
                         hp["batch"])]
      g = jax.grad(lambda p: nets.xent(apply_fn(p, x_NxP[idx]), y_N[idx], w_N[idx])
                   + 0.5 * wd * l2(p))(params)
      upd, state = opt.update(g, state, params)
      return (optax.apply_updates(params, upd), state), None

    (params, state), _ = jax.lax.scan(step, (params, state), jnp.arange(every))
    loss = hold_loss(params)
    better = loss < best_loss
    best = jax.tree.map(lambda a, b: jnp.where(better, a, b), params, best)
    return (params, state, best, jnp.where(better, loss, best_loss)), None

  carry = (params, opt.init(params), params, jnp.asarray(jnp.inf))
  (_, _, best, _), _ = jax.lax.scan(chunk, carry, jnp.arange(hp["retrain_steps"] // every))
  return best


def gst_fresh(key, teacher, init_fn, apply_fn, domains_RxNxP, lr, wd, hp):
  """Gradual self-training, `retrain` variant: per domain in order, the current teacher
  pseudo-labels it (the least confident `drop` share removed), a fresh student is
  fitted to those labels (`fit_fresh`) and becomes the next teacher."""

  def round_(teacher, inp):
    r, x = inp
    yhat, w = nets.pseudo_labels(apply_fn(teacher, x), hp["drop"])
    return fit_fresh(jax.random.fold_in(key, r), init_fn, apply_fn, x, yhat, w, lr, wd,
                     hp), None

  student, _ = jax.lax.scan(round_, teacher,
                            (jnp.arange(domains_RxNxP.shape[0]), domains_RxNxP))
  return student


def linear_init(key, in_dim, num_classes):
  """Multinomial logistic regression as a classifier pytree (identity encoder)."""
  w = jax.random.normal(key, (in_dim, num_classes)) * jnp.sqrt(1.0 / in_dim)
  return {"enc": [], "head": [(w, jnp.zeros((num_classes,)))]}


def gst_from_source(key, init_fn, apply_fn, x_src_NxP, y_src_N, domains_RxNxP, lr, wd,
                    hp):
  """Kumar et al.'s whole pipeline: the source model is itself a fresh, regularised,
  early-stopped network (the same lr and weight decay), then `gst_fresh` over the
  domains. As in their code, the source model and every student share one recipe."""
  k0, k1 = jax.random.split(key)
  src = fit_fresh(k0, init_fn, apply_fn, x_src_NxP, y_src_N,
                  jnp.ones(y_src_N.shape, jnp.float32), lr, wd, hp)
  return gst_fresh(k1, src, init_fn, apply_fn, domains_RxNxP, lr, wd, hp)


def gst_linear(key, x_src_NxP, y_src_N, domains_RxNxP, class_mask, lr, wd, hp):
  """Linear gradual self-training (Kumar et al.'s theory setting): `gst_from_source`
  with multinomial logistic regression students."""
  init_fn = lambda k: linear_init(k, x_src_NxP.shape[-1], class_mask.shape[-1])  # noqa: E731
  apply_fn = lambda p, x: nets.logits(p, x, class_mask)  # noqa: E731
  return gst_from_source(key, init_fn, apply_fn, x_src_NxP, y_src_N, domains_RxNxP, lr,
                         wd, hp)


def goat_fresh(key, head, z_DxNxF, y_src_N, class_mask, lr, wd, hp):
  """GOAT on top of the fresh-student GST: the same generated domains (OT between
  consecutive domains in the frozen source encoder's space); a fresh regularised head
  fitted on the labeled source features, then a fresh head per generated or given domain
  (`gst_from_source` in feature space)."""
  seq = goat_domains(z_DxNxF, hp["goat_n_gen"], hp["goat_epsilon"])
  feat, hid = z_DxNxF.shape[-1], head[0][0].shape[1]
  init_fn = lambda k: nets.mlp_init(k, (feat, hid, class_mask.shape[-1]))  # noqa: E731
  apply_fn = lambda h, z: nets.head_logits(h, z, class_mask)  # noqa: E731
  hp = dict(hp, retrain_steps=hp["goat_retrain_steps"])
  return gst_from_source(key, init_fn, apply_fn, z_DxNxF[0], y_src_N, seq, lr, wd, hp)
