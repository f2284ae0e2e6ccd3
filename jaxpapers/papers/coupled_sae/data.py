"""Multisubject coupled SAE (abstract 1): from stories to (TR features, voxel responses).

`features_for(config)` builds the stories (Shakespeare passages with modelled word
timings, or a LeBel et al. dataset from `data.path`), extracts word-level LM features
(cached in the workdir) and resamples them to the TR grid (Lanczos, window 3) at word
mid-times, z-scoring per story. `responses_for(feats, config, seed)` simulates the
subjects (or returns the real responses). Splits are by whole stories: the first
`n_train` stories train, the next `n_val` select hyper-parameters, the last `n_test` test.
With Shakespeare the features are extracted once for a pool of `n_plays` passages (one per
play, 38 plays) and `for_seed` draws each seed's train/val/test stories from the pool
(`draw_stories`), so the seed spread includes the stimulus draw; without it every seed
uses the pool's first stories in order (and LeBel data always keeps the user's order).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from jaxpapers.papers.coupled_sae import analysis
from jaxpapers.papers.coupled_sae import features as features_lib
from jaxpapers.papers.coupled_sae import lebel
from jaxpapers.papers.coupled_sae import signal
from jaxpapers.papers.coupled_sae import simulate as sim_lib


@dataclasses.dataclass
class Features:
  stories: list
  x: list                 # per story (T, D) TR features, z-scored per story
  words_tr: list          # per story, the words heard in each TR
  split: dict             # train / val / test -> story indices
  real_resp: dict | None  # LeBel data: {subject: [per-story (T, V)]}


@dataclasses.dataclass
class Responses:
  y: list                 # per subject, per story (T, V_s): subjects may differ in V_s
  sim: sim_lib.Simulation | None
  subjects: tuple | None = None  # names, for error messages


def check_responses(feats: Features, resp: Responses) -> None:
  """One-line ValueError for any shape the methods cannot use.

  Subjects may have different voxel counts (the methods pad them with a mask); within a
  subject every story needs the same count, and every story as many TRs as its features.
  """
  names = resp.subjects or tuple(f"subject {s}" for s in range(len(resp.y)))
  if len(resp.y) < 1:
    raise ValueError("no subjects: responses are empty")
  for name, ys in zip(names, resp.y):
    if len(ys) != len(feats.x):
      raise ValueError(f"{name}: {len(ys)} story responses for {len(feats.x)} stories")
    counts = set()
    for i, (y, x) in enumerate(zip(ys, feats.x)):
      story = feats.stories[i].name
      if np.ndim(y) != 2:
        raise ValueError(f"{name}, story {story}: response must be (TRs, voxels), got "
                         f"shape {np.shape(y)}")
      if y.shape[0] != x.shape[0]:
        raise ValueError(f"{name}, story {story}: response has {y.shape[0]} TRs but the "
                         f"story's features have {x.shape[0]}")
      if y.shape[1] < 1:
        raise ValueError(f"{name}, story {story}: response has no voxels")
      counts.add(y.shape[1])
    if len(counts) > 1:
      raise ValueError(f"{name}: stories have different voxel counts {sorted(counts)}")


def _split(n: int, d) -> dict:
  if d.n_train + d.n_val + d.n_test > n:
    raise ValueError(f"n_train+n_val+n_test = {d.n_train + d.n_val + d.n_test} "
                     f"exceeds the {n} stories")
  if min(d.n_train, d.n_val, d.n_test) < 1:
    raise ValueError("n_train, n_val and n_test must each be >= 1 story")
  idx = list(range(n))
  return {"train": idx[:d.n_train], "val": idx[d.n_train:d.n_train + d.n_val],
          "test": idx[d.n_train + d.n_val:d.n_train + d.n_val + d.n_test]}


def tr_features(word_feats, story, times, window: int = 3) -> np.ndarray:
  mid = 0.5 * (story.onsets + story.offsets)
  return signal.zscore(signal.lanczos_resample(word_feats, mid, times, window)).astype(
      np.float32)


def features_for(config, cache_dir: str | None, log=print) -> Features:
  d = config.data
  if d.source == "shakespeare":
    n_used = d.n_train + d.n_val + d.n_test
    if n_used > d.n_plays:
      raise ValueError(f"n_train+n_val+n_test = {n_used} exceeds n_plays={d.n_plays}")
    stories = features_lib.make_stories(
        features_lib.shakespeare_stories(d.n_plays, d.words_per_story), seed=0)
    times = [signal.tr_times(int(np.ceil((s.offsets[-1] + d.tail_s) / d.tr)), d.tr)
             for s in stories]
    real = None
  elif d.source == "lebel":
    if not d.path:
      raise ValueError("data.source=lebel needs data.path (the ds003020 root)")
    stories, real, times = lebel.load(d.path, tuple(d.subjects), tuple(d.stories), d.tr,
                                      d.trim)
  else:
    raise ValueError(f"unknown data.source {d.source!r}; expected shakespeare or lebel")
  word_feats = features_lib.extract(stories, d.lm, d.layer, d.window, d.context, cache_dir,
                                    log=log)
  x = [tr_features(w, s, t) for w, s, t in zip(word_feats, stories, times)]
  words = [analysis.words_per_tr(s, len(t), d.tr) if d.source == "shakespeare" else
           _words_at(s, t, d.tr) for s, t in zip(stories, times)]
  split = _split(len(stories), d)
  if d.source == "shakespeare":  # the pool: `for_seed` picks each seed's stories
    split = {"pool": list(range(len(stories)))}
  return Features(stories, x, words, split, real)


def for_seed(feats: Features, config, seed: int) -> Features:
  """The stories of one seed, re-indexed train, val, test in order.

  Shakespeare: `n_train + n_val + n_test` stories of the pool, a random draw per seed
  (`data.draw_stories`) or the pool's first ones; LeBel: unchanged.
  """
  d = config.data
  if "pool" not in feats.split:
    return feats
  n = d.n_train + d.n_val + d.n_test
  pool = feats.split["pool"]
  if d.draw_stories:
    pick = np.random.default_rng([int(seed), 3]).permutation(len(pool))[:n]
  else:
    pick = np.arange(n)
  idx = [pool[i] for i in pick]
  return Features([feats.stories[i] for i in idx], [feats.x[i] for i in idx],
                  [feats.words_tr[i] for i in idx], _split(n, d), None)


def _words_at(story, times, tr):
  return [[w for w, on in zip(story.words, story.onsets) if t - tr / 2 <= on < t + tr / 2]
          for t in times]


def responses_for(feats: Features, config, seed: int) -> Responses:
  if feats.real_resp is not None:
    resp = Responses([feats.real_resp[s] for s in config.data.subjects], None,
                     tuple(config.data.subjects))
    check_responses(feats, resp)
    return resp
  sim = sim_lib.simulate(feats.x, feats.split["train"], config.sim, seed)
  return Responses(sim.responses, sim)


def stack(parts, idx):
  return np.concatenate([parts[i] for i in idx], axis=0)


def delayed(parts, idx, delays):
  return np.concatenate([signal.make_delayed(parts[i], delays) for i in idx], axis=0)
