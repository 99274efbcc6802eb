# MLflow import: not on a table's path (a table reads the run files, never the store), so a table is
# built without it. `snakemake --cores all mlflow_<table>` (the table's name, a slash as an underscore: mlflow_table1,
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
from fedbayes.tracking import REHEARSAL_IMPORT


# import group -> {experiment: [methods]}: each table's pairs; at rehearsal scale one group of every
# (experiment, method), those in no table too (the rehearsal's summary lists them all)
try:
    IMPORTS = plan.import_groups(config, REHEARSAL_IMPORT if stand_in_size(config) else None)
except ValueError as e:
    raise WorkflowError(str(e))

for _group, _pairs in IMPORTS.items():

    rule:
        conda:
            CONDA_ENV
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
            f"{shlex.quote(sys.executable)} -m fedbayes.cli track --params {shlex.quote(str(EFFECTIVE))}"
            " --name {params.name:q} --pairs {params.pairs:q} --figure {params.figure:q}"
            " --marker {output:q} > {log:q} 2>&1 && tail -n 1 {log:q}"  # a line a pair in the log, its sum here


# every table's runs in the MLflow store; at rehearsal scale the one import of every experiment
MLFLOW_GROUPS = [REHEARSAL_IMPORT] if stand_in_size(config) else list(config["tables"])


rule mlflow:
    input:
        [import_marker(g) for g in MLFLOW_GROUPS],
