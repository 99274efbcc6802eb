# MLflow import: not on a table's path (a table reads the run files, never the store), so a table is
# built without it. `snakemake --cores all mlflow_<table>` (the table's name, a slash as an underscore: mlflow_table1,
# mlflow_fedlap_table1) imports that table's runs and no other's; `snakemake --cores all mlflow` every
# table's (also part of the default target). One job per table imports every run of its (experiment,
# method) pairs (each sweep point on the selection's seeds, the selected point on every seed) in one
# process (python -m fedbayes.tracking): MLflow's import costs seconds, so a process per pair made the
# imports most of a small DAG's time. A run the store already holds with the same content and selected
# tag is not imported again, so a pair two tables share costs the second a look-up. Jobs are serialised
# on the SQLite store by the `mlflow_db` resource (the default profile sets --resources mlflow_db=1) and
# by a file lock (fedbayes.tracking.store_lock). A table's marker (work/mlflow/<table>.runs) records the
# store and, per MLflow run, its id, key and content hash; it is trusted only where that store holds
# those runs (fedbayes.tracking.marker_problems). Tags: selected=true|false, content_hash, import_id.
from fedbayes.tracking import REHEARSAL_IMPORT, imported_runs, marker_problems, tracking_uri


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


# import group -> {experiment: [methods]}: each table's pairs; at rehearsal scale one group of every
# (experiment, method), those in no table too (the rehearsal's summary lists them all)
try:
    IMPORTS = plan.import_groups(config, REHEARSAL_IMPORT if stand_in_size(config) else None)
except ValueError as e:
    raise WorkflowError(str(e))

for _group, _pairs in IMPORTS.items():

    rule:
        name:
            plan.import_rule(_group)
        input:
            lost=store_lost(_group),
            status=unrecorded_status(_group, _pairs),
            runs=imported_files(_pairs),
            selected=imported_selections(_pairs),
            figures=imported_figures(_pairs),
        output:
            import_marker(_group),
        params:
            # a param: data newly available here, or a pair added to the table, redoes the import
            pairs=lambda wc, pairs=_pairs: json.dumps(available_pairs(pairs), sort_keys=True),
            name=_group,
            figure=lambda wc: partition_figure_of("{experiment}", "{seed}"),  # filled in by the job
        resources:
            mlflow_db=1,
        log:
            f"{WORK}/logs/mlflow/{_group}.log",
        shell:
            f"{shlex.quote(sys.executable)} -m fedbayes.tracking --params {shlex.quote(str(EFFECTIVE))}"
            " --name {params.name:q} --pairs {params.pairs:q} --figure {params.figure:q}"
            " --marker {output:q} > {log:q} 2>&1 && tail -n 1 {log:q}"  # a line a pair in the log, its sum here


# every table's runs in the MLflow store; at rehearsal scale the one import of every experiment
MLFLOW_GROUPS = [REHEARSAL_IMPORT] if stand_in_size(config) else list(config["tables"])


rule mlflow:
    input:
        [import_marker(g) for g in MLFLOW_GROUPS],
