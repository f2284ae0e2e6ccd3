"""Neural orthonormal bases as paths on the orthogonal group (abstract 6, arXiv 2605.19959)."""
