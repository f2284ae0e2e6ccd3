"""lhdlm's study pieces: the synthetic generator's exact entropy rate, the add-k bigram,
LHDLM's logged terms, and the study's cached cells (a chunked study reassembles)."""
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.core import config as config_lib
from jaxpapers.data import text as text_lib
from jaxpapers.papers.lhdlm import data as data_lib
from jaxpapers.papers.lhdlm import model as model_lib
from jaxpapers.papers.lhdlm import study
from tests.test_lhdlm import loop_eval


def test_source_filter_is_the_generators_direct_conditional():
  """Order 1, no overlap: once a window has shown a content token, the class is known and
  P(next | past) has a closed form; the forward filter must give exactly that."""
  K, n, F, pf = 3, 4, 2, 0.3
  tok, labels, V = data_lib.synthetic(3000, K, n, F, pf, 0.0, seed=1, order=1)
  _, trans = data_lib.class_chain(K, 1, 1)
  zn = 1.0 / np.arange(1, n + 1)
  zn /= zn.sum()
  zf = 1.0 / np.arange(1, F + 1)
  zf /= zf.sum()
  w = text_lib.eval_windows(tok, 12, 50)
  lp = data_lib.source_log2p(w, classes=K, per_class=n, functions=F, p_function=pf,
                             overlap=0.0, seed=1, order=1)
  checked = 0
  for i in range(len(w)):
    for t in range(1, w.shape[1]):
      past = [x for x in w[i, :t] if labels[x] < K]
      if not past:
        continue
      k, prev, x = labels[past[-1]], w[i, t - 1], w[i, t]
      if labels[x] == K:
        p = pf * zf[x - K * n]
      else:
        p = (1 - pf if labels[prev] < K else 1.0) * trans[k, labels[x]] * zn[x % n]
      np.testing.assert_allclose(lp[i, t - 1], math.log2(p), rtol=1e-9, atol=1e-9)
      checked += 1
  assert checked > 400


def test_source_kernel_is_stochastic_and_order_two_is_beyond_a_bigram():
  for order, overlap in ((1, 0.0), (2, 0.0), (2, 0.3)):
    E, pi = data_lib.source_kernel(overlap=overlap, order=order)
    np.testing.assert_allclose(E.sum((0, 2)), 1.0, rtol=1e-12)
    np.testing.assert_allclose(pi @ E.sum(0), pi, atol=1e-10)
  # the study's language: the second-order class chain leaves a bigram far above the floor
  tok, _, V = data_lib.synthetic(60_000, order=2)
  d = text_lib.TokenData(tok[:50_000], tok[50_000:], V, np.ones(V, np.int32), None, "s")
  w = text_lib.eval_windows(d.val, 32, 64)
  big = data_lib.unigram_bigram_bpb(d, w)["bigram"]
  assert big - data_lib.source_bits(w, order=2) > 0.5


def test_add_k_bigram_on_hand_counts():
  d = text_lib.TokenData(np.array([0, 1, 0, 1, 0]), np.array([0, 1]), 2,
                         np.ones(2, np.int32), None, "t")
  out = data_lib.unigram_bigram_bpb(d, np.array([[0, 1]]), k=0.5)
  np.testing.assert_allclose(out["unigram"], -np.log2(2.5 / 6))    # counts 3,2 +0.5 each
  np.testing.assert_allclose(out["bigram"], -np.log2(2.5 / 3))     # 0->1 twice; 0->0 never
  tri = study._trivial(d, np.array([[0, 1]]), np.array([[0, 1]]), (0.01, 0.5, 2.0))
  assert tri["bigram_k"] == 0.01 and tri["bigram_k_edge"]          # less smoothing fits 0->1


def test_study_model_names():
  assert study._kind("lhdlm_noreg") == ("lhdlm", 0.0, False)
  assert study._kind("lhdlm_reg3") == ("lhdlm", 3.0, False)
  assert study._kind("hdlm_planted") == ("hdlm", None, True)
  assert study._kind("mdlm") == ("mdlm", None, False)


