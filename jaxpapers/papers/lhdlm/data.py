"""lhdlm's corpora: the synthetic planted word-class language, Shakespeare bytes, a user file.

Synthetic language ('synthetic'): K word classes of `per_class` content tokens and F
shared function tokens. A sentence walks a sparse Markov chain over classes (each class
has 2 favoured successors); each content word is drawn from its class with Zipf weights,
and after it a function word follows with probability `p_function` (the function word
drawn from one Zipf law shared by all contexts), so function tokens appear next to every
class: their "cluster" is genuinely diffuse while content tokens have a sharp class.
`overlap` > 0 breaks the planted hard partition (the assumption of HDLM's clusters): each
class then emits a fraction `overlap` of its words from the next class's tokens.

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


def synthetic(n_tokens: int, classes: int = 4, per_class: int = 8, functions: int = 6,
              p_function: float = 0.4, overlap: float = 0.0, seed: int = 0):
  """(tokens int32, labels (V,), V) of the planted word-class language."""
  rng = np.random.default_rng(seed)
  K, n, F = classes, per_class, functions
  V = K * n + F
  trans = np.full((K, K), 0.02)
  for k in range(K):
    trans[k, rng.choice(K, 2, replace=False)] += 1.0
  trans /= trans.sum(1, keepdims=True)
  zipf_n = 1.0 / np.arange(1, n + 1)
  zipf_n /= zipf_n.sum()
  zipf_f = 1.0 / np.arange(1, F + 1)
  zipf_f /= zipf_f.sum()
  out = np.empty(n_tokens + 2, np.int32)
  i, k = 0, 0
  while i < n_tokens:
    k = rng.choice(K, p=trans[k])
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
                                  s.p_function, s.overlap, s.seed)
    cut = int(len(tokens) * (1 - d.holdout))
    return text_lib.TokenData(tokens[:cut], tokens[cut:], V, np.ones(V, np.int32),
                              _Ids(V), f"synthetic(K={s.classes},overlap={s.overlap})"), labels
  return text_lib.prepare(d.corpus, d.tokenizer, d.vocab_size, d.max_chars or None,
                          d.holdout, d.path), None


def unigram_bigram_bpb(data: text_lib.TokenData, windows: np.ndarray) -> dict:
  """The trivial models' held-out bits per byte on the targets windows[:, 1:] (add-one
  smoothed counts of the training split; the bigram conditions on the previous token)."""
  V = data.vocab_size
  tr = np.asarray(data.train, np.int64)
  uni = np.bincount(tr, minlength=V) + 1.0
  uni /= uni.sum()
  big = np.ones((V, V))
  np.add.at(big, (tr[:-1], tr[1:]), 1.0)
  big /= big.sum(1, keepdims=True)
  x, prev = windows[:, 1:], windows[:, :-1]
  nbytes = float(data.token_bytes[x].sum())
  return {"unigram": float(-np.log2(uni[x]).sum() / nbytes),
          "bigram": float(-np.log2(big[prev, x]).sum() / nbytes)}
