"""Numerics goldens, the cheaper half of the rerun rule's guard (fedbayes.engine.replay), which the workflow
runs itself (``numerics_check``, the CLI's ``numerics-check``, run by the DAG: workflow/rules/train.smk): a method's numerics golden — 3 rounds of
a tiny synthetic problem, ``tests/golden/numerics/<method>.v<core>.<version>.json`` — replayed whenever
the code (fedbayes' sources, a plug-in's package) differs from the code of the method's last check;
bit-identical numbers adopt the code silently, others stop the DAG with one line naming the method and
the first differing value (docs/workflow.md: cost and cadence).

A golden is written (``make_golden``), and checked on this machine's class bit for bit or on another
within the round-off envelope (``numerics_check``, which records the code it held for).
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np

from fedbayes.study import FROZEN_DEFAULTS, METHOD_SPECS, method_defaults, numerics
from fedbayes.study.model import RunSpec
from fedbayes.data import make_synthetic
from fedbayes.eval.registry import evaluated_column
from fedbayes.fileio import write_text_atomic
from fedbayes.methods.failure import raised_in_method
from fedbayes.partition import make_partition
from fedbayes.machine import class_id, class_slug, machine_class, same_class
from fedbayes.engine import roundoff
from fedbayes.provenance import plugin_identity, source_hash

from fedbayes.engine.replay import TIMING

# what a golden's run is shrunk to: seconds on a CPU, whatever the method's real settings
GOLDEN_SIZES = dict(local_epochs=2, batch_size=32, server_iters=20, pred_samples=3, mc_every=1, burn_in=1,
                    laplace_epochs=1, ngvi_epochs=1, ngvi_samples=2)


def golden_name(method: str) -> str:
    """``<method>.v<core>.<method version>.json``: a golden holds one numerics version's numbers."""
    v = numerics(method)
    return f"{method}.v{v['core']}.{v['method']}.json"


@functools.cache
def _synthetic() -> dict[str, np.ndarray]:
    """The synthetic image set, drawn once a process (≈ 40 ms; a numerics check replays up to 35 goldens),
    kept read-only; each golden gets its own copy."""
    a = make_synthetic()
    for arr in a.values():
        arr.flags.writeable = False
    return a


def golden_history(method: str, hp: dict, tmp: str | Path) -> list[dict]:
    """The method on a tiny synthetic problem: 4 Dirichlet clients, a 32-16 ReLU MLP, 3 rounds, one CPU
    thread (what a numerics golden records)."""
    import torch

    from fedbayes.engine.loop import RunData, preprocess, run_federated  # imports torch (seconds)

    a = {k: v.copy() for k, v in _synthetic().items()}
    idx = np.arange(400)
    parts = [idx[p] for p in make_partition(a["y_train"][idx], 4, "dirichlet", np.random.default_rng(0), min_size=8)]
    noise = np.random.default_rng(1).integers(0, 256, size=(50, 28, 28), dtype=np.uint8)
    data = RunData(x_train=preprocess(a["x_train"], "unit"), y_train=torch.from_numpy(a["y_train"]).long(),
                   x_test=preprocess(a["x_test"][:100], "unit"), y_test=torch.from_numpy(a["y_test"][:100]).long(),
                   x_ood=preprocess(noise, "unit"), n_classes=10, parts=parts)
    cfg = {"experiment": "numerics-golden", "method": method, "point": "default", "seed": 0, "scale": "smoke",
           "dataset": "synthetic", "ood": "noise", "subsample": 1.0, "clients": 4, "partition": {"scheme": "dirichlet"},
           "participation": 1.0, "rounds": 3, "model": {"name": "mlp", "hidden": [32, 16], "activation": "relu"},
           "input_scale": "unit", "hparams": hp, "save_rounds": [1, 2, 3]}
    torch.set_num_threads(1)
    return run_federated(RunSpec.from_config(cfg), data, tmp, torch.device("cpu"), log=lambda m: None)


def as_text(history: list[dict]) -> list[dict]:
    """History rows as the CSV writer writes them (``str`` of each value), timing columns left out."""
    return [{k: ("" if v is None else str(v)) for k, v in row.items() if k not in TIMING} for row in history]


