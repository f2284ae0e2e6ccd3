"""BFMNet (abstract 8): exact DSIC / IR / budget feasibility, baselines, relaxation, smoke."""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.papers.bfmnet import classical
from jaxpapers.papers.bfmnet import evaluate
from jaxpapers.papers.bfmnet import experiment
from jaxpapers.papers.bfmnet import grid_study
from jaxpapers.papers.bfmnet import markets
from jaxpapers.papers.bfmnet import mechanism
from jaxpapers.papers.bfmnet import menus
from jaxpapers.papers.bfmnet import regretnet
from jaxpapers.papers.bfmnet import train_lib

N = 5
BATCH = 4   # markets per test batch
GRID = jnp.linspace(0.0, 1.0, 21)


def _config(arg="smoke"):
  return config_lib.load("configs/bfmnet.py:" + arg)


# One menu network shape for every BFMNet test; parameters are passed as arguments, so
# each jitted check below compiles once and serves both settings.
MODEL = menus.MenuNet(hidden=8, channels=4, monotone=4)


def _net(seed, price_shift):
  # Shifting the price head's bias by +s equals an offset of -s: raw menus from far
  # below to far above the budget, so the transformation is exercised both when it binds
  # and when it does not.
  params = menus.init_params(jax.random.PRNGKey(seed), MODEL, N)
  head = params["_MLP_2"]["Dense_1"]
  params["_MLP_2"]["Dense_1"] = dict(head, bias=head["bias"].at[0].add(price_shift))
  return params


_sample = jax.jit(markets.sample_markets, static_argnums=(1, 2, 4))
# Jitted once per input shape: the hand-computed cases call them several times.
_singer = jax.jit(classical.singer)
_cgl = jax.jit(classical.cgl_random_sm)
_greedy_half = jax.jit(classical.greedy_half)
_spp = jax.jit(classical.spp)
_cgl_batch = jax.jit(jax.vmap(classical.cgl_random_sm))


def _markets(seed, valuation, dist="uniform"):
  # One batch size everywhere (BATCH): the sampler and every mechanism compile once.
  return _sample(jax.random.PRNGKey(seed), BATCH, N, markets.cell_ids(valuation, dist), 0.1)


def _bfm(params):
  return evaluate.bfmnet_mechanism(MODEL, params)


def _posted_prices(mech):
  """(markets, bids) -> every seller's posted price / threshold, read by letting that
  seller bid 0 (every seller accepts any non-negative price): one call for all n."""
  return lambda m, b: jax.vmap(lambda i: mech.seller(m, b.at[i].set(0.0), i)[1])(
      jnp.arange(b.shape[0]))


@jax.jit
def _bfm_full_and_prices(params, mk, bids):
  """The vmapped full mechanism and every seller's posted price t_i (mechanism.prices:
  the transformed price, which does not read b_i) in one compiled program."""
  def prices(m, b):
    return mechanism.prices(menus.raw_price_fn(MODEL, params, m), m["budget"], b)[0]
  return jax.vmap(_bfm(params).full)(mk, bids), jax.vmap(prices)(mk, bids)


_raw_full = jax.jit(lambda p, m, b: jax.vmap(evaluate.raw_menu_mechanism(MODEL, p).full)(m, b))
_bfm_regrets = jax.jit(lambda p, m: evaluate.regrets(_bfm(p), m, GRID))



@pytest.fixture(scope="module", params=[("additive", 6.0), ("submodular", 0.0)],
                ids=["additive-overpriced", "submodular-default"])
def setting(request):
  """One network and one batch of markets per setting, with the adversarial bid profiles
  built against it (shared by the budget and truthfulness tests)."""
  valuation, shift = request.param
  params = _net(3, shift)
  mk = _markets(11, valuation)
  full = lambda m, b: _bfm_full_and_prices(params, m, b)[0]
  prices = lambda m, b: _bfm_full_and_prices(params, m, b)[1]
  return {"valuation": valuation, "params": params, "mk": mk, "full": full,
          "profiles": _adversarial_profiles(prices, full, mk)}


@jax.jit
def _own_bid_sweep(params, mk):
  """(seller, misreport) prices of one market when seller i alone bids every grid point."""
  raw = menus.raw_price_fn(MODEL, params, mk)
  bids = mk["costs"]
  def for_i(i):
    return jax.vmap(lambda b: mechanism.price_one(raw, mk["budget"], jnp.where(
        jnp.arange(N) == i, b, bids), i)[0])(GRID)
  return jax.vmap(for_i)(jnp.arange(N))


def test_price_ignores_own_bid_bitwise(setting):
  t = np.asarray(_own_bid_sweep(setting["params"], jax.tree.map(lambda x: x[0], setting["mk"])))
  assert np.all(t == t[:, :1]), "a seller's price moved with its own bid"
  assert np.all(t >= 0)


def test_no_gain_from_any_misreport_on_grid(setting):
  # evaluate.regrets: misreport utilities from the seller view (price_one), the truthful
  # utility from the full mechanism (outcome), i.e. not the same batch or code path.
  r = np.asarray(_bfm_regrets(setting["params"], setting["mk"]))
  assert r.shape == (BATCH, N)
  assert r.max() <= 1e-6   # truthful utility comes from the full mechanism: round-off only


