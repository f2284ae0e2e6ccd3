# Independent textbook observers for the pendulum (NumPy only; data from dump.py).
import numpy as np, sys
G_L, B, NOISE, DT = 4.0, 0.2, 0.01, 0.04
mode = sys.argv[1] if len(sys.argv) > 1 else 'exact'
D = np.load(f'/tmp/review_issue46_pend_{mode}.npz'); SZ, EB = D['s_z'], D['err_box']

def fbar(z, u):  # nominal extended pendulum model, z = [theta, omega, d], batched (n,3)
  return np.stack([z[:, 1], -B * z[:, 1] + u[:, 0] - G_L * np.sin(z[:, 0]) + z[:, 2],
                   0 * z[:, 0]], 1)
def rk4(f, z, dt):
  k1 = f(z); k2 = f(z + dt / 2 * k1); k3 = f(z + dt / 2 * k2); k4 = f(z + dt * k3)
  return z + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
def nmse(zh, z): return np.mean(((zh - z) / SZ) ** 2)

def acker(A, C, poles):  # textbook Ackermann observer gain
  n = len(A); O = np.vstack([C @ np.linalg.matrix_power(A, k) for k in range(n)])
  c = np.real(np.poly(poles)); ph = sum(ck * np.linalg.matrix_power(A, n - k) for k, ck in enumerate(c))
  return ph @ np.linalg.solve(O, np.eye(n)[:, -1:])
A_LIN = np.array([[0, 1, 0], [-G_L, -B, 1], [0, 0, 0.]]); C = np.array([[1., 0, 0]])

def luenberger(L, d, current=False):
  """Continuous nonlinear model copy + L (y - C zhat), RK4 with ZOH (study's convention:
  output the estimate before the step); current=True: discrete predictor-corrector."""
  z, out = d['zhat0'].copy(), []
  for k in range(d['u'].shape[1]):
    u, y = d['u'][:, k], d['y'][:, k]
    if current:
      z = z + (y - z @ C.T) @ L.T; out.append(z); z = rk4(lambda s: fbar(s, u), z, DT)
    else:
      out.append(z); z = rk4(lambda s: fbar(s, u) + (y - s @ C.T) @ L.T, z, DT)
  return np.stack(out, 1)

def ekf(qx, qd, d):
  """Discrete EKF, RK4 prediction, finite-difference Jacobian, posterior output."""
  n, T = d['u'].shape[:2]; R = NOISE ** 2; Q = np.diag([qx, qx, qd]) * DT
  z = d['zhat0'].copy(); P = np.repeat(np.diag(EB ** 2 / 3)[None], n, 0); out = []
  for k in range(T):
    u, y = d['u'][:, k], d['y'][:, k]
    S = P[:, 0, 0] + R; K = P[:, :, 0] / S[:, None]
    z = z + K * (y[:, 0] - z[:, 0])[:, None]
    P = P - K[:, :, None] * P[:, None, 0, :]; out.append(z.copy())
    f = lambda s: rk4(lambda v: fbar(v, u), s, DT); fz = f(z); h = 1e-6
    F = np.stack([(f(z + h * np.eye(3)[j]) - fz) / h for j in range(3)], 2)
    z = fz; P = F @ P @ F.transpose(0, 2, 1) + Q; P = 0.5 * (P + P.transpose(0, 2, 1))
  return np.stack(out, 1)

def split(s, sp): return {k: D[f's{s}_{sp}_{k}'] for k in ('u', 'y', 'z', 'zhat0')}
def tune(name, grid, run):
  tests, picks = [], []
  for s in range(3):
    va, te = split(s, 'val'), split(s, 'test')
    sc = [nmse(run(g, va), va['z']) for g in grid]
    sc = [v if np.isfinite(v) else np.inf for v in sc]; i = int(np.argmin(sc))
    picks.append((grid[i], 'EDGE' if i in (0, len(grid) - 1) else 'in')); tests.append(nmse(run(grid[i], te), te['z']))
  print(f'{mode:9s} {name:38s} test nmse {np.mean(tests):.5f} +- {np.std(tests, ddof=1):.5f}  per seed {np.round(tests,5)}  picks {picks}')
  return tests

P = list(np.geomspace(0.5, 40, 25))
trip = lambda p: [-p] * 3; butter = lambda p: p * np.array([-1, -0.5 + 0.866j, -0.5 - 0.866j])
if len(sys.argv) > 2:  # sanity: the study's own L (linear_part) through my integrator
  L = np.load(sys.argv[2]); print('study L through my rollout', [nmse(luenberger(L, split(s, 'test')), split(s, 'test')['z']) for s in range(3)])
tune('luenberger acker triple pole (cont.)', P, lambda p, d: luenberger(acker(A_LIN, C, trip(p)), d))
tune('luenberger acker butterworth (cont.)', P, lambda p, d: luenberger(acker(A_LIN, C, butter(p)), d))
tune('luenberger acker triple, current (disc.)', P, lambda p, d: luenberger(DT * acker(A_LIN, C, trip(p)), d, True))
QD = list(10.0 ** np.arange(-7, 1.01, 0.5))
tune('ekf q_d tuned, q_x=1e-4 (study)', QD, lambda q, d: ekf(1e-4, q, d))
QX = list(10.0 ** np.arange(-8, 0.01, 1.0))
grid2 = [(a, b) for a in QX for b in QD[::2]]
##tune('ekf (q_x, q_d) tuned jointly', grid2, lambda g, d: ekf(g[0], g[1], d))
A_BAR = np.array([[0, 1, 0], [0, -B, 1], [0, 0, 0.]])
tune('high-gain structure (Abar), fine grid', P, lambda p, d: luenberger(acker(A_BAR, C, trip(p)), d))
