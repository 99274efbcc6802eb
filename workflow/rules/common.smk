# Shared by the rules: resolved configuration, paths, the code each rule runs, the rerun markers. The
# planning itself is fedbayes.workflow (importable, unit-tested); here are the rules' one-line callers.
import json
import re
import shlex
import sys
from pathlib import Path

from fedbayes import runpaths
from fedbayes.published import PAPERS
from fedbayes.study.schema import schema_file
from fedbayes.study.stamp import write_stamp
from fedbayes.study import (experiment_config, overlay_replacements, partition_config, paths, run_config, seeds,
                             selection, selection_seeds, stand_in_size, swept_points, sweep_points, table_figures)
from fedbayes.reports.headline import plot_files as headline_plot_files
from fedbayes.reports.toys import TOYS
from fedbayes.workflow import codes, inputs, plan, staleness
from fedbayes.tracking import imported_runs, marker_problems, tracking_uri

SCALE = config["scale"]
PATHS = paths(config)
RAW, PART, RUNS, WORK, REPORTS = (PATHS[k] for k in ("raw", "partitions", "runs", "work", "reports"))

# The CLI reads the effective configuration (params.yaml plus --config overrides) from this file;
# rewritten only when its content changes, so it never triggers reruns by itself.
EFFECTIVE = plan.effective_path(config)   # <work>/params.effective.yaml
if not EFFECTIVE.exists() or EFFECTIVE.read_text() != plan.effective_text(config):
    EFFECTIVE.parent.mkdir(parents=True, exist_ok=True)
    EFFECTIVE.write_text(plan.effective_text(config))
# validated above (the Snakefile): stamped so, the jobs trust it instead of validating it again (a configuration
# validated before is that very file, its stamp already this code's)
if not VALIDATED_BEFORE:
    write_stamp(EFFECTIVE, schema_file(EFFECTIVE))
# Each rule's software (`snakemake --use-conda`): fedbayes and its dependencies; by default the venv this
# workflow runs in (its path is relative to the rule files in workflow/rules/).
CONDA_ENV = "../envs/fedbayes.yaml"
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


# The package sources each job runs (its entry modules' import graph, fedbayes.workflow.codes.RULE_CODE)
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
# The input functions that hold state or decide between cases (rerun markers, the numerics gate, stale
# runs and metrics, the runs a table reads): fedbayes.workflow.inputs, unit-tested; here they are named.
INPUTS = inputs.Inputs(config, PATHS, workflow, checkpoints, PLANNING)
run_dir, selected_file = INPUTS.run_dir, INPUTS.selected_file


def partition_file(experiment, seed):
    return str(runpaths.partition_file(PATHS, experiment, seed))


def partition_figure_of(experiment, seed):
    return str(runpaths.partition_figure(PATHS, SCALE, experiment, seed))


RUN = run_dir("{experiment}", "{method}", "{point}", "{seed}")  # one training run

marker_input, forced, missing_outputs, gate_input = INPUTS.marker_input, INPUTS.forced, INPUTS.missing_outputs, INPUTS.gate_input
selected_point, selected_runs, missing_marker = INPUTS.selected_point, INPUTS.selected_runs, INPUTS.missing_marker
changed_config, stale_metrics, run_cfg = INPUTS.changed_config, INPUTS.stale_metrics, INPUTS.run_cfg


def damaged_selection(wc):  # a damaged selected.json is made again (its marker)
    return marker_input(f"{WORK}/damaged/{wc.experiment}/{wc.method}.selected.txt", "selected again because ", staleness.selection_damage(selected_file(wc.experiment, wc.method)), [selected_file(wc.experiment, wc.method)])


def selection_source(wc):  # the selected.json of the experiment this one takes its selection from, if any
    return [selected_file(s, wc.method) for s in [experiment(wc.experiment).get("selection_from")] if s]


