# MLflow import, one job per run, serialised on the SQLite store by the `mlflow_db` resource
# (the default profile sets --resources mlflow_db=1). Markers live under work/, not results/.
# Every sweep point and every seed of the selected point is logged; tag selected=true|false.


rule mlflow_log:
    input:
        metrics=f"{RUN}/metrics.json",
        history=f"{RUN}/history.csv",
        selected=f"{RUNS}/{{experiment}}/{{method}}/selected.json",
        figure=partition_figure,
    output:
        f"{WORK}/mlflow/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.run",
    params:
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
    resources:
        mlflow_db=1,
    log:
        f"{WORK}/logs/mlflow/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:
        cli("track") + " --experiment {wildcards.experiment} --method {wildcards.method}"
        " --point '{wildcards.point}' --seed {wildcards.seed} --run-dir '{params.out}'"
        " --selected {input.selected} --partition-figure {input.figure} --marker '{output}' > '{log}' 2>&1"
