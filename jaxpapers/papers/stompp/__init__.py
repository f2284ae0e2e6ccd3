"""StoMPP: Stochastic Masked Partial Progressive Binarization (arXiv 2601.22660)."""
