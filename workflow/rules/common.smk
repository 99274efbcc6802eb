# Shared helpers: resolved configuration, paths and the code each rule depends on.
import hashlib
import json
import re
import shlex
import sys
from pathlib import Path

from fedbayes.study import (comparable_experiments, experiment_config, partition_config, paths, run_config,
                             seeds, selection, selection_seeds, stand_in_size, swept_points, sweep_points,
                             table_figures)
from fedbayes import runpaths
from fedbayes.study import split_variant
from fedbayes.reports.headline import plot_files as headline_plot_files
from fedbayes.reports.toys import TOYS

SCALE = config["scale"]
PATHS = paths(config)
RAW, PART, RUNS, WORK, REPORTS = (PATHS[k] for k in ("raw", "partitions", "runs", "work", "reports"))

# The CLI reads the effective configuration (params.yaml plus --config overrides) from this file;
# rewritten only when its content changes, so it never triggers reruns by itself. Keys in params.yaml's
# order: an experiment's methods are a mapping whose order is the order of its reports' rows.
EFFECTIVE = Path(WORK) / "params.effective.yaml"
_text = json.dumps(config, indent=1)
if not EFFECTIVE.exists() or EFFECTIVE.read_text() != _text:
    EFFECTIVE.parent.mkdir(parents=True, exist_ok=True)
    EFFECTIVE.write_text(_text)
# The package's CLI through the Python that runs this workflow, so `.venv/bin/snakemake …` works without
# activating the venv (a bare `fedbayes` would need it on PATH).
FEDBAYES = f"{shlex.quote(sys.executable)} -m fedbayes.cli"
CLI = f"{FEDBAYES} {{cmd}} --params {shlex.quote(str(EFFECTIVE))}"


# A scale value that replaces a user's own method setting, said once when the DAG is planned (the
# scale's shared values win: fedbayes.config.overlay_replacements; `fedbayes validate --scale <scale>`
# names every place).
from fedbayes.study import overlay_replacements

if not workflow.remote_exec and not workflow.subprocess_exec and (_REPLACED := overlay_replacements(config, limit=3)):
    print(_REPLACED + f"; all of them: fedbayes validate --scale {SCALE}", file=sys.stderr)


def cli(cmd):
    return CLI.format(cmd=cmd)


def code(*parts):
    """Package sources a rule runs (the installed fedbayes): a change reruns the rule (Snakemake's code
    trigger sees only the shell command). Package data counts too: the papers' published numbers
    (``papers/*.yaml``) are read by the table rules."""
    import fedbayes

    root = Path(fedbayes.__file__).parent
    files = []
    for part in parts:
        p = root / part
        files += sorted(str(f) for f in (p.rglob("*") if p.is_dir() else [p]) if f.suffix in (".py", ".yaml"))
    return files


def fixed(files):
    """Inputs whose timestamps must not trigger reruns (Snakemake's ``ancient``): code and data status
    files. A fresh clone writes them after the committed results (history.csv, metrics.json), so by
    mtime every finished run would look stale. What they hold is compared instead, through params: the
    resolved configuration and ``code_hash`` of the sources. (``ancient`` does not stop reruns caused by
    an upstream job that runs, which is why training has no data or partition job upstream.)"""
    return [ancient(f) for f in files]


def code_hash(files):
    """Content hash of package sources (paths relative to the package, so it is the same in any clone)."""
    import fedbayes

    root = Path(fedbayes.__file__).parent
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: str(Path(f).resolve().relative_to(root))):
        h.update(str(Path(f).resolve().relative_to(root)).encode() + b"\0" + Path(f).read_bytes())
    return h.hexdigest()[:16]


def dataset_code(experiment_name):
    """The data code a run of this experiment executes: the registry, sources, IDX parser and the
    modules defining its datasets' loaders (not every dataset module of the package)."""
    import inspect

    from fedbayes.data import DATASETS

    e = experiment(experiment_name)
    files = code("data/registry.py", "data/sources.py", "data/idx.py")
    if stand_in_size(config):  # the stand-ins' generator (only there: the real data's jobs never read it)
        files += code("data/standin.py")
    files += [inspect.getsourcefile(DATASETS[d].loader) for d in (e["dataset"], e.get("ood")) if d]
    return sorted(set(files))


def experiment(name):
    return experiment_config(config, name)


def table_pairs(spec):
    """A table's (experiment, method) pairs with runs, as {experiment: [methods]}: its comparable
    experiments (a not_comparable one carries published numbers only), each with the table's methods it
    runs (a prediction variant ``<method>@<variant>`` → its method)."""
    return {e: [m for m in dict.fromkeys(split_variant(m)[0] for m in spec["methods"]) if m in experiment(e)["methods"]]
            for e in comparable_experiments(spec)}


def experiment_datasets(name):
    e = experiment(name)
    return [d for d in (e["dataset"], e.get("ood")) if d]


def datasets_of(name):
    """The data checkpoint's status files of an experiment's datasets (inputs of partition and train)."""
    return [f"{WORK}/data/{d}.json" for d in experiment_datasets(name)]


