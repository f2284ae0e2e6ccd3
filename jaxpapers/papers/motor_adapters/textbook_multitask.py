"""Independent textbook multitask GRU (Yang et al. 2019 style: one-hot task input into a
standard PyTorch-form GRU, PyTorch default init, plain Adam, no clipping, no activity
penalty) on the repo's arm / feedback / tasks as the environment. Same budget as the
study: 2000 steps x batch 16 single primitives from random starts. Evaluated like the
study: primitives from 4 test starts, letters from home with each stroke's task given.
usage: python jaxpapers/papers/motor_adapters/textbook_multitask.py STEPS SEEDS LR1+LR2 OUT.json

Written by a reviewer who did not write the study, without the study's model code (only
the arm, feedback buffers, tasks and evaluation sets are shared), to check that the
study's multitask baseline is not handicapped (README, "Baseline check")."""
import json, sys, time
import jax, jax.numpy as jnp, numpy as np, optax
from jaxpapers.core import config as C
from jaxpapers.papers.motor_adapters import arm as A, feedback as F, tasks as T
from jaxpapers.papers.motor_adapters import rollout as R, experiment as E

steps, nseed, lrs, out = int(sys.argv[1]), int(sys.argv[2]), [float(x) for x in sys.argv[3].split("+")], sys.argv[4]
cfg = C.load("configs/motor_adapters.py"); env = E.make_env(cfg); p = env.arm
H, NT, B, EFF = 64, T.N_PRIMITIVES, 16, 1.0
IN = R.IN_DIM + NT

def init(key):
  k = jax.random.split(key, 6); s = 1 / np.sqrt(H)
  u = lambda kk, sh: jax.random.uniform(kk, sh, minval=-s, maxval=s)
  return dict(wi=u(k[0], (IN, 3 * H)), wh=u(k[1], (H, 3 * H)), bi=u(k[2], (3 * H,)),
              bh=u(k[3], (3 * H,)), wo=u(k[4], (H, 6)), bo=u(k[5], (6,)))

def gru(w, h, x):  # torch.nn.GRU equations
  gi, gh = x @ w["wi"] + w["bi"], h @ w["wh"] + w["bh"]
  r = jax.nn.sigmoid(gi[:H] + gh[:H]); z = jax.nn.sigmoid(gi[H:2*H] + gh[H:2*H])
  n = jnp.tanh(gi[2*H:] + r * gh[2*H:])
  return (1 - z) * n + z * h

def rollout(w, tasks, targets, q0, key):
  """tasks (S,), targets (S, T, 2) relative to each segment's start; carry-over state."""
  S, Tn = targets.shape[:2]
  hand0 = A.fingertip(p, q0)
  origins = hand0[None] + jnp.concatenate([jnp.zeros((1, 2)), jnp.cumsum(targets[:, -1], 0)[:-1]], 0)
  st = A.rest_state(p, q0)
  carry = (st, jnp.zeros(H), F.init(A.proprioception(p, st), env.prop_delay), F.init(hand0, env.vis_delay))
  def seg(c, xs):
    task, origin, k = xs
    def stp(c, i):
      st, h, pb, vb = c; g, kk = i; kp, kv, km = jax.random.split(kk, 3)
      prop = A.proprioception(p, st) + env.prop_noise * jax.random.normal(kp, (12,))
      hand = A.fingertip(p, st.q) + env.vis_noise * env.radius * jax.random.normal(kv, (2,))
      pd, pb = F.push(pb, prop); hd, vb = F.push(vb, hand)
      x = jnp.concatenate([pd, (hd - origin) / env.radius, g[None], jax.nn.one_hot(task, NT)])
      h = gru(w, h, x); uu = jax.nn.sigmoid(h @ w["wo"] + w["bo"])
      st = A.step(p, st, uu + env.motor_noise * jax.random.normal(km, (6,)), env.dt, env.substeps)
      return (st, h, pb, vb), (A.fingertip(p, st.q), uu)
    return jax.lax.scan(stp, c, ((jnp.arange(Tn) == 0).astype(jnp.float32), jax.random.split(k, Tn)))
  _, (hand, u) = jax.lax.scan(seg, carry, (tasks, origins, jax.random.split(key, S)))
  return hand.reshape(-1, 2), (origins[:, None] + targets).reshape(-1, 2), u.reshape(-1, 6)

prim = jnp.asarray(T.primitive_paths(env.radius, env.move_steps, env.hold_steps))

