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
the first `n_test` distinct questions are the test set, the next `n_val` the validation
set (the best LR is chosen there), the rest train, so no question is in two splits.
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
    work, ans = f"{a} plus {b}", a + b
  elif kind == 1:
    a = rng.integers(1, 10)
    b = rng.integers(0, a + 1)
    q = f"{name} has {a} {item}, gives {b} away. How many?"
    work, ans = f"{a} minus {b}", a - b
  else:
    a, b = rng.integers(1, 6, size=2)
    q = f"{name} has {a} bags of {b} {item}. How many?"
    work, ans = f"{a} times {b}", a * b
  # MetaMath-style target: the reasoning step, then the final number (the one scored).
  return f"{q}\nA: ", f"{work} is {int(ans)}"


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
  # The reasoning (which option is the target), then the chosen letter (the one scored).
  answer = f"a {options[int(np.argmax(order == 0))]} is a {target}, so ({letter})"
  return f"Which is a {target}? {opts}\nA: ", answer


GENERATORS = {"math": _math_problem, "choice": _choice_problem}


def knowledge_facts() -> list[str]:
  """The background knowledge the tasks draw on, stated plainly, for pretraining.

  The paper fine-tunes LLMs that already know arithmetic and what a pear is; fine-tuning
  teaches them to use it in a task's format. A tiny model pretrained on Shakespeare alone
  knows neither, so (at `pretrain.knowledge` > 0) these statements are mixed into its
  pretraining text. They state every sum, difference and product the math task can ask
  and every word's category, in a surface form no task uses ("3 plus 4 is 7.", "a pear is a
  fruit."); no task prompt, name, item or answer format appears in them.
  """
  facts = [f"{a} plus {b} is {a + b}." for a in range(10) for b in range(10)]
  facts += [f"{a} minus {b} is {a - b}." for a in range(1, 10) for b in range(a + 1)]
  facts += [f"{a} times {b} is {a * b}." for a in range(1, 6) for b in range(1, 6)]
  for cat, words in CATEGORIES.items():
    facts += [f"a {w} is a {cat}." for w in words]
  return facts


def knowledge_text(n_chars: int, seed: int = 0) -> str:
  """About `n_chars` of `knowledge_facts()` in random order, a line of a few facts each."""
  facts = knowledge_facts()
  rng = np.random.default_rng(seed)
  lines, n = [], 0
  while n < n_chars:
    line = " ".join(facts[i] for i in rng.integers(len(facts), size=4))
    lines.append(line)
    n += len(line) + 1
  return "\n".join(lines)


def make_splits(name: str, n_train: int, n_val: int, n_test: int, seed: int = 1234):
  """Deterministic disjoint (train, validation, test) Splits of distinct generated problems.

  The first `n_test` distinct questions are the test set, the next `n_val` the validation
  set (model selection: best LR), the rest train; no question string is in two splits.
  """
  if name not in GENERATORS:
    raise ValueError(f"unknown task {name!r}; expected one of {sorted(GENERATORS)}")
  gen = GENERATORS[name]
  rng = np.random.default_rng(seed)
  total = n_train + n_val + n_test
  seen, prompts, answers = set(), [], []
  tries = 0
  while len(prompts) < total:
    p, a = gen(rng)
    tries += 1
    if tries > 100 * total:
      raise ValueError(f"task {name!r} has fewer than {total} distinct problems")
    if p in seen:
      continue
    seen.add(p)
    prompts.append(p)
    answers.append(a)
  test = Split(prompts[:n_test], answers[:n_test])
  val = Split(prompts[n_test:n_test + n_val], answers[n_test:n_test + n_val])
  train = Split(prompts[n_test + n_val:], answers[n_test + n_val:])
  return train, val, test


def make_task(name: str, n_train: int, n_test: int, seed: int = 1234):
  """Deterministic (train, test) Splits (no validation split); see `make_splits`."""
  train, _, test = make_splits(name, n_train, 0, n_test, seed)
  return train, test


def final_number(text: str) -> str | None:
  nums = re.findall(r"-?\d+", text)
  return nums[-1] if nums else None


def final_choice(text: str) -> str | None:
  letters = re.findall(r"\(([abc])\)", text)
  return letters[-1] if letters else None


def is_correct(task: str, generated: str, answer: str) -> bool:
  """Exact checker on the first generated line against the reference answer: the final
  number for math (GSM8K's rule), the final "(letter)" for choice."""
  text = generated.split("\n")[0]
  pick = final_number if task == "math" else final_choice
  got = pick(text)
  return got is not None and got == pick(answer)


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
