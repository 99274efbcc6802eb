"""The machine class: what decides a run's bits besides its code and configuration.

Bits are promised within a machine class, round-off within a measured envelope across classes
(``fedbayes.engine.goldens``, ``fedbayes.engine.replay_verdict``: numerics goldens and replays). A class is the CPU's vendor, family and
model, the vector instruction sets the numerical libraries are allowed (``fedbayes.NUMERICS_ENV``:
PyTorch's own kernels, oneDNN, MKL, NumPy), the torch and NumPy versions, and the device. Two machines of
one class compute the same bits; Intel and AMD CPUs do not, even with every library capped at AVX2
(MKL and oneDNN take other code paths), nor does one CPU run with another vector width
(``ATEN_CPU_CAPABILITY=default``, which the test suite uses to emulate another class).

Torch-free: the capability PyTorch uses is the one the environment allows, capped by what the CPU
has (PyTorch's own rule); ``machine_class(torch_capability=...)`` records what torch reports where it is
loaded (run.json).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from importlib import metadata
from pathlib import Path

# PyTorch's CPU capabilities, weakest first, and the /proc/cpuinfo flag each needs (x86-64)
_ATEN = (("default", None), ("avx2", "avx2"), ("avx512", "avx512bw"))


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none: macOS, Windows)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def aten_capability(flags: set[str], requested: str | None) -> str:
    """The capability PyTorch's CPU kernels use: the strongest the CPU has, capped at ``requested``
    (``ATEN_CPU_CAPABILITY``; unset or unknown: no cap). Upper case, as torch reports it."""
    names = [n for n, _ in _ATEN]
    strongest = max((i for i, (_, flag) in enumerate(_ATEN) if flag is None or flag in flags), default=0)
    cap = names.index(requested.lower()) if requested and requested.lower() in names else len(names) - 1
    return names[min(strongest, cap)].upper()


@functools.lru_cache(maxsize=None)
def machine_class(device: str = "cpu") -> dict:
    """The class of this machine for ``device`` ("cpu" or a CUDA device's name): CPU vendor, family and
    model, the capped vector ISAs, library versions and device. JSON values; ``class_id`` names it."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    return {"arch": platform.machine(), "vendor": info.get("vendor_id") or platform.processor() or None,
            "family": info.get("cpu family"), "model": info.get("model"),
            "cpu": info.get("model name"),
            "aten": aten_capability(flags, os.environ.get("ATEN_CPU_CAPABILITY")) if flags else None,
            "onednn": os.environ.get("ONEDNN_MAX_CPU_ISA"), "mkl": os.environ.get("MKL_ENABLE_INSTRUCTIONS"),
            "numpy_disabled": os.environ.get("NPY_DISABLE_CPU_FEATURES"),
            "torch": _version("torch"), "numpy": _version("numpy"), "device": device}


# what makes two machines round differently (``cpu``, the model's marketing name, is shown, not compared)
CLASS_KEYS = ("arch", "vendor", "family", "model", "aten", "onednn", "mkl", "numpy_disabled", "torch", "numpy", "device")


def class_id(cls: dict) -> str:
    """A readable name of a class: ``x86_64 GenuineIntel 6/207 AVX2 torch 2.14.1+cu130 numpy 2.3.5 cpu``
    (a field the record leaves open: ``*``)."""
    def v(k):
        return "*" if cls.get(k) is None else str(cls[k])
    return (f"{v('arch')} {v('vendor')} {v('family')}/{v('model')} {v('aten')} torch {v('torch')} "
            f"numpy {v('numpy')} {v('device')}")


def class_slug(cls: dict) -> str:
    """A folder name for a class's own goldens: its vendor and ISA, and 8 hex of every compared field."""
    digest = hashlib.sha256(repr([cls.get(k) for k in CLASS_KEYS]).encode()).hexdigest()[:8]
    return f"{cls.get('vendor') or 'unknown'}-{(cls.get('aten') or 'unknown').lower()}-{digest}"


def same_class(recorded: dict | None, here: dict) -> bool:
    """Whether ``here`` is of the class ``recorded`` (a golden's or a run's record): every field the
    record gives agrees; a field it leaves open (None) agrees with any value. No record: not known to be."""
    if not recorded:
        return False
    return all(recorded.get(k) is None or str(recorded.get(k)) == str(here.get(k)) for k in CLASS_KEYS)
