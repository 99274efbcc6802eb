# MLflow import (`snakemake --cores all mlflow`, also part of the default target): not on a table's path
# (a table reads the run files, never the store), so a table is built without it. One job per experiment, importing every run of its (experiment, method) pairs in one
# process (python -m fedbayes.tracking): MLflow's import costs seconds, so a process per pair made the
# imports most of a small DAG's time. A run the store already holds with the same content and selected
# tag is not imported again. Jobs are serialised on the SQLite store by the `mlflow_db` resource (the
# default profile sets --resources mlflow_db=1) and by a file lock (fedbayes.tracking.store_lock). Each
# pair's marker records the store and, per MLflow run, its id, key and content hash, and lives under
# work/, not results/. It is trusted only where that store holds those runs
# (fedbayes.tracking.marker_problems). Tags: selected=true|false, content_hash, import_id.
from fedbayes.tracking import imported_runs


def method_runs(experiment, method):
    """(point, seed) of every run of (experiment, method) that is imported; waits for the selection."""
    return imported_runs(config, experiment, method, selected_point(experiment, method))


def import_marker(experiment, method):
    return f"{WORK}/mlflow/{experiment}/{method}.runs"


def store_lost(experiment, methods):
    """Input function: an import whose runs are not in the store as imported (it was deleted, runs were
    removed in the UI, MLFLOW_TRACKING_URI names another store or server) is redone: a marker naming why
    becomes an input (fedbayes.tracking.marker_problems)."""

    def inputs(wc):
        from fedbayes.tracking import marker_problems, tracking_uri

        uri = tracking_uri(config)
        why = [f"{m}: {w}" for m in methods for w in marker_problems(import_marker(experiment, m), uri)]
        return marker_input(f"{WORK}/damaged/mlflow/{experiment}.txt", "re-imported because ", why)

    return inputs


def imported_files(experiment, methods):
    def inputs(wc):
        return [f"{run_dir(experiment, m, pt, s)}/{f}" for m in methods for pt, s in method_runs(experiment, m)
                for f in ("metrics.json", "history.csv")]

    return inputs


def imported_figures(experiment, methods):
    return lambda wc: sorted({partition_figure_of(experiment, s) for m in methods for _, s in method_runs(experiment, m)})


# experiment -> its methods whose runs are imported: every table's pairs; at rehearsal scale every
# (experiment, method), those in no table too (the rehearsal's summary lists them all)
IMPORTS = {}
for _spec in config["tables"].values():
    for _e, _ms in table_pairs(_spec).items():
        IMPORTS.setdefault(_e, {}).update(dict.fromkeys(_ms))
if stand_in_size(config):
    for _e in config["experiments"]:
        IMPORTS.setdefault(_e, {}).update(dict.fromkeys(experiment(_e)["methods"]))

for _e, _ms in IMPORTS.items():
    _ms = list(_ms)

    rule:
        name:
            f"mlflow_log_{re.sub(r'[^A-Za-z0-9]', '_', _e)}"
        input:
            lost=store_lost(_e, _ms),
            runs=imported_files(_e, _ms),
            selected=[f"{RUNS}/{_e}/{m}/selected.json" for m in _ms],
            figures=imported_figures(_e, _ms),
        output:
            [import_marker(_e, m) for m in _ms],
        params:
            runs=lambda wc, e=_e, ms=_ms: json.dumps({m: method_runs(e, m) for m in ms}),
            methods=_ms,
            experiment=_e,
            figure=lambda wc: partition_figure_of("{experiment}", "{seed}"),  # filled in by the job
            marker=lambda wc, e=_e: import_marker(e, "{method}"),
        resources:
            mlflow_db=1,
        log:
            f"{WORK}/logs/mlflow/{_e}.log",
        shell:
            f"{shlex.quote(sys.executable)} -m fedbayes.tracking --params {shlex.quote(str(EFFECTIVE))}"
            " --experiment {params.experiment:q} --methods {params.methods:q} --figure {params.figure:q}"
            " --marker {params.marker:q} > {log:q} 2>&1 && tail -n 1 {log:q}"  # a line a pair in the log, its sum here


def all_imports(wc=None):
    """Every table's pairs' import markers, of the experiments whose data this machine has (as the tables)."""
    return [import_marker(e, m) for e, ms in IMPORTS.items() if experiment_available(e) for m in ms]


rule mlflow:  # every run of every table's (experiment, method) pairs in the MLflow store
    input:
        all_imports,
