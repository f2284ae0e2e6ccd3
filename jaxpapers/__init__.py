"""jaxpapers: JAX implementations of NeurIPS 2026 papers in one functional codebase."""
__version__ = "0.1.0"
