"""Compiled CPU kernels for the sampling methods, each giving the eager code's numbers bit for bit.

IVON draws a standard normal per parameter at every local step; on one CPU core ``torch.randn`` of the
178,110-parameter MLP takes 0.45 ms, as long as a minibatch's forward and backward, because its
Mersenne Twister is called once per number. ``kernels.cpp`` (beside this file) runs the same generator
on a copy of its state in a vectorised loop and the same Box-Muller block, and writes the state back:
the same bits from the same generator, in 0.13 ms (``randn_``). ``sample_`` adds IVON's scaling and
shift while each stretch of noise is in cache, and ``ivon_step`` is IVON's update (``ivon._ivon_step_``)
as one loop rounded operation by operation, called without torch.compile's per-call guards;
``add_scaled_square_`` and ``scaled_difference_`` are FOLA's Fisher sum and prior gradient in one pass
each.

They are compiled once per machine (a C++ compiler, ≈ 20 s, cached by torch under
~/.cache/torch_extensions) and used only after ``randn_`` has reproduced ``torch.randn`` bit for bit
here, on several sizes and successive draws; anywhere else — no compiler, a CPU without AVX2, another
dtype, a GPU tensor, fewer than MIN_NUMEL numbers, ``FEDBAYES_COMPILE=0`` — the eager code runs.
``tests/test_kernels.py`` checks each against its eager form.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch

from fedbayes.fileio import exclusive_lock

MIN_NUMEL = 65_536      # smaller tensors keep the eager code (no compilation for the toys and unit tests)
_kernel = None          # None: not loaded yet; False: unavailable here


def _load():
    from torch.utils.cpp_extension import load

    if shutil.which("ninja") is None:            # the ninja package's binary (a dependency), off PATH in
        import ninja                             # an unactivated virtual environment

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")

    build = build_directory()
    # One builder at a time under a flock, which the kernel releases when its holder dies.
    with exclusive_lock(build.parent / f"{build.name}.build"):
        src = stable_source(build)
        for attempt in (1, 2):
            _remove_stale_baton(build)
            # A library cut short (a full disk, a killed copy) still loads: the loader maps the missing pages
            # and the process dies of SIGBUS at the first touch, every time, as ninja calls it up to date.
            # Checked before loading against its ELF layout and the hash recorded when it last loaded.
            if damaged := [f"{so.name}: {why}" for so in sorted(build.glob("*.so")) if (why := library_problem(so))]:
                warnings.warn(f"kernels: the compiled library in {build} is damaged ({'; '.join(damaged)}); "
                              "building it again", RuntimeWarning, stacklevel=2)
                shutil.rmtree(build, ignore_errors=True)
            try:
                k = load(name="fedbayes_kernels", sources=[str(src)], verbose=False,
                         extra_cflags=["-O3", "-mavx2", "-mfma", "-fno-math-errno"])
            except (OSError, ImportError, RuntimeError):
                if attempt == 2 or not build.exists():
                    raise
                # a build left half-written (a truncated library, a killed compiler): built again from scratch
                warnings.warn(f"kernels: the build in {build} is broken; building it again", RuntimeWarning, stacklevel=2)
                shutil.rmtree(build, ignore_errors=True)
            else:
                if getattr(k, "__file__", None):
                    record_library(Path(k.__file__))
                return k


def stable_source(build: Path) -> Path:
    """kernels.cpp copied beside the build under a name its content gives, the path the build reads:
    torch's loader writes the source's path into its ninja file, so a process of a clone at another path
    (another checkout, a test's copy of the repository) found the build out of date and compiled it again
    (36 s measured) each time the path changed; the same source now builds once a machine."""
    import hashlib

    from fedbayes.fileio import atomic_target

    text = Path(__file__).with_name("kernels.cpp").read_bytes()
    dst = build.parent / f"{build.name}.sources" / f"kernels-{hashlib.sha256(text).hexdigest()[:16]}.cpp"
    if not dst.exists() or dst.read_bytes() != text:
        dst.parent.mkdir(parents=True, exist_ok=True)
        with atomic_target(dst, keep_suffix=True) as tmp:
            tmp.write_bytes(text)
    return dst


def _remove_stale_baton(build: Path) -> None:
    """torch before 2.6 marked a build in progress by the mere existence of ``<build>/lock`` (a baton),
    which a build killed midway left behind, and every later load waited on it forever: under our flock
    nobody else is building, so such a file is stale. Later torch holds a flock on that file instead (its
    existence means nothing, and removing it could let a builder outside fedbayes in): left alone."""
    import torch.utils.cpp_extension as ext

    stale = build / "lock"
    if not hasattr(ext, "FileLock") and stale.exists():
        warnings.warn(f"kernels: removing {stale}, left by a build that was killed", RuntimeWarning, stacklevel=3)
        stale.unlink()


def _record(so: Path) -> Path:
    return so.with_name(so.name + ".sha256")


def _digest(so: Path) -> str:
    import hashlib

    return hashlib.sha256(so.read_bytes()).hexdigest()


def record_library(so: Path) -> None:
    """Record the hash and size of a library that loaded and built as torch built it (``<so>.sha256``)."""
    from fedbayes.fileio import write_text_atomic

    try:
        write_text_atomic(_record(so), f"{_digest(so)} {so.stat().st_size}\n")
    except OSError:   # a read-only cache: nothing recorded, the layout check still runs
        pass


def library_problem(so: Path) -> str | None:
    """What is wrong with a compiled library, or None: its size or hash differ from the record written when
    it last loaded; or (no record) its ELF headers, segments or section table reach past its end."""
    import struct

    try:
        data = so.read_bytes()
    except OSError as e:
        return f"unreadable: {e.strerror}"
    rec = _record(so)
    if rec.exists():
        try:
            digest, size = rec.read_text().split()
            size = int(size)
        except (OSError, ValueError):
            digest, size = None, None
        if size is not None:
            if len(data) != size:
                return f"{len(data)} bytes, {size} when built"
            import hashlib

            return None if hashlib.sha256(data).hexdigest() == digest else "its contents differ from the build's"
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return f"not a shared library ({len(data)} bytes)"
    if data[4] != 2 or data[5] != 1:   # not 64-bit little-endian: the kernels are built for x86-64 alone
        return None
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    if phoff + phnum * phentsize > len(data) or shoff + shnum * shentsize > len(data):
        return f"cut short at {len(data)} bytes, its headers reach past the end"
    for i in range(phnum):
        _, _, offset, _, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if offset + filesz > len(data):
            return f"cut short at {len(data)} bytes, a segment ends at {offset + filesz}"
    return None


def build_directory() -> Path:
    """Where torch's extension loader builds the kernels (TORCH_EXTENSIONS_DIR, else its per-user cache)."""
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory("fedbayes_kernels", verbose=False))


