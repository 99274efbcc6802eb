# MLflow import: one job per (experiment, method), importing every run of it (each sweep point on the
# selection's seeds, the selected point on every seed) in one process — MLflow's import costs seconds, so
# one process per run made the imports the largest part of a small DAG. Jobs are serialised on the
# SQLite store by the `mlflow_db` resource (the default profile sets --resources mlflow_db=1); the marker
# records the store and, per MLflow run, its id, key and content hash, and lives under work/, not results/.
# It is trusted only where that store holds those runs (fedbayes.tracking.marker_problems). Tags:
# selected=true|false, content_hash, import_id.


def method_runs(experiment, method):
    """(point, seed) of every run of (experiment, method) that is imported; waits for the selection."""
    point = selected_point(experiment, method)
    runs = {(point, s) for s in seeds(config, experiment, method)}
    runs |= {(pt, s) for pt in swept_points(config, experiment, method) for s in selection_seeds(config, experiment, method)}
    return sorted(runs, key=lambda r: (r[1], r[0]))


def store_lost(wc):
    """An import whose runs are not in the store as imported (it was deleted, runs were removed in the UI,
    MLFLOW_TRACKING_URI names another store or server) is redone: a marker naming why becomes an input
    (fedbayes.tracking.marker_problems)."""
    from fedbayes.tracking import marker_problems, tracking_uri

    return marker_input(f"{WORK}/damaged/mlflow/{wc.experiment}/{wc.method}.txt", "re-imported because ",
                        marker_problems(f"{WORK}/mlflow/{wc.experiment}/{wc.method}.runs", tracking_uri(config)))


rule mlflow_log:
    input:
        lost=store_lost,
        runs=lambda wc: [f"{run_dir(wc.experiment, wc.method, pt, s)}/{f}"
                         for pt, s in method_runs(wc.experiment, wc.method) for f in ("metrics.json", "history.csv")],
        selected=selected_file("{experiment}", "{method}"),
        figures=lambda wc: sorted({partition_figure_of(wc.experiment, s) for _, s in method_runs(wc.experiment, wc.method)}),
    output:
        f"{WORK}/mlflow/{{experiment}}/{{method}}.runs",
    params:
        runs=lambda wc: " ".join(shlex.join(["--run", pt, str(s), run_dir(wc.experiment, wc.method, pt, s),
                                             partition_figure_of(wc.experiment, s)])
                                 for pt, s in method_runs(wc.experiment, wc.method)),
    resources:
        mlflow_db=1,
    log:
        f"{WORK}/logs/mlflow/{{experiment}}/{{method}}.log",
    shell:
        cli("track") + " --experiment {wildcards.experiment} --method {wildcards.method} {params.runs}"
        " --selected {input.selected:q} --marker {output:q} > {log:q} 2>&1"
