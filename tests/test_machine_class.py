"""Bits within a machine class, round-off across classes (fedbayes.machine, engine.roundoff, the numerics
check). Another class is emulated on the machine at hand: ``ATEN_CPU_CAPABILITY=default`` runs PyTorch's
CPU kernels without vector instructions, which changes the last bits of the same code on the same CPU
and is a class of its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedbayes.engine import roundoff
from fedbayes.machine import aten_capability, class_id, class_slug, machine_class, same_class

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "numerics"
EMULATED = {"ATEN_CPU_CAPABILITY": "default"}


def check(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedbayes.cli", "numerics-check", *args], cwd=cwd, text=True,
                          capture_output=True, env={**os.environ, **env}, timeout=900)


def test_a_class_names_what_decides_bits_and_an_open_field_matches_any():
    here = machine_class()
    assert same_class(here, here) and class_id(here) and class_slug(here) == class_slug(dict(here))
    assert same_class({**here, "family": None, "model": None, "numpy": None}, here)     # left open: any
    assert not same_class({**here, "aten": "DEFAULT" if here["aten"] != "DEFAULT" else "AVX2"}, here)
    assert not same_class({**here, "vendor": "SomeOtherVendor"}, here)
    assert not same_class(None, here) and not same_class({}, here)   # no record: not known to be the same
    assert aten_capability({"avx2", "avx512bw"}, "avx2") == "AVX2"
    assert aten_capability({"avx2", "avx512bw"}, None) == "AVX512"
    assert aten_capability({"avx2"}, "avx512") == "AVX2" and aten_capability({"sse4_2"}, None) == "DEFAULT"
    assert aten_capability({"avx2", "avx512bw"}, "default") == "DEFAULT"


def test_the_class_torch_free_agrees_with_what_torch_reports():
    """machine_class() infers PyTorch's capability without importing it (planning is torch-free): the same
    as torch reports, natively and under the emulation."""
    code = "import fedbayes, torch; from fedbayes.machine import machine_class as m; print(m()['aten'], torch.backends.cpu.get_cpu_capability())"
    for env in ({}, EMULATED):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, **env}).stdout.split()
        assert out[0] == out[1], (env, out)


def test_the_envelope_separates_round_off_from_a_change():
    assert roundoff.excess("train/loss", "2.2034658266107243", "2.2034658006827037") < 0.01   # seen across classes
    assert roundoff.excess("test/nll", "2.258030778169632", "2.2580691373348234") > 1         # a 0.1 % larger lr
    assert roundoff.excess("test/acc", "0.24", "0.25") <= 1 < roundoff.excess("test/acc", "0.24", "0.26")
    assert roundoff.excess("test/ece", "nan", "nan") == 0 and roundoff.excess("x", "1.0", "") == float("inf")
    outside, worst, frac = roundoff.compare([{"round": "1", "train/loss": "1.0", "time_s": "3"}],
                                            [{"round": "1", "train/loss": "1.001", "time_s": "9"}], skip=("time_s",))
    assert outside == ["round 1: train/loss 1.0 != 1.001"] and frac == pytest.approx(0.001 / 1.001 / 1e-5)


@pytest.mark.full
def test_on_another_class_the_goldens_pass_within_round_off_in_one_process(tmp_path):
    """The emulated class: every committed golden replays within the envelope, one line says so, each
    record says "within round-off", and this class's goldens are recorded under work/numerics/<class>/."""
    r = check("--all", "--work", str(tmp_path / "work"), cwd=REPO, **EMULATED)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [l for l in r.stdout.splitlines() if l.startswith("fedbayes numerics-check: ")]
    assert len(lines) == 1 and "rounds differently from the goldens' machine" in lines[0], r.stdout
    assert "DEFAULT" in lines[0] and "within the envelope" in lines[0]
    records = sorted((tmp_path / "work" / "numerics").glob("*.json"))
    assert len(records) >= 26 and {json.loads(f.read_text())["result"] for f in records} == {"within round-off"}
    own = list((tmp_path / "work" / "numerics").glob("*-default-*/*.json"))
    assert len(own) == len(list(GOLDEN.glob("*.json"))) - 1      # every golden but machine.json
    assert json.loads(own[0].read_text())["machine"]["aten"] == "DEFAULT"


