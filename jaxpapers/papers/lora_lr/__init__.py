"""Learning Rate Matters: Vanilla LoRA May Suffice (arXiv 2602.04998)."""

# The paper's files, for the commit stamp of every table (both legs of the study).
PATHS = ["jaxpapers/papers/lora_lr", "configs/lora_lr.py", "jaxpapers/nn",
         "jaxpapers/data/text.py", "tests/test_lora_lr.py"]