def test_regret_audit_catches_a_seller_view_that_reads_own_bid():
  # The truthful utility comes from `full`, misreports from `seller`: a mechanism whose
  # seller view pays the bid plus 0.1 must show regret, not cancel against itself.
  mk = _markets(1, "additive")
  full = lambda m, b: (jnp.ones_like(b), 0.5 * jnp.ones_like(b), 0.0, 0.0)
  leaky = evaluate.Mechanism(full, lambda m, b, i: (1.0, b[i] + 0.1))
  r = np.asarray(jax.jit(lambda m: evaluate.regrets(leaky, m, GRID))(mk))
  np.testing.assert_allclose(r, np.maximum(1.1 - 0.5, 0.0) * np.ones((BATCH, N)), atol=1e-6)


def test_budget_ir_and_payments_on_random_bid_profiles(setting):
  mk, full, params = setting["mk"], setting["full"], setting["params"]
  budget = np.asarray(mk["budget"])
  raw_over, any_win = False, False
  for k in range(8):                       # 32 arbitrary (not truthful) profiles
    bids = jax.random.uniform(jax.random.PRNGKey(9 + k), (BATCH, N))
    x, pay, _, spend = map(np.asarray, full(mk, bids))
    assert np.all(spend <= budget * (1 + 1e-6)), "budget violated"
    assert np.all(pay[x == 1] >= np.asarray(bids)[x == 1]), "a winner was paid below its bid"
    assert np.all(pay[x == 0] == 0), "a loser was paid"
    assert np.all(pay >= 0)
    raw_over |= bool(np.any(np.asarray(_raw_full(params, mk, bids)[3]) > budget))
    any_win |= bool(np.any(x == 1))
  if setting["valuation"] == "additive":  # the over-priced net: raw menus overspend
    assert raw_over, "the over-priced raw menus should overspend, so the map binds"
    assert any_win, "the transformation should not simply shut the market"


def _adversarial_profiles(prices, full, mk, rng_seed=0, rounds=1):
  """Bid profiles built against the mechanism, per instance: every seller at its posted
  price, one float step below it, and coordinate ascent on total spend (each seller in
  turn moves to the grid point or price-edge bid that maximises the total payment).
  `prices(mk, bids)` -> every seller's posted price, `full` the vmapped mechanism."""
  n = mk["costs"].shape[1]
  profiles = []
  bids = mk["costs"]
  t = prices(mk, bids)
  profiles += [t, jnp.nextafter(t, -jnp.inf)]
  bids = jax.random.uniform(jax.random.PRNGKey(rng_seed), mk["costs"].shape)
  batch = bids.shape[0]
  cand_grid = jnp.linspace(0.0, 1.0, 6)
  for _ in range(rounds):
    for i in range(n):
      t_i = prices(mk, bids)[:, i]
      cands = jnp.concatenate([jnp.broadcast_to(cand_grid, (batch, 6)),
                               t_i[:, None], jnp.nextafter(t_i, -jnp.inf)[:, None]], 1)
      spends = []
      for k in range(cands.shape[1]):
        prof = bids.at[:, i].set(cands[:, k])
        profiles.append(prof)
        spends.append(np.asarray(full(mk, prof)[3]))
      best = np.argmax(np.stack(spends, 1), 1)
      bids = bids.at[:, i].set(cands[jnp.arange(batch), best])
  return profiles


def test_budget_and_ir_on_adversarial_profiles(setting):
  mk, full = setting["mk"], setting["full"]
  budget = np.asarray(mk["budget"])
  assert len(setting["profiles"]) == 2 + N * 8
  for prof in setting["profiles"]:
    x, pay, _, spend = map(np.asarray, full(mk, prof))
    assert np.all(spend <= budget * (1 + 1e-6)), "budget violated on an adversarial profile"
    assert np.all(pay[x == 1] >= np.asarray(prof)[x == 1] - 1e-7)
    assert np.all(pay[x == 0] == 0)


def _edges(name, mk, bids):
  """(batch, n, k) bids where each seller's outcome can switch: its posted price or
  threshold (read by bidding 0, `_posted_prices`); for CGL the threshold of its greedy
  branch (GREEDY-SM with B/2, the greedy-half mechanism's) and B (the top branch)."""
  thr = _classical("greedy_half" if name == "cgl" else name)[2](mk, bids)
  out = [thr] + ([jnp.broadcast_to(mk["budget"][:, None], thr.shape)] if name == "cgl" else [])
  return jnp.stack(out, -1)


