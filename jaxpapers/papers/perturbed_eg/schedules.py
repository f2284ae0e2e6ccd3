"""Perturbed S-EG / S-OGDA (abstract 19): regularisation and step-size schedules.

Horizon schedule (constrained problems, the O(T^{-1/4+eps}) theorem). On the mu-strongly
monotone regularised problem, S-EG/S-OGDA with a constant step eta satisfy
  E|z_T - z*_mu|^2 <~ exp(-c eta mu T) D^2 + eta sigma^2 / mu,
and the gap is Lipschitz in z while the Tikhonov bias is gap(z*_mu) <= mu D^2 / 2. So
  gap(z_T) <~ mu D^2 + sqrt(eta / mu) sigma + exp(-c eta mu T / 2) D.
With eta = eta0 T^{-a} / L and mu = mu0 L T^{-b}: bias T^{-b}, noise T^{-(a-b)/2}, and the
optimisation term vanishes iff a + b < 1. Balancing b = (a - b)/2 gives a = 3b, and
a + b = 4b < 1 forces b = 1/4 - eps, a = 3/4 - 3 eps: the rate T^{-1/4+eps}. The
exponents are config fields; eta is capped at eta_cap / (L + mu) for stability.

Anytime schedule (unconstrained, almost-sure convergence with one timescale):
  eta_t = gamma_t = eta0 / L (1 + t/t0)^{-a},   mu_t = mu0 L (1 + t/t0)^{-b},
with 1/2 < a (sum eta_t^2 < inf: the noise is summable), a + b < 1 (sum eta_t mu_t = inf:
the contraction is not), so the iterates track the Tikhonov path z*_{mu_t}, which tends
to the solution nearest z0. The vanilla methods use the same steps with mu = 0; the
two-timescale reference (double-stepsize EG of Hsieh et al. 2020) explores with
gamma_t ~ t^{-1/3} and updates with eta_t ~ t^{-2/3}.
"""
from __future__ import annotations

from jaxpapers.papers.perturbed_eg import methods

# key -> (label, algorithm, perturbed, two_timescale)
VARIANTS = {
    "seg": ("S-EG", "eg", False, False),
    "sogda": ("S-OGDA", "ogda", False, False),
    "pseg": ("perturbed S-EG", "eg", True, False),
    "psogda": ("perturbed S-OGDA", "ogda", True, False),
    "dseg": ("two-timescale S-EG (DSEG)", "eg", False, True),
}


def lookup(key: str):
  if key not in VARIANTS:
    raise ValueError(f"unknown method {key!r}; known: {', '.join(VARIANTS)}")
  return VARIANTS[key]


def exponents(sched) -> tuple[float, float]:
  """(a, b) of eta ~ T^-a, mu ~ T^-b; from eps unless given explicitly (>= 0)."""
  a = sched.eta_exponent if sched.eta_exponent >= 0 else 0.75 - 3 * sched.eps
  b = sched.mu_exponent if sched.mu_exponent >= 0 else 0.25 - sched.eps
  return a, b


def horizon_constants(sched, lipschitz: float, perturbed: bool):
  """Returns eta_of(T), mu_of(T): the constant step and regularisation of a T-run.

  Vanilla methods (mu = 0) use eta ~ T^-vanilla_eta_exponent, by default the standard
  1/sqrt(T) step of stochastic mirror-prox (Juditsky et al. 2011) under which the
  *averaged* iterate has gap O(T^-1/2); their last iterate is what the paper criticises.
  """
  a, b = exponents(sched)
  if not perturbed:
    a = sched.vanilla_eta_exponent

  def mu_of(t):
    return sched.mu0 * lipschitz * t**-b if perturbed else 0.0

  def eta_of(t):
    return min(sched.eta0 * t**-a, sched.eta_cap) / (lipschitz + mu_of(t))

  return eta_of, mu_of


def horizon_runs(sched, lipschitz: float, perturbed: bool, horizons, group: int = 0):
  """(group, T, eta_T, gamma_T = eta_T, mu_T) for each horizon: input of methods.horizon_plan."""
  eta_of, mu_of = horizon_constants(sched, lipschitz, perturbed)
  return [(group, int(t), eta_of(t), eta_of(t), mu_of(t)) for t in horizons]


def anytime_plan(key: str, sched, lipschitz: float, t_max: int, checkpoints, block: int):
  """Plan of the decaying single- (or two-) timescale run of method `key`."""
  _, _, perturbed, two = lookup(key)
  a, b = exponents(sched)
  eta = sched.eta_cap / lipschitz
  mu = sched.mu0 * lipschitz if perturbed else 0.0
  decay = (2.0 / 3.0, 1.0 / 3.0, 0.0) if two else (a, a, b if perturbed else 0.0)
  return methods.anytime_plan(t_max, checkpoints, block, eta, eta, mu, decay)
