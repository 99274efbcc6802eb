"""Provenance of a run trained from a modified tree, or before run.json recorded its code: ``fedbayes
replay --record`` replays it at a clean commit and records that in run.json (``replayed``); MLflow tags
say so. A record from a modified tree is refused, and a damaged record is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "results/runs/fmnist10-iid-k10/bayesadmm/default/seed0"


@pytest.fixture
def run(tmp_path):
    d = tmp_path / "fmnist10-iid-k10/bayesadmm/default/seed0"
    d.mkdir(parents=True)
    shutil.copy(RUN / "history.csv", d / "history.csv")
    info = json.loads((RUN / "run.json").read_text())
    info.pop("replayed", None)   # the committed run as trained, before its provenance was recorded
    (d / "run.json").write_text(json.dumps(info, indent=2))
    return d


def _identity(monkeypatch, commit="c0ffee" * 6 + "c0ff", dirty=False):
    import fedbayes.cli.replay
    import fedbayes.engine.replay

    ident = {"commit": commit, "dirty": dirty, "source": "s" * 16, "torch": "2.14.1", "numpy": "2.4.6"}
    for module in (fedbayes.cli.replay, fedbayes.engine.replay):
        monkeypatch.setattr(module, "code_identity", lambda: ident)


def test_a_clean_replay_is_recorded_and_tagged(run, monkeypatch):
    from fedbayes.engine.replay import record_replay
    from fedbayes.runfiles import read_run_info
    from fedbayes.tracking import code_tags

    before = json.loads((run / "run.json").read_text())
    _identity(monkeypatch)
    rec = record_replay(run, 50)
    info = read_run_info(run)
    assert info["replayed"] == rec and rec["rounds"] == 50 and rec["of"] == before["config"]["rounds"]
    assert info["code"] == before["code"] and info["config"] == before["config"]   # what trained it stays
    tags = code_tags(info)
    assert tags["replayed_commit"] == rec["commit"] and tags["replayed_rounds"] == f"50 of {rec['of']}"
    assert "modified tree" in tags["provenance"] and tags["git_dirty"] == "true"


@pytest.mark.parametrize("commit,dirty", [(None, None), ("ab" * 20, True)])
def test_a_replay_from_a_modified_tree_is_not_recorded(run, monkeypatch, commit, dirty):
    from fedbayes import cli
    from fedbayes.engine.replay import record_replay

    _identity(monkeypatch, commit, dirty)
    with pytest.raises(RuntimeError, match="clean checkout"):
        record_replay(run, 1)
    with pytest.raises(SystemExit, match="clean checkout"):   # before any replay work
        cli.main(["replay", "--record", str(run)])
    assert "replayed" not in json.loads((run / "run.json").read_text())


def test_a_damaged_replay_record_is_named(run):
    from fedbayes.runfiles import DamagedFile, read_run_info

    info = json.loads((run / "run.json").read_text())
    info["replayed"] = {"commit": "ab" * 20, "rounds": "1", "of": 50, "identical": True}
    (run / "run.json").write_text(json.dumps(info))
    with pytest.raises(DamagedFile, match="replayed.rounds"):
        read_run_info(run)


def _cut(run, keep):
    """The run's history.csv with only the rows of rounds ``keep`` (a history cut short or with rows lost)."""
    lines = (run / "history.csv").read_text().splitlines(keepends=True)
    (run / "history.csv").write_text(lines[0] + "".join(lines[1 + r] for r in keep))


@pytest.mark.parametrize("keep", [[], [0], [0, 2]], ids=["header-only", "round-0-only", "round-1-lost"])
def test_a_replay_is_recorded_only_for_the_rounds_its_history_holds(run, monkeypatch, capsys, keep):
    """`replay --record --rounds 2` of a run whose history.csv lacks some of rounds 0-2 compared only the rows
    there (none, for a header alone), called them bit-identical and recorded "rounds 2 of 50": refused now in
    one line naming history.csv, before any replay work, and nothing recorded."""
    from fedbayes import cli
    from fedbayes.engine.replay import record_replay

    _identity(monkeypatch)
    _cut(run, keep)
    monkeypatch.setattr(cli.replay, "replay_verdict", lambda d, rounds, raw: {   # what comparing nothing gave
        "verdict": "bit-identical", "line": f"rounds 0-{rounds} bit-identical", "rounds": rounds, "machine": "m"})
    before = (run / "run.json").read_text()
    with pytest.raises(SystemExit) as ex:
        cli.main(["replay", "--record", "--rounds", "2", str(run)])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("\n") == 1 and "history.csv" in err, err
    assert (run / "run.json").read_text() == before
    with pytest.raises(ValueError, match="history.csv"):
        record_replay(run, 2)
    assert (run / "run.json").read_text() == before
