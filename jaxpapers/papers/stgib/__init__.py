"""STGIB: spatio-temporal graph information bottleneck explanations (abstract 13)."""
