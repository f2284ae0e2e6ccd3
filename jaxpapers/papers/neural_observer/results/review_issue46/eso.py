# Textbook linear ESO (Gao 2003) for the pendulum: theta'' = u + f, f lumped; gains (3w, 3w^2, w^3).
import numpy as np, sys
exec(open('textbook.py').read().split("P = list")[0])  # reuse my own helpers (rk4, nmse, split, tune)
def eso(w, d, current=False):
  Lg = np.array([3 * w, 3 * w ** 2, w ** 3]); z = d['zhat0'].copy(); out = []
  for k in range(d['u'].shape[1]):
    u, y = d['u'][:, k], d['y'][:, k]
    f = lambda s: np.stack([s[:, 1], u[:, 0] + s[:, 2], 0 * s[:, 0]], 1) + (y - s[:, :1]) * Lg
    est = z.copy(); est[:, 2] = z[:, 2] + B * z[:, 1] + G_L * np.sin(z[:, 0])  # d = f + b w + g/l sin th
    out.append(est); z = rk4(f, z, DT)
  return np.stack(out, 1)
P = list(np.geomspace(0.5, 64, 30))
tune('textbook linear ESO (Gao), lumped total f', P, eso)
