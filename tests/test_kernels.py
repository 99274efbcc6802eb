"""The compiled CPU kernels (fedbayes/methods/core/kernels.cpp) against the eager code they replace, bit for
bit: torch.randn (values and the generator's state after), IVON's sampling step and IVON's update."""

import itertools
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from fedbayes.methods.core import ivon, kernels

N = kernels.MIN_NUMEL + 37          # not a multiple of 16: normal_fill's redrawn tail


@pytest.fixture(scope="module")
def kernel():
    """The kernels, which must load wherever they can be built: an AVX2 CPU, a C++ compiler, not switched
    off (elsewhere the eager code runs and these tests have nothing to check)."""
    k = kernels.kernel()
    can = (os.environ.get("FEDBAYES_COMPILE", "1") != "0" and shutil.which("c++") is not None
           and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"))
    if k is None and can:
        pytest.fail("the compiled kernels did not load (or differ from torch.randn) on an AVX2 machine with a C++ compiler")
    if k is None:
        pytest.skip("no compiled kernels here (no C++ compiler, no AVX2, or FEDBAYES_COMPILE=0)")
    return k


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


@pytest.mark.parametrize("n", [kernels.MIN_NUMEL, N, 178_110, 624 * 200 + 1])
def test_randn_is_torch_randn(kernel, n):
    """Same numbers from the same global generator state, draw after draw, and the generator left where
    torch.randn leaves it (the next draw, by torch itself, agrees too)."""
    torch.manual_seed(11)
    torch.rand(3)                                             # start mid-stream
    want = [torch.randn(n), torch.randn(n), torch.randn(5)]
    torch.manual_seed(11)
    torch.rand(3)
    got = [kernels.randn((n,)), kernels.randn((n,)), torch.randn(5)]
    for a, b in zip(want, got):
        assert torch.equal(bits(a), bits(b))


def test_randn_with_a_generator_and_the_fallbacks(kernel, monkeypatch):
    g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    assert torch.equal(bits(kernels.randn((N,), generator=g1)), bits(torch.randn(N, generator=g2)))
    assert torch.equal(g1.get_state(), g2.get_state())
    small = kernels.randn((100,), generator=g1)                # below MIN_NUMEL: torch.randn itself
    assert torch.equal(small, torch.randn(100, generator=g2))
    monkeypatch.setattr(kernels, "_kernel", False)            # unavailable: the eager code, same numbers
    assert kernels.kernel() is None
    assert torch.equal(kernels.randn((N,), generator=g1), torch.randn(N, generator=g2))


def test_a_kernel_that_differs_is_not_used(monkeypatch):
    """The self-check refuses a kernel whose draws are not torch.randn's."""
    class Off:
        def randn_(self, out, gen):
            torch.randn(out.shape, generator=gen, out=out)
            out[0] += 1.0
    assert not kernels._agrees(Off())


def test_sample_is_the_eager_draw(kernel):
    gen = torch.Generator().manual_seed(2)
    m, hd = torch.randn(N, generator=gen), torch.rand(N, generator=gen) * 2 + 1e-4
    ess = 59_999.5
    torch.manual_seed(8)
    std = (hd * ess).rsqrt()
    noise_want = torch.randn(N) * std
    theta_want = m + noise_want
    torch.manual_seed(8)
    noise, theta, scratch = torch.empty(N), torch.empty(N), torch.empty(N)
    kernels.sample_(noise, theta, m, hd, ess, scratch)
    assert torch.equal(bits(noise), bits(noise_want)) and torch.equal(bits(theta), bits(theta_want))


@pytest.mark.parametrize("vec_delta,vec_prior,with_v,with_u,clip",
                         [(*c, r) for c in itertools.product([False, True], repeat=4) for r in (math.inf, 0.02)])
def test_ivon_step_is_the_eager_step(kernel, vec_delta, vec_prior, with_v, with_u, clip):
    """Every combination of vector/scalar δ and prior mean, duals v and u, and clipping, with ĝ∘(θ − m)
    given or formed by the kernel: m, h, g, h + δ and the step count after four steps equal the eager
    ``_ivon_step_``'s bit for bit."""
    gen = torch.Generator().manual_seed(5)
    r = lambda: torch.randn(N, generator=gen)  # noqa: E731
    m, h, g = r(), r().abs() * 1e-3, r() * 1e-2
    delta = r().abs() * 1e-2 + 1e-4 if vec_delta else 1e-3
    kw = dict(ess=3000.0, delta=delta, beta1=0.9, beta2=0.99999, prior_mean=r() * 0.1 if vec_prior else 0.25,
              v=r() * 1e-3 if with_v else None, u=r().abs() * 1e-4 if with_u else None, clip_radius=clip,
              debias=True)
    steps = [(r() * 0.1, r() * 1e-2, 0.01 * (1 - i / 5)) for i in range(4)]
    out = []
    for how in ("eager", "kernel", "kernel forms nxg"):
        mm, hh, gg = m.clone(), h.clone(), g.clone()
        hd, a, b, t = hh + delta, torch.empty(N), torch.empty(N), 0
        for grad, noise, lr in steps:                         # noise: θ − m; nxg = noise·grad
            if how == "eager":
                t = ivon._ivon_step_(mm, hh, gg, t, grad, noise * grad, hd, a, b, lr=lr, **kw)
            elif how == "kernel":
                t = kernels.ivon_step(mm, hh, gg, t, grad, noise * grad, hd, lr=lr, **kw)
            else:
                t = kernels.ivon_step(mm, hh, gg, t, grad, None, hd, lr=lr, noise=noise, **kw)
        out.append((mm, hh, gg, hd, t))
    for state in out[1:]:
        assert state[4] == out[0][4] == 4
        for x, y in zip(out[0][:4], state[:4]):
            assert torch.equal(bits(x), bits(y))


def test_ivon_step_declines_what_it_cannot_take(kernel):
    m = torch.zeros(N, dtype=torch.float64)
    assert kernels.ivon_step(m, m, m, 0, m, m, m, lr=0.1, ess=1.0, delta=1.0, beta1=0.9, beta2=0.99,
                             prior_mean=0.0, v=None, u=None, clip_radius=math.inf, debias=True) is None


def test_folas_fisher_sum_and_prior_gradient_are_the_eager_ops(kernel):
    gen = torch.Generator().manual_seed(9)
    r = lambda: torch.randn(N, generator=gen)  # noqa: E731
    acc, g, w, mu, factor = r().abs(), r() * 1e-2, r(), r(), r().abs() * 100
    want = acc.clone()
    want.add_(torch.mul(g, g).mul_(32 / 2021))
    got = acc.clone()
    kernels.add_scaled_square_(got, g, 32 / 2021, scratch=torch.empty(N))
    assert torch.equal(bits(got), bits(want))
    out = torch.empty(N)
    assert kernels.scaled_difference_(out, w, mu, factor) is out
    assert torch.equal(bits(out), bits(torch.sub(w, mu).mul_(factor)))


def test_ivon_refuses_a_gradient_changed_before_its_step():
    """IVON forms ĝ∘(θ − m) at its step from the gradient its gradient() returned: a gradient changed in
    between (a clipping hook) is an error, not a silently different update."""
    from fedbayes.methods.core.ivon import IVON, IVONState

    w = torch.zeros(64)
    opt = IVON(IVONState.start(w, 0.1), lr=lambda i, n: 0.1, ess=100.0, delta=1e-3)
    _, g = opt.gradient(lambda theta: ((theta ** 2).sum(),) * 2)
    g.mul_(0.5)
    with pytest.raises(RuntimeError, match="unchanged"):
        opt.step(g, 0, 1)


def test_a_build_killed_midway_is_cleaned_not_waited_on(tmp_path, monkeypatch):
    """A kill -9 during the kernels' first build left torch's lock file in the build folder, and every
    later load waited on it forever. Under fedbayes' own flock (released when its holder dies) a lock file
    there is stale: removed, and the build goes ahead; a broken build is removed and built again once."""
    import torch.utils.cpp_extension as ext

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.delattr(ext, "FileLock", raising=False)   # a torch whose lock file is a baton (before 2.6)
    build = kernels.build_directory()
    assert build.is_relative_to(tmp_path)
    build.mkdir(parents=True, exist_ok=True)
    (build / "lock").write_text("")
    calls = []

    def fake_load(**kwargs):   # torch's loader: waits while "lock" exists (here: would never return)
        assert not (build / "lock").exists(), "the build would wait on a dead builder's lock forever"
        calls.append(kwargs["name"])
        if len(calls) == 1:
            raise ImportError("fedbayes_kernels.so: file too short")   # a truncated library of the killed build
        return "loaded"

    monkeypatch.setattr(ext, "load", fake_load)
    with pytest.warns(RuntimeWarning, match="left by a build that was killed"):
        assert kernels._load() == "loaded"
    assert calls == ["fedbayes_kernels", "fedbayes_kernels"]


def test_a_flock_lock_file_is_left_alone_and_not_reported(tmp_path, monkeypatch):
    """torch 2.6 on holds a flock on <build>/lock, which stays after every build: its existence means no
    killed build (before: every process's first load warned it removed one 'left by a build that was
    killed', and removing a held lock file could let a second builder in)."""
    import warnings

    import torch.utils.cpp_extension as ext

    if not hasattr(ext, "FileLock"):
        pytest.skip("this torch marks a build by the lock file's existence")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build = kernels.build_directory()
    build.mkdir(parents=True, exist_ok=True)
    (build / "lock").write_text("")
    monkeypatch.setattr(ext, "load", lambda **kw: "loaded")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels._load() == "loaded"
    assert (build / "lock").exists()


LOADER = """
import importlib.util, shutil, sys
import torch.utils.cpp_extension as ext
from fedbayes.methods.core import kernels

lib = importlib.util.find_spec("_bisect").origin      # a real extension module stands in for the kernels
build = kernels.build_directory()
built = []

def load(name, **kw):   # torch's loader: builds the library where there is none, then imports it
    so = build / "fedbayes_kernels.so"
    if not so.exists():
        build.mkdir(parents=True, exist_ok=True)
        shutil.copy(lib, so)
        built.append(so)
    spec = importlib.util.spec_from_file_location("_bisect", so)
    return importlib.util.module_from_spec(spec)

ext.load = load
k = kernels._load()
print("built" if built else "reused", k.__file__)
"""


def _cut_into_last_segment(so):
    """Truncate a library inside its last loaded segment (what a full disk or a killed copy leaves): the
    dynamic loader maps it and the process dies of SIGBUS when the missing page is touched."""
    import struct

    data = so.read_bytes()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads = [struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize) for i in range(phnum)]
    offset = max(h[2] for h in loads if h[0] == 1)   # PT_LOAD
    so.write_bytes(data[:offset + 8])


