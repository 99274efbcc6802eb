"""The suite's disk: a passing test's and a passing file's folders are removed as they finish (CI's disk
filled near the end of a run when one session kept every folder: 5.9 GB), a failing one's are kept."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests/fixtures/disk/probe_folders.py"


def run_probe(basetemp: Path, fail: bool) -> subprocess.CompletedProcess:
    # the suite's own conftest.py (tests/) and pyproject settings, on a probe file outside the collected names
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           f"--basetemp={basetemp}", "-o", "python_files=probe_*.py", f"--confcutdir={REPO / 'tests'}",
                           "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"), str(PROBE),
                           "--override-ini", "testpaths="],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PROBE_FAIL": "1" if fail else "0"})


@pytest.mark.parametrize("fail", [False, True])
def test_a_passing_files_folders_are_removed_and_a_failing_ones_kept(tmp_path, fail):
    base = tmp_path / "base"
    r = run_probe(base, fail)
    assert r.returncode == (1 if fail else 0), r.stdout + r.stderr
    left = sorted(d.name for d in base.iterdir()) if base.exists() else []
    if fail:   # the failing file's build is kept to look at; its passing test's own folder is not
        assert "built0" in left and not any(n.startswith("test_writes_its_own_folder") for n in left), left
    else:
        assert left == [], left
