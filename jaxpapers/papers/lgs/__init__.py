"""LGS: latent generative PDE solver (arXiv 2602.11229)."""
