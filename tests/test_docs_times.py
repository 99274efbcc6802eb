"""Every time the README, docs/ and the Makefile quote for a make target is one measured value, with the
cores and the load it was measured under: the README's targets table is the source, the Makefile's comment
above the target and every duration docs/ gives beside `make <target>` repeat it."""

import re
import subprocess

import pytest

DURATION = re.compile(r"\d+ min \d+ s|\d+(?:\.\d+)? min\b|\d+ s\b|about a minute|a few minutes|a minute or two")


def readme_time(repo, target: str) -> str:
    """The with-committed-runs (or only) time in the README's row for `make <target>` (setup: in table1's)."""
    rows = [line for line in (repo / "README.md").read_text().splitlines() if line.startswith(f"| `make {target}` |")]
    assert len(rows) == 1, target
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    cell = next(c for c in cells[2:] if DURATION.search(c))
    assert "cores" in cell and ("load" in cell or "loaded" in cell), (target, cell)
    return DURATION.search(cell).group(0)


def makefile_comment(repo, target: str) -> str:
    lines = (repo / "Makefile").read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(f"{target}:"))
    comment = []
    while i > 0 and lines[i - 1].startswith("# "):
        i -= 1
        comment.insert(0, lines[i])
    return " ".join(comment)


@pytest.mark.parametrize("target", ["smoke", "table1", "mlflow"])
def test_a_targets_time_is_the_same_everywhere(repo, target):
    t = readme_time(repo, target)
    assert t in makefile_comment(repo, target), (target, t)
    for f in sorted((repo / "docs").glob("*.md")) + [repo / "README.md"]:
        for line in f.read_text().splitlines():
            if line.startswith("|"):  # a table row about the target: its first cell names it
                about = f"`make {target}`" in line.split("|")[1]
                said = line.split("|", 2)[2] if about else ""
            else:  # prose: a duration within a few words after the target's name
                said = " ".join(s[:60] for s in line.split(f"`make {target}`")[1:])
            quoted = {d for d in DURATION.findall(said) if not d.endswith("/round")} - {t}
            assert not quoted or t in said, (f.name, target, quoted)


def test_setup_time_is_the_same_in_readme_and_makefile(repo):
    row = next(line for line in (repo / "README.md").read_text().splitlines() if line.startswith("| `make table1` |"))
    setup = re.search(r"`make setup`, which took (\d+ min \d+ s)", row).group(1)
    assert setup in makefile_comment(repo, "setup")


def test_make_help_lists_the_targets_with_their_comments(repo):
    out = subprocess.run(["make", "-s", "help"], cwd=repo, capture_output=True, text=True, check=True).stdout
    for target in ("setup", "table1", "mlflow", "smoke", "report", "help"):
        assert re.search(rf"^{re.escape(target)}\s", out, re.M), target
    assert readme_time(repo, "smoke") in out


def test_the_snakefiles_header_quotes_the_measured_smoke_time(repo):
    """The Snakefile's opening comment shows the smoke command: the time beside it is the README's."""
    header = []
    for line in (repo / "Snakefile").read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    smoke = [line for line in header if "scale=smoke" in line]
    assert smoke
    t = readme_time(repo, "smoke")
    for line in smoke:
        assert set(DURATION.findall(line)) <= {t}, line
        assert t in line, line
