# MLflow import: not on a table's path (a table reads the run files, never the store), so a table is
# built without it. `snakemake --cores all mlflow_<table>` (the table's name, "/" as "_": mlflow_table1,
# mlflow_fedlap_table1) imports that table's runs and no other's; `snakemake --cores all mlflow` every
# table's (also part of the default target). One job per table imports every run of its (experiment,
# method) pairs (each sweep point on the selection's seeds, the selected point on every seed) in one
# process (fedbayes track --pairs): MLflow's import costs seconds, so a process per pair made the
# imports most of a small DAG's time. A run the store already holds with the same content and selected
# tag is not imported again, so a pair two tables share costs the second a look-up. Jobs are serialised
# on the SQLite store by the `mlflow_db` resource (the default profile sets --resources mlflow_db=1) and
# by a file lock (fedbayes.tracking.store_lock). A table's marker (work/mlflow/<table>.runs) records the
# store and, per MLflow run, its id, key and content hash; it is trusted only where that store holds
# those runs (fedbayes.tracking.marker_problems). Tags: selected=true|false, content_hash, import_id.
from fedbayes.tracking import REHEARSAL_IMPORT, imported_runs


def method_runs(experiment, method):
    """(point, seed) of every run of (experiment, method) that is imported; waits for the selection."""
    return imported_runs(config, experiment, method, selected_point(experiment, method))


def import_marker(group):
    return f"{WORK}/mlflow/{group}.runs"


def import_rule(group):
    return "mlflow_" + re.sub(r"[^A-Za-z0-9]", "_", group)


def available_pairs(pairs):
    """The pairs whose experiment's data this machine has (as the tables: the others' rows say "not run")."""
    return {e: ms for e, ms in pairs.items() if experiment_available(e)}


def store_lost(group):
    """Input function: an import whose runs are not in the store as imported (it was deleted, runs were
    removed in the UI, MLFLOW_TRACKING_URI names another store or server) is redone: a marker naming why
    becomes an input (fedbayes.tracking.marker_problems)."""

    def inputs(wc):
        from fedbayes.tracking import marker_problems, tracking_uri

        return marker_input(f"{WORK}/damaged/mlflow/{group}.txt", "re-imported because ",
                            marker_problems(import_marker(group), tracking_uri(config)), [import_marker(group)])

    return inputs


def imported_files(pairs):
    def inputs(wc):
        return [f"{run_dir(e, m, pt, s)}/{f}" for e, ms in available_pairs(pairs).items() for m in ms
                for pt, s in method_runs(e, m) for f in ("metrics.json", "history.csv")]

    return inputs


def imported_selections(pairs):
    return lambda wc: [selected_file(e, m) for e, ms in available_pairs(pairs).items() for m in ms]


def imported_figures(pairs):
    return lambda wc: sorted({partition_figure_of(e, s) for e, ms in available_pairs(pairs).items() for m in ms
                              for _, s in method_runs(e, m)})


# import group -> {experiment: [methods]}: each table's pairs; at rehearsal scale one group of every
# (experiment, method), those in no table too (the rehearsal's summary lists them all)
IMPORTS = {t: table_pairs(s) for t, s in config["tables"].items()}
if stand_in_size(config):
    if REHEARSAL_IMPORT in IMPORTS:
        raise WorkflowError(f"params: a table may not be named {REHEARSAL_IMPORT!r} at rehearsal scale "
                            "(the name of the MLflow import of every experiment)")
    IMPORTS[REHEARSAL_IMPORT] = {e: list(experiment(e)["methods"]) for e in config["experiments"]}
if len({import_rule(g) for g in IMPORTS}) < len(IMPORTS):
    raise WorkflowError(f"params: two tables' names give the same MLflow import rule ({sorted(IMPORTS)})")

for _group, _pairs in IMPORTS.items():

    rule:
        name:
            import_rule(_group)
        input:
            lost=store_lost(_group),
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
            f"{shlex.quote(sys.executable)} -m fedbayes.cli track --params {shlex.quote(str(EFFECTIVE))}"
            " --name {params.name:q} --pairs {params.pairs:q} --figure {params.figure:q}"
            " --marker {output:q} > {log:q} 2>&1 && tail -n 1 {log:q}"  # a line a pair in the log, its sum here


# every table's runs in the MLflow store; at rehearsal scale the one import of every experiment
MLFLOW_GROUPS = [REHEARSAL_IMPORT] if stand_in_size(config) else list(config["tables"])


rule mlflow:
    input:
        [import_marker(g) for g in MLFLOW_GROUPS],
