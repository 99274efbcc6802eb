"""Lock files are the lock's own: created exclusively and never opened through a symbolic link or a
second name of another file, so a planted link cannot make a job truncate or overwrite its target."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedbayes.fileio import LockRefused, exclusive_lock, try_exclusive_lock


def take(kind: str, path: Path):
    """Take the lock of ``kind`` on ``path`` (its ``.lock`` file for exclusive_lock) and release it."""
    if kind == "exclusive":
        with exclusive_lock(path):
            pass
    else:
        with try_exclusive_lock(Path(str(path) + ".lock")):
            pass


@pytest.fixture
def victim(tmp_path) -> Path:
    f = tmp_path / "elsewhere" / "precious.txt"
    f.parent.mkdir()
    f.write_text("not a lock\n")
    return f


@pytest.mark.parametrize("kind", ["exclusive", "try"])
def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path, victim, kind):
    (tmp_path / "data.lock").symlink_to(victim)
    with pytest.raises(LockRefused) as e:
        take(kind, tmp_path / "data")
    assert str(e.value).count("\n") == 0 and str(tmp_path / "data.lock") in str(e.value)
    assert victim.read_text() == "not a lock\n"


@pytest.mark.parametrize("kind", ["exclusive", "try"])
def test_a_dangling_symlinked_lock_creates_nothing(tmp_path, kind):
    target = tmp_path / "elsewhere" / "new.txt"
    (tmp_path / "data.lock").symlink_to(target)
    with pytest.raises(LockRefused):
        take(kind, tmp_path / "data")
    assert not target.exists() and not target.parent.exists()


@pytest.mark.parametrize("kind", ["exclusive", "try"])
def test_a_hard_linked_lock_is_refused(tmp_path, victim, kind):
    os.link(victim, tmp_path / "data.lock")
    with pytest.raises(LockRefused, match="other names"):
        take(kind, tmp_path / "data")
    assert victim.read_text() == "not a lock\n"


@pytest.mark.parametrize("kind", ["exclusive", "try"])
def test_an_own_lock_file_is_created_then_reused(tmp_path, kind):
    take(kind, tmp_path / "data")
    assert (tmp_path / "data.lock").is_file() and not (tmp_path / "data.lock").is_symlink()
    take(kind, tmp_path / "data")  # the lock left behind is taken again


def test_the_mlflow_store_lock_never_follows_a_link(tmp_path, victim):
    from fedbayes.tracking import store_lock

    (tmp_path / "mlflow.db.lock").symlink_to(victim)
    with pytest.raises(LockRefused), store_lock(f"sqlite:///{tmp_path / 'mlflow.db'}"):
        pass
    assert victim.read_text() == "not a lock\n"
