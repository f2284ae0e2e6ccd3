"""lhdlm's corpora: the synthetic planted word-class language, Shakespeare bytes, a user file.

Synthetic language ('synthetic'): K word classes of `per_class` content tokens and F
shared function tokens. A sentence walks a sparse Markov chain over classes (each class
has 2 favoured successors); each content word is drawn from its class with Zipf weights,
and after it a function word follows with probability `p_function` (the function word
drawn from one Zipf law shared by all contexts), so function tokens appear next to every
class: their "cluster" is genuinely diffuse while content tokens have a sharp class.
`overlap` > 0 breaks the planted hard partition (the assumption of HDLM's clusters): each
class then emits a fraction `overlap` of its words from the next class's tokens.
`order` = 2 makes the class chain second order: the next class depends on the last *two*
content classes (one favoured successor per pair, probability 0.89), so a bigram model,
which sees one token, cannot know it; a model that reads the context can (order 1: the
next class depends on the last class only, and most of the text's entropy is the
word-within-class choice, which no model can reduce: the bigram is then within 0.13
bits/token of the source's entropy rate, too close to separate the models).

Planted labels: class id for content tokens, K for function tokens.
"""
from __future__ import annotations

import numpy as np

from jaxpapers.data import text as text_lib


class _Ids:
  """A trivial tokenizer for the synthetic language (token ids are the text)."""

  def __init__(self, V):
    self.vocab_size = V

  def decode(self, ids):
    return " ".join(f"w{int(i)}" for i in ids)


def class_chain(classes: int, order: int, seed: int):
  """(rng, trans): the class transition table, (K, K) for order 1 (2 favoured successors
  per class), (K, K, K) for order 2 (trans[k2, k1]: one favoured successor per pair)."""
  rng = np.random.default_rng(seed)
  K = classes
  if order == 1:
    trans = np.full((K, K), 0.02)
    for k in range(K):
      trans[k, rng.choice(K, 2, replace=False)] += 1.0
  elif order == 2:
    trans = np.full((K, K, K), 1.0 / 24)
    for k2 in range(K):
      for k1 in range(K):
        trans[k2, k1, rng.integers(K)] += 1.0
  else:
    raise ValueError(f"synthetic order={order}; expected 1 or 2")
  return rng, trans / trans.sum(-1, keepdims=True)


def synthetic(n_tokens: int, classes: int = 4, per_class: int = 8, functions: int = 6,
              p_function: float = 0.4, overlap: float = 0.0, seed: int = 0, order: int = 1):
  """(tokens int32, labels (V,), V) of the planted word-class language."""
  K, n, F = classes, per_class, functions
  V = K * n + F
  rng, trans = class_chain(K, order, seed)
  zipf_n = 1.0 / np.arange(1, n + 1)
  zipf_n /= zipf_n.sum()
  zipf_f = 1.0 / np.arange(1, F + 1)
  zipf_f /= zipf_f.sum()
  out = np.empty(n_tokens + 2, np.int32)
  i, k, k2 = 0, 0, 0
  while i < n_tokens:
    k, k2 = rng.choice(K, p=trans[k] if order == 1 else trans[k2, k]), k
    src = (k + 1) % K if rng.random() < overlap else k
    out[i] = src * n + rng.choice(n, p=zipf_n)
    i += 1
    if rng.random() < p_function:
      out[i] = K * n + rng.choice(F, p=zipf_f)
      i += 1
  labels = np.concatenate([np.repeat(np.arange(K), n), np.full(F, K)])
  return out[:n_tokens], labels, V


def load(config):
  """(TokenData, planted labels or None) for config.data."""
  d = config.data
  if d.corpus == "synthetic" and not d.path:
    s = d.synthetic
    tokens, labels, V = synthetic(s.tokens, s.classes, s.per_class, s.functions,
                                  s.p_function, s.overlap, s.seed, s.get("order", 1))
    cut = int(len(tokens) * (1 - d.holdout))
    return text_lib.TokenData(tokens[:cut], tokens[cut:], V, np.ones(V, np.int32),
                              _Ids(V), f"synthetic(K={s.classes},order={s.get('order', 1)},overlap={s.overlap})"), labels
  return text_lib.prepare(d.corpus, d.tokenizer, d.vocab_size, d.max_chars or None,
                          d.holdout, d.path), None


