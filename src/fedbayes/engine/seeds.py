"""Order-independent random streams from one base seed (numpy SeedSequence spawn keys).

Every stream is addressed by a fixed key, so a resumed run draws exactly what an uninterrupted one
draws, whichever rounds or clients ran before.
"""

from __future__ import annotations

import numpy as np

PARTITION, INIT, SAMPLING, TRAIN, EVAL, SERVER = 0, 1, 2, 3, 4, 5


def stream(seed: int, *key: int) -> np.random.SeedSequence:
    return np.random.SeedSequence(seed, spawn_key=tuple(key))


def rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(stream(seed, *key))


def torch_seed(seed: int, *key: int) -> int:
    return int(stream(seed, *key).generate_state(1, dtype=np.uint64)[0] % (2**63 - 1))
