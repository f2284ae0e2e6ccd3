"""BFMNet (abstract 8): exact DSIC / IR / budget feasibility, baselines, relaxation, smoke."""
import importlib.util
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.papers.bfmnet import classical
from jaxpapers.papers.bfmnet import evaluate
from jaxpapers.papers.bfmnet import experiment
from jaxpapers.papers.bfmnet import markets
from jaxpapers.papers.bfmnet import mechanism
from jaxpapers.papers.bfmnet import menus
from jaxpapers.papers.bfmnet import regretnet
from jaxpapers.papers.bfmnet import train_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 5
GRID = jnp.linspace(0.0, 1.0, 21)


def _config(arg="smoke=true"):
  spec = importlib.util.spec_from_file_location("bfm_cfg", os.path.join(ROOT, "configs/bfmnet.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def _net(seed, offset):
  # Different offsets give raw menus from far below to far above the budget, so the
  # transformation is exercised both when it binds and when it does not.
  model = menus.MenuNet(hidden=8, channels=4, monotone=4, offset=offset)
  return model, menus.init_params(jax.random.PRNGKey(seed), model, N)


def _markets(seed, valuation, batch=6, dist="uniform"):
  return markets.sample_markets(jax.random.PRNGKey(seed), batch, N,
                                markets.cell_ids(valuation, dist), 0.1)


@pytest.fixture(scope="module", params=[("additive", -6.0), ("submodular", 0.0)],
                ids=["additive-overpriced", "submodular-default"])
def setting(request):
  valuation, offset = request.param
  model, params = _net(3, offset)
  return valuation, model, params, evaluate.bfmnet_mechanism(model, params)


def test_price_ignores_own_bid_bitwise(setting):
  valuation, model, params, mech = setting
  mk = jax.tree.map(lambda x: x[0], _markets(0, valuation))
  raw = menus.raw_price_fn(model, params, mk)
  bids = mk["costs"]

  @jax.jit
  def all_prices(b_i_values):
    def for_i(i):
      return jax.vmap(lambda b: mechanism.price_one(raw, mk["budget"], jnp.where(
          jnp.arange(N) == i, b, bids), i)[0])(b_i_values)
    return jax.vmap(for_i)(jnp.arange(N))
  t = np.asarray(all_prices(GRID))              # (seller, misreport)
  assert np.all(t == t[:, :1]), "a seller's price moved with its own bid"
  assert np.all(t >= 0)


def test_no_gain_from_any_misreport_on_grid(setting):
  valuation, _, _, mech = setting
  mk = _markets(1, valuation, batch=4)
  r = np.asarray(jax.jit(lambda m: evaluate.regrets(mech, m, GRID))(mk))
  assert r.shape == (4, N)
  assert r.max() <= 1e-6   # truthful utility comes from the full mechanism: round-off only


def test_regret_audit_catches_a_seller_view_that_reads_own_bid():
  # The truthful utility comes from `full`, misreports from `seller`: a mechanism whose
  # seller view pays the bid plus 0.1 must show regret, not cancel against itself.
  mk = _markets(1, "additive", batch=2)
  full = lambda m, b: (jnp.ones_like(b), 0.5 * jnp.ones_like(b), 0.0, 0.0)
  leaky = evaluate.Mechanism(full, lambda m, b, i: (1.0, b[i] + 0.1))
  r = np.asarray(evaluate.regrets(leaky, mk, GRID))
  np.testing.assert_allclose(r, np.maximum(1.1 - 0.5, 0.0) * np.ones((2, N)), atol=1e-6)


def test_budget_ir_and_payments_on_random_bid_profiles(setting):
  valuation, model, params, mech = setting
  mk = _markets(2, valuation, batch=32)
  bids = jax.random.uniform(jax.random.PRNGKey(9), (32, N))   # arbitrary, not truthful

  @jax.jit
  def run(m, b):
    x, pay, _, spend = jax.vmap(mech.full)(m, b)
    raw = evaluate.raw_menu_mechanism(model, params)
    return x, pay, spend, jax.vmap(raw.full)(m, b)[3]
  x, pay, spend, raw_spend = map(np.asarray, run(mk, bids))
  budget = np.asarray(mk["budget"])
  assert np.all(spend <= budget * (1 + 1e-6)), "budget violated"
  assert np.all(pay[x == 1] >= np.asarray(bids)[x == 1]), "a winner was paid below its bid"
  assert np.all(pay[x == 0] == 0), "a loser was paid"
  assert np.all(pay >= 0)
  if valuation == "additive":  # the over-priced net: raw menus overspend, so the map binds
    assert np.any(raw_spend > budget)
    assert np.any(x == 1), "the transformation should not simply shut the market"


def _adversarial_profiles(mech, mk, rng_seed=0, rounds=2):
  """Bid profiles built against the mechanism, per instance: every seller at its posted
  price, one float step below it, and coordinate ascent on total spend (each seller in
  turn moves to the grid point or price-edge bid that maximises the total payment)."""
  n = mk["costs"].shape[1]
  full = jax.jit(jax.vmap(mech.full))
  seller_pay = jax.jit(jax.vmap(lambda m, b: jax.vmap(lambda i: mech.seller(m, b, i))(
      jnp.arange(n))))
  # A winner's payment is its posted price: read prices by bidding 0 (every seller
  # accepts any non-negative price).
  def prices(bids):
    out = []
    for i in range(n):
      b = bids.at[:, i].set(0.0)
      out.append(np.asarray(seller_pay(mk, b)[1])[:, i])
    return jnp.asarray(np.stack(out, 1))
  profiles = []
  bids = mk["costs"]
  t = prices(bids)
  profiles += [t, jnp.nextafter(t, -jnp.inf)]
  bids = jax.random.uniform(jax.random.PRNGKey(rng_seed), mk["costs"].shape)
  cand_grid = jnp.linspace(0.0, 1.0, 6)
  for _ in range(rounds):
    for i in range(n):
      t_i = prices(bids)[:, i]
      cands = jnp.concatenate([jnp.broadcast_to(cand_grid, (bids.shape[0], 6)),
                               t_i[:, None], jnp.nextafter(t_i, -jnp.inf)[:, None]], 1)
      spends = []
      for k in range(cands.shape[1]):
        prof = bids.at[:, i].set(cands[:, k])
        profiles.append(prof)
        spends.append(np.asarray(full(mk, prof)[3]))
      best = np.argmax(np.stack(spends, 1), 1)
      bids = bids.at[:, i].set(cands[jnp.arange(bids.shape[0]), best])
  return profiles


def test_budget_and_ir_on_adversarial_profiles(setting):
  valuation, _, _, mech = setting
  mk = _markets(11, valuation, batch=6)
  full = jax.jit(jax.vmap(mech.full))
  budget = np.asarray(mk["budget"])
  for prof in _adversarial_profiles(mech, mk):
    x, pay, _, spend = map(np.asarray, full(mk, prof))
    assert np.all(spend <= budget * (1 + 1e-6)), "budget violated on an adversarial profile"
    assert np.all(pay[x == 1] >= np.asarray(prof)[x == 1] - 1e-7)
    assert np.all(pay[x == 0] == 0)


def _edges(name, mk, bids, i):
  """Bids where seller i's outcome can switch: its posted price / threshold(s)."""
  if name == "bfmnet":
    raise AssertionError("use the price directly")
  share = {"singer": 1.0, "greedy_half": 0.5, "cgl": 0.5}.get(name)
  if share is None:  # SPP: the offer, read by bidding 0 (accepts any offer)
    return [evaluate.spp_mechanism(2.0).seller(mk, bids.at[i].set(0.0), i)[1]]
  out = [classical.threshold(mk, bids, share * mk["budget"], i)]
  return out + ([mk["budget"]] if name == "cgl" else [])


@pytest.mark.parametrize("name,valuation", [("singer", "additive"), ("cgl", "submodular"),
                                            ("greedy_half", "submodular"),
                                            ("spp", "submodular")])
def test_classical_truthful_and_feasible_on_adversarial_profiles(name, valuation):
  # The profiles (at the price, one float step below, coordinate ascent on total spend)
  # are taken as the true costs; every seller then tries the grid and its own switching
  # bids (threshold, one float step below and above). No deviation may gain, and no
  # profile may overspend ex post (CGL: each branch separately). Each profile is a
  # separate call of one compiled program: allocation (greedy run) and payment
  # (threshold formula) are different computations, so a wrong threshold shows as gain.
  mech = {"singer": evaluate.singer_mechanism(), "cgl": evaluate.cgl_mechanism(),
          "greedy_half": evaluate.greedy_half_mechanism(),
          "spp": evaluate.spp_mechanism(2.0)}[name]
  mk = _markets(13, valuation, batch=3, dist="bimodal")
  every = _adversarial_profiles(mech, mk, rounds=1)
  profiles = [every[0], every[1], every[-1]]   # at the price, a step below, ascent's end
  full = jax.jit(jax.vmap(mech.full))
  edges = jax.jit(jax.vmap(lambda m, b, i: jnp.stack(_edges(name, m, b, i)),
                           in_axes=(0, 0, None)))
  budget = np.asarray(mk["budget"])
  for costs in profiles:
    x, p, _, spend = map(np.asarray, full(mk, costs))
    u_true = p - np.asarray(costs) * x
    for i in range(N):
      e = edges(mk, costs, i)                                     # (batch, edges)
      cands = jnp.concatenate([jnp.broadcast_to(jnp.linspace(0.0, 1.0, 6), (3, 6)), e,
                               jnp.nextafter(e, -jnp.inf), jnp.nextafter(e, jnp.inf)], 1)
      for k in range(cands.shape[1]):
        xm, pm, _, _ = map(np.asarray, full(mk, costs.at[:, i].set(cands[:, k])))
        gain = pm[:, i] - np.asarray(costs)[:, i] * xm[:, i] - u_true[:, i]
        assert gain.max() <= 1e-6, f"seller {i} gained {gain.max()} by bidding {cands[:, k]}"
    if name == "cgl":
      br = jax.vmap(classical.cgl_random_sm)(mk, costs)[2]
      spend = np.maximum(np.asarray(br["top"][1]).sum(1), np.asarray(br["greedy"][1]).sum(1))
    assert np.all(spend <= budget * (1 + 1e-6)), "budget violated ex post"


def test_bfmnet_truthful_on_adversarial_profiles(setting):
  # Others bid adversarially (at their prices, a float step below, spend ascent); seller
  # i's utility at its price and one float step either side never beats truth-telling.
  valuation, model, params, mech = setting
  mk = _markets(14, valuation, batch=3)
  profiles = _adversarial_profiles(mech, mk, rounds=1)

  @jax.jit
  def gain(m, costs):
    raw = menus.raw_price_fn(model, params, m)
    def for_i(i):
      t = mechanism.price_one(raw, m["budget"], costs, i)[0]
      cands = jnp.concatenate([jnp.linspace(0.0, 1.0, 6),
                               jnp.stack([t, jnp.nextafter(t, -jnp.inf),
                                          jnp.nextafter(t, jnp.inf)])])
      def util(b):
        x, p = mech.seller(m, costs.at[i].set(b), i)
        return p - costs[i] * x
      return jnp.max(jax.vmap(util)(cands))
    x, p, _, _ = mech.full(m, costs)
    return jax.vmap(for_i)(jnp.arange(N)) - (p - costs * x)

  run = jax.jit(jax.vmap(gain))
  for prof in profiles[::3]:
    assert np.asarray(run(mk, prof)).max() <= 1e-6


def test_raw_prices_monotone_in_other_bids():
  model, params = _net(4, 0.0)
  mk = jax.tree.map(lambda x: x[0], _markets(3, "submodular"))
  raw = menus.raw_price_fn(model, params, mk)
  base = jax.random.uniform(jax.random.PRNGKey(1), (N,))
  prof = jnp.stack([base.at[1].set(b) for b in GRID])       # vary seller 1's bid
  t0 = np.asarray(raw(prof))
  others = [i for i in range(N) if i != 1]
  assert np.all(np.diff(t0[:, others], axis=0) >= -1e-7)
  assert np.any(np.diff(t0[:, others], axis=0) > 0), "prices should react to other bids"
  assert np.all(t0[:, 1] == t0[0, 1])


def test_feasible_menus_left_unchanged_infeasible_ones_cut():
  budget = jnp.asarray(1.0)
  bids = jnp.asarray([0.1, 0.15, 0.05, 0.19, 0.9])
  # Feasible at every profile: prices <= B / n whatever the others bid.
  feasible = lambda b: 0.2 * jax.nn.sigmoid(jnp.sum(b, axis=1, keepdims=True) - b)
  t, t0, _ = mechanism.prices(feasible, budget, bids)
  np.testing.assert_array_equal(np.asarray(t), np.asarray(t0))
  # Every seller offered the whole budget: only one could be paid.
  greedy = lambda b: jnp.ones_like(b) * budget
  t, t0, cap = mechanism.prices(greedy, budget, bids)
  win = bids <= t
  assert float(jnp.sum(t * win)) <= 1.0 + 1e-7
  assert np.all(np.asarray(t) < np.asarray(t0))


def test_singer_hand_example():
  # Additive values (4, 3, 2), bids 1, B = 3. Prefix rule: 1 <= 3*4/4, 1 <= 3*3/7,
  # 1 > 3*2/9 -> winners {0, 1}. Thresholds (others' order by b/v, max over positions of
  # min(rank bound, proportional bound)): seller 0: max(4/3, min(2, 12/7), 4/3) = 12/7;
  # seller 1: max(3/4, min(3/2, 9/7), 1) = 9/7. They exhaust B exactly.
  mk = {"costs": jnp.ones(3), "weights": jnp.asarray([4.0, 3.0, 2.0]), "cover": jnp.eye(3),
        "budget": jnp.asarray(3.0)}
  x, p = classical.singer(mk, jnp.ones(3))
  np.testing.assert_array_equal(np.asarray(x), [1, 1, 0])
  np.testing.assert_allclose(np.asarray(p), [12 / 7, 9 / 7, 0], rtol=1e-6)


def test_cgl_hand_example():
  # Coverage: s0 = {0, 1}, s1 = {1, 2}, s2 = {2}; weights (2, 1, 1); bids (1, .5, .2); B = 4.
  # GREEDY-SM(B/2 = 2) takes s2 (ratio 5), then s0 (3/1; 1 <= 2*3/4), then stops at s1.
  # Thresholds: s0 = max(min(.6, 2), min(1.5, 1.5), 1) = 1.5, s2 = max(.25, 0, 0) = .25.
  # i* = s0 (v = 3, bid 1 <= B) is offered B = 4 with probability 2/5.
  cover = jnp.asarray([[1, 1, 0], [0, 1, 1], [0, 0, 1]], jnp.float32)
  mk = {"costs": jnp.zeros(3), "weights": jnp.asarray([2.0, 1.0, 1.0]), "cover": cover,
        "budget": jnp.asarray(4.0)}
  bids = jnp.asarray([1.0, 0.5, 0.2])
  x, p, br = classical.cgl_random_sm(mk, bids)
  np.testing.assert_array_equal(np.asarray(br["greedy"][0]), [1, 0, 1])
  np.testing.assert_allclose(np.asarray(br["greedy"][1]), [1.5, 0, 0.25], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(x), [1.0, 0.0, 0.6], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(p), [0.4 * 4 + 0.6 * 1.5, 0.0, 0.15], rtol=1e-6)


def _additive(values, budget):
  k = len(values)
  return {"costs": jnp.zeros(k), "weights": jnp.asarray(values, jnp.float32),
          "cover": jnp.eye(k), "budget": jnp.asarray(budget, jnp.float32)}


def test_cgl_top_seller_must_be_affordable():
  # Values (5, 3, 1), B = 1, bids (1.5, .9, .1): the top-value seller s0 bids above B, so
  # i* is s1 (the most valuable seller bidding <= B), paid B. s1 keeps the posted price B
  # for any bid <= B and loses above it; s0 cannot become i* by any bid > B.
  mk = _additive([5.0, 3.0, 1.0], 1.0)
  _, _, br = classical.cgl_random_sm(mk, jnp.asarray([1.5, 0.9, 0.1]))
  np.testing.assert_array_equal(np.asarray(br["top"][0]), [0, 1, 0])
  np.testing.assert_allclose(np.asarray(br["top"][1]), [0, 1.0, 0])
  mech = evaluate.cgl_mechanism()
  for bid, wins in ((0.2, 1), (1.0, 1), (1.01, 0)):
    b = jnp.asarray([1.5, bid, 0.1])
    _, _, br = classical.cgl_random_sm(mk, b)
    assert float(br["top"][0][1]) == wins
    # the seller view (used by the regret audit) agrees with the full mechanism
    x_i, p_i = mech.seller(mk, b, 1)
    x, p, _ = classical.cgl_random_sm(mk, b)
    assert float(x_i) == pytest.approx(float(x[1])) and float(p_i) == pytest.approx(float(p[1]))
  # Nobody affordable: the top branch buys nothing.
  _, _, br = classical.cgl_random_sm(mk, jnp.asarray([2.0, 2.0, 2.0]))
  assert float(jnp.sum(br["top"][0])) == 0.0


def test_greedy_half_hand_example():
  # Additive values (4, 3, 2), bids (.5, .5, .45), B = 3, so share B/2 = 1.5.
  # Order by v/b: s0 (8), s1 (6), s2 (4.4). s0: .5 <= 1.5*4/4; s1: .5 <= 1.5*3/7 = .643;
  # s2: .45 > 1.5*2/9 = .333 -> stop, winners {s0, s1}.
  # Threshold of s0 (others' run takes s1, s2): max(min(.5*4/3, 1.5), min(.45*4/2,
  # 1.5*4/7), 1.5*4/9) = max(.667, .857, .667) = 6/7. Of s1 (others: s0, s2):
  # max(min(.5*3/4, 1.5), min(.45*3/2, 1.5*3/7), 1.5*3/9) = max(.375, .643, .5) = 9/14.
  # They spend 6/7 + 9/14 = 1.5 = B/2 exactly.
  mk = _additive([4.0, 3.0, 2.0], 3.0)
  x, p = classical.greedy_half(mk, jnp.asarray([0.5, 0.5, 0.45]))
  np.testing.assert_array_equal(np.asarray(x), [1, 1, 0])
  np.testing.assert_allclose(np.asarray(p), [6 / 7, 9 / 14, 0], rtol=1e-6)


def test_spp_hand_example():
  # Values (5, 3, 1), v(N) = 9, B = 1, bids (1.5, .9, .1). Visit order = marginal value.
  # alpha = 1: prices 5/9, 3/9, 1/9; s0 and s1 refuse, s2 sells at 1/9.
  # alpha = 3: s0's price 5/3 exceeds the budget left (not offered); s1 is offered 1 and
  # sells, leaving 0; s2's price 1/3 is then not offered.
  mk = _additive([5.0, 3.0, 1.0], 1.0)
  bids = jnp.asarray([1.5, 0.9, 0.1])
  x, p = classical.spp(mk, bids, 1.0)
  np.testing.assert_array_equal(np.asarray(x), [0, 0, 1])
  np.testing.assert_allclose(np.asarray(p), [0, 0, 1 / 9], rtol=1e-6)
  x, p = classical.spp(mk, bids, 3.0)
  np.testing.assert_array_equal(np.asarray(x), [0, 1, 0])
  np.testing.assert_allclose(np.asarray(p), [0, 1.0, 0], rtol=1e-6)
  # Coverage: s0 = {0, 1}, s1 = {1}, weights (1, 1), B = 1, alpha = 1, v(N) = 2. s0 is
  # visited first at price 1 and sells; s1's marginal is then 0 (price 0, bid .1: refuses).
  cover = jnp.asarray([[1, 1], [0, 1]], jnp.float32)
  mk = {"costs": jnp.zeros(2), "weights": jnp.ones(2), "cover": cover,
        "budget": jnp.asarray(1.0)}
  x, p = classical.spp(mk, jnp.asarray([0.9, 0.1]), 1.0)
  np.testing.assert_array_equal(np.asarray(x), [1, 0])
  np.testing.assert_allclose(np.asarray(p), [1.0, 0], rtol=1e-6)


@pytest.mark.parametrize("name", ["cgl", "greedy_half", "spp"])
def test_truthful_baselines_no_regret_budget_feasible(name):
  mk = _markets(12, "submodular", batch=3, dist="bimodal")
  mech = {"cgl": evaluate.cgl_mechanism(), "greedy_half": evaluate.greedy_half_mechanism(),
          "spp": evaluate.spp_mechanism(2.0)}[name]
  r = np.asarray(jax.jit(lambda m: evaluate.regrets(mech, m, GRID))(mk))
  assert r.max() <= 1e-5
  bids = jax.random.uniform(jax.random.PRNGKey(3), (3, N))
  _, _, _, spend = jax.jit(jax.vmap(mech.full))(mk, bids)
  assert np.all(np.asarray(spend) <= np.asarray(mk["budget"]) * (1 + 1e-6))


@pytest.mark.parametrize("valuation", ["additive", "submodular"])
def test_classical_thresholds_consistent_and_budget_feasible(valuation):
  mk = _markets(5, valuation, batch=16, dist="bimodal")
  share = mk["budget"] * (1.0 if valuation == "additive" else 0.5)

  @jax.jit
  def run(m, s):
    def one(mm, ss):
      sel, _ = classical.greedy_ps(mm, mm["costs"], ss)
      thr = jax.vmap(lambda i: classical.threshold(mm, mm["costs"], ss, i))(jnp.arange(N))
      return sel, thr
    return jax.vmap(one)(m, s)
  sel, thr = map(np.asarray, run(mk, share))
  costs = np.asarray(mk["costs"])
  np.testing.assert_array_equal(sel, costs <= thr)           # winners = below threshold
  spend = (thr * sel).sum(1)
  assert np.all(spend <= np.asarray(share) * (1 + 1e-6))     # Singer / CGL feasibility
  if valuation == "submodular":  # exact thresholds => no gain from any grid misreport
    mech = evaluate.cgl_mechanism()
    r = np.asarray(jax.jit(lambda m: evaluate.regrets(mech, m, GRID))(
        jax.tree.map(lambda a: a[:2], mk)))
    assert r.max() <= 1e-5


def test_optimum_matches_brute_force():
  for valuation in ("additive", "submodular"):
    mk = jax.tree.map(lambda x: x[0], _markets(6, valuation, batch=1))
    val, ok = markets.optimum(mk)
    cover, w = np.asarray(mk["cover"]), np.asarray(mk["weights"])
    costs, budget = np.asarray(mk["costs"]), float(mk["budget"])
    best = 0.0
    for subset in itertools.product([0, 1], repeat=N):
      s = np.asarray(subset, bool)
      if costs[s].sum() <= budget and s.any():
        best = max(best, float((w * cover[s].max(0)).sum()))
    assert ok
    assert abs(val - best) <= 1e-5 * max(best, 1.0)


def test_multilinear_relaxation_matches_value_at_vertices():
  mk = jax.tree.map(lambda x: x[0], _markets(7, "submodular", batch=1))
  s = jnp.asarray([1, 0, 1, 1, 0], jnp.float32)
  assert float(markets.multilinear(mk, s)) == pytest.approx(float(markets.value(mk, s)), 1e-6)
  # Expected coverage is strictly between the extremes for a fractional point.
  half = markets.multilinear(mk, 0.5 * jnp.ones(N))
  assert 0 < float(half) < float(markets.value(mk, jnp.ones(N)))


def test_regret_search_finds_known_gain():
  # Pay-your-bid at a 0.5 reserve: a seller with cost 0.2 gains 0.3 by bidding 0.5.
  costs = jnp.asarray([0.2, 0.7, 0.4])
  out_fn = lambda b: ((b <= 0.5).astype(jnp.float32), b * (b <= 0.5))
  rgt, _ = regretnet.regret(out_fn, costs, jnp.broadcast_to(GRID[None], (3, GRID.shape[0])))
  np.testing.assert_allclose(np.asarray(rgt), [0.3, 0.0, 0.1], atol=1e-6)


def test_misreport_ascent_matches_brute_force():
  # Smooth pay-your-bid: x(b) = sigmoid((0.5 - b) / 0.05), p = x b. Seller 0 (cost 0.2)
  # maximises (b - 0.2) x(b); a 100001-point NumPy search gives the reference optimum.
  costs = jnp.asarray([0.2, 0.7, 0.4])
  out_fn = lambda b: (jax.nn.sigmoid((0.5 - b) / 0.05), b * jax.nn.sigmoid((0.5 - b) / 0.05))
  init = jnp.asarray([[0.1, 0.9], [0.1, 0.9], [0.1, 0.9]])
  found = regretnet.ascend_misreports(out_fn, costs, init, steps=300, lr=0.01)
  b = np.linspace(0, 1, 100001)
  x = 1 / (1 + np.exp(-(0.5 - b) / 0.05))
  for i, c in enumerate(np.asarray(costs)):
    ref = np.max((b - c) * x)
    xf, pf = out_fn(found[i])
    got = np.max(np.asarray(pf - c * xf))
    assert got == pytest.approx(ref, abs=2e-4)
    assert np.all((np.asarray(found) >= 0) & (np.asarray(found) <= 1))


def test_expost_spend_draws_match_closed_form():
  # Two lotteries x = (0.5, 0.5) paying pi = 0.6 on a win, B = 1: overspend iff both win,
  # probability 1/4; realised spend is 0, 0.6 or 1.2; IR holds ex post (pi >= bid).
  x = jnp.asarray([0.5, 0.5])
  pi = jnp.asarray([0.6, 0.6])
  spends = np.asarray(regretnet.expost_spends(x, pi, jax.random.PRNGKey(0), 20000))
  levels = np.asarray([0.0, 0.6, 1.2])
  assert np.all(np.min(np.abs(spends[:, None] - levels[None]), axis=1) < 1e-6)
  assert np.mean(spends > 1.0) == pytest.approx(0.25, abs=0.015)
  soft = np.asarray(regretnet.relaxed_spend(x, pi, jax.random.PRNGKey(1), 20000, 0.01))
  assert soft.mean() == pytest.approx(0.6, abs=0.02)          # E[spend] = sum x pi


def test_regretnet_ir_shapes_and_training_steps():
  cfg = _config()
  model, opt, states = train_lib.init_states(cfg, "regretnet", jax.random.PRNGKey(0), 2)
  chunk = train_lib.make_chunk(train_lib.make_step(cfg, "regretnet", model, opt), 3)
  ids = jnp.stack([markets.cell_ids("additive", "uniform"),
                   markets.cell_ids("submodular", "bimodal")])
  states, m = chunk(states, jnp.asarray(0), ids)
  metrics_lib.check_finite(3, m)
  assert m["regret"].shape == (2,) and np.all(np.asarray(m["regret"]) >= 0)
  assert np.all(np.asarray(m["budget_violation"]) >= 0)
  assert np.all(np.asarray(states["lam"]) >= 0)
  state = jax.tree.map(lambda x: x[0], states)
  mk = jax.tree.map(lambda x: x[0], _markets(8, "additive"))
  z, pair = markets.features(mk)
  bids = jax.random.uniform(jax.random.PRNGKey(2), (7, N))
  x, p = model.apply({"params": state["params"]}, z, pair, bids)
  assert x.shape == p.shape == (7, N)
  assert np.all(np.asarray(p) >= np.asarray(x * bids) - 1e-7)   # IR by construction


def test_smoke_run_trains_and_audits(tmp_path):
  cfg = _config()
  res = experiment.train_and_evaluate(cfg, str(tmp_path))
  rows = metrics_lib.read_metrics(str(tmp_path), split="train")
  assert rows and all(np.isfinite(r["bfmnet/loss"]) for r in rows)
  assert res["bfmnet"]["budget_viol"] == 0 and res["bfmnet"]["ir_viol"] == 0
  assert res["bfmnet"]["losers_paid"] == 0
  assert 0.0 <= res["bfmnet"]["value_ratio"] <= 1.0 + 1e-6


def test_smoke_respects_explicit_args():
  cfg = _config("smoke,steps=20,n=6")
  assert cfg.optim.steps == 20 and cfg.market.n == 6 and cfg.optim.batch == 8


def test_resume_is_bitwise_exact(tmp_path):
  cfg = _config()   # the smoke config (10 steps in chunks of 5): its program is cached
  ids = jnp.stack([markets.cell_ids("additive", "uniform")])
  _, full, _ = experiment.train(cfg, "bfmnet", ids, str(tmp_path / "a"))
  _, part, _ = experiment.train(cfg, "bfmnet", ids, str(tmp_path / "b"), stop_at=5)
  _, resumed, _ = experiment.train(cfg, "bfmnet", ids, str(tmp_path / "b"))
  assert any(np.any(np.asarray(a) != np.asarray(b))
             for a, b in zip(jax.tree.leaves(part), jax.tree.leaves(full)))
  for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(full)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
