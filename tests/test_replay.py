"""The rerun rule's guard: a change that alters any number a method computes must bump its numerics
version (``fedbayes.study.rerun``), because finished runs are adopted by new code on their configuration
and numerics versions alone (never on source hashes).

Two checks, bit for bit on the machine class that computed the golden or run (``fedbayes.machine``;
the goldens that record none: ``tests/golden/numerics/machine.json``), within round-off on another:

- every method, on a tiny synthetic problem (3 rounds, 4 clients, the hyperparameters stored in its
  golden): its history against ``tests/golden/numerics/<method>.v<core>.<method version>.json``, within
  ``engine.roundoff``'s envelope on another class;
- one committed paper-scale run per method (``REPLAYED``): its first round retrained from its run.json
  (``fedbayes replay``) against its committed history.csv: on another class round 0 within round-off and
  round 1, where training has amplified it, within the spread of the run's seeds.

After a deliberate numerics change: bump the method spec's ``numerics`` (fedbayes/methods/<key>/__init__.py)
or CORE_NUMERICS (fedbayes/study/rerun.py), write the new golden with
``python tests/test_replay.py METHOD …``, and rerun the method's runs (Snakemake plans exactly those).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# the golden's problem and comparison are the package's: the workflow's numerics check runs them too
from fedbayes.engine.goldens import GOLDEN_SIZES, make_golden

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "numerics"

# One committed run per method whose first round this machine class retrains bit for bit: its cheapest
# run trained on an AVX2 CPU (runs trained elsewhere before the AVX2 cap in fedbayes/__init__.py differ
# by round-off; reports/notes/rerun-rule.md lists them).
REPLAYED = {
    "fedavg": "fmnist10-dir-k10/fedavg/local_epochs=5/seed0",
    "fedprox": "fmnist10-dir-k10/fedprox/alpha=0.01+local_epochs=5/seed0",
    "feddyn": "fmnist10-dir-k10/feddyn/alpha=0.01+local_epochs=5+weight_decay=1e-05/seed0",
    "fedlap": "fmnist10-dir-k10/fedlap/delta=0.0001+local_epochs=5/seed1",
    "fedlap_cov": "fmnist10-dir-k10/fedlap_cov/delta=0.01+local_epochs=10/seed0",
    "fedlap_func": "fmnist10-iid-k10/fedlap_func/delta=0.01+local_epochs=10+tau=0.0001/seed2",
    "bayesadmm": "fmnist10-dir-k10/bayesadmm/default/seed2",
    "fedivon": "fmnist-shards-k200/fedivon/default/seed0",
    "fedcurv": "fmnist10-labeldir0.01-k20-r20/fedcurv/lambda_prior=1.0/seed0",
    "fola": "fmnist10-labeldir0.01-k20-r20/fola/lambda_prior=1.0/seed0",
    "scaffold": "fmnist10-labeldir0.01-k20-r20/scaffold/default/seed0",
    "fednova": "fmnist10-labeldir0.01-k20-r20/fednova/default/seed0",
    "fedbe": "fmnist10-labeldir0.01-k20-r20/fedbe/default/seed0",
}


def _method_names() -> list[str]:
    from fedbayes.study import METHOD_VARIANTS

    return sorted(METHOD_VARIANTS)


def golden_path(method: str) -> Path:
    from fedbayes.engine.goldens import golden_name

    return GOLDEN / golden_name(method)


def _experiment_for(params: dict, method: str) -> str:
    """Where a new golden's hyperparameters are taken from: the first experiment that runs the method
    (or its I variant), else the headline Dirichlet experiment."""
    for name in (method, f"{method}_i"):
        for e, spec in params["experiments"].items():
            if name in spec["methods"]:
                return e
    return "fmnist10-dir-k10"


def golden_hparams(method: str) -> dict:
    """A new golden's hyperparameters: params.yaml's at smoke scale, shrunk to seconds. They are stored
    in the golden, so that a later params.yaml edit changes no golden."""
    from fedbayes.study import load_params, method_hparams, sweep_points

    params = load_params(REPO / "params.yaml", scale="smoke")
    experiment = _experiment_for(params, method)
    hp = method_hparams(params, experiment, method, next(iter(sweep_points(params, experiment, method))))
    hp.update(GOLDEN_SIZES)
    if "variant" in hp:  # fedep / fedsep (no experiment runs them): the FedEP family's clients run SGD-M
        hp["optimizer"] = "sgd"
    return hp


def write_golden(method: str, tmp: Path) -> Path:
    hp = golden_hparams(method)
    path = golden_path(method)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(make_golden(method, hp, tmp), indent=1) + "\n")
    return path


@pytest.mark.parametrize("method", _method_names())
def test_method_numerics_match_their_golden(method, tmp_path):
    from fedbayes.engine.goldens import golden_files

    path = golden_path(method)
    assert path.exists(), (f"{method}: no golden for numerics version {path.name}; after a deliberate numerics "
                           f"change write it with `python tests/test_replay.py {method}`")
    from fedbayes.engine.goldens import check_golden

    for path in golden_files(method, GOLDEN):   # one per code path of its committed runs (path_signature)
        _, v = check_golden(path, GOLDEN, tmp_path)   # bit for bit on its class, within round-off on another
        assert not v["outside"], (f"{method}'s numbers changed without a numerics version bump (its spec's numerics "
                                  f"or CORE_NUMERICS, fedbayes/study/rerun.py): {path.name} ({v['mode']}): {v['outside'][:4]}")


def _committed_runs() -> dict[tuple[str, str], Path]:
    """(method, path signature tag) → the cheapest committed paper-scale run that takes that code path."""
    from fedbayes.engine.goldens import run_tag

    out, cost = {}, {}
    for f in sorted((REPO / "results" / "runs").glob("*/*/*/seed*/run.json")):
        info = json.loads(f.read_text())
        key = (info["config"]["method"], run_tag(info["config"]["method"], info["config"]["hparams"]))
        if info.get("wall_s", 1e9) < cost.get(key, float("inf")):
            out[key], cost[key] = f.parent, info.get("wall_s", 1e9)
    return out


def _covered_paths() -> set[tuple[str, str]]:
    """(method, path signature tag) of every committed golden."""
    from fedbayes.engine.goldens import golden_files, golden_hparams_with_defaults, signature_tag

    goldens = [json.loads(f.read_text()) for m in _method_names() for f in golden_files(m, GOLDEN)]
    return {(g["method"], signature_tag(golden_hparams_with_defaults(g))) for g in goldens}


def test_every_code_path_of_the_committed_runs_has_a_golden():
    """A golden checked only the hyperparameters it was written with: FedAvg's committed runs take four
    code paths (persistent / fresh Adam, a linear schedule, SGD), its golden one, so a change to
    another path's numbers passed the workflow's check and the test suite. Each path a committed run
    takes (its string and boolean hyperparameters, engine.goldens.path_signature) has a golden; write
    the missing ones with `python tests/test_replay.py paths`."""
    covered = _covered_paths()
    missing = sorted(f"{m} {run.relative_to(REPO)}" for (m, tag), run in _committed_runs().items() if (m, tag) not in covered)
    assert not missing, missing


def write_path_goldens(tmp: Path) -> list[Path]:
    """A golden for each code path of the committed runs that has none: the cheapest such run's
    hyperparameters, shrunk to GOLDEN_SIZES."""
    from fedbayes.engine.goldens import path_golden_name

    covered = _covered_paths()
    written = []
    for (m, tag), run in sorted(_committed_runs().items()):
        if (m, tag) in covered:
            continue
        hp = {**json.loads((run / "run.json").read_text())["config"]["hparams"], **GOLDEN_SIZES}
        path = GOLDEN / path_golden_name(m, tag)
        path.write_text(json.dumps(make_golden(m, hp, tmp), indent=1) + "\n")
        written.append(path)
    return written


@pytest.mark.full
@pytest.mark.parametrize("method", sorted(REPLAYED))
def test_committed_run_replays(method):
    """Bit for bit on the class that trained it (a run without a class record: the goldens' machine,
    tests/golden/numerics/machine.json); on another, round 0 within round-off and round 1 within the seed
    spread (engine.replay_verdict.replay_verdict), never a failure for round-off alone."""
    from dagutil import require_fmnist

    from fedbayes.study import numerics
    from fedbayes.data.root import fetch_dataset
    from fedbayes.engine.replay_verdict import replay_verdict
    from fedbayes.machine import machine_class, same_class

    require_fmnist(pytest)
    run = REPO / "results" / "runs" / REPLAYED[method]
    info = json.loads((run / "run.json").read_text())
    trained = info.get("numerics") or {"core": 1, "method": 1}
    assert trained == numerics(method), (f"{REPLAYED[method]} was trained at numerics {trained}, the code is at "
                                         f"{numerics(method)}: name a run of the current version in REPLAYED")
    raw = REPO / "data" / "raw"
    for d in ("fmnist", "mnist5k"):
        fetch_dataset(d, str(raw), download=False)
    v = replay_verdict(run, rounds=1, raw=str(raw))
    own = info.get("machine") or json.loads((GOLDEN / "machine.json").read_text())["machine"]
    allowed = {"bit-identical"} if same_class(own, machine_class()) else {"bit-identical", "within round-off",
                                                                          "within the seed spread",
                                                                          "within the amplified round-off"}
    assert v["verdict"] in allowed, (f"{method}: the committed run {REPLAYED[method]} no longer replays: {v['line']}; "
                                     f"a change that alters numbers bumps {method}'s spec's numerics "
                                     f"(fedbayes/methods/<key>/__init__.py) or CORE_NUMERICS")


def test_the_workflows_numerics_check_adopts_same_numbers_and_names_the_first_other_one(tmp_path):
    """engine.goldens.numerics_check, which the DAG runs when a method's code changed since its last check
    (workflow/rules/train.smk; the DAG's side: tests/test_rerun_rule.py): a method without a committed
    golden (a plug-in) gets a baseline from a run's hyperparameters on its first check; the record makes
    the next check due only when the code changes; a golden the code no longer computes is one line
    naming the method and the first differing value, and records nothing; a damaged golden names its file."""
    from fedbayes.engine.goldens import check_due, golden_name, numerics_check

    record, empty = tmp_path / "work" / "fedavg.json", tmp_path / "none"
    hp = {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1}
    assert check_due("fedavg", record)
    assert numerics_check("fedavg", empty, record, hp) is None
    baseline = record.parent / golden_name("fedavg")
    assert json.loads(record.read_text())["result"] == "baseline written" and baseline.exists()
    assert not check_due("fedavg", record)
    assert numerics_check("fedavg", empty, record) is None and json.loads(record.read_text())["result"] == "bit-identical"
    golden = json.loads(baseline.read_text())
    # an evaluated metric is the metric code's, not training's: a golden with prediction digests leaves it to
    # evaluation (a metric definition change is no numbers change) and compares the predictions themselves
    golden["history"][2]["test/acc"] = "0.123"
    baseline.write_text(json.dumps(golden))
    record.unlink()
    assert numerics_check("fedavg", empty, record) is None
    for where, value, said in (("history", "0.123", "round 2: train/loss 0.123 != "),
                               ("predictions", "0" * 16, f"round 2: predictions {'0' * 16} != ")):
        g = json.loads(json.dumps(golden))
        if where == "history":
            g["history"][2]["train/loss"] = value
        else:
            g["predictions"]["2"] = value
        baseline.write_text(json.dumps(g))
        record.unlink(missing_ok=True)
        problem = numerics_check("fedavg", empty, record)
        assert problem.startswith(f"fedavg's numbers changed without a numerics version bump: {said}"), problem
        assert "\n" not in problem and not record.exists() and check_due("fedavg", record)
    del golden["predictions"]   # a golden written before predictions were digested compares every column
    baseline.write_text(json.dumps(golden))
    problem = numerics_check("fedavg", empty, record)
    assert problem.startswith("fedavg's numbers changed without a numerics version bump: round 2: test/acc 0.123 != ")
    baseline.write_text("{not json")
    assert numerics_check("fedavg", empty, record).startswith(f"fedavg: its numerics golden {baseline} is unreadable")
    assert numerics_check("fedprox", empty, tmp_path / "work" / "fedprox.json") == (
        f"fedprox: no numerics golden {empty / golden_name('fedprox')} and no run configuration to make one")


def test_a_pass_is_remembered_across_clones_for_the_same_code_golden_bytes_and_class(tmp_path, monkeypatch):
    """``numerics-check --remember`` (the workflow's job): a golden this very code replayed bit for bit on
    this machine class is not replayed again in another clone (another record folder); another golden byte,
    another code fingerprint (a source edited, another class or library version) or a failed check is
    replayed; without ``passed`` every check replays."""
    import fedbayes.engine.goldens as goldens
    from fedbayes.engine.goldens import golden_name, numerics_check

    empty, passed = tmp_path / "none", tmp_path / "passed"
    hp = {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1}
    first = tmp_path / "clone1" / "fedavg.json"
    assert numerics_check("fedavg", empty, first, hp) is None   # a baseline (no committed golden here)
    baseline = first.parent / golden_name("fedavg")
    assert not passed.exists()                                  # a baseline written is not a pass
    replays = []
    real = goldens.golden_diffs
    monkeypatch.setattr(goldens, "golden_diffs", lambda g, tmp: replays.append(1) or real(g, tmp))

    def check(record, **kw):
        record.parent.mkdir(parents=True, exist_ok=True)
        if not (record.parent / baseline.name).exists():
            (record.parent / baseline.name).write_bytes(baseline.read_bytes())
        n = len(replays)
        problem = numerics_check("fedavg", empty, record, **kw)
        return problem, len(replays) - n

    assert check(tmp_path / "clone1" / "fedavg.json", passed=passed) == (None, 1)   # replayed, marked
    assert len(list(passed.glob("*.json"))) == 1
    got = check(tmp_path / "clone2" / "fedavg.json", passed=passed)                # another clone: remembered
    assert got == (None, 0) and json.loads((tmp_path / "clone2/fedavg.json").read_text())["result"] == "bit-identical"
    assert check(tmp_path / "clone3" / "fedavg.json") == (None, 1)                 # not asked to remember
    # another golden byte: replayed (and its failure neither marked nor recorded)
    g = json.loads(baseline.read_text())
    g["history"][2]["train/loss"] = "0.123"
    (tmp_path / "clone4").mkdir()
    (tmp_path / "clone4" / baseline.name).write_text(json.dumps(g))
    problem, n = check(tmp_path / "clone4" / "fedavg.json", passed=passed)
    assert n == 1 and problem.startswith("fedavg's numbers changed without a numerics version bump")
    assert len(list(passed.glob("*.json"))) == 1 and not (tmp_path / "clone4/fedavg.json").exists()
    # other code (an edited source, another class: the fingerprint): replayed
    monkeypatch.setattr(goldens, "code_fingerprint", lambda m: "0" * 16 + "/-/v1.1/other")
    assert check(tmp_path / "clone5" / "fedavg.json", passed=passed) == (None, 1)


def test_a_baseline_this_code_wrote_on_another_class_gates_no_one_who_changed_nothing(tmp_path, monkeypatch):
    """The workflow's own baseline (a run's path no committed golden covers) written on one machine class and
    replayed on another by the same code: its differences are the machine's alone, even where its training
    carries round-off beyond the committed goldens' envelope (BayesADMM's rehearsal path under
    ATEN_CPU_CAPABILITY=default: 10x it). The check passes within round-off and records this class's golden,
    which the next check compares bit for bit. Had the code changed too, the envelope gates as before."""
    import fedbayes.engine.goldens as goldens
    from fedbayes.engine.goldens import golden_name, numerics_check
    from fedbayes.machine import class_slug, machine_class

    record, empty = tmp_path / "work" / "fedavg.json", tmp_path / "none"
    hp = {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1}
    assert numerics_check("fedavg", empty, record, hp) is None
    baseline = record.parent / golden_name("fedavg")
    # the baseline and its check as another class left them: its values apart beyond the envelope
    other = {**machine_class(), "aten": "AVX512", "model": 999}
    golden = json.loads(baseline.read_text())
    golden["machine"] = other
    golden["history"][2]["train/loss"] = str(float(golden["history"][2]["train/loss"]) * (1 + 1e-4))
    baseline.write_text(json.dumps(golden))
    rec = json.loads(record.read_text())
    code = goldens.code_fingerprint("fedavg").rpartition("/")[0]
    rec["fingerprint"] = f"{code}/{class_slug(other)}"
    record.write_text(json.dumps(rec))
    assert numerics_check("fedavg", empty, record) is None
    got = json.loads(record.read_text())
    assert got["result"] == "within round-off" and got["roundoff"][0]["same_code"]
    mine = record.parent / class_slug(machine_class()) / golden_name("fedavg")
    assert mine.exists()
    assert numerics_check("fedavg", empty, record) is None                 # this class's own golden: bits
    assert json.loads(record.read_text())["result"] == "bit-identical"
    # the same baseline, with a record of other code: the envelope gates
    mine.unlink()
    rec["fingerprint"] = f"{'0' * 16}/-/v1.1/{class_slug(other)}"
    record.write_text(json.dumps(rec))
    problem = numerics_check("fedavg", empty, record)
    assert problem.startswith("fedavg's numbers changed without a numerics version bump: round 2: train/loss"), problem


def test_every_method_with_committed_runs_is_replayed():
    """A method that gets committed paper-scale runs also gets a replayed one here."""
    have = {p.parent.parent.name for p in (REPO / "results" / "runs").glob("*/*/*/seed*") if "smoke" not in p.parts}
    assert have - set(REPLAYED) <= {"fedep_i", "fedsep_i", "fedpa"}, sorted(have - set(REPLAYED))


if __name__ == "__main__":  # python tests/test_replay.py METHOD ...  (or: all)
    import tempfile

    if sys.argv[1:] == ["paths"]:
        with tempfile.TemporaryDirectory() as d:
            print(*write_path_goldens(Path(d)), sep="\n")
        sys.exit(0)
    names = _method_names() if sys.argv[1:] == ["all"] else sys.argv[1:]
    for m in names:
        with tempfile.TemporaryDirectory() as d:
            print(write_golden(m, Path(d)))


def test_numpy_kernels_are_capped_at_avx2_like_torchs():
    """NumPy's SIMD dispatch is capped at X86_V3 (AVX2) once fedbayes is imported first, as the CLI and the
    tests do: on an AVX-512 machine its AVX-512 reductions changed ECE/Brier in the last bit and the
    goldens failed (checked on an AMD EPYC Zen 4). Nothing to check on a machine without AVX-512."""
    import os
    import subprocess

    code = ("import fedbayes, numpy; from numpy._core._multiarray_umath import __cpu_features__ as f; "
            "print(int(bool(f.get('X86_V4') or f.get('AVX512_ICL'))))")
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "0", out.stdout + out.stderr


def test_the_numerics_check_replays_a_golden_for_every_code_path(tmp_path):
    """The workflow's check replays every golden of the method, one per code path: a changed number on a
    path other than the first golden's is found; a run on a path no golden covers makes the check due
    and gets a baseline of its own, the first path's golden untouched."""
    from fedbayes.engine.goldens import check_due, golden_files, numerics_check, run_tag

    record, empty = tmp_path / "work" / "fedavg.json", tmp_path / "none"
    adam = {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1}
    sgd = {**adam, "optimizer": "sgd"}
    assert numerics_check("fedavg", empty, record, adam) is None
    assert not check_due("fedavg", record, adam) and check_due("fedavg", record, sgd)
    assert numerics_check("fedavg", empty, record, sgd) is None
    files = golden_files("fedavg", record.parent)
    assert len(files) == 2 and files[1].name.endswith(f".{run_tag('fedavg', sgd)}.json")
    assert json.loads(record.read_text())["signatures"] == [run_tag("fedavg", adam), run_tag("fedavg", sgd)]
    assert not check_due("fedavg", record, sgd) and not check_due("fedavg", record, adam)
    golden = json.loads(files[1].read_text())
    golden["history"][1]["train/loss"] = "9.0"
    files[1].write_text(json.dumps(golden))
    record.unlink()
    problem = numerics_check("fedavg", empty, record, adam)
    assert problem.startswith("fedavg's numbers changed without a numerics version bump: round 1: train/loss 9.0 != ")
    assert files[1].name in problem
