"""fedbayes: a reproducibility workflow for Bayesian federated learning."""

import os

__version__ = "0.1.0"

# Portable CPU numerics. PyTorch's own kernels, oneDNN and MKL pick their vector instructions by CPU
# (AVX2, AVX-512), with different round-off, and training amplifies it: FedEP-I's committed FMNIST 10 %
# Dirichlet run, trained on another machine, gives 36.9 % at round 1 where the same code gives 36.1 % on
# this one. Capping all three at AVX2 is meant to give a run the same bits on every x86-64 CPU with
# AVX2 (not yet checked on an AVX-512 machine), so that a committed run replays bit for bit
# (``fedbayes replay``, the rerun rule); on an AVX2 machine each cap keeps the bits (checked on the
# committed runs). MKL_CBWR (MKL's reproducibility mode) is deliberately not set: it changes the bits of
# every run on an AVX2 AMD CPU. Set before torch loads (import fedbayes first); an exported value wins.
NUMERICS_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
for _k, _v in NUMERICS_ENV.items():
    os.environ.setdefault(_k, _v)