def _agrees(kernel) -> bool:
    """Does ``kernel`` give torch.randn's bits, draw after draw, from the same generator state?"""
    for seed, sizes in ((0, (16, 17, 1000, 10_007)), (1, (178_110, 624 * 16 + 3, 65_536))):
        ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        for n in sizes:
            a = torch.randn(n, generator=theirs, device="cpu")
            b = torch.empty(n, device="cpu")
            kernel.randn_(b, ours)
            if not torch.equal(a.view(torch.int32), b.view(torch.int32)):
                return False
        if not torch.equal(ours.get_state(), theirs.get_state()):
            return False
    return True


def kernel():
    """The compiled kernel, or None where it is unavailable or would differ from torch.randn."""
    global _kernel
    if _kernel is None:
        _kernel = False
        if os.environ.get("FEDBAYES_COMPILE", "1") != "0" and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
            try:
                k = _load()
            except Exception as err:  # noqa: BLE001  (no C++ compiler, headers missing)
                warnings.warn(f"kernels: the compiled kernels are unavailable ({type(err).__name__}: {str(err)[:200]}); "
                              "using the eager code (the same numbers, slower)", RuntimeWarning, stacklevel=3)
            else:
                if _agrees(k):
                    _kernel = k
                else:
                    warnings.warn("kernels: the compiled randn differs from torch.randn on this machine; "
                                  "using the eager code", RuntimeWarning, stacklevel=3)
    return _kernel or None


def usable(*tensors: torch.Tensor) -> bool:
    """May the compiled kernels take these tensors (contiguous float32 on the CPU, MIN_NUMEL up)?"""
    return (all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors)
            and tensors[0].numel() >= MIN_NUMEL and kernel() is not None)


