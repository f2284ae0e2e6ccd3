"""Tokenizers for the language models: byte-level, and BPE rebuilt from a GGUF file.

`ByteTokenizer` maps UTF-8 bytes to ids 0..255 (plus an end-of-text id); the tiny models
that papers pretrain on offline corpora use it because a 256-way softmax is cheap.
`gguf_bpe` rebuilds a GPT-2-style byte-level BPE (the `tokenizer.ggml.model == "gpt2"`
case, e.g. SmolLM2) from the vocabulary and merge list stored in the GGUF file, with the
`tokenizers` library. SmolLM2's pre-tokenizer splits digits individually before the
byte-level regex split, which is what llama.cpp's "smollm" pre-tokenizer does too.
"""
from __future__ import annotations

import numpy as np


class ByteTokenizer:
  """UTF-8 bytes as tokens; id 256 ends a text (used as end-of-answer and padding)."""

  vocab_size = 257
  eos_id = 256

  def encode(self, text: str) -> list[int]:
    return list(text.encode("utf-8"))

  def decode(self, ids) -> str:
    data = bytes(int(i) for i in ids if 0 <= int(i) < 256)
    return data.decode("utf-8", errors="replace")


class HFTokenizer:
  """Thin wrapper over a `tokenizers.Tokenizer` with the same encode/decode interface."""

  def __init__(self, tok, eos_id: int, bos_id: int | None = None):
    self.tok = tok
    self.eos_id = eos_id
    self.bos_id = bos_id
    self.vocab_size = tok.get_vocab_size()

  def encode(self, text: str) -> list[int]:
    return self.tok.encode(text, add_special_tokens=False).ids

  def decode(self, ids) -> str:
    return self.tok.decode([int(i) for i in np.asarray(ids).reshape(-1)],
                           skip_special_tokens=False)


def gguf_bpe(r) -> HFTokenizer:
  """Byte-level BPE from a GGUFReader's `tokenizer.ggml.*` fields."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # pylint: disable=g-import-not-at-top
  kind = r.fields["tokenizer.ggml.model"].contents()
  if kind != "gpt2":
    raise ValueError(f"GGUF tokenizer model {kind!r} is not the byte-level BPE ('gpt2')")
  tokens = r.fields["tokenizer.ggml.tokens"].contents()
  merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
  types = r.fields["tokenizer.ggml.token_type"].contents()
  vocab = {t: i for i, t in enumerate(tokens)}
  tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
  pre = r.fields.get("tokenizer.ggml.pre")
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  if pre is not None and pre.contents() == "smollm":
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), byte_level])
  else:
    tok.pre_tokenizer = byte_level
  tok.decoder = decoders.ByteLevel()
  # Control tokens (type 3) such as <|im_start|> must match whole, never be split.
  special = [t for t, ty in zip(tokens, types) if int(ty) == 3]
  tok.add_special_tokens(special)
  eos = int(r.fields["tokenizer.ggml.eos_token_id"].contents())
  bos_f = r.fields.get("tokenizer.ggml.bos_token_id")
  return HFTokenizer(tok, eos_id=eos, bos_id=int(bos_f.contents()) if bos_f else None)
