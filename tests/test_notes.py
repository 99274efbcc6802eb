"""Reproduction notes (params.yaml `tables.<table>.notes`, embedded verbatim into the tables' markdown)
agree with their tables: a count of published cells in a note is the table's own count, every file a
note names in this repository exists, and a note reads as a statement of what is, not a work log."""

import re
import subprocess

import pandas as pd
import pytest

from dagutil import read_params
from fedbayes.reports.tally import published_cells, ran_counts

# "84 of the table's 104 published cells", "111 of 126 compared cells": a count of published cells
COUNT = re.compile(r"(\d[\d,]*) of (?:the table's |its |the )?(\d[\d,]*) (?:published |compared )?cells")
# a path into this repository (a top-level folder of it) or a markdown file named bare: these must exist;
# files of the authors' code (train.py, local_client_worker.py) are named with their upstream repository
TOP = ("reports", "papers", "src", "tests", "docs", "workflow", "benchmarks", "results", "profiles")
PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP) + r")/[\w./<>*@–-]*[\w>*]|[\w-]+\.md)\b")
# work-log phrasing: it is true on the day it was written and false on every later one
WORKLOG = re.compile(r"\bthis (?:session|morning|afternoon|week)\b|\bat the end of the session\b|"
                     r"\bwhen (?:it|they) finish(?:es)?\b|\bwere started\b|\btoday\b|\byesterday\b|"
                     r"\bis the next check\b", re.I)


def note_files(p: dict) -> dict[str, list[str]]:
    """{notes file: the tables that embed it}."""
    out: dict[str, list[str]] = {}
    for name, spec in p["tables"].items():
        if spec.get("notes"):
            out.setdefault(spec["notes"], []).append(name)
    return out


def table_counts(repo, names: list[str]) -> set[tuple[int, int]]:
    """(within, compared) of each table, and of all of them together: the counts a note may quote."""
    per = [ran_counts(published_cells(pd.read_csv(repo / "reports" / f"{n}.csv").assign(table=n))) for n in names]
    return set(per) | {(sum(w for w, _ in per), sum(r for _, r in per))}


def count_problems(text: str, allowed: set[tuple[int, int]]) -> list[str]:
    bad = []
    for m in COUNT.finditer(text):
        got = (int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")))
        if got not in allowed:
            bad.append(f"{m.group(0)!r}: the table gives {sorted(allowed)}")
    return bad


def path_problems(text: str, note, repo, tracked: set[str]) -> list[str]:
    bad = []
    for m in PATH.finditer(text):
        ref = m.group(1).rstrip(".")
        if "/" not in ref:  # a bare markdown name: anywhere in the repository
            if not any(t == ref or t.endswith("/" + ref) for t in tracked):
                bad.append(ref)
            continue
        # <experiment>: any name; table1–5: its first (table1.md, table1.csv)
        pattern = re.sub(r"(\d+)–\d+", r"\1", re.sub(r"<[^>]*>", "*", ref))
        if not any(list(root.glob(g)) for root in (repo, note.parent) for g in (pattern, pattern + ".*")):
            bad.append(ref)
    return bad


def test_note_checks_catch_a_wrong_count_a_missing_file_and_a_work_log_line(repo):
    """The checks below fail on the mistakes they are for (the table1 notes once made each of them)."""
    tracked = set(subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True).stdout.split())
    assert count_problems("78 of the table's 104 published cells are within tolerance", {(84, 104)})
    assert not count_problems("84 of the table's 104 published cells are within tolerance", {(84, 104)})
    note = repo / "reports" / "notes" / "table1.md"
    assert path_problems("each round (reference-code.md §2.2)", note, repo, tracked) == ["reference-code.md"]
    assert path_problems("in `reports/evidence/no_such_file.csv`", note, repo, tracked)
    assert not path_problems("`reports/sweeps/<experiment>.csv`, `reports/fedlap/table1–5`, README.md", note, repo, tracked)
    assert WORKLOG.search("were started at the end of this session; rebuilt when they finish")


@pytest.mark.parametrize("notes", sorted(note_files(read_params(__import__("pathlib").Path(__file__).parents[1]))))
def test_notes_agree_with_their_tables(repo, notes):
    p = read_params(repo)
    names = note_files(p)[notes]
    note = repo / notes
    text = note.read_text()
    tracked = set(subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True).stdout.split())
    assert not count_problems(text, table_counts(repo, names)), notes
    assert not path_problems(text, note, repo, tracked), f"{notes} names files not in the repository"
    assert not [m.group(0) for m in WORKLOG.finditer(text)], f"{notes}: work-log lines"
