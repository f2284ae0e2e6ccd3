"""llops: learnable low-rank polynomial sketches for linear attention (LLoPS, abstract 14)."""
