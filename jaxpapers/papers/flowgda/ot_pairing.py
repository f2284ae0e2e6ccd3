"""FlowGDA (abstract 10): minibatch optimal-transport pairing with ott-jax.

Conditional flow matching with OT couplings (Tong et al. 2023; Pooladian et al. 2023)
pairs each minibatch of the earlier domain with one of the later domain through an
entropic OT plan, which straightens the conditional paths and so the learned velocity
field. The plan comes from ott-jax's Sinkhorn solver on a squared-Euclidean point cloud;
its epsilon is relative to the mean cost, so one setting works whatever the feature
scale. Pairs are drawn from the plan's rows (each earlier point keeps exactly one partner,
drawn with the plan's conditional probabilities); at a small epsilon the plan is close to
a permutation and the draw is the exact assignment (checked against scipy's Hungarian
solver in the tests).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from ott.geometry import pointcloud
from ott.solvers import linear
from ott.solvers.linear import acceleration


def plan(x_BxD, y_BxD, epsilon: float = 0.05, max_iterations: int = 200,
         threshold: float = 1e-3):
  """Entropic OT plan (B, B) between two equal-size uniform point clouds."""
  # ott-jax broadcasts with implicit rank promotion internally; allow it in its scope
  # only (the tests run with jax_numpy_rank_promotion="raise").
  with jax.numpy_rank_promotion("allow"):
    geom = pointcloud.PointCloud(x_BxD, y_BxD, epsilon=epsilon, relative_epsilon="mean")
    out = linear.solve(geom, threshold=threshold, max_iterations=max_iterations,
                       momentum=acceleration.Momentum(value=1.5))
  return jax.lax.stop_gradient(out.matrix)


def sample_partners(key, plan_BxB):
  """For every row i a partner j ~ plan[i, :] / sum(plan[i, :])."""
  logp = jnp.log(jnp.maximum(plan_BxB, 1e-30))
  return jax.random.categorical(key, logp, axis=-1)


def assignment(plan_BxB):
  """The most likely partner of every row (the permutation for a near-exact plan)."""
  return plan_BxB.argmax(-1)


def pair(key, x_BxD, y_BxD, epsilon: float, use_ot, max_iterations: int = 200):
  """y reordered to pair with x: OT partners when use_ot, else the given (random) order.

  `use_ot` may be a traced 0/1 value (the ablation switch of a vmapped program).
  """
  j = sample_partners(key, plan(x_BxD, y_BxD, epsilon, max_iterations))
  j = jnp.where(use_ot > 0, j, jnp.arange(x_BxD.shape[0]))
  return y_BxD[j]


def barycentric_map(x_NxD, y_MxD, epsilon: float = 0.01, max_iterations: int = 500):
  """T(x_i) = sum_j plan_ij y_j / sum_j plan_ij (the OT map estimate GOAT interpolates)."""
  p = plan(x_NxD, y_MxD, epsilon, max_iterations)
  return (p @ y_MxD) / p.sum(-1, keepdims=True)