@functools.cache
def _classical(name):
  """(mechanism, jitted vmapped full outcome, jitted vmapped posted prices / thresholds),
  built once per name and shared by every test."""
  mech = {"singer": evaluate.singer_mechanism(), "cgl": evaluate.cgl_mechanism(),
          "greedy_half": evaluate.greedy_half_mechanism(),
          "spp": evaluate.spp_mechanism(2.0)}[name]
  return mech, jax.jit(jax.vmap(mech.full)), jax.jit(jax.vmap(_posted_prices(mech)))


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
  _, full, prices = _classical(name)
  mk = _markets(13, valuation, dist="bimodal")
  every = _adversarial_profiles(prices, full, mk)
  profiles = [every[0], every[1], every[-1]]   # at the price, a step below, ascent's end
  budget = np.asarray(mk["budget"])
  for costs in profiles:
    x, p, _, spend = map(np.asarray, full(mk, costs))
    u_true = p - np.asarray(costs) * x
    edges = _edges(name, mk, costs)
    for i in range(N):
      e = edges[:, i]                                             # (batch, edges)
      cands = jnp.concatenate([jnp.broadcast_to(jnp.linspace(0.0, 1.0, 6), (BATCH, 6)), e,
                               jnp.nextafter(e, -jnp.inf), jnp.nextafter(e, jnp.inf)], 1)
      for k in range(cands.shape[1]):
        xm, pm, _, _ = map(np.asarray, full(mk, costs.at[:, i].set(cands[:, k])))
        gain = pm[:, i] - np.asarray(costs)[:, i] * xm[:, i] - u_true[:, i]
        assert gain.max() <= 1e-6, f"seller {i} gained {gain.max()} by bidding {cands[:, k]}"
    if name == "cgl":
      br = _cgl_batch(mk, costs)[2]
      spend = np.maximum(np.asarray(br["top"][1]).sum(1), np.asarray(br["greedy"][1]).sum(1))
    assert np.all(spend <= budget * (1 + 1e-6)), "budget violated ex post"


@jax.jit
def _bfm_best_gain(params, mk_B, costs_BxN):
  """Per market and seller: the best utility over the grid, the seller's own price and
  one float step either side (seller view, price_one) minus the truthful utility (full
  mechanism, a separate computation)."""
  mech = _bfm(params)

  def gain(m, costs):
    raw = menus.raw_price_fn(MODEL, params, m)
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
  return jax.vmap(gain)(mk_B, costs_BxN)


def test_bfmnet_truthful_on_adversarial_profiles(setting):
  # Others bid adversarially (at their prices, a float step below, spend ascent); the
  # profile is taken as the true costs and no seller gains from any deviation tried.
  for prof in setting["profiles"][::3]:
    assert np.asarray(_bfm_best_gain(setting["params"], setting["mk"], prof)).max() <= 1e-6


def test_raw_prices_monotone_in_other_bids():
  params = _net(4, 0.0)
  mk = jax.tree.map(lambda x: x[0], _markets(3, "submodular"))
  raw = jax.jit(menus.raw_price_fn(MODEL, params, mk))
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
  x, p = _singer(mk, jnp.ones(3))
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
  x, p, br = _cgl(mk, bids)
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
  _, _, br = _cgl(mk, jnp.asarray([1.5, 0.9, 0.1]))
  np.testing.assert_array_equal(np.asarray(br["top"][0]), [0, 1, 0])
  np.testing.assert_allclose(np.asarray(br["top"][1]), [0, 1.0, 0])
  mech = evaluate.cgl_mechanism()
  seller_1 = jax.jit(lambda m, b: mech.seller(m, b, 1))
  for bid, wins in ((0.2, 1), (1.0, 1), (1.01, 0)):
    b = jnp.asarray([1.5, bid, 0.1])
    _, _, br = _cgl(mk, b)
    assert float(br["top"][0][1]) == wins
    # the seller view (used by the regret audit) agrees with the full mechanism
    x_i, p_i = seller_1(mk, b)
    x, p, _ = _cgl(mk, b)
    assert float(x_i) == pytest.approx(float(x[1])) and float(p_i) == pytest.approx(float(p[1]))
  # Nobody affordable: the top branch buys nothing.
  _, _, br = _cgl(mk, jnp.asarray([2.0, 2.0, 2.0]))
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
  x, p = _greedy_half(mk, jnp.asarray([0.5, 0.5, 0.45]))
  np.testing.assert_array_equal(np.asarray(x), [1, 1, 0])
  np.testing.assert_allclose(np.asarray(p), [6 / 7, 9 / 14, 0], rtol=1e-6)


def test_spp_hand_example():
  # Values (5, 3, 1), v(N) = 9, B = 1, bids (1.5, .9, .1). Visit order = marginal value.
  # alpha = 1: prices 5/9, 3/9, 1/9; s0 and s1 refuse, s2 sells at 1/9.
  # alpha = 3: s0's price 5/3 exceeds the budget left (not offered); s1 is offered 1 and
  # sells, leaving 0; s2's price 1/3 is then not offered.
  mk = _additive([5.0, 3.0, 1.0], 1.0)
  bids = jnp.asarray([1.5, 0.9, 0.1])
  x, p = _spp(mk, bids, 1.0)
  np.testing.assert_array_equal(np.asarray(x), [0, 0, 1])
  np.testing.assert_allclose(np.asarray(p), [0, 0, 1 / 9], rtol=1e-6)
  x, p = _spp(mk, bids, 3.0)
  np.testing.assert_array_equal(np.asarray(x), [0, 1, 0])
  np.testing.assert_allclose(np.asarray(p), [0, 1.0, 0], rtol=1e-6)
  # Coverage: s0 = {0, 1}, s1 = {1}, weights (1, 1), B = 1, alpha = 1, v(N) = 2. s0 is
  # visited first at price 1 and sells; s1's marginal is then 0 (price 0, bid .1: refuses).
  cover = jnp.asarray([[1, 1], [0, 1]], jnp.float32)
  mk = {"costs": jnp.zeros(2), "weights": jnp.ones(2), "cover": cover,
        "budget": jnp.asarray(1.0)}
  x, p = _spp(mk, jnp.asarray([0.9, 0.1]), 1.0)
  np.testing.assert_array_equal(np.asarray(x), [1, 0])
  np.testing.assert_allclose(np.asarray(p), [1.0, 0], rtol=1e-6)