def test_logged_terms_vanish_for_identical_columns():
  """The probe logs the mask- and cluster-state terms each step; with identical columns
  (the degenerate map) the mask-state term is exactly 0 and I(X;C) = 0."""
  config = config_lib.load("configs/lhdlm.py:smoke=true")
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train, probe=3)
  params = mdl.lm_model.init(jax.random.PRNGKey(0))
  metrics = jax.jit(mdl.train_metrics)  # one compiled program for both maps (not op by op)
  m = jax.device_get(metrics(params))
  assert m["mask_term"] > 0 and m["cluster_term"] > 0
  same = {**params, "gamma": jnp.zeros_like(params["gamma"])}
  m = jax.device_get(metrics(same))
  np.testing.assert_allclose(m["mask_term"], 0.0, atol=1e-6)
  np.testing.assert_allclose(m["mi"], 0.0, atol=1e-6)
  np.testing.assert_allclose(m["col_entropy"], math.log(mdl.C), rtol=1e-5)


def test_planted_partition_hdlm_uses_the_given_map():
  config = config_lib.load("configs/lhdlm.py:smoke=true")
  data, labels = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train, kind="hdlm",
                        assign=labels % config.model.clusters)
  g = np.exp(mdl.fixed_log_gamma)
  np.testing.assert_array_equal(g.argmax(0), labels % config.model.clusters)


def test_study_cells_are_cached_and_reassembled(tmp_path):
  arg = ("configs/lhdlm.py:smoke=true,study_kinds=lhdlm,study_seeds=1,study_steps=2,"
         "study_val_points=2,study_gen_corpora=")
  config = config_lib.load(arg)
  study.run(config, str(tmp_path))
  cell = tmp_path / "synthetic" / "lhdlm" / "cell.json"
  stamp = os.path.getmtime(tmp_path / "synthetic" / "lhdlm" / "metrics.jsonl")
  rows = json.loads((tmp_path / "study_rows.json").read_text())
  assert [r["model"] for r in rows["summary"]] == ["lhdlm"] and len(rows["rows"]) == 3
  assert rows["val_curves"]["synthetic/lhdlm"]["step"] == [1, 2]
  assert {"mask_term", "cluster_term", "mi", "col_entropy"} <= set(rows["ablation"][0])
  assert rows["trivial"]["synthetic"]["source"] < rows["trivial"]["synthetic"]["unigram"]
  # a second run only reads the cell back: no training, the same table
  again = study.run(config, str(tmp_path))
  assert os.path.getmtime(tmp_path / "synthetic" / "lhdlm" / "metrics.jsonl") == stamp
  assert again == [json.loads(cell.read_text())["summary"]]


def test_mc_tail_stats_on_hand_draws():
  from jaxpapers.papers.lhdlm import mc_tail
  d = np.array([1.0] * 99 + [101.0])
  out = mc_tail.tail_stats(d)
  np.testing.assert_allclose(out["mean"], 2.0)
  np.testing.assert_allclose(out["median"], 1.0)
  np.testing.assert_allclose(out["max"], 101.0)
  np.testing.assert_allclose(out["top1pct_share_of_excess"], 1.0)  # one draw carries it all
  np.testing.assert_allclose(out["se"], np.std(d, ddof=1) / 10.0)