# The output layout is fedbayes.runpaths' (the CLI and the reports read the same); a name may be a wildcard.
def run_dir(experiment, method, point, seed):
    return str(runpaths.run_dir(PATHS, experiment, method, point, seed))


def selected_file(experiment, method):
    return str(runpaths.selected_file(PATHS, experiment, method))


def partition_file(experiment, seed):
    return str(runpaths.partition_file(PATHS, experiment, seed))


def partition_figure_of(experiment, seed):
    return str(runpaths.partition_figure(PATHS, SCALE, experiment, seed))


RUN = run_dir("{experiment}", "{method}", "{point}", "{seed}")  # one training run


# marker path -> its text, for the marker jobs of this process (their params)
MARKER_TEXT = {}


def marker_input(path, why, reasons, consumer):
    """The rules' way to force a rerun that Snakemake's own checks miss (a changed configuration, a
    damaged or missing file, a lost MLflow import): with ``reasons``, an input that the ``marker`` job
    writes (``<why><reasons>``), so the consuming job has an input another job updates and reruns; without,
    no input. Planning only looks: nothing is written while the DAG is built (``snakemake -n`` leaves
    the disk as it was) and the dry run shows each marker job with its reason.

    The file is named by a hash of its text and of the state (size, mtime) of ``consumer``, the files of
    the job that reads it: the same reason after the job has rerun (its outputs rewritten) is a new
    marker, not an old file that would look older than the outputs. Where none of ``consumer`` exists the
    job runs anyway (for its outputs): no marker."""
    state = [(str(f), st.st_size, st.st_mtime_ns) for f in consumer if (st := _stat(f))]
    if not reasons or not state:
        return []
    text = why + ", ".join(reasons)
    s = workflow.dag_settings
    if not workflow.remote_exec and not workflow.subprocess_exec and not (s.forceall or "marker" in set(s.forcerun)):
        raise WorkflowError(f"{path}: {text}; this rerun needs its marker job forced, and this command's "
                            "--forcerun replaced the default profile's list: add marker to it (--forcerun marker …)")
    key = hashlib.sha256(json.dumps([text, state]).encode()).hexdigest()[:12]
    path = f"{str(path).removesuffix('.txt')}.rerun-{key}.txt"
    MARKER_TEXT[path] = text
    return [path]


def _stat(f):
    try:
        return Path(f).stat()
    except OSError:
        return None


# Snakemake runs the job of a missing intermediate file only when a job that reads it must run anyway
# (temp-file semantics), so the marker jobs are forced: profiles/default/config.yaml says `forcerun:
# [marker]` (a marker job in the DAG always runs, and its consumer with it); marker_input stops a DAG
# whose command line replaced that list.
rule marker:  # the file that makes its consumer rerun (marker_input); the file is its own record, no log
    output:
        f"{WORK}/{{marker}}.rerun-{{key}}.txt",
    wildcard_constraints:
        key="[0-9a-f]{12}",
    params:
        text=lambda wc, output: MARKER_TEXT.get(output[0], "rerun marker"),
    message:
        "{params.text}"
    localrule: True
    shell:
        "printf '%s\\n' {params.text:q} > {output:q}"


def missing_outputs(name, files, anchor):
    """Input function: a job whose requested output exists while another of its outputs does not (a spec
    edit that adds one: ECE in a table's metrics adds its reliability diagram, a metric in the headline's
    curves adds a curve CSV). Snakemake 9 checks only the requested outputs of a target job, and does not
    compare the params of a job with an output it has no record of, so it said "Nothing to be done" for the
    edited table. A marker naming the missing outputs becomes an input; only where ``anchor`` exists (else
    the job runs anyway)."""
    def inputs(wc):
        if not Path(anchor).exists():
            return []
        return marker_input(f"{WORK}/missing/outputs/{name}.txt", "rebuilt because these outputs are missing: ",
                            [f for f in files if not Path(f).exists()], files)

    return inputs


def selected_point(experiment, method):
    """Waits for the (experiment, method) sweep selection (a checkpoint) and returns its point. A damaged
    selected.json (fedbayes.runfiles.read_selected) is waited for as one not made yet: its select job
    reruns (its marker, damaged_selection), and Snakemake asks again when it has."""
    from snakemake.exceptions import IncompleteCheckpointException
    from snakemake.io import checkpoint_target

    out = checkpoints.select.get(experiment=experiment, method=method).output[0]
    point = recorded_point(out)
    if point is None:
        raise IncompleteCheckpointException(checkpoints.select.rule, checkpoint_target(out))
    return point


def recorded_point(selected):
    """The point a selected.json records, or None where it is missing or damaged."""
    from fedbayes.runfiles import selection_problems

    _, sel = selection_problems(selected)
    return sel["point"] if sel else None


wildcard_constraints:
    experiment="[a-z0-9][a-z0-9.-]*",
    method="[a-z_]+",
    seed=r"\d+",
    point="[A-Za-z0-9_.=+-]+",
    dataset="[a-z0-9_]+",