@pytest.mark.parametrize("name", ["cgl", "greedy_half", "spp"])
def test_truthful_baselines_no_regret_budget_feasible(name):
  mk = _markets(12, "submodular", dist="bimodal")
  mech, full, _ = _classical(name)
  r = np.asarray(jax.jit(lambda m: evaluate.regrets(mech, m, GRID))(mk))
  assert r.max() <= 1e-5
  bids = jax.random.uniform(jax.random.PRNGKey(3), (BATCH, N))
  _, _, _, spend = full(mk, bids)
  assert np.all(np.asarray(spend) <= np.asarray(mk["budget"]) * (1 + 1e-6))


@pytest.mark.parametrize("name,valuation", [("singer", "additive"),
                                            ("greedy_half", "submodular")])
def test_classical_thresholds_consistent_and_budget_feasible(name, valuation):
  # The winners of the greedy run (full mechanism) are exactly the sellers bidding at most
  # their threshold (classical.threshold, read through the seller view), winners are paid
  # it, and the payments fit the share (Singer: B; GREEDY-SM: B/2).
  _, full, prices = _classical(name)
  for seed in range(4):                                     # 16 markets
    mk = _markets(5 + seed, valuation, dist="bimodal")
    costs = mk["costs"]
    x, pay, _, spend = map(np.asarray, full(mk, costs))
    thr = np.asarray(prices(mk, costs))
    np.testing.assert_array_equal(x == 1, np.asarray(costs) <= thr)
    np.testing.assert_allclose(pay, thr * x, rtol=1e-6)
    share = np.asarray(mk["budget"]) * (1.0 if name == "singer" else 0.5)
    assert np.all(spend <= share * (1 + 1e-6))
  # (no gain from any grid misreport with these thresholds: the regrets tests above)


def test_optimum_matches_brute_force():
  for valuation in ("additive", "submodular"):
    mk = jax.tree.map(lambda x: x[0], _markets(6, valuation))
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
  mk = jax.tree.map(lambda x: x[0], _markets(7, "submodular"))
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


def test_smoke_respects_explicit_args():
  cfg = _config("smoke,steps=20,n=6")
  assert cfg.optim.steps == 20 and cfg.market.n == 6 and cfg.optim.batch == 8


def test_resume_is_bitwise_exact(tmp_path):
  # The smoke run (10 steps in chunks of 5, checkpointed): finite losses, no violation;
  # then a run killed after step 5 and restarted on its workdir ends bitwise where the
  # uninterrupted run did (same compiled chunk, so this costs no extra compilation).
  cfg = _config()
  res = experiment.train_and_evaluate(cfg, str(tmp_path / "a"))
  rows = metrics_lib.read_metrics(str(tmp_path / "a"), split="train")
  assert rows and all(np.isfinite(r["bfmnet/loss"]) for r in rows)
  assert res["bfmnet"]["budget_viol"] == 0 and res["bfmnet"]["ir_viol"] == 0
  assert res["bfmnet"]["losers_paid"] == 0
  assert 0.0 <= res["bfmnet"]["value_ratio"] <= 1.0 + 1e-6
  ids = jnp.stack([markets.cell_ids(cfg.market.valuation, cfg.market.cost_dist)])
  from tests import _runs  # pylint: disable=g-import-not-at-top
  _, full, _ = experiment.train(cfg, "bfmnet", ids, str(tmp_path / "a"))  # restores step 10
  b = str(tmp_path / "b")
  _, part, _ = experiment.train(cfg, "bfmnet", ids, b, stop_at=5,
                                writer=metrics_lib.MetricsWriter(b, verbose=False))
  _, resumed, _ = experiment.train(cfg, "bfmnet", ids, b,
                                   writer=metrics_lib.MetricsWriter(b, verbose=False))
  # The resumed run's rows equal the uninterrupted run's BFMNet training rows.
  _runs.assert_same_metrics(b, tmp_path / "a",
                            keep=lambda r: r["split"] == "train" and "bfmnet/loss" in r)
  assert any(np.any(np.asarray(a) != np.asarray(b))
             for a, b in zip(jax.tree.leaves(part), jax.tree.leaves(full)))
  for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(full)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _sweep_rows(method, values, regrets=None, overspends=None, cell="additive_uniform"):
  rows = []
  for s, v in enumerate(values):
    r = {"n": 5, "cell": cell, "method": method, "setting": s, "lr": 10.0 ** -(s + 2),
         "val_value": v}
    if regrets is not None:
      r.update(val_regret=regrets[s], val_overspend=overspends[s])
    rows.append(r)
  return rows