def loss(w, key):
  kt, ks, kr = jax.random.split(key, 3)
  task = jax.random.randint(kt, (B,), 0, NT); q0, _ = R.random_starts(env, ks, B)
  hand, tgt, u = jax.vmap(lambda t, q, k: rollout(w, t[None], prim[t][None], q, k))(task, q0, jax.random.split(kr, B))
  d2 = jnp.sum((hand - tgt) ** 2, -1) * 1e4
  return d2.mean() + EFF * jnp.mean(u ** 2), jnp.sqrt(d2 + 1e-12).mean()

opt = optax.scale_by_adam()
def lane_chunk(state, start, n):
  def body(s, i):
    (l, e), g = jax.value_and_grad(loss, has_aux=True)(s["w"], jax.random.fold_in(s["key"], i))
    up, o = opt.update(g, s["opt"], s["w"])
    return {**s, "w": jax.tree.map(lambda a, b: a - s["lr"] * b, s["w"], up), "opt": o}, e
  s, e = jax.lax.scan(body, state, start + jnp.arange(n)); return s, e.mean()
chunk = jax.jit(jax.vmap(lane_chunk, in_axes=(0, None, None)), static_argnums=2)

lanes = [(sd, lr) for sd in range(nseed) for lr in lrs]
def mk(sd, lr):
  w = init(jax.random.fold_in(jax.random.key(1234), sd))
  return {"w": w, "opt": opt.init(w), "lr": jnp.float32(lr), "key": jax.random.fold_in(jax.random.key(99), sd)}
state = jax.tree.map(lambda *x: jnp.stack(x), *[mk(*l) for l in lanes])
curve, t0 = [], time.time()
import os
if os.environ.get("TRACE_ONLY"):
  print(jax.eval_shape(lambda s: jax.vmap(lane_chunk, in_axes=(0, None, None))(s, jnp.int32(0), 2), state)[1]); steps = 0
for s in range(0, steps, 100):
  state, e = chunk(state, jnp.int32(s), 100); curve.append(np.asarray(e).tolist())
  print(s + 100, np.round(np.asarray(e), 3), f"{time.time() - t0:.0f}s", flush=True)

def eval_prims(w, q, key):
  def one(t):
    hand, tgt, _ = jax.vmap(lambda qq, k: rollout(w, t[None], prim[t][None], qq, k))(q, jax.random.split(jax.random.fold_in(key, t), q.shape[0]))
    return jnp.linalg.norm(hand - tgt, axis=-1).mean() * 100
  return jax.lax.map(one, jnp.arange(NT))
names, ids = T.letters(); _, ltg, lmask = E.drawing_set(env, ids)
lq, _ = R.home_start(env, len(names))
def eval_letters(w, key):
  hand, tgt, _ = jax.vmap(lambda t, g, q, k: rollout(w, t, g, q, k))(jnp.maximum(ids, 0), ltg, lq, jax.random.split(key, len(names)))
  d = jnp.linalg.norm(hand - tgt, axis=-1) * 100  # (L, S*T)
  m = jnp.repeat(lmask.astype(jnp.float32), env.steps, axis=1)
  per = (d * m).sum(1) / m.sum(1)
  d3, m3 = d.reshape(len(names), -1, env.steps), m.reshape(len(names), -1, env.steps)
  return per, (d3[:, 0] * m3[:, 0]).sum() / m3[:, 0].sum(), (d3[:, 1:] * m3[:, 1:]).sum() / m3[:, 1:].sum()
qv, _ = R.random_starts(env, jax.random.key(7), 4); qt, _ = R.random_starts(env, jax.random.key(8), 4)
ev = (jax.jit if not os.environ.get("TRACE_ONLY") else (lambda f: (lambda w: jax.eval_shape(f, w))))(jax.vmap(lambda w: (eval_prims(w, qv, jax.random.key(70)), eval_prims(w, qt, jax.random.key(80)), *eval_letters(w, jax.random.key(90)))))
outs = ev(state["w"])
if os.environ.get("TRACE_ONLY"): print([o.shape for o in outs]); sys.exit()
val, test, per, first, later = map(np.asarray, outs)
res = [dict(seed=sd, lr=lr, val=float(val[i].mean()), test=float(test[i].mean()), letters=float(per[i].mean()),
            letters_per=per[i].tolist(), first=float(first[i]), later=float(later[i]), final_train=curve[-1][i])
       for i, (sd, lr) in enumerate(lanes)]
for r in res: print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k != "letters_per"})
json.dump(dict(lanes=res, curve=curve, wall=time.time() - t0), open(out, "w"))
