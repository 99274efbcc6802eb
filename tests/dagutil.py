"""Shared by the tests that run the real workflow (Snakemake, DVC, MLflow, SLURM) in a temporary copy
of the repository: copy it, edit its params.yaml, run a command with the venv's tools on PATH."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import yaml

BIN = Path(sys.executable).parent
COPY = ["Snakefile", "params.yaml", "params.smoke.yaml", "dvc.yaml", ".dvcignore", ".gitignore", "workflow", "profiles", "src", "papers",
        "reports/notes", "reports/causes.yaml", "reports/evidence",
        "tests/golden"]   # the numerics goldens the DAG's numerics check replays (workflow/rules/train.smk)
FMNIST_DEB = "/usr/share/datasets/fashion-mnist"


def fmnist_available() -> bool:
    mirrors = os.environ.get("FEDBAYES_DATA_MIRRORS", "").split(os.pathsep) + [FMNIST_DEB]
    return any(Path(m, "train-images-idx3-ubyte.gz").exists() for m in mirrors if m)


def require_fmnist(pytest) -> None:
    """Skip (fail on CI, which must run these tests) when Fashion-MNIST cannot be had offline."""
    if not fmnist_available():
        if os.environ.get("CI"):
            pytest.fail("Fashion-MNIST is not available (install dataset-fashion-mnist); CI must run this test")
        pytest.skip("Fashion-MNIST not available offline (apt-get install dataset-fashion-mnist)")


def read_params(root: Path) -> dict:
    """``root``'s params.yaml as written, with the ``smoke`` block of params.smoke.yaml beside it inline
    (as fedbayes.study.with_smoke_overlay lays it; an inline block written back wins over the file)."""
    p = yaml.safe_load((root / "params.yaml").read_text())
    overlay = root / "params.smoke.yaml"
    if overlay.exists() and "smoke" not in p:
        p["smoke"] = yaml.safe_load(overlay.read_text())["smoke"]
    return p


def copy_repo(repo: Path, dst: Path, edit: Callable[[dict], None] | None = None, scale: str = "smoke") -> Path:
    """The workflow's files copied into ``dst``; params.yaml at ``scale`` (its smoke overlay inline), then
    passed to ``edit`` (and dvc.yaml's params lists generated again for the edited tables)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in COPY:
        src = repo / name
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir()
         else shutil.copy2(src, dst / name))
    if scale != "paper":  # DVC's stages write where Snakemake writes at this scale (dvc.yaml `vars`)
        dvc = (dst / "dvc.yaml").read_text()
        assert "  - reports_dir: reports\n" in dvc
        (dst / "dvc.yaml").write_text(dvc.replace("  - reports_dir: reports\n", f"  - reports_dir: reports/{scale}\n"))
    p = read_params(dst)
    p["scale"] = scale
    if edit is not None:
        edit(p)
    (dst / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    # dvc.yaml follows the copy, as `make dvc.yaml` writes it: the params lists the edited tables read, and no
    # dependency on the repository's committed runs, which the copy does not hold (DVC refuses a stage whose
    # dependency is missing); params a test makes invalid on purpose (or that name a plug-in only the test's
    # commands see) leave dvc.yaml as it is: the command under test then reports them itself
    subprocess.run([sys.executable, "workflow/dvc_stages.py"], cwd=dst, check=False, capture_output=True)
    return dst


def built_copy(tmp_path_factory, repo: Path, name: str, edit: Callable[[dict], None] | None, scale: str,
               command: str) -> Path:
    """A fresh copy of a repository copy (``copy_repo``) in which ``command`` ran on the copy's own sources
    (``PYTHONPATH=<copy>/src``, as tests that edit them run it): the build is made once a test session,
    shared by the files that ask for the same ``name`` on any xdist worker (a lock), and copied with its
    mtimes, so each caller's edits stay its own and Snakemake sees the copy up to date."""
    from fedbayes.fileio import exclusive_lock

    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root   # the session's, not the worker's
    cache = root / f"built-{name}"
    with exclusive_lock(cache):
        if not (cache / ".built").exists():
            shutil.rmtree(cache, ignore_errors=True)
            copy_repo(repo, cache, edit, scale)
            sh(command, cache, PYTHONPATH=str(cache / "src"))
            (cache / ".built").write_text(command + "\n")
    d = tmp_path_factory.mktemp(name)
    shutil.copytree(cache, d, dirs_exist_ok=True, symlinks=True, ignore=shutil.ignore_patterns(".built"))
    return d


def env(**extra: str) -> dict:
    """The test's environment with the venv's tools first on PATH, a local SQLite MLflow store and no
    downloads (MNIST, CIFAR-10, UCI, FLamby are unavailable offline and never fetched)."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db", "FEDBAYES_OFFLINE": "1", **extra}


def sh(cmd: str, cwd: Path, timeout: float = 3600, check: bool = True, **extra_env: str) -> str:
    r = subprocess.run(cmd, cwd=cwd, shell=True, capture_output=True, text=True, timeout=timeout, env=env(**extra_env))
    if check:
        assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}"
    return r.stdout + r.stderr


def mtimes(root: Path, pattern: str) -> dict:
    return {str(f.relative_to(root)): f.stat().st_mtime_ns for f in sorted(root.glob(pattern))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mlflow_server(where: Path):
    """An ``mlflow server`` on a free loopback port, its SQLite store and artifacts under ``where``: its URL."""
    where.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(where / "mlflow-server.log", "w")
    proc = subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{where / 'server.db'}",
         "--artifacts-destination", str(where / "server-artifacts")],
        stdout=log, stderr=subprocess.STDOUT, env=env(), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).read().strip() == b"OK":
                    break
            except OSError:
                pass
            assert proc.poll() is None, (where / "mlflow-server.log").read_text()[-3000:]
            assert time.monotonic() - t0 < 120, "mlflow server did not answer /health in 120 s"
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