def test_grid_selection_reads_validation_rows_only():
  # Hand-computed choices. BFMNet: best validation value (setting 1). RegretNet: settings
  # 1 and 2 are admissible (regret <= 0.005, overspend <= 5%), 1 has the higher value;
  # setting 0 has the highest value but violates.
  bfm = _sweep_rows("bfmnet", [0.5, 0.7, 0.6])
  rgn = _sweep_rows("regretnet", [0.9, 0.4, 0.1], [0.02, 0.004, 0.001], [0.3, 0.01, 0.0])
  key_b, key_r = (5, "additive_uniform", "bfmnet"), (5, "additive_uniform", "regretnet")
  choice = grid_study.choose(bfm + rgn, 0.005, 0.05)
  assert choice == {key_b: 1, key_r: 1}
  # Test-set numbers planted in the rows (favouring other settings) and a shuffled order
  # change nothing: the selector reads the validation fields only.
  planted = [dict(r, value_ratio=10.0 * r["setting"], test_value=-r["setting"],
                  regret_max=0.0, budget_viol=0) for r in (bfm + rgn)[::-1]]
  assert grid_study.choose(planted, 0.005, 0.05) == choice
  # ... while the validation fields do drive it.
  bfm[2]["val_value"] = 0.8
  rgn[1]["val_overspend"] = 0.2                       # now only setting 2 is admissible
  assert grid_study.choose(bfm + rgn, 0.005, 0.05) == {key_b: 2, key_r: 2}
  # No admissible setting: the smallest regret + overspend (setting 1: 0.004 + 0.06).
  rgn = _sweep_rows("regretnet", [0.9, 0.4, 0.1], [0.02, 0.004, 0.3], [0.3, 0.06, 0.0])
  assert grid_study.choose(rgn, 0.005, 0.05) == {key_r: 1}


def test_validation_markets_are_not_test_markets():
  # The grid study's validation markets (own key) share no instance with the test set.
  cfg = _config()
  ids = markets.cell_ids("submodular", "uniform")
  val = _sample(jax.random.PRNGKey(cfg.seed + grid_study.VAL_KEY_OFFSET), 64, N, ids, 0.1)
  test = _sample(jax.random.PRNGKey(cfg.seed + 10_007), 128, N, ids, 0.1)
  d = np.abs(np.asarray(val["costs"])[:, None] - np.asarray(test["costs"])[None]).sum(-1)
  assert d.min() > 1e-6


def test_grid_sweep_spread_over_8_devices_matches_one_device_and_a_plain_run():
  # Issue 51: the grid study's runs (cells x lr x hinge x seed) are split over every device
  # by core.sharding.spread (vmapped, or with map_runs a lax.map per device). One sweep
  # cell of 3 runs (on 3 of the 8 devices) must equal the previous 1-device program,
  # jax.jit(jax.vmap(one run)), as the committed study tables were computed.
  # The same 3-run program also checks the per-run seed and hinge weight: a run with state
  # seed 0 and hinge weight 0 must be the run with cfg.seed = 0 (same initialisation, same
  # data stream), whatever else shares the program (whose own cfg.seed is 1, so a state
  # seed that were ignored would show). The plain run is the smoke config's first chunk
  # (the smoke test's, the resume test's and the notebook's compiled program).
  assert jax.device_count() == 8
  cfg = _config("smoke,seed=1")
  ids = jnp.stack([markets.cell_ids("additive", "uniform"),
                   markets.cell_ids("submodular", "bimodal"),
                   markets.cell_ids("submodular", "uniform")])
  model, opt, states = train_lib.init_states(cfg, "bfmnet", jax.random.PRNGKey(0), 3,
                                             lrs=[cfg.optim.lr, 1e-2, 3e-3], seeds=[0, 1, 2],
                                             penalties=[0.0, 1.0, 0.0])
  length = cfg.optim.log_every
  step = train_lib.make_step(cfg, "bfmnet", model, opt)
  one_device = jax.jit(jax.vmap(train_lib.cell_fn(step, length), in_axes=(0, None, 0)))
  ref, ref_m = one_device(states, jnp.asarray(0), ids)
  assert len(jax.tree.leaves(ref["params"])[0].devices()) == 1
  out, m = train_lib.make_chunk(step, length)(states, jnp.asarray(0), ids)
  leaf = jax.tree.leaves(out["params"])[0]
  assert leaf.shape[0] == 3                      # the padding is dropped
  assert len(leaf.devices()) == 3, leaf.sharding  # one run per device, 3 of the 8
  for a, b in zip(jax.tree.leaves((ref, ref_m)), jax.tree.leaves((out, m))):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)
  # the three runs really differ (seeds, rates, cells), so equality is not trivial
  v = np.asarray(ref_m["value"])
  assert np.ptp(v) > 1e-4
  # Run 0 (state seed 0, hinge 0, cfg.optim.lr) is the plain cfg.seed = 0 run, stopped
  # after the same chunk; run 1 (seed 1) is a different run.
  plain = _config("smoke")
  assert plain.optim.log_every == length and plain.optim.steps == cfg.optim.steps
  _, alone, _ = experiment.train(plain, "bfmnet", ids[:1], stop_at=length)
  differs = False
  for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(out["params"])):
    np.testing.assert_allclose(np.asarray(b)[0], np.asarray(a)[0], rtol=1e-5, atol=1e-6)
    differs |= bool(np.any(np.abs(np.asarray(b)[1] - np.asarray(a)[0]) > 1e-4))
  assert differs   # the seed-1 run is a different run


