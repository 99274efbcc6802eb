"""What the documented commands write and nobody commits is ignored: `git status` stays clean after them."""

import subprocess

import pytest


@pytest.mark.parametrize("path", ["report.html", "reports/smoke/table1.csv", "reports/rehearsal/summary.md"])
def test_build_outputs_that_are_never_committed_are_ignored(repo, path):
    """make report writes report.html at the top of the clone (it was left untracked, not ignored)."""
    r = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=repo)
    assert r.returncode == 0, f"{path} is not ignored"