def selections(wc):  # every method's selection of the experiment (its sweep report's inputs)
    return [selected_file(wc.experiment, m) for m in experiment(wc.experiment)["methods"]]


def partition_code(experiment):  # the split's code and the loaders of the experiment's datasets
    return codes.rule_code(codes.RULE_CODE["partition"][0] + codes.dataset_modules(experiment_datasets(experiment)))


def dvc_cache(wildcards):  # the command that puts a fetched folder dvc.yaml caches into DVC's cache
    return plan.dvc_cache_command(f"{RAW}/{wildcards.dataset}", DVC_CACHED, f"{WORK}/data/.dvc.lock", sys.executable)


# Reports (report.smk)
def in_report(path, name, caption, subcategory=None):  # marked for `snakemake --report` once built (a report runs nothing)
    return report(path, caption=f"../report/{caption}.rst", category=plan.report_category(name, PAPERS), subcategory=subcategory or name, labels={"file": Path(path).name, "table": name}) if Path(path).exists() else path


def table_status(experiments):  # the data status of every dataset of the table's experiments
    return lambda wc: sorted({plan.status_file(WORK, d) for e in experiments for d in experiment_datasets(e)})


def sweep_reports(table, spec, experiments):  # a table's sweep reports, or the data status not recorded yet
    return lambda wc: [f for e in experiments for f in ([plan.sweep_report(REPORTS, table, spec, e)] if experiment_available(e) else plan.unrecorded(WORK, experiment_datasets(e)))]


def all_sweep_reports(wc):  # every table's experiments' sweep reports (each trains every method of its experiment)
    return sorted({f for t, s in config["tables"].items() for f in sweep_reports(t, s, list(TABLE_PAIRS[t]))(wc)})


def page_of(wc):  # the table, toy or scorecard a report page shows
    return REPORT_PAGES.get(wc.page, "")


# MLflow imports (track.smk)
def method_runs(experiment, method):  # (point, seed) of every imported run of the pair; waits for the selection
    return imported_runs(config, experiment, method, selected_point(experiment, method))


def import_marker(group):
    return f"{WORK}/mlflow/{group}.runs"


def available_pairs(pairs):  # the pairs whose experiment's data this machine has (as the tables: the others' rows say "not run")
    return {e: ms for e, ms in pairs.items() if experiment_available(e)}


def store_lost(group):  # an import whose runs are not in the store as imported is redone (tracking.marker_problems)
    return lambda wc: marker_input(f"{WORK}/damaged/mlflow/{group}.txt", "re-imported because ", marker_problems(import_marker(group), tracking_uri(config)), [import_marker(group)])


def pairs_status(pairs):  # the data status files of the pairs' experiments not recorded yet
    return sorted({f for e in pairs for f in plan.unrecorded(WORK, experiment_datasets(e))})


def unrecorded_status(group, pairs):  # data not recorded yet: its status asked for (the data checkpoint), with a marker
    return lambda wc: pairs_status(pairs) + marker_input(f"{WORK}/missing/mlflow/{group}.txt", "rebuilt because of: ", pairs_status(pairs), [import_marker(group)])


def imported_files(pairs):
    return lambda wc: [f"{run_dir(e, m, pt, s)}/{f}" for e, ms in available_pairs(pairs).items() for m in ms for pt, s in method_runs(e, m) for f in ("metrics.json", "history.csv")]


def imported_selections(pairs):
    return lambda wc: [selected_file(e, m) for e, ms in available_pairs(pairs).items() for m in ms]


def imported_figures(pairs):
    return lambda wc: sorted({partition_figure_of(e, s) for e, ms in available_pairs(pairs).items() for m in ms for _, s in method_runs(e, m)})


wildcard_constraints:
    experiment="[a-z0-9][a-z0-9.-]*",
    method="[a-z_]+",
    seed=r"\d+",
    point="[A-Za-z0-9_.=+-]+",
    dataset="[a-z0-9_]+",