@pytest.mark.full
@pytest.mark.parametrize("emulated", [False, True], ids=["this class", "another class"])
def test_a_real_numbers_change_stops_on_every_class(tmp_path, emulated):
    """A golden the code no longer computes (FedProx's proximal weight half the code's: the same as a
    change of FedProx's client code that doubles it, μ for μ/2) stops the check on this machine's class and on the
    emulated one, naming the method and the first value outside."""
    goldens = tmp_path / "goldens"
    goldens.mkdir()
    shutil.copy(GOLDEN / "machine.json", goldens)
    from fedbayes.engine.goldens import golden_name

    name = golden_name("fedprox")
    g = json.loads((GOLDEN / name).read_text())
    g["hparams"]["alpha"] = g["hparams"]["alpha"] / 2
    # a golden of this machine's class is checked bit for bit, one of another within round-off: record it as
    # computed here so that "this class" means bits wherever the suite runs, then change its numbers
    env = EMULATED if emulated else {}
    out = subprocess.run([sys.executable, "-c", "import fedbayes, json, sys, tempfile; from fedbayes.engine.goldens "
                          "import make_golden; g = json.load(sys.stdin); print(json.dumps(make_golden('fedprox', "
                          "g['hparams'], tempfile.mkdtemp())))"], input=json.dumps(g), capture_output=True, text=True,
                         check=True, env={**os.environ, **env})
    changed = json.loads(out.stdout)
    changed["hparams"]["alpha"] = g["hparams"]["alpha"] * 2           # the code's value: its numbers differ
    (goldens / name).write_text(json.dumps(changed))
    for env_here in ({}, EMULATED):
        r = check("fedprox", "--goldens", str(goldens), "--work", str(tmp_path / "work"), cwd=REPO, **env_here)
        assert r.returncode == 1, r.stdout + r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert line.startswith("fedbayes numerics-check: fedprox's numbers changed without a numerics version bump: "
                               "round "), line
        same = bool(env_here) == emulated
        assert ("bit for bit on its own machine class" in line) == same, line
        assert ("beyond round-off" in line) == (not same), line
        assert not (tmp_path / "work" / "numerics" / "fedprox.json").exists()


@pytest.mark.full
def test_a_committed_run_replays_on_another_class_within_round_off_or_its_seed_spread():
    """`fedbayes replay` on the emulated class: the verdict of a committed run is round-off (round 0) and
    the seed spread (round 1, where training amplifies it) with the numbers shown, exit 0; never a
    failure for round-off alone."""
    from dagutil import require_fmnist

    from fedbayes.data.root import fetch_dataset

    require_fmnist(pytest)
    # the data the replay reads, fetched here (a fresh clone has none; the test ran after another test had
    # fetched it, until the suite stopped reordering files by size)
    for d in ("fmnist", "mnist5k"):
        fetch_dataset(d, str(REPO / "data" / "raw"), download=False)
    run = "results/runs/fmnist10-dir-k10/fedlap/delta=0.0001+local_epochs=5/seed1"
    r = subprocess.run([sys.executable, "-m", "fedbayes.cli", "replay", run, "--root", "data/raw"], cwd=REPO,
                       capture_output=True, text=True, env={**os.environ, **EMULATED}, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    line = [l for l in r.stdout.splitlines() if l.startswith(run)][0]
    assert re.search(r": (rounds 0-1 (bit-identical|within round-off)|round 0 within round-off, round 1 within the "
                     r"seed spread: train/loss \S+ -> \S+ \(\|Δ\| \S+; 3 seeds)", line), line