def unigram_bigram_bpb(data: text_lib.TokenData, windows: np.ndarray, k: float = 1.0) -> dict:
  """The trivial models' held-out bits per byte on the targets windows[:, 1:] (add-k
  smoothed counts of the training split; the bigram conditions on the previous token)."""
  V = data.vocab_size
  tr = np.asarray(data.train, np.int64)
  uni = np.bincount(tr, minlength=V) + float(k)
  uni /= uni.sum()
  big = np.full((V, V), float(k))
  np.add.at(big, (tr[:-1], tr[1:]), 1.0)
  big /= big.sum(1, keepdims=True)
  x, prev = windows[:, 1:], windows[:, :-1]
  nbytes = float(data.token_bytes[x].sum())
  return {"unigram": float(-np.log2(uni[x]).sum() / nbytes),
          "bigram": float(-np.log2(big[prev, x]).sum() / nbytes)}


def source_kernel(classes: int = 4, per_class: int = 8, functions: int = 6,
                  p_function: float = 0.4, overlap: float = 0.0, seed: int = 0,
                  order: int = 1):
  """(E, pi): E[x, s, s'] = P(next token x, next state s' | state s) of the synthetic
  generator, its hidden state s = (last two classes, a function word just emitted), and
  pi the stationary law of the state."""
  K, n, F = classes, per_class, functions
  V = K * n + F
  _, trans = class_chain(K, order, seed)
  t2 = np.broadcast_to(trans[None], (K, K, K)) if order == 1 else trans   # [k2, k1, j]
  zn = 1.0 / np.arange(1, n + 1)
  zn /= zn.sum()
  zf = 1.0 / np.arange(1, F + 1) if F else np.zeros(0)
  zf = zf / zf.sum() if F else zf
  src = (1 - overlap) * np.eye(K) + overlap * np.roll(np.eye(K), 1, axis=1)  # [j, r]
  S = 2 * K * K

  def sid(k2, k1, ph):
    return (k2 * K + k1) * 2 + ph

  E = np.zeros((V, S, S))
  for k2 in range(K):
    for k1 in range(K):
      for ph in (0, 1):
        s = sid(k2, k1, ph)
        go = 1.0 - p_function if ph == 0 else 1.0
        for j in range(K):
          for r in range(K):
            E[r * n:(r + 1) * n, s, sid(k1, j, 0)] += go * t2[k2, k1, j] * src[j, r] * zn
        if ph == 0:
          E[K * n:, s, sid(k2, k1, 1)] += p_function * zf
  P = E.sum(0)
  pi = np.full(S, 1.0 / S)
  for _ in range(2000):
    pi = pi @ P
  return E, pi


def source_log2p(windows: np.ndarray, **kw) -> np.ndarray:
  """(N, T) log2 P(windows[:, t] | windows[:, :t]) under the generator (t >= 1): an exact
  forward filter over its hidden state, started from the stationary law."""
  E, pi = source_kernel(**kw)
  w = np.asarray(windows, np.int64)
  a = pi[None] @ E[w[:, 0]]
  a = a[:, 0] / a[:, 0].sum(-1, keepdims=True)
  out = np.zeros((w.shape[0], w.shape[1] - 1))
  for t in range(1, w.shape[1]):
    a = np.einsum("ns,nst->nt", a, E[w[:, t]])
    p = a.sum(-1)
    out[:, t - 1] = np.log2(p)
    a /= p[:, None]
  return out


def source_bits(windows: np.ndarray, classes: int = 4, per_class: int = 8,
                functions: int = 6, p_function: float = 0.4, overlap: float = 0.0,
                seed: int = 0, order: int = 1) -> float:
  """The generator's own bits per token on windows[:, 1:] given windows[:, :1] (the AR
  model's targets): the floor any model of the synthetic language reaches on them."""
  return float(-source_log2p(windows, classes=classes, per_class=per_class,
                             functions=functions, p_function=p_function, overlap=overlap,
                             seed=seed, order=order).mean())
