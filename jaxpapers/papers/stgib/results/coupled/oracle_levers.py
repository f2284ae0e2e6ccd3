import numpy as np, sys, time

from jaxpapers.papers.stgib import simulator as S
g = S.grid_graph(3, 4)
settings = {
 "default": dict(),
 "c85_rho10": dict(rho=0.1, coupling=0.85),
 "c85_rho10_s05": dict(rho=0.1, coupling=0.85, sigma=0.05),
 "c85_s05_d6-10": dict(rho=0.1, coupling=0.85, sigma=0.05, delays=(6, 10)),
 "c85_s05_d6-10_inc.2": dict(rho=0.1, coupling=0.85, sigma=0.05, delays=(6, 10), incident_rate=0.2),
 "c95_rho0_s05_d6-10_inc.2": dict(rho=0.0, coupling=0.95, sigma=0.05, delays=(6, 10), incident_rate=0.2),
}
for name, kw in settings.items():
  t0 = time.time()
  sim = S.simulate(g, 14 * 288, 0, "markov", **kw)
  tl = np.arange(int(14*288*0.8), 14*288 - 13, 7)[:150]
  y = np.stack([sim.r[t + 1:t + 13] for t in tl])
  full = S.oracle_forecast(sim, tl, 12)
  nog = S.oracle_forecast(sim, tl, 12, graph=False)
  zero = np.abs(y).mean()
  a, b = np.abs(full - y).mean(), np.abs(nog - y).mean()
  print(f"{name:28s} std r {sim.r.std():.3f} MAE zero {zero:.3f} oracle {a:.3f} oracle-nograph {b:.3f} worth {b/a-1:+.1%}  ({time.time()-t0:.1f}s)", flush=True)
