import jax, jax.numpy as jnp, numpy as np
from jaxpapers.papers.lpr import detectors as Dt
rng = np.random.default_rng(0)
D, B, L = 64, 128, 64
cfg = Dt.DetectorConfig(kind="memae", hidden=(64, 32), latent=L)
det = Dt.Detector(cfg, D)
x = jnp.asarray(rng.normal(size=(B, D)), jnp.float32)
fmask = jnp.ones(D); code_n = jnp.float32(1.0)
params, _ = det.init(jax.random.key(0), x, jnp.ones(B), fmask, 0.0, code_n)
net = det.net
cm = det.code_mask(fmask, code_n)
def enc(p, xx):
  return net.apply(p, xx, method=lambda m, v: m.encoder(v)) * cm[None, :]
def head(z, mem, shrink_fn):
  mem = mem * cm[None, :]
  att = jax.nn.softmax(z @ mem.T, axis=-1)
  att = shrink_fn(att)
  att = att / (jnp.sum(jnp.abs(att), axis=-1, keepdims=True) + 1e-12)
  ent = -jnp.sum(att * jnp.log(att + 1e-12), axis=-1)
  return att @ mem, ent
l = 0.02
y = jnp.asarray(rng.normal(size=(B, L)), jnp.float32)
shr = {"gong_1e-12": lambda a: jax.nn.relu(a - l) * a / (jnp.abs(a - l) + 1e-12),
       "gong_1e-6": lambda a: jax.nn.relu(a - l) * a / (jnp.abs(a - l) + 1e-6),
       "hard_where": lambda a: jnp.where(a > l, a, 0.0)}
z0 = enc(params, x); mem0 = params["params"]["memory"]
print("att at init: frac within 1e-6 of l:", float(jnp.mean(jnp.abs(jax.nn.softmax(z0 @ (mem0*cm).T, -1) - l) < 1e-6)),
      "z unique", np.unique(np.asarray(z0[:, 0]))[:5], "zero rows", int(jnp.sum(z0[:, 0] == 0)))
for name, fn in shr.items():
  def f(z, mem):
    def lossf(z, mem):
      r, ent = head(z, mem, fn); return jnp.mean(jnp.sum(r * y, -1)) + 2e-4 * jnp.mean(ent), (jnp.mean(jnp.sum(r*y,-1)), jnp.mean(ent))
    (lv, aux), g = jax.value_and_grad(lossf, argnums=(0, 1), has_aux=True)(z, mem)
    return lv, aux, g
  outs = {}
  for R in (1, 10, 70):
    Z = jnp.broadcast_to(z0, (R,) + z0.shape); M = jnp.broadcast_to(mem0, (R,) + mem0.shape)
    outs[R] = jax.tree.map(lambda a: np.asarray(a[0]), jax.jit(jax.vmap(f))(Z, M))
  for R in (10, 70):
    d = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), outs[1], outs[R])
    print(name, R, "loss", d[0], "parts", d[1], "grad z", d[2][0], "grad mem", d[2][1], "| |grad z| max", float(np.abs(outs[1][2][0]).max()))