def test_map_runs_blocks_per_device_match_the_vmapped_runs():
  # map_runs pads R runs to a multiple of the devices and lax.maps each device's block: a
  # per-run toy step (cheap to compile; the BFMNet step is checked above) must give every
  # run's own result in order, for R not a multiple of 8.
  def step(state, i, ids):
    x = state["x"] * (1.0 + 0.1 * ids[0]) + jnp.sin(i + ids[1] + state["x"])
    return dict(state, x=x), {"x": x}
  states = {"x": jnp.linspace(-1.0, 1.0, 5 * 3).reshape(5, 3)}
  ids = jnp.arange(10, dtype=jnp.int32).reshape(5, 2)
  ref = jax.jit(jax.vmap(train_lib.cell_fn(step, 3), in_axes=(0, None, 0)))(
      states, jnp.asarray(2), ids)
  out = train_lib.make_chunk(step, 3, map_runs=True)(states, jnp.asarray(2), ids)
  assert out[0]["x"].shape == (5, 3)
  for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(out)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6)


# ---- issue 17: Singer priors, the shrunk evaluation point, the RochetNet-style menus ----

_singer_closed = jax.jit(jax.vmap(classical.singer_prices_additive))
_singer_trace = jax.jit(jax.vmap(lambda m, b: jax.vmap(
    lambda i: classical.threshold(m, b, m["budget"], i))(jnp.arange(b.shape[0]))))


def test_singer_closed_form_prices_match_greedy_thresholds():
  # Closed form (sorting-free candidates) vs the greedy-trace threshold of classical.py,
  # on truthful, random and at-threshold (tie) bid profiles of additive markets.
  mk = _markets(21, "additive", "bimodal")
  for bids in (mk["costs"], jax.random.uniform(jax.random.PRNGKey(5), (BATCH, N)),
               _singer_trace(mk, mk["costs"])):
    got = np.asarray(_singer_closed(mk, bids[:, None])[:, 0])
    np.testing.assert_allclose(got, np.asarray(_singer_trace(mk, bids)), atol=1e-6)


def _prior_model(prior, shrink=0.0):
  return menus.MenuNet(hidden=8, channels=4, monotone=4, prior=prior, shrink=shrink)


@pytest.mark.parametrize("prior", ["feature", "residual"])
def test_singer_prior_prices_monotone_and_ignore_own_bid(prior):
  # The budget proof needs raw prices that never read the own bid and are non-decreasing
  # in every other bid; with Singer's prices inside (as input or as the residual's base)
  # both must still hold. The residual's gain is set to 0.5 so the correction is active.
  model = _prior_model(prior)
  params = menus.init_params(jax.random.PRNGKey(4), model, N)
  if prior == "residual":
    params = dict(params, residual_gain=jnp.asarray(0.5))
  mk = jax.tree.map(lambda x: x[0], _markets(3, "additive"))
  raw = jax.jit(menus.raw_price_fn(model, params, mk))
  base = jax.random.uniform(jax.random.PRNGKey(1), (N,))
  for j in range(N):
    prof = jnp.stack([base.at[j].set(b) for b in GRID])       # vary seller j's bid
    t0 = np.asarray(raw(prof))
    others = [i for i in range(N) if i != j]
    assert np.all(np.diff(t0[:, others], axis=0) >= -1e-7), f"not monotone in b_{j}"
    assert np.all(t0[:, j] == t0[0, j]), "a raw price read the own bid"


def test_residual_starts_at_singer_and_shrink_lets_singer_pass():
  # At init (gain 0) the residual menus are Singer's prices. Through the transformation
  # at the closed end (shrink 0) some Singer winner is cut on these markets; with the
  # shrunk evaluation point every winner set equals Singer's and each payment is Singer's
  # threshold times (1 - shrink).
  mk = _sample(jax.random.PRNGKey(7), 32, 10, markets.cell_ids("additive", "uniform"), 0.1)
  w0, p0 = map(np.asarray, jax.jit(jax.vmap(lambda m: classical.singer(m, m["costs"])))(mk))
  outs = {}
  for shrink in (0.0, 1e-4):
    model = menus.MenuNet(hidden=8, channels=4, monotone=4, prior="residual", shrink=shrink)
    params = menus.init_params(jax.random.PRNGKey(0), model, 10)
    # the raw prices at truthful bids and the mechanism's outcomes: one compiled program
    raw0, out = jax.jit(lambda m: (  # pylint: disable=cell-var-from-loop
        jax.vmap(lambda mm: menus.raw_price_fn(model, params, mm)(mm["costs"][None])[0])(m),
        evaluate.outcomes(evaluate.bfmnet_mechanism(model, params), m)))(mk)
    np.testing.assert_allclose(np.asarray(raw0), np.asarray(_singer_trace(mk, mk["costs"])),
                               rtol=1e-5, atol=1e-7)
    outs[shrink] = tuple(map(np.asarray, out))
  assert np.any(outs[0.0][0] != w0), "expected the closed-end map to cut a Singer winner"
  x, pay = outs[1e-4][:2]
  np.testing.assert_array_equal(x, w0)
  np.testing.assert_allclose(pay, p0 * (1 - 1e-4), rtol=1e-5, atol=1e-7)


_GRID6 = np.linspace(0, 1, 6).astype(np.float32)   # the misreport grid of the audits below