def randn_(out: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``torch.randn(out.shape, generator=generator, out=out)``: the same numbers, and the generator left
    in the same state."""
    if usable(out):
        _kernel.randn_(out, generator)
        return out
    return torch.randn(out.shape, generator=generator, dtype=out.dtype, device=out.device, out=out)


def sample_(noise: torch.Tensor, theta: torch.Tensor, m: torch.Tensor, hd: torch.Tensor, ess: float,
            std: torch.Tensor) -> None:
    """IVON's posterior draw θ = m + ε/sqrt(ess·hd), ε ~ N(0, I) from torch's global generator: ``noise``
    receives ε/sqrt(ess·hd) and ``theta`` θ (``std``: scratch). The same bits as the eager

        std = (hd·ess).rsqrt();  noise = torch.randn(…)·std;  theta = m + noise

    which runs wherever the compiled kernel does not (there in one pass, each stretch of the noise
    scaled while it is in cache: 0.18 ms for 178,110 parameters against 0.56 ms)."""
    if usable(noise, theta, m, hd):
        _kernel.sample_(noise, theta, m, hd, float(ess), None)
        return
    torch.mul(hd, ess, out=std)
    std.rsqrt_()
    randn_(noise)
    noise.mul_(std)
    torch.add(m, noise, out=theta)


def randn(shape, *, generator: torch.Generator | None = None, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """``torch.randn(shape, generator=..., dtype=..., device=...)`` through ``randn_``."""
    return randn_(torch.empty(shape, dtype=dtype, device=device), generator)


_EMPTY = torch.empty(0, device="cpu")   # "no vector" for the kernel (which takes CPU tensors only)


def _vector_or_scalar(x, n: int):
    """(vector, 0.0) for a length-n tensor, else (empty, the number)."""
    if isinstance(x, torch.Tensor) and x.numel() == n:
        return x, 0.0
    return _EMPTY, float(x)


def ivon_step(m, h, g, t: int, grad, nxg, hd, *, lr: float, ess: float, delta, beta1: float, beta2: float,
              prior_mean, v, u, clip_radius: float, debias: bool, noise=None) -> int | None:
    """``ivon._ivon_step_`` in the compiled kernel: m, h, g and hd (h + δ) updated in place, the new step
    count returned; None (nothing done) where the kernel cannot take these tensors. ``nxg`` = ĝ∘(θ − m),
    or None with ``noise`` = θ − m, the kernel then forming noise·grad itself (the same rounding; a pass
    saved). The scalars are computed here as the eager step computes them (Python floats, rounded to
    float32 by the kernel)."""
    n = m.numel()
    vectors = [x for x in (delta, prior_mean, v, u) if isinstance(x, torch.Tensor) and x.numel() == n]
    if not usable(m, h, g, hd, grad, nxg if noise is None else noise, *vectors):
        return None
    t += 1
    bias = 1.0 - beta1 ** t if debias else 1.0
    _kernel.ivon_step_(m, h, g, hd, grad, _EMPTY if nxg is None else nxg, _EMPTY if noise is None else noise,
                       *_vector_or_scalar(delta, n), *_vector_or_scalar(prior_mean, n),
                       _EMPTY if v is None else v, _EMPTY if u is None else u,
                       beta1, 1.0 - beta1, beta2, 1.0 - beta2, 0.5 * (1.0 - beta2) ** 2, float(ess), bias,
                       float(lr), float(clip_radius))
    return t


def add_scaled_square_(acc: torch.Tensor, g: torch.Tensor, c: float, scratch: torch.Tensor) -> None:
    """acc += c·g², rounded as ``torch.mul(g, g, out=scratch); acc.add_(scratch.mul_(c))`` (FOLA's Fisher
    sum), in one pass where the kernel runs."""
    if usable(acc, g):
        _kernel.add_scaled_square_(acc, g, float(c))
        return
    torch.mul(g, g, out=scratch)
    acc.add_(scratch.mul_(c))


def scaled_difference_(out: torch.Tensor, w: torch.Tensor, mu: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """out = (w − mu)·factor, rounded as ``torch.sub(w, mu, out=out).mul_(factor)``, in one pass where the
    kernel runs. Returns out."""
    if usable(out, w, mu, factor):
        _kernel.scaled_difference_(out, w, mu, factor)
        return out
    return torch.sub(w, mu, out=out).mul_(factor)

