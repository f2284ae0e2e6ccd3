"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998) -- the paper's scale.

`plan(config)` gives `launch/plan.py` the program that dominates the paper's compute: one
adapter optimizer step (`finetune.make_update`, the very update the study's runs scan)
on a Llama-2-7B-shaped model at `configs/lora_lr.py:paper` sizes, from abstract arguments
(nothing allocated, no weights needed). The frozen base is stored in the compute dtype
(bfloat16, as the authors' `--bf16` runs load it) and, under `mesh=fsdp:-1`, every large
leaf (base kernels, adapters and their Adam moments) is split over the devices along its
largest divisible dimension; batch rows are split over the same devices. Only the
adapters are differentiated, so the base costs forward + activation gradients, about
4 x base params x tokens, with no weight gradient or optimizer state.

The layer loop is scanned in the planned program (`plan_unroll`, default False), as in the
study's runs: XLA's cost analysis counts a `lax.scan` body once, and `core.planner` adds the
matmul FLOPs of the trips it skips (227 of 239 TFLOP at `:paper`). `plan_unroll=true`
unrolls the 32 layers so that XLA counts every one itself: the same 239 TFLOP (75.53 vs
75.51 ms per step at 40% MFU), 27.5 GB per device instead of the scanned program's 25.9,
for about a minute of CPU compile instead of ~11 s.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxpapers.core import mesh as mesh_lib
from jaxpapers.core import planner
from jaxpapers.core import precision
from jaxpapers.core import sharding
from jaxpapers.nn import llama
from jaxpapers.nn.tokenizer import ByteTokenizer
from jaxpapers.papers.lora_lr import adapters as adapters_lib
from jaxpapers.papers.lora_lr import finetune


def planned_model(config) -> llama.LlamaConfig:
  """The configured shape with its own vocabulary (32000 at `:paper`; 0 = bytes)."""
  m = config.model
  return llama.LlamaConfig(vocab_size=m.vocab_size or ByteTokenizer.vocab_size, dim=m.dim,
                           n_layers=m.n_layers, n_heads=m.n_heads, n_kv_heads=m.n_kv_heads,
                           hidden_dim=m.hidden_dim, rope_theta=m.rope_theta,
                           tie_embeddings=m.tie_embeddings)


def _abstract(tree, mesh, dtype=None):
  """ShapeDtypeStructs carrying the FSDP/replicated sharding `core.sharding` gives them."""
  specs = sharding.tree_specs(tree, mesh)
  return jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(
          x.shape, dtype if dtype is not None and jnp.issubdtype(x.dtype, jnp.floating)
          else x.dtype, sharding=NamedSharding(mesh, s)),
      tree, specs, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))


def step_program(config, adapter_config, train_config):
  """(jitted update, abstract args (train, opt, base, frozen, tokens, mask, lr, i), labels)."""
  cfg = planned_model(config)
  ac, tc = adapter_config, train_config
  dtype = precision.compute_dtype(config)
  mesh = mesh_lib.make_mesh(config.mesh)
  params = jax.eval_shape(lambda k: llama.init(k, cfg), jax.random.PRNGKey(0))
  grads = params["blocks"] if ac.method in adapters_lib.NEEDS_GRAD else None
  base, ad = jax.eval_shape(
      lambda p, g: adapters_lib.attach(jax.random.PRNGKey(0), p, cfg, ac, g), params, grads)
  opt_state = jax.eval_shape(finetune.direction(ac, tc).init, ad["train"])
  train = _abstract(ad["train"], mesh)
  opt = _abstract(opt_state, mesh)
  frozen = _abstract(ad["frozen"], mesh)
  base = _abstract(base, mesh, dtype)  # frozen: stored once, in the compute dtype
  rows = NamedSharding(mesh, P(mesh_lib.batch_axes(mesh)))
  B, T = tc.batch, config.data.seq_len
  tokens = jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=rows)
  mask = jax.ShapeDtypeStruct((B, T), jnp.float32, sharding=rows)
  repl = NamedSharding(mesh, P())
  lr = jax.ShapeDtypeStruct((), jnp.float32, sharding=repl)
  i = jax.ShapeDtypeStruct((), jnp.int32, sharding=repl)
  update = finetune.make_update(cfg, ac, tc, dtype, remat=config.remat,
                                unroll=config.plan_unroll)
  shard = lambda t: jax.tree.map(lambda x: x.sharding, t)
  fn = jax.jit(update, out_shardings=(shard(train), shard(opt), repl), donate_argnums=(0, 1))
  n_base = sum(x.size for x in jax.tree.leaves(params))
  n_train = sum(x.size for x in jax.tree.leaves(ad["train"]))
  return fn, (train, opt, base, frozen, tokens, mask, lr, i), (cfg, n_base, n_train)


def plan(config, adapter_config, train_config) -> planner.Plan:
  fn, args, (cfg, n_base, n_train) = step_program(config, adapter_config, train_config)
  ac, tc = adapter_config, train_config
  label = (f"LoRA-LR {ac.method} rank {ac.rank} on a Llama d={cfg.dim} L={cfg.n_layers} "
           f"H={cfg.n_heads} ffn={cfg.hidden_dim} vocab={cfg.vocab_size} "
           f"({n_base / 1e9:.2f}B frozen, {n_train / 1e6:.1f}M trainable), batch "
           f"{tc.batch} x {config.data.seq_len} tokens, compute_dtype={config.compute_dtype}, "
           f"remat={config.remat}, mesh={config.mesh}, layers "
           f"{'unrolled' if config.plan_unroll else 'scanned'}; "
           f"one fine-tuning run of {tc.steps} steps")
  return planner.Plan(fn, args, steps=tc.steps, label=label,
                      bf16=config.compute_dtype == "bfloat16")