def _deviations(mech):
  """Jitted (markets, bids_BxN, cands_NxBxK) -> seller i's (x_i, pay_i) when it alone bids
  cands[i, :, k] and the others bid `bids` ((N, B, K) each, from mech.seller): every
  seller and every candidate bid in one compiled program."""
  def one(m, bids_N, cands_NxK):
    return jax.vmap(lambda i, c_K: jax.vmap(lambda b: mech.seller(m, bids_N.at[i].set(b), i))(
        c_K))(jnp.arange(N), cands_NxK)
  return jax.jit(jax.vmap(one, in_axes=(0, 0, 1), out_axes=1))


def _assert_no_gain(deviate, mk, prof, u_true, cands):
  """No seller gains over its truthful utility u_true (batch, N) by any bid of `cands`
  (grid points, or (N, batch, k) per-seller bids) when the others bid `prof`."""
  cands = jnp.concatenate([jnp.broadcast_to(c, (N, BATCH, np.shape(c)[-1])) for c in cands], -1)
  xm, pm = map(np.asarray, deviate(mk, prof, cands))
  gain = pm - np.asarray(prof).T[..., None] * xm - u_true.T[..., None]
  i, b, k = np.unravel_index(np.argmax(gain), gain.shape)
  assert gain.max() <= 1e-6, f"seller {i} gained {gain.max()} by bidding {cands[i, b, k]}"


def test_shrunk_map_budget_and_truthful_on_adversarial_profiles():
  # A residual net far from Singer (gain 2: prices up to 2x Singer's, so raw menus
  # overspend and the shrunk map binds), on adversarial profiles built against it.
  model = _prior_model("residual", shrink=1e-4)
  params = dict(menus.init_params(jax.random.PRNGKey(2), model, N),
                residual_gain=jnp.asarray(2.0))
  mech = evaluate.bfmnet_mechanism(model, params)
  full = jax.jit(jax.vmap(mech.full))
  prices = jax.jit(jax.vmap(_posted_prices(mech)))
  mk = _markets(17, "additive", "bimodal")
  profiles = _adversarial_profiles(prices, full, mk)
  budget = np.asarray(mk["budget"])
  raw = jax.jit(jax.vmap(evaluate.raw_menu_mechanism(model, params).full))
  assert any(np.any(np.asarray(raw(mk, p)[3]) > budget) for p in profiles), \
      "the raw menus should overspend somewhere, or the map is not exercised"
  deviate = _deviations(mech)
  for prof in profiles[::4]:
    x, pay, _, spend = map(np.asarray, full(mk, prof))
    assert np.all(spend <= budget * (1 + 1e-6)), "budget violated"
    assert np.all(pay[x == 1] >= np.asarray(prof)[x == 1] - 1e-7)
    u_true = pay - np.asarray(prof) * x
    t = jnp.asarray(prices(mk, prof)).T[..., None]                   # (N, batch, 1)
    _assert_no_gain(deviate, mk, prof, u_true, [
        _GRID6, t, jnp.nextafter(t, -jnp.inf), jnp.nextafter(t, jnp.inf)])


def test_rochetnet_choice_hand_example():
  # Options (x, pi) = (1, .3), (.5, .5). Bid .1: utilities .2 and .2 -> tie, the lower
  # index (the posted price); bid .2: .1 < .15 -> the lottery; bid .35: -.05 < .075 ->
  # the lottery; bid .6: both negative -> null option (0, 0).
  from jaxpapers.papers.bfmnet import rochetnet
  x_k = jnp.asarray([[1.0, 0.5]] * 4)
  pi_k = jnp.asarray([[0.3, 0.5]] * 4)
  x, pi = map(np.asarray, rochetnet.choose(x_k, pi_k, jnp.asarray([0.1, 0.2, 0.35, 0.6])))
  np.testing.assert_allclose(x, [1.0, 0.5, 0.5, 0.0])
  np.testing.assert_allclose(pi, [0.3, 0.5, 0.5, 0.0])


def test_rochetnet_truthful_and_budget_feasible_on_adversarial_profiles():
  # Bid-independent menus: every seller at each of its option prices, one float step
  # below, and coordinate ascent on the realised spend; the worst realisation (every
  # seller with x > 0 selling at its option's price) never exceeds B, and no seller
  # gains from any bid tried (grid, every option price and a float step either side).
  from jaxpapers.papers.bfmnet import rochetnet
  model = rochetnet.RochetMenu(hidden=8, options=3)
  params = rochetnet.init_params(jax.random.PRNGKey(6), model, N)
  mech = evaluate.rochetnet_mechanism(model, params)
  full = jax.jit(jax.vmap(mech.full))
  mk = _markets(19, "submodular")
  menu = jax.jit(jax.vmap(lambda m: model.apply({"params": params}, *markets.features(m),
                                                m["budget"])))
  x_k, pi_k = map(np.asarray, menu(mk))
  budget = np.asarray(mk["budget"])
  assert np.all(pi_k.max(2).sum(1) <= budget * (1 + 1e-6))
  top = lambda m, b: jnp.asarray(pi_k.max(2))
  profiles = _adversarial_profiles(top, full, mk)
  profiles += [jnp.asarray(pi_k[:, :, k]) for k in range(3)]
  profiles += [jnp.nextafter(jnp.asarray(pi_k[:, :, k]), -jnp.inf) for k in range(3)]
  deviate = _deviations(mech)
  pi = jnp.asarray(pi_k).transpose(1, 0, 2)                          # (N, batch, options)
  for prof in profiles[::3]:
    x, pay, _, spend = map(np.asarray, full(mk, prof))
    assert np.all(spend <= budget * (1 + 1e-6)), "realised spend above B"
    assert np.all(pay >= np.asarray(prof) * x - 1e-7), "IR violated"
    u_true = pay - np.asarray(prof) * x
    _assert_no_gain(deviate, mk, prof, u_true, [
        _GRID6, jnp.nextafter(pi, -jnp.inf), jnp.nextafter(pi, jnp.inf), pi])


