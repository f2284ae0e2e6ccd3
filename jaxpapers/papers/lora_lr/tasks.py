"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- generated tasks.

The paper fine-tunes on MetaMathQA / GSM8K-style math, commonsense multiple choice,
code and instruction following. Offline and at tiny scale we generate two families
with exact checkers, in the same supervised format (loss on the answer tokens only,
like the paper's IGNORE_INDEX on the prompt):
- `math`: arithmetic word problems (add, take away, groups of); scored by exact match of
  the final number in the greedy generation (the GSM8K rule);
- `choice`: commonsense-style multiple choice ("Which one is a fruit? (a) hammer (b) pear
  (c) blue"), scored by exact match of the chosen letter.
Problems are drawn by a fixed-seed generator, de-duplicated, and split deterministically:
the first `n_test` distinct questions are the test set, the rest train, so no test
question string appears in training.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

NAMES = ["Tom", "Ann", "Sam", "Mia", "Ben", "Eva", "Max", "Zoe", "Leo", "Ivy"]
ITEMS = ["apples", "pens", "cards", "eggs", "books", "coins", "cups", "hats"]
CATEGORIES = {
    "fruit": ["apple", "pear", "plum", "grape", "lemon", "peach", "mango", "cherry"],
    "animal": ["horse", "cat", "dog", "sheep", "goat", "mouse", "lion", "wolf"],
    "colour": ["red", "blue", "green", "black", "white", "pink", "brown", "grey"],
    "tool": ["hammer", "saw", "drill", "spade", "axe", "wrench", "chisel", "rake"],
    "body part": ["hand", "foot", "nose", "ear", "knee", "elbow", "chin", "neck"],
}


@dataclasses.dataclass
class Split:
  prompts: list
  answers: list


def _math_problem(rng):
  name = NAMES[rng.integers(len(NAMES))]
  item = ITEMS[rng.integers(len(ITEMS))]
  kind = rng.integers(3)
  if kind == 0:
    a, b = rng.integers(0, 10, size=2)
    q = f"{name} has {a} {item}, gets {b} more. How many?"
    ans = a + b
  elif kind == 1:
    a = rng.integers(1, 10)
    b = rng.integers(0, a + 1)
    q = f"{name} has {a} {item}, gives {b} away. How many?"
    ans = a - b
  else:
    a, b = rng.integers(1, 6, size=2)
    q = f"{name} has {a} bags of {b} {item}. How many?"
    ans = a * b
  return f"{q}\nA: ", str(int(ans))


def _choice_problem(rng):
  cats = list(CATEGORIES)
  target = cats[rng.integers(len(cats))]
  others = [c for c in cats if c != target]
  picked = rng.choice(len(others), size=2, replace=False)
  options = [CATEGORIES[target][rng.integers(8)]]
  options += [CATEGORIES[others[i]][rng.integers(8)] for i in picked]
  order = rng.permutation(3)
  options = [options[i] for i in order]
  letter = "abc"[int(np.argmax(order == 0))]
  opts = " ".join(f"({l}) {o}" for l, o in zip("abc", options))
  return f"Which is a {target}? {opts}\nA: ", letter


GENERATORS = {"math": _math_problem, "choice": _choice_problem}


def make_task(name: str, n_train: int, n_test: int, seed: int = 1234):
  """Deterministic (train, test) Splits of distinct generated problems."""
  if name not in GENERATORS:
    raise ValueError(f"unknown task {name!r}; expected one of {sorted(GENERATORS)}")
  gen = GENERATORS[name]
  rng = np.random.default_rng(seed)
  seen, prompts, answers = set(), [], []
  tries = 0
  while len(prompts) < n_train + n_test:
    p, a = gen(rng)
    tries += 1
    if tries > 100 * (n_train + n_test):
      raise ValueError(f"task {name!r} has fewer than {n_train + n_test} distinct problems")
    if p in seen:
      continue
    seen.add(p)
    prompts.append(p)
    answers.append(a)
  test = Split(prompts[:n_test], answers[:n_test])
  train = Split(prompts[n_test:], answers[n_test:])
  return train, test


def final_number(text: str) -> str | None:
  nums = re.findall(r"-?\d+", text)
  return nums[-1] if nums else None


def is_correct(task: str, generated: str, answer: str) -> bool:
  """Exact checker: final number for math, first option letter for choice."""
  text = generated.split("\n")[0]
  if task == "math":
    return final_number(text) == answer
  m = re.search(r"[abc]", text)
  return bool(m) and m.group(0) == answer


def encode_supervised(split: Split, tok, seq_len: int):
  """Token arrays (N, seq_len) and a loss mask on the answer (+ end) tokens."""
  n = len(split.prompts)
  tokens = np.full((n, seq_len), tok.eos_id, np.int32)
  mask = np.zeros((n, seq_len), np.float32)
  for i, (p, a) in enumerate(zip(split.prompts, split.answers)):
    pi, ai = tok.encode(p), tok.encode(a) + [tok.eos_id]
    seq = pi + ai
    if len(seq) > seq_len:
      raise ValueError(f"example {i} has {len(seq)} tokens > seq_len={seq_len}: {p + a!r}")
    tokens[i, :len(seq)] = seq
    # mask[t] weights predicting token t+1 from position t.
    mask[i, len(pi) - 1:len(seq) - 1] = 1.0
  return tokens, mask


def encode_prompts(split: Split, tok, seq_len: int, n_new: int):
  """Right-padded prompt buffers with room for `n_new` generated tokens, and lengths."""
  n = len(split.prompts)
  tokens = np.full((n, seq_len), tok.eos_id, np.int32)
  lens = np.zeros((n,), np.int32)
  for i, p in enumerate(split.prompts):
    pi = tok.encode(p)
    if len(pi) + n_new > seq_len:
      raise ValueError(f"prompt {i} ({len(pi)} tokens) + {n_new} new > seq_len={seq_len}")
    tokens[i, :len(pi)] = pi
    lens[i] = len(pi)
  return tokens, lens


def decode_answers(tok, gen_tokens, lens, n_new: int) -> list[str]:
  out = []
  for row, l in zip(np.asarray(gen_tokens), np.asarray(lens)):
    ids = row[l:l + n_new].tolist()
    if tok.eos_id in ids:
      ids = ids[:ids.index(tok.eos_id)]
    out.append(tok.decode(ids))
  return out
