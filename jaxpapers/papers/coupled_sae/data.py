"""Multisubject coupled SAE (abstract 1): from stories to (TR features, voxel responses).

`features_for(config)` builds the stories (Shakespeare passages with modelled word
timings, or a LeBel et al. dataset from `data.path`), extracts word-level LM features
(cached in the workdir) and resamples them to the TR grid (Lanczos, window 3) at word
mid-times, z-scoring per story. `responses_for(feats, config, seed)` simulates the
subjects (or returns the real responses). Splits are by whole stories: the first
`n_train` stories train, the next `n_val` select hyper-parameters, the last `n_test` test.
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
  y: list                 # per subject, per story (T, V)
  sim: sim_lib.Simulation | None


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
    stories = features_lib.make_stories(
        features_lib.shakespeare_stories(d.n_train + d.n_val + d.n_test, d.words_per_story),
        seed=0)
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
  return Features(stories, x, words, _split(len(stories), d), real)


def _words_at(story, times, tr):
  return [[w for w, on in zip(story.words, story.onsets) if t - tr / 2 <= on < t + tr / 2]
          for t in times]


def responses_for(feats: Features, config, seed: int) -> Responses:
  if feats.real_resp is not None:
    return Responses([feats.real_resp[s] for s in config.data.subjects], None)
  sim = sim_lib.simulate(feats.x, feats.split["train"], config.sim, seed)
  return Responses(sim.responses, sim)


def stack(parts, idx):
  return np.concatenate([parts[i] for i in idx], axis=0)


def delayed(parts, idx, delays):
  return np.concatenate([signal.make_delayed(parts[i], delays) for i in idx], axis=0)