@pytest.mark.full
@pytest.mark.skipif(sys.platform != "linux", reason="an ELF shared library")
@pytest.mark.parametrize("record", [True, False])
def test_a_damaged_kernel_library_is_built_again_not_loaded(tmp_path, record):
    """A compiled kernel library cut short in the build cache loaded (ninja calls it up to date) and every
    later process died of SIGBUS (rc 135) before training. Now checked before loading — against the hash
    recorded at its last load, or (a library from before the record) its ELF layout — and built again."""
    import subprocess

    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "PYTHONWARNINGS": "default"}
    run = lambda: subprocess.run([sys.executable, "-c", LOADER], env=env, capture_output=True, text=True)  # noqa: E731
    first = run()
    assert first.returncode == 0 and first.stdout.startswith("built"), first.stderr
    so = next(tmp_path.rglob("fedbayes_kernels.so"))
    assert run().stdout.startswith("reused")             # intact: loaded as it is
    if not record:                                         # a library built before the hash was recorded
        so.with_name(so.name + ".sha256").unlink()
    _cut_into_last_segment(so)
    again = run()
    assert again.returncode == 0, f"rc {again.returncode}: {again.stderr[-500:]}"
    assert again.stdout.startswith("built") and "is damaged" in again.stderr and "building it again" in again.stderr
    assert run().stdout.startswith("reused")


