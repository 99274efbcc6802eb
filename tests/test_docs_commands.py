"""Every shell line README.md and docs/*.md show (a line of a ```sh / ```bash block, or an inline code span
that starts with a command) is checked as a reader would meet it:

- ``run``: it runs offline in seconds (``fedbayes methods``, ``fedbayes validate``, ``make help``, ``git
  status``, ``fedbayes new-method`` into a scratch folder): run it, exit 0;
- ``plan``: a ``snakemake`` build: its targets are planned by one ``snakemake -n`` a scale, in a copy of the
  repository (full tier: planning the paper DAG takes a minute);
- ``dvc``: a DVC command that only reads (full tier: DVC's start-up costs 10–20 s a command here);
- ``help``: it trains, downloads, serves, or names a placeholder (``<name>``): the subcommand exists and
  takes every option the line gives (``<cmd> <sub> --help`` lists it);
- ``target`` / ``file``: a make target the Makefile defines, a script that exists;
- ``skip``: anything else, with the reason in RULES.

A documented line no rule covers fails the test: a new doc line gets a rule (and so a check) with it.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from dagutil import BIN, copy_repo

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMANDS = ("fedbayes", "snakemake", "make", "dvc", "mlflow", "pip", "git", "python", "rm", "mv", "export", "$EDITOR")

# (pattern of a normalised line, kind, why): the first that matches decides
RULES: list[tuple[str, str, str]] = [
    (r"^fedbayes [\w-]+: ", "skip", "a message a command prints, quoted, not a command"),
    (r"^fedbayes table\|", "skip", "names several subcommands at once (each is checked where a line shows it)"),
    (r"^fedbayes (--help|methods( \w+)?|validate( --scale \w+)?)$", "run", ""),
    (r"^fedbayes new-method \w+ --out \S+$", "run", ""),
    (r"^fedbayes ", "help", "trains, downloads or replays for minutes, or names a placeholder"),
    (r"^make help$", "run", ""),
    (r"^make [\w.-]+$", "target", "builds the venv, downloads data, trains or runs the test suite (hours)"),
    (r"^git status$", "run", ""),
    (r"^git clone ", "skip", "clones a remote repository (<repo> is a placeholder)"),
    (r"^snakemake .*<", "help", "names a placeholder"),
    (r"^snakemake (-n|--cores all)( \S+)*$", "plan", ""),
    (r"^snakemake ", "help", "unlocks, reruns, reports or submits to a cluster: not a plan of targets"),
    (r"^dvc (metrics (show|diff)|exp show)( .*)?$", "dvc", ""),
    (r"^dvc remote add ", "skip", "configures and pushes to a DVC remote on a shared file system"),
    (r"^dvc ", "help", "reproduces the DAG (hours) or writes plots into the checkout"),
    (r"^mlflow (ui|server|runs list) ", "help", "serves until stopped, or needs the MLflow store and an id"),
    (r"^python -c .*mlflow", "skip", "queries the MLflow store, which `snakemake --cores all mlflow` builds"),
    (r"^python (benchmarks|tests)/\S+\.py", "file", "measures for minutes or replays goldens (the script must exist)"),
    (r"^pip install ", "skip", "installs into the environment that runs the tests"),
    (r"^(rm|mv|export) ", "skip", "a recovery step that deletes, moves or points elsewhere: it changes the checkout"),
    (r"^\$EDITOR ", "skip", "opens an editor"),
]


def normalised(line: str) -> str:
    line = re.sub(r"\s+#\s.*$", "", line.strip())   # a trailing comment
    return re.sub(r"\s+", " ", line).strip()


def documented_lines() -> dict[str, str]:
    """Each documented shell line → the first file that shows it."""
    found: dict[str, str] = {}
    for doc in DOCS:
        text = doc.read_text()
        for block in re.finditer(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", text, re.S | re.M):
            if block.group(1) in ("sh", "bash", "shell", "console"):
                for line in block.group(2).replace("\\\n", " ").splitlines():
                    line = normalised(line)
                    if line and not line.startswith("#"):
                        found.setdefault(line, doc.name)
        # fences in list items are indented
        prose = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.S | re.M).replace("\n", " ")
        for span in re.finditer(r"`([^`]+)`", prose):
            line = normalised(span.group(1))
            if line.split(" ")[0] in COMMANDS and " " in line:
                found.setdefault(line, doc.name)
    return found


def kind(line: str) -> tuple[str, str]:
    for pattern, what, why in RULES:
        if re.search(pattern, line):
            return what, why
    raise AssertionError(f"documented line with no rule in tests/test_docs_commands.py RULES: {line!r}")


LINES = documented_lines()


def env() -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}


def sh(line: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)


def test_every_documented_line_has_a_rule_and_the_docs_show_the_commands_a_user_starts_with():
    kinds = {line: kind(line)[0] for line in LINES}
    assert len(kinds) > 40, sorted(kinds)
    for must in ("fedbayes --help", "fedbayes methods", "fedbayes validate", "make help"):
        assert kinds.get(must) == "run", (must, sorted(LINES))
    skipped = {line: kind(line)[1] for line in LINES if kinds[line] == "skip"}
    assert all(skipped.values()), skipped   # every line left unrun says why


@pytest.mark.parametrize("line", sorted(l for l in LINES if kind(l)[0] == "run"))
def test_a_documented_command_runs(line, tmp_path):
    if line.startswith("fedbayes new-method"):   # writes its package where --out says: into a scratch folder
        line = re.sub(r"--out \S+", f"--out {tmp_path / 'pkg'}", line)
    r = sh(line.replace("fedbayes ", f"{sys.executable} -m fedbayes.cli ", 1), REPO)
    assert r.returncode == 0, f"{LINES.get(line, 'docs')}: `{line}` failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr, r.stderr


def options(line: str) -> tuple[list[str], list[str]]:
    """(the command and its subcommands, the --options) of a line, its placeholders and values left out."""
    words = shlex.split(line.replace("<", "").replace(">", ""))
    head = [words[0]]
    for w in words[1:]:
        if w.startswith("-") or "/" in w or "." in w or "=" in w:
            break
        head.append(w)
    return head, [w.split("=")[0] for w in words if w.startswith("--")]


SUBCOMMANDS = {"fedbayes": 1, "dvc": 2, "mlflow": 2, "snakemake": 0}   # how many words name the subcommand


@functools.cache
def help_text(head: tuple[str, ...]) -> subprocess.CompletedProcess:
    """``<head> --help`` (once a process for each command: several lines share one)."""
    cmd = [sys.executable, "-m", "fedbayes.cli", *head[1:]] if head[0] == "fedbayes" else [str(BIN / head[0]), *head[1:]]
    return subprocess.run([*cmd, "--help"], cwd=REPO, env=env(), capture_output=True, text=True, timeout=120)


# commands whose start-up alone takes 10–20 s here: their --help checks run in the full tier
SLOW_START = ("dvc", "mlflow")


@pytest.mark.parametrize("tier", ["fast", pytest.param("slow", marks=pytest.mark.full)])
def test_documented_commands_that_cannot_run_here_exist_with_their_options(tier):
    problems = []
    for line in sorted(l for l in LINES if kind(l)[0] == "help" and (l.split()[0] in SLOW_START) == (tier == "slow")):
        head, opts = options(line)
        head = tuple(head[:1 + SUBCOMMANDS[head[0]]])
        r = help_text(head)
        if r.returncode != 0:
            problems.append(f"{LINES[line]}: {line!r}: `{' '.join(head)} --help` failed: {r.stderr.strip()[-300:]}")
        elif missing := [o for o in opts if o not in r.stdout]:
            problems.append(f"{LINES[line]}: {line!r}: {' '.join(head)} takes no {missing}")
    assert not problems, "\n".join(problems)


def test_documented_make_targets_and_scripts_exist():
    makefile = (REPO / "Makefile").read_text()
    for line in LINES:
        what, _ = kind(line)
        if what == "target":
            target = line.split()[1]
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{LINES[line]}: no make target {target!r}"
        elif what == "file":
            script = line.split()[1]
            assert (REPO / script).is_file(), f"{LINES[line]}: {script} does not exist"


def plans() -> dict[str, list[str]]:
    """The documented snakemake builds' targets, by the --config they give (one dry run each)."""
    by: dict[str, list[str]] = {}
    for line in LINES:
        if kind(line)[0] != "plan":
            continue
        words = subprocess.run(["bash", "-c", f"printf '%s\\n' {line}"], capture_output=True, text=True).stdout.split()
        config, targets, i = "", [], 1
        while i < len(words):
            w = words[i]
            if w in ("--cores", "--config"):   # an option with a value
                config = words[i + 1] if w == "--config" else config
                i += 2
                continue
            if not w.startswith("-"):
                targets.append(w)
            i += 1
        by.setdefault(config, []).extend(targets or ["all"])
    return by


# targets the docs show that exist only with the docs' own params.yaml lines (docs/adding-a-method.md's
# example tables of outside methods)
EXAMPLE_ONLY = ("reports/smoke/example.csv", "reports/example.csv", "mlflow_example", "reports/smoke/swag.csv")


@pytest.mark.full
def test_documented_snakemake_builds_plan(tmp_path):
    work = copy_repo(REPO, tmp_path / "repo", scale="paper")
    for config, targets in plans().items():
        targets = sorted(set(t for t in targets if t not in EXAMPLE_ONLY))
        line = f"snakemake -n --cores 1 {' '.join(targets)}" + (f" --config {config}" if config else "")
        r = sh(line, work, timeout=1800)
        assert r.returncode == 0, f"`{line}` failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


@pytest.mark.full
@pytest.mark.parametrize("line", sorted(l for l in LINES if kind(l)[0] == "dvc"))
def test_a_documented_dvc_command_runs(line, tmp_path):
    # what it writes with `> file` goes to a scratch folder, not into the checkout
    r = sh(re.sub(r">\s*(\S+)$", lambda m: f"> {tmp_path / Path(m.group(1)).name}", line), REPO)
    assert r.returncode == 0, f"{LINES[line]}: `{line}` failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
