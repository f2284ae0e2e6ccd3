"""Perturbed S-EG / S-OGDA: last-iterate convergence in stochastic constrained minimax.

Abstract 19 of the NeurIPS 2026 set. See README.md in this directory.
"""
