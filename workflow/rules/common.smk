# Shared by the rules: resolved configuration, paths, the code each rule runs, the rerun markers. The
# planning itself is fedbayes.workflow (importable, unit-tested); here are the rules' one-line callers.
import functools
import json
import re
import shlex
import sys
from pathlib import Path

from fedbayes import runpaths
from fedbayes.study.schema import schema_file
from fedbayes.study.stamp import write_stamp
from fedbayes.study import (experiment_config, overlay_replacements, partition_config, paths, run_config, seeds,
                             selection, selection_seeds, stand_in_size, swept_points, sweep_points, table_figures)
from fedbayes.reports.headline import plot_files as headline_plot_files
from fedbayes.reports.toys import TOYS
from fedbayes.workflow import codes, markers, numerics, plan, staleness

SCALE = config["scale"]
PATHS = paths(config)
RAW, PART, RUNS, WORK, REPORTS = (PATHS[k] for k in ("raw", "partitions", "runs", "work", "reports"))

# The CLI reads the effective configuration (params.yaml plus --config overrides) from this file;
# rewritten only when its content changes, so it never triggers reruns by itself.
EFFECTIVE = Path(WORK) / "params.effective.yaml"
if not EFFECTIVE.exists() or EFFECTIVE.read_text() != plan.effective_text(config):
    EFFECTIVE.parent.mkdir(parents=True, exist_ok=True)
    EFFECTIVE.write_text(plan.effective_text(config))
# validated above (the Snakefile): stamped so, the jobs trust it instead of validating it again
write_stamp(EFFECTIVE, schema_file(EFFECTIVE))
# The package's CLI through the Python that runs this workflow, so `.venv/bin/snakemake …` works without
# activating the venv (a bare `fedbayes` would need it on PATH).
FEDBAYES = f"{shlex.quote(sys.executable)} -m fedbayes.cli"
CLI = f"{FEDBAYES} {{cmd}} --params {shlex.quote(str(EFFECTIVE))}"
PLANNING = not workflow.remote_exec and not workflow.subprocess_exec  # the process that plans, not a job's

# A scale value that replaces a user's own method setting, said once when the DAG is planned
# (`fedbayes validate --scale <scale>` names every place).
if PLANNING and (_REPLACED := overlay_replacements(config, limit=3)):
    print(_REPLACED + f"; all of them: fedbayes validate --scale {SCALE}", file=sys.stderr)


def cli(cmd):
    return CLI.format(cmd=cmd)


# The package sources each rule runs (its entry modules' import graph: fedbayes.workflow.codes.RULE_CODE)
# and their hash: an input whose timestamp never triggers a rerun (ancient: a fresh clone writes them after
# the committed results) and a param whose change does. Training has none: its reruns follow numbers.
CODE = {r: codes.rule_code(*codes.RULE_CODE[r]) for r in codes.RULE_CODE}
CODE_HASH = {r: codes.code_hash(f) for r, f in CODE.items()}


def fixed(files):
    return [ancient(f) for f in files]


def experiment(name):
    return experiment_config(config, name)


def experiment_datasets(name):
    return plan.experiment_datasets(config, name)


def datasets_of(name):
    return [plan.status_file(WORK, d) for d in experiment_datasets(name)]


def experiment_available(name):
    return plan.availability(WORK, experiment_datasets(name))


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

MARKER_TEXT = {}  # marker path -> its text, for the marker jobs of this process (their params)


def marker_input(path, why, reasons, consumer):
    """A rerun marker as an input (fedbayes.workflow.markers.marker), or none; planning writes nothing."""
    if (made := markers.marker(path, why, reasons, consumer)) is None:
        return []
    MARKER_TEXT[made[0]] = made[1]
    return [forced(*made, "marker")]


def forced(path, text, rule):
    """``path``, the output of a forced rule's job; stops a DAG whose --forcerun left the rule out."""
    s = workflow.dag_settings
    if PLANNING and (problem := markers.forcerun_problem(path, text, s.forceall, s.forcerun, rule)):
        raise WorkflowError(problem)
    return path


# Snakemake runs the job of a missing intermediate file only when a job that reads it must run anyway
# (temp-file semantics), so the marker jobs are forced: profiles/default/config.yaml says `forcerun:
# [marker, numerics_check]`; marker_input stops a DAG whose command line replaced that list.
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
    """Input function: a marker naming a job's missing outputs where its ``anchor`` output exists
    (Snakemake 9 checks only the requested outputs of a target job)."""
    return lambda wc: marker_input(f"{WORK}/missing/outputs/{name}.txt", "rebuilt because these outputs are missing: ",
                                   markers.missing(files), files) if Path(anchor).exists() else []


def selected_point(experiment, method):
    """Waits for the (experiment, method) sweep selection (a checkpoint; a damaged one as one not made) and
    returns its point."""
    from snakemake.exceptions import IncompleteCheckpointException
    from snakemake.io import checkpoint_target

    out = checkpoints.select.get(experiment=experiment, method=method).output[0]
    if (point := staleness.recorded_point(out)) is None:
        raise IncompleteCheckpointException(checkpoints.select.rule, checkpoint_target(out))
    return point


wildcard_constraints:
    experiment="[a-z0-9][a-z0-9.-]*",
    method="[a-z_]+",
    seed=r"\d+",
    point="[A-Za-z0-9_.=+-]+",
    dataset="[a-z0-9_]+",