def test_es_gradient_matches_the_analytic_gradient_of_a_quadratic():
  # Antithetic differences are exact directional derivatives for a quadratic, so the
  # estimate is M grad with M = mean(eps eps^T) -> I: with 4000 pairs in 3 dimensions
  # it must be within a few percent of the closed-form gradient -2 (theta - a).
  a = {"w": jnp.array([0.3, -1.0]), "b": jnp.array(2.0)}
  theta = {"w": jnp.array([1.0, 0.5]), "b": jnp.array(-0.5)}
  f = lambda p: -(jnp.sum((p["w"] - a["w"]) ** 2) + (p["b"] - a["b"]) ** 2)
  g, mean_v = train_lib.es_grad(f, theta, jax.random.PRNGKey(0), 4000, 0.1)
  want = {"w": 2 * (theta["w"] - a["w"]), "b": 2 * (theta["b"] - a["b"])}  # grad of -f
  np.testing.assert_allclose(g["w"], want["w"], rtol=0.08, atol=0.08)
  np.testing.assert_allclose(g["b"], want["b"], rtol=0.08, atol=0.08)
  # mean perturbed value = f(theta) - sigma^2 d (Gaussian smoothing of a quadratic)
  np.testing.assert_allclose(mean_v, f(theta) - 0.01 * 3, rtol=0.02)


def test_tau_anneal_endpoints_and_hard_value_of_an_overpriced_net():
  cfg = _config("smoke,tau=0.05,tau_end=0.005,steps=10")
  np.testing.assert_allclose(train_lib.tau_at(cfg, 0), 0.05, rtol=1e-6)
  np.testing.assert_allclose(train_lib.tau_at(cfg, 5), np.sqrt(0.05 * 0.005), rtol=1e-5)
  np.testing.assert_allclose(train_lib.tau_at(cfg, 10), 0.005, rtol=1e-5)
  assert train_lib.tau_at(_config("smoke"), 7) == 0.05   # no anneal: the constant
  # The ES objective is the hard mechanism's value: a brute-force NumPy recomputation
  # (posted prices from mechanism.prices, sale iff cost <= price, additive value).
  mk = _markets(3, "additive")
  params = _net(0, 1.0)
  # the hard value and the posted prices it must agree with: one compiled program
  got, t_BxN = jax.jit(lambda p, mk: (train_lib.bfm_hard_value(p, MODEL, mk), jax.vmap(
      lambda m: mechanism.prices(menus.raw_price_fn(MODEL, p, m), m["budget"],
                                 m["costs"])[0])(mk)))(params, mk)
  got, t_BxN = float(got), np.asarray(t_BxN)
  want = []
  for b in range(BATCH):
    m = jax.tree.map(np.asarray, jax.tree.map(lambda x: x[b], mk))
    win = m["costs"] <= t_BxN[b]
    covered = (m["cover"] * win[:, None]).max(0)
    want.append((m["weights"] * covered).sum() / m["weights"].sum())
  np.testing.assert_allclose(got, np.mean(want), rtol=1e-5)


def test_extension_rows_keep_only_cells_where_the_union_choice_is_new():
  # Cell a: the new setting wins on validation -> its rows replace the old ones; cell b:
  # the old choice stays -> no new rows. A planted test value must not matter.
  old = [{"n": 5, "cell": "additive_uniform", "method": "bfmnet", "setting": 0, "lr": 0.01,
          "penalty": 0.0, "val_value": 1.0, "chosen": True},
         {"n": 5, "cell": "additive_bimodal", "method": "bfmnet", "setting": 0, "lr": 0.01,
          "penalty": 0.0, "val_value": 2.0, "chosen": True}]
  new = [{"n": 5, "cell": "additive_uniform", "method": "bfmnet", "setting": 0,
          "lr": 0.003, "penalty": 1.0, "val_value": 1.5, "chosen": True},
         {"n": 5, "cell": "additive_bimodal", "method": "bfmnet", "setting": 0,
          "lr": 0.003, "penalty": 1.0, "val_value": 1.9, "chosen": True}]
  rows = [{"n": 5, "valuation": "additive", "costs": c, "method": "bfmnet", "seed": s,
           "lr": 0.003, "penalty": 1.0, "value_ratio": 9.0 if c == "bimodal" else 0.1}
          for c in ("uniform", "bimodal") for s in range(3)]
  got = grid_study.extension_rows(old, new, rows)
  assert [(r["costs"], r["seed"]) for r in got] == [("uniform", s) for s in range(3)]