def test_loop_key_terms_reproduce_the_loops_estimate():
  """mc_tail's decomposition of the loop's fixed-key held-out estimate adds up to what
  nn.lm's eval_step reports (so its largest term is a term of that very estimate), each
  eval batch with its own keys; one key for every batch (the old loop) is another draw."""
  from jaxpapers.papers.lhdlm import mc_tail
  # the loop pads a short last batch to eval.batch_size rows (which moves the
  # low-discrepancy times); the study's 64 windows fill two batches of 32, as here 8 fill 2
  config = config_lib.override(config_lib.load("configs/lhdlm.py:smoke=true,samples=2"),
                               {"eval.batch_size": 4})
  data, _ = data_lib.load(config)
  mdl = model_lib.build(config, data.vocab_size, data.train)
  task = model_lib.make_task(config, data, mdl)
  state = task.init(jax.random.PRNGKey(0))
  ev = loop_eval(task, state)
  w = text_lib.eval_windows(data.val, config.data.seq_len, config.eval.max_windows)
  assert len(w) == 2 * config.eval.batch_size
  got = mc_tail.loop_key_terms(mdl, state["params"], w, 2, config.eval.batch_size)
  np.testing.assert_allclose(got["loop_estimate"], ev["bpb"], rtol=1e-4)
  assert got["loop_estimate_without_max"] < got["loop_estimate"]
  shared = mc_tail.loop_key_terms(mdl, state["params"], w, 2, config.eval.batch_size,
                                  shared_key=True)
  assert abs(shared["loop_estimate"] - ev["bpb"]) > 1e-3


def _piece(path, members, val, test, curves, steps):
  """A cell.json as study._cell writes it: rows and curve columns in member order."""
  path.mkdir(parents=True)
  rows = [{"lr": lr, "seed": s, "val_bpb": v, "test_bpb": t, "test_mc_se": 0.01}
          for (lr, s), v, t in zip(members, val, test)]
  cell = {"rows": rows, "curves": {"val_step": steps,
                                   "val_bpb": np.asarray(curves, float).T.tolist()}}
  (path / "cell.json").write_text(json.dumps(cell))
  return str(path)


def test_combine_joins_pieces_by_lr_and_seed(tmp_path):
  """Seed 0 alone, seeds 1-2 in a second population, the grid extended in a third: the
  choice is on the mean over seeds, each seed's curve follows its own member."""
  from jaxpapers.papers.lhdlm import combine
  steps = [1, 2, 3, 4, 5, 6, 7, 8]
  c = lambda end: [5.0 - 0.1 * i for i in range(7)] + [end]   # the quarter: points 6 -> 8
  a = _piece(tmp_path / "a", [(1e-3, 0), (3e-3, 0)], [4.0, 3.0], [4.1, 3.1],
             [c(9), c(4.3)], steps)
  # member order lr-major, seed fastest (population.grid): seeds 1, 2 of 1e-3, then of 3e-3
  b = _piece(tmp_path / "b", [(1e-3, 1), (1e-3, 2), (3e-3, 1), (3e-3, 2)],
             [3.0, 3.0, 3.3, 3.3], [9, 9, 3.2, 3.6], [c(9), c(9), c(4.4), c(4.5)], steps)
  e = _piece(tmp_path / "e", [(1e-2, 0), (1e-2, 1), (1e-2, 2)], [3.5, 3.5, 3.5],
             [9, 9, 9], [c(9)] * 3, steps)
  r = combine.summarize([a, b, e], bigram=4.0)
  assert r["lrs"] == [1e-3, 3e-3, 1e-2] and r["seeds"] == [0, 1, 2]
  np.testing.assert_allclose(r["val_by_lr"], [10 / 3, 9.6 / 3, 3.5])
  assert r["best_lr"] == 3e-3 and not r["edge"]
  np.testing.assert_allclose(r["test_by_seed"], [3.1, 3.2, 3.6])
  np.testing.assert_allclose(r["under_bigram"], 4.0 - 9.9 / 3)
  assert r["quarter_from_step"] == 6
  np.testing.assert_allclose(r["quarter_drop_by_seed"], [4.5 - 4.3, 4.5 - 4.4, 4.5 - 4.5])
  np.testing.assert_allclose(r["eighth_drop_by_seed"], [0.1, 0.0, -0.1], atol=1e-12)
  assert combine.summarize([a, b], bigram=4.0)["edge"]      # without the extension: an edge
  one = combine.summarize([e], bigram=4.0)                  # a single LR: carried, not tuned
  assert not one["tuned"] and not one["edge"] and r["tuned"]
  with pytest.raises(ValueError, match="in two pieces"):
    combine.summarize([a, a], bigram=4.0)
  with pytest.raises(ValueError, match="missing"):
    combine.summarize([a, e], bigram=4.0)