def golden_hparams_with_defaults(golden: dict) -> dict:
    """A golden's hyperparameters with the spec defaults it ran under filled in: its ``defaults`` (a golden
    written since they are recorded), else ``catalog.FROZEN_DEFAULTS`` (the defaults when the committed
    goldens were written). An edited default is a configuration change (the rerun rule reruns the runs
    that read it), not a numbers change of the code: the golden is replayed under its own defaults."""
    defaults = golden["defaults"] if "defaults" in golden else FROZEN_DEFAULTS.get(golden["method"], {})
    return {**defaults, **golden["hparams"]}


def make_golden(method: str, hp: dict, tmp: str | Path) -> dict:
    """A numerics golden of the code at hand: its hyperparameters, the spec defaults it read, its history,
    a digest of each round's kept predictions (``prediction_digests``) and the machine class that computed
    it (``fedbayes.machine``: bits are promised within a class)."""
    return {"method": method, "hparams": hp, "defaults": method_defaults(method, hp),
            "history": as_text(golden_history(method, hp, tmp)), "predictions": prediction_digests(tmp),
            "machine": machine_class()}


# the machine class of the goldens that record none (written before classes were recorded): the file of
# that name beside them
GOLDENS_MACHINE = "machine.json"


def golden_class(golden: dict, path: str | Path) -> dict | None:
    """The machine class a golden was computed on: its own record, else its folder's ``machine.json``
    (``{"machine": {...}}``), else unknown (None: compared within round-off everywhere)."""
    if golden.get("machine"):
        return golden["machine"]
    try:
        return json.loads((Path(path).parent / GOLDENS_MACHINE).read_text())["machine"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def roundoff_diffs(golden: dict, tmp: str | Path) -> tuple[list[str], str, float, list[dict]]:
    """A golden of another machine class against the code at hand, every column within the round-off
    envelope (``engine.roundoff``; prediction digests are bits, so the evaluated metrics stand for them):
    (values outside it, the largest difference as a line, its fraction of the envelope, the history
    computed here)."""
    got = as_text(golden_history(golden["method"], golden_hparams_with_defaults(golden), tmp))
    outside, worst_line, worst = roundoff.compare(golden["history"], got)
    return outside, worst_line, worst, got


def prediction_digests(run_dir: str | Path) -> dict[str, str]:
    """Round → a digest of every log-probability the run kept at that round (its predictions.npz, every
    key but the labels), bit for bit: what the model predicts, whatever the metrics make of it."""
    with np.load(Path(run_dir) / "predictions.npz", allow_pickle=False) as z:
        keys = sorted(k for k in z.files if k not in ("rounds", "y_test"))
        arrays = {k: z[k] for k in keys}
        return {str(int(r)): hashlib.sha256(b"".join(k.encode() + arrays[k][i].tobytes() for k in keys)).hexdigest()[:16]
                for i, r in enumerate(z["rounds"])}


def golden_diffs(golden: dict, tmp: str | Path) -> list[str]:
    """``round N: column golden != now`` for each value of a golden (``{"method", "hparams", "history"}``,
    ``defaults``, ``predictions``) the code at hand computes otherwise; [] when it gives the golden bit for
    bit. A golden with prediction digests compares them, and training's own columns (loss, bytes, local
    accuracy), not the evaluated metrics: a metric definition change is evaluation's (eval.evaluate
    re-evaluates every kept round), not a numbers change of training. One without (written before
    predictions were digested) compares every column."""
    want, got = golden["history"], as_text(golden_history(golden["method"], golden_hparams_with_defaults(golden), tmp))
    digests = golden.get("predictions")
    diffs = [f"round {w['round']}: {k} {w[k]} != {g.get(k, '<absent>')}" for w, g in zip(want, got) for k in w
             if w[k] != g.get(k, "") and not (digests is not None and evaluated_column(k))]
    if digests is not None:
        now = prediction_digests(tmp)
        diffs += [f"round {r}: predictions {d} != {now.get(r, '<absent>')}" for r, d in digests.items() if now.get(r) != d]
    return diffs + ([f"{len(want)} rounds != {len(got)}"] if len(want) != len(got) else [])


def code_fingerprint(method: str) -> str:
    """What the method's numbers are computed by, and on what: fedbayes' sources (``provenance.source_hash``,
    the shared core and every method: one hash, no import graph to keep right), a plug-in's package
    (``provenance.plugin_identity``), the numerics versions the run would record, and the machine class
    (another class, or the same CPU with another vector width, is checked again)."""
    plugin = plugin_identity(method)
    v = numerics(method)
    return f"{source_hash()}/{plugin['source'] if plugin else '-'}/v{v['core']}.{v['method']}/{class_slug(machine_class())}"


def path_signature(hp: dict) -> dict:
    """The hyperparameters that choose a code path rather than a number: a run's string and boolean values
    (optimizer, client optimizer, schedule, variant, …). A numerics golden checks the paths of its own
    signature, so the check replays one golden per signature the method's runs use."""
    return {k: v for k, v in sorted(hp.items()) if isinstance(v, (str, bool))}


def signature_tag(hp: dict) -> str:
    """8 hex of a path signature: the name of the golden that checks it (``<method>.v<c>.<v>.<tag>.json``)."""
    return hashlib.sha256(json.dumps(path_signature(hp), sort_keys=True).encode()).hexdigest()[:8]


def run_tag(method: str, hparams: dict) -> str:
    """The signature tag of a run's resolved ``hparams`` with the spec defaults it reads filled in (as a
    golden's, ``golden_hparams_with_defaults``): a value left at its default takes the same path."""
    return signature_tag({**method_defaults(method, hparams), **hparams})


def path_golden_name(method: str, tag: str) -> str:
    """``<method>.v<core>.<version>.<tag>.json``: the golden of a further code path (``signature_tag``)."""
    return f"{golden_name(method).removesuffix('.json')}.{tag}.json"


def golden_methods(goldens: str | Path) -> list[str]:
    """The installed methods with a committed golden of their current numerics version in ``goldens``."""
    return [m for m in sorted(METHOD_SPECS) if (Path(goldens) / golden_name(m)).exists()]


def golden_files(method: str, *dirs: str | Path) -> list[Path]:
    """The method's goldens of its current numerics version in ``dirs``: ``<golden_name>`` first, then one
    ``path_golden_name`` per further path signature."""
    main, other = golden_name(method), len(path_golden_name(method, "0" * 8))
    return [f for d in dirs for f in sorted(Path(d).glob(f"{main.removesuffix('.json')}*.json"),
                                            key=lambda f: (f.name != main, f.name))
            if f.name == main or len(f.name) == other]


def check_due(method: str, record: str | Path, hparams: dict | None = None) -> bool:
    """Whether the code differs from the code of the method's last check (its record ``record``: none,
    unreadable, or another ``code_fingerprint``), or a run's ``hparams`` take a code path (``path_signature``)
    no golden of that check covered. Torch-free, a hash of the sources: the DAG asks it for every method
    with finished runs, each time it is built."""
    try:
        rec = json.loads(Path(record).read_text())
        if rec.get("fingerprint") != code_fingerprint(method):
            return True
        return hparams is not None and "signatures" in rec and run_tag(method, hparams) not in rec["signatures"]
    except (OSError, ValueError, AttributeError):
        return True


def class_golden(path: Path, goldens: str | Path, slug: str) -> Path | None:
    """A committed golden of this machine's class with the name of ``path``: ``<goldens>/<slug>/<name>``
    (``machine.class_slug``), written on a machine of that class (``python tests/test_replay.py --class``)."""
    own = Path(goldens) / slug / path.name
    return own if own.exists() else None


def check_golden(path: Path, goldens: str | Path, tmp: str | Path,
                 passed: tuple[Path, str] | None = None) -> tuple[dict, dict]:
    """Replay one golden with the code at hand on this machine. Returns (the golden, the verdict):
    ``{"mode": "bits" | "round-off", "outside": [...], "worst": line, "fraction": float, "class": id,
    "history": rows computed}``. Bit for bit against a golden of this machine's class (the golden itself,
    or a committed one of this class beside it); within the round-off envelope (``engine.roundoff``)
    against one of another class. ``passed``: (a folder of bit-for-bit passes, the code's fingerprint):
    a bit-for-bit check this code already passed on this class against these very golden bytes
    (``passed_mark``) is not replayed, and a new pass is marked there."""
    here = machine_class()
    golden = json.loads(Path(path).read_text())
    # this class's golden beside it: a committed one (``goldens``), or the one the workflow recorded beside
    # its own baseline (``numerics_check``'s record folder) when this class first replayed it
    own = class_golden(Path(path), goldens, class_slug(here)) or class_golden(Path(path), Path(path).parent,
                                                                              class_slug(here))
    if own is not None:
        path, golden = own, json.loads(own.read_text())
    cls = golden_class(golden, path)
    if same_class(cls, here):
        verdict = {"mode": "bits", "outside": [], "class": class_id(cls), "golden": str(path)}
        mark = passed_mark(passed[0], passed[1], Path(path)) if passed else None
        if mark is not None and mark.exists():
            return golden, verdict
        verdict["outside"] = golden_diffs(golden, tmp)
        if mark is not None and not verdict["outside"]:
            try:   # best effort: an unwritable cache costs a replay next time
                mark.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(mark, json.dumps({"golden": str(path), "fingerprint": passed[1],
                                                    "machine": class_id(here)}) + "\n")
            except OSError:
                pass
        return golden, verdict
    outside, worst_line, worst, got = roundoff_diffs(golden, tmp)
    return golden, {"mode": "round-off", "outside": outside, "worst": worst_line, "fraction": worst, "history": got,
                    "class": class_id(cls) if cls else "not recorded", "golden": str(path)}


def passed_mark(folder: Path, fingerprint: str, golden: Path) -> Path:
    """The mark of a bit-for-bit pass: ``<folder>/<sha256 of the code fingerprint and the golden's bytes>``.
    The fingerprint (``code_fingerprint``) holds every source file of the package, a plug-in's, the
    numerics versions and the machine class with its library versions; the same code replaying the same
    golden on the same class computes the same bits, so a pass marked in one clone holds in another."""
    h = hashlib.sha256(fingerprint.encode() + b"\0" + golden.read_bytes())
    return Path(folder) / f"{h.hexdigest()[:32]}.json"


def baselines_of_this_code(method: str, record: str | Path) -> set[str]:
    """The workflow's own baselines (goldens it wrote beside ``record``, not committed ones) that the method's
    last check held with the code at hand on another machine class: its record names them and its code
    fingerprint is this code's but for the class. Replayed on this class, such a baseline can differ only by
    this machine's rounding, however far training carries it, so it is not a code change's gate (a baseline
    of a path trained differently from the committed goldens' problem can go beyond their envelope)."""
    try:
        rec = json.loads(Path(record).read_text())
        code, _, cls = rec["fingerprint"].rpartition("/")
        if code != code_fingerprint(method).rpartition("/")[0] or cls == class_slug(machine_class()):
            return set()
        if rec.get("result") not in ("bit-identical", "baseline written", "within round-off"):
            return set()
        return {g for g in [*rec.get("goldens", []), rec.get("golden", "")] if Path(g).parent == Path(record).parent}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return set()


def numerics_check(method: str, goldens: str | Path, record: str | Path, hparams: dict | None = None,
                   passed: str | Path | None = None) -> str | None:
    """Replay every numerics golden of the method (one per code path its runs take, ``golden_files``) with
    the code at hand (``check_golden``: bit for bit on the golden's machine class, within round-off on
    another). The same numbers → write ``record`` (the code's fingerprint, the machine class, the
    signatures checked and the verdict: the check is not repeated until the code, the class or a run's
    path changes) and return None; within round-off, this machine's goldens are recorded beside
    ``record`` (``<record dir>/<class slug>/``). Otherwise return one line naming the method and the first
    value outside (bits on its own class, the envelope on another), and write nothing.
    The goldens are the committed ones in ``goldens``, and the workflow's own baselines beside
    ``record``: a run whose ``hparams`` take a path no golden covers (a plug-in, a version bumped without
    writing one, a new option) gets one on its first check, from its configuration shrunk to
    ``GOLDEN_SIZES``. ``passed``: a folder of bit-for-bit passes shared by clones (``check_golden``)."""
    record = Path(record)
    here = machine_class()
    files = golden_files(method, goldens, record.parent)
    tag = run_tag(method, hparams) if hparams is not None else None
    vouched = baselines_of_this_code(method, record)
    marks = (Path(passed), code_fingerprint(method)) if passed else None
    with tempfile.TemporaryDirectory() as tmp:
        seen, result, roundoffs = [], "bit-identical", []
        for path in files:
            try:
                golden, v = check_golden(path, goldens, tmp, marks)
            except (ValueError, KeyError, TypeError, OSError) as e:
                if raised_in_method(method, e) is not None:
                    raise   # the method's own code failed replaying it: not an unreadable golden
                return f"{method}: its numerics golden {path} is unreadable ({type(e).__name__}: {e})"
            if v["outside"] and v["mode"] == "bits":
                return (f"{method}'s numbers changed without a numerics version bump: {v['outside'][0]} (golden "
                        f"{v['golden']}, {len(v['outside'])} values differ, bit for bit on its own machine class); "
                        f"bump its spec's numerics (or CORE_NUMERICS in fedbayes/study/rerun.py) and write its golden, "
                        f"or revert the change")
            if v["outside"] and str(path) not in vouched:
                return (f"{method}'s numbers changed without a numerics version bump: {v['outside'][0]} (golden "
                        f"{v['golden']}, {len(v['outside'])} values beyond round-off; it was computed on {v['class']}, "
                        f"this machine is {class_id(here)}); if you changed the code: bump its spec's numerics (or "
                        f"CORE_NUMERICS in fedbayes/study/rerun.py) and write its golden, or revert the change; if you "
                        f"changed nothing, this machine rounds beyond the envelope measured on other classes "
                        f"(docs/workflow.md, \"Same numbers on another machine\"): report this line")
            if v["mode"] == "round-off":
                ref = {"golden": v["golden"], "class": v["class"], "largest": v["worst"],
                       "of_envelope": round(v["fraction"], 4)}
                if v["outside"]:   # beyond the envelope, but the baseline is this very code's: the machine's
                    ref |= {"same_code": True}
                own = {**golden, "history": v["history"], "predictions": prediction_digests(tmp), "machine": here,
                       "reference": ref}
                mine = record.parent / class_slug(here) / Path(path).name
                mine.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(mine, json.dumps(own, indent=1) + "\n")
                roundoffs.append({**ref, "recorded": str(mine)})
                result = "within round-off"
            seen.append(signature_tag(golden_hparams_with_defaults(golden)))
        if tag is not None and tag not in seen:
            name = path_golden_name(method, tag) if files else golden_name(method)
            golden = make_golden(method, {**hparams, **GOLDEN_SIZES}, tmp)
            record.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(record.parent / name, json.dumps(golden, indent=1) + "\n")
            files.append(record.parent / name)
            seen.append(tag)
            result = "baseline written" if result == "bit-identical" else result
        elif not files:
            return f"{method}: no numerics golden {Path(goldens) / golden_name(method)} and no run configuration to make one"
    record.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(record, json.dumps({"method": method, "fingerprint": code_fingerprint(method),
                                          "machine": class_id(here),
                                          "golden": str(files[0] if files else record.parent / golden_name(method)),
                                          "goldens": [str(f) for f in files], "signatures": seen,
                                          "result": result, **({"roundoff": roundoffs} if roundoffs else {})},
                                         indent=1) + "\n")
    return None


def roundoff_note(records: list[str | Path]) -> str | None:
    """The one line a check within round-off prints (None when every record is bit-identical or none was
    checked within round-off): the goldens' class, this machine's, how many goldens, the largest
    difference as a fraction of the envelope."""
    rows = []
    for r in records:
        try:
            rows += json.loads(Path(r).read_text()).get("roundoff", [])
        except (OSError, ValueError, AttributeError):
            continue
    if not rows:
        return None
    beyond = [x for x in rows if x.get("same_code")]
    worst = max([x for x in rows if not x.get("same_code")] or rows, key=lambda x: x["of_envelope"])
    classes = sorted({x["class"] for x in rows})
    also = (f"; {len(beyond)} of the workflow's own baselines beyond the envelope were written by this same code "
            f"on the other class, so only the machine differs" if beyond else "")
    return (f"this machine rounds differently from the goldens' machine (class {'; '.join(classes)}); runs here "
            f"replay within round-off, not bit for bit ({len(rows) - len(beyond)} goldens within the envelope, the "
            f"largest difference {worst['of_envelope']:.2g} of it: {worst['largest'] or 'none'}{also}; this machine "
            f"is {class_id(machine_class())}, its goldens recorded in {Path(worst['recorded']).parent})")
