import shutil
from pathlib import Path

import fedbayes  # noqa: F401  (first: its CPU-numerics settings must precede torch's start-up)
import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

# One intra-op thread: the tests' tensors are tiny, and with two threads on a loaded 2-core machine
# every op's synchronisation stalls (measured 60× slower IVON steps while other jobs ran).
torch.set_num_threads(1)


# Files whose tests run the real DAG for minutes and depend on each other (module-scoped work
# directories): collected first, so that `pytest -n auto --dist loadfile --no-loadscope-reorder` (make test)
# starts them on their own workers at once instead of after every quick file; the order within a file is
# kept. (Without --no-loadscope-reorder xdist sends the files with the most tests first, and the rehearsal,
# six tests, started 15 minutes into a run.)
SLOW_FIRST = ("test_rehearsal.py", "test_integration.py", "test_slurm.py", "test_scaleout.py", "test_damaged.py", "test_faults.py",
              "test_recovery.py", "test_rerun_rule.py", "test_edit_loop.py", "test_method_plugins.py")


# The second tier (`make test-all`, what CI runs): the stand-in rehearsal of every experiment, the real
# smoke DAG with DVC and MLflow, a Slurm cluster (these files whole), and each test marked `full` elsewhere:
# one that runs a Snakemake DAG, DVC, an MLflow server or concurrent processes, trains whole runs,
# compiles a kernel, installs a package or replays committed runs. `make test` (unit and planning tests,
# `snakemake -n` included) leaves them out (-m "not full").
FULL_TIER = ("test_rehearsal.py", "test_integration.py", "test_slurm.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "full: the second test tier (a DAG, DVC, a server or a replay run): make test-all")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in FULL_TIER:
            item.add_marker(pytest.mark.full)
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))   # stable: keeps the rest's order


def no_download(*args, **kwargs):
    raise AssertionError("a test tried to download data")


@pytest.fixture(scope="module", autouse=True)
def module_folders_removed_when_passed(request, tmp_path_factory):
    """A file's own folders (``tmp_path_factory.mktemp``: its built repository copies) are removed when its
    tests are done and none failed; a failing file keeps them to look at, as pyproject's
    ``tmp_path_retention_policy = "failed"`` does for a test's ``tmp_path``. Kept whole, one session's
    folders reached 5.9 GB (the rehearsal's ResNet-18 posteriors alone 3.8 GB) beside a 6.4 GB checkout
    and virtual environment: CI's disk filled near the end of a run (SQLite could not create its tables).
    The builds shared between files (``dagutil.built_copy``'s ``built-*``) stay for the session."""
    base = tmp_path_factory.getbasetemp()
    before = set(base.iterdir())
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed == failed:
        for d in set(base.iterdir()) - before:
            if d.is_dir() and not d.name.startswith("built-"):
                shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def offline_data(monkeypatch):
    """No test downloads or reads the user's mirrors: fetches see only the sources a test sets up
    (a test may still monkeypatch ``download_url`` with a fake of its own)."""
    from fedbayes.data import sources

    monkeypatch.delenv(sources.MIRRORS_ENV, raising=False)
    monkeypatch.setattr(sources, "download_url", no_download)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def synthetic_run_data():
    """A tiny federated problem on the synthetic image set: 4 Dirichlet clients, OOD = noise."""
    from fedbayes.data import make_synthetic
    from fedbayes.engine import RunData, preprocess
    from fedbayes.partition import make_partition

    a = make_synthetic()
    idx = np.arange(400)
    parts = [idx[p] for p in make_partition(a["y_train"][idx], 4, "dirichlet", np.random.default_rng(0), min_size=8)]
    rng = np.random.default_rng(1)
    ood = rng.integers(0, 256, size=(100, 28, 28), dtype=np.uint8)
    return RunData(
        x_train=preprocess(a["x_train"], "unit"), y_train=torch.from_numpy(a["y_train"]).long(),
        x_test=preprocess(a["x_test"][:200], "unit"), y_test=torch.from_numpy(a["y_test"][:200]).long(),
        x_ood=preprocess(ood, "unit"), n_classes=10, parts=parts)


def small_cfg(**over):
    cfg = {
        "experiment": "synthetic-test", "method": "fedavg", "seed": 3, "scale": "smoke", "dataset": "synthetic",
        "ood": None, "subsample": 1.0, "clients": 4, "partition": {"scheme": "dirichlet"}, "participation": 1.0,
        "rounds": 4, "model": {"name": "mlp", "hidden": [32, 16], "activation": "relu"}, "input_scale": "unit",
        "hparams": {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1},
        "save_rounds": [2, 3, 4],
    }
    cfg.update(over)
    return cfg


@pytest.fixture
def cfg_factory():
    return small_cfg
