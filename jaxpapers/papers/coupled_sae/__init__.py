"""Multisubject coupled sparse autoencoder for language encoding models (abstract 1)."""