def test_a_library_whose_contents_changed_is_damaged(tmp_path):
    """Same size, other bytes (a corrupted block): the recorded hash tells."""
    import importlib.util

    so = tmp_path / "fedbayes_kernels.so"
    shutil.copy(importlib.util.find_spec("_bisect").origin, so)
    assert kernels.library_problem(so) is None
    kernels.record_library(so)
    assert kernels.library_problem(so) is None
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF
    so.write_bytes(bytes(data))
    assert kernels.library_problem(so) == "its contents differ from the build's"
    so.write_bytes(b"")
    assert "0 bytes" in kernels.library_problem(so)


def test_the_build_reads_its_source_from_a_path_its_content_names(tmp_path):
    build = tmp_path / "fedbayes_kernels"
    src = kernels.stable_source(build)
    assert src.read_bytes() == (Path(kernels.__file__).with_name("kernels.cpp")).read_bytes()
    assert src.parent == tmp_path / "fedbayes_kernels.sources" and src.name.startswith("kernels-")
    before = src.stat().st_mtime_ns
    assert kernels.stable_source(build) == src and src.stat().st_mtime_ns == before   # not rewritten
    src.write_text("damaged")
    assert kernels.stable_source(build).read_bytes() != b"damaged"


@pytest.mark.full
def test_a_clone_at_another_path_loads_the_kernels_without_building_them_again(tmp_path):
    """torch's loader wrote the source's path into its build file: a process of another checkout (or a
    test's copy of the repository) compiled the kernels again, 36 s, each time the path changed."""
    import subprocess

    clone = tmp_path / "clone"
    shutil.copytree(Path(kernels.__file__).parents[3], clone / "src", ignore=shutil.ignore_patterns("__pycache__"))
    code = ("from fedbayes.methods.core import kernels; k = kernels.kernel(); import sys; "
            "print(bool(k)); print(kernels.build_directory())")
    runs = []
    for where in (clone / "src", Path(kernels.__file__).parents[3], clone / "src"):
        env = {**os.environ, "PYTHONPATH": str(where)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-2000:]
        loaded, build = out.stdout.split()
        so = sorted(Path(build).glob("*.so"))
        runs.append((loaded, [(f.name, f.stat().st_mtime_ns) for f in so]))
    if runs[0][0] != "True":
        pytest.skip("no compiler or no AVX2 here: the kernels do not build")
    assert runs[0][1] == runs[1][1] == runs[2][1], runs   # built (at most) once, then loaded as built
