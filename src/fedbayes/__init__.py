"""fedbayes: a reproducibility workflow for Bayesian federated learning."""

import os

__version__ = "0.1.0"

# Portable CPU numerics. PyTorch's own kernels, oneDNN and MKL pick their vector instructions by CPU
# (AVX2, AVX-512), with different round-off, and training amplifies it: FedEP-I's committed FMNIST 10 %
# Dirichlet run, trained on another machine, gives 36.9 % at round 1 where the same code gives 36.1 % on
# this one. Capping all three at AVX2 is meant to give a run the same bits on every x86-64 CPU with
# AVX2, so that a committed run replays bit for bit
# (``fedbayes replay``, the rerun rule); on an AVX2 machine each cap keeps the bits (checked on the
# committed runs). MKL_CBWR (MKL's reproducibility mode) is deliberately not set: it changes the bits of
# every run on an AVX2 AMD CPU. Set before torch loads (import fedbayes first); an exported value wins.
#
# NumPy dispatches its own SIMD kernels (sums, exp, log in the metrics) and needs the same cap: on an
# AVX-512 machine (AMD EPYC Zen 4, checked 2026-11-25) its AVX-512 reductions change ECE, MCE and Brier
# in the last bit, and 14 of the 26 numerics goldens failed; with NumPy at X86_V3 (AVX2) all pass and
# the committed runs replay (X86_V4 is AVX-512 in NumPy 2's names). NumPy reads the variable once, at its
# import: import fedbayes first.
NUMERICS_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}
for _k, _v in NUMERICS_ENV.items():
    os.environ.setdefault(_k, _v)
