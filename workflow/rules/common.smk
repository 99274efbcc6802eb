# Shared helpers: resolved configuration, paths and the code each rule depends on.
import hashlib
import json
import re
import shlex
import sys
from pathlib import Path

from fedbayes.config import (comparable_experiments, experiment_config, partition_config, paths, run_config,
                             seeds, selection, selection_seeds, stand_in_size, swept_points, sweep_points,
                             table_figures)
from fedbayes import runpaths
from fedbayes.catalog import split_variant
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


def marker_input(path, why, reasons):
    """The rules' way to force a rerun that Snakemake's own checks miss (a changed configuration, a
    damaged or missing file, a lost MLflow import): with ``reasons``, write ``<why><reasons>`` to the
    marker file ``path`` (a new mtime) and return it as an input; without, no input."""
    if not reasons:
        return []
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(why + ", ".join(reasons) + "\n")
    return [str(path)]


def missing_outputs(name, files, anchor):
    """Input function: a job whose requested output exists while another of its outputs does not (a spec
    edit that adds one: ECE in a table's metrics adds its reliability diagram, a metric in the headline's
    curves adds a curve CSV). Snakemake 9 checks only the requested outputs of a target job, and does not
    compare the params of a job with an output it has no record of, so it said "Nothing to be done" for the
    edited table. A marker naming the missing outputs (new mtime) becomes an input; only where ``anchor``
    exists (else the job runs anyway, and a marker written then would be one Snakemake's file-existence
    cache has seen missing)."""
    def inputs(wc):
        if not Path(anchor).exists():
            return []
        return marker_input(f"{WORK}/missing/outputs/{name}.txt", "rebuilt because these outputs are missing: ",
                            [f for f in files if not Path(f).exists()])

    return inputs


def selected_point(experiment, method):
    """Waits for the (experiment, method) sweep selection (a checkpoint) and returns its point."""
    from fedbayes.runfiles import read_selected

    return read_selected(checkpoints.select.get(experiment=experiment, method=method).output[0])["point"]


def set_aside_damaged_selections():
    """A damaged selected.json (a derived file: fedbayes.runfiles.read_selected) is moved aside to
    ``selected.json.damaged`` and rebuilt from the runs' metrics before the DAG is built, with one line
    saying so. (Snakemake reads checkpoint outputs while it builds the DAG, and does not rerun a missing
    one behind an existing table; where the runs are not there to select from, the selection job runs.)"""
    from fedbayes.reports.selection import write_selection
    from fedbayes.runfiles import DamagedFile, read_selected

    for f in sorted(Path(RUNS).glob("*/*/selected.json")):
        try:
            read_selected(f)
        except DamagedFile as e:
            f.replace(f"{f}.damaged")
            experiment, method = f.parent.parent.name, f.parent.name
            try:
                write_selection(config, experiment, method, f)
                print(f"{e}: moved aside to {f}.damaged and rebuilt from the runs' metrics", file=sys.stderr)
            except (OSError, ValueError, KeyError):
                print(f"{e}: moved aside to {f}.damaged, the selection reruns", file=sys.stderr)


set_aside_damaged_selections()


wildcard_constraints:
    experiment="[a-z0-9][a-z0-9.-]*",
    method="[a-z_]+",
    seed=r"\d+",
    point="[A-Za-z0-9_.=+-]+",
    dataset="[a-z0-9_]+",