def test_combine_reads_the_last_quarter_and_eighth_of_a_16_point_curve(tmp_path):
  """16 validation points (every 1000 of 16000 steps): the quarter starts at step 12000 and
  the eighth at 14000, not at the last point but one."""
  from jaxpapers.papers.lhdlm import combine
  steps = list(range(1000, 17000, 1000))
  curve = [5.0 - 0.01 * i - (0.5 if i == 15 else 0.0) for i in range(16)]  # a last-step drop
  p = _piece(tmp_path / "a", [(1e-3, 0)], [3.0], [3.1], [curve], steps)
  r = combine.summarize([p], bigram=4.0)
  assert r["quarter_from_step"] == 12000 and r["eighth_from_step"] == 14000
  np.testing.assert_allclose(r["quarter_drop"], 0.04 + 0.5)
  np.testing.assert_allclose(r["eighth_drop"], 0.02 + 0.5)


def test_map_bytes_reads_a_hand_built_map():
  """Whitespace and upper case one-hot, punctuation spread evenly over two clusters."""
  from jaxpapers.papers.lhdlm import map_bytes
  V, C = 128, 4
  counts = np.zeros(V)
  byte = {" ": 40, "a": 30, "b": 10, "A": 5, ".": 8, ",": 7}
  for ch, n in byte.items():
    counts[ord(ch)] = n
  g = np.full((C, V), 1.0 / C)                              # unused bytes: uniform columns
  for ch, c in {" ": 0, "a": 1, "b": 1, "A": 2}.items():
    g[:, ord(ch)] = np.eye(C)[c]
  for ch in ".,":
    g[:, ord(ch)] = [0, 0, 0.5, 0.5]
  assign = np.zeros(V, np.int64)
  assign[[ord("a"), ord("b")]] = 1
  assign[[ord("A"), ord("."), ord(",")]] = 2
  r = map_bytes.read_map(g, counts, assign, top=3)
  assert r["by_group"]["whitespace"]["mean"] == pytest.approx(0.0, abs=1e-6)
  assert r["by_group"]["punct"]["mean"] == pytest.approx(math.log(2), rel=1e-5)
  assert r["by_group"]["punct"]["n"] == 2 and "digit" not in r["by_group"]
  assert r["by_group"]["lower"]["mass"] == pytest.approx(40 / 100)
  assert [n for n, _, _ in r["most_diffuse"][:2]] == [".", ","]
  assert r["argmax_clusters"][0] == "[space]" and r["argmax_clusters"][1] == "ab"
  assert r["n_used_clusters"] == 3
  # the argmax map (ties to cluster 2) equals the k-means partition on the used bytes
  assert r["ari_to_kmeans"] == pytest.approx(1.0)
  assert 0.0 < r["mi"] < math.log(C)
  assert map_bytes.byte_group(ord("\n")) == "whitespace" and map_bytes.byte_name(10) == "[\\n]"


def test_study_synthetic_cluster_count():
  """C = K + 1 by default on the synthetic corpora; study_syn_clusters=K leaves the function
  words no cluster of their own; Shakespeare keeps the model's clusters."""
  base = config_lib.load("configs/lhdlm.py:smoke")
  K = base.data.synthetic.classes
  assert study._corpus_config(base, "synthetic").model.clusters == K + 1
  c = config_lib.load(f"configs/lhdlm.py:smoke,study_syn_clusters={K}")
  assert study._corpus_config(c, "synthetic").model.clusters == K
  assert study._corpus_config(c, "synthetic_overlap").model.clusters == K
  assert study._corpus_config(c, "shakespeare").model.clusters == c.model.clusters
