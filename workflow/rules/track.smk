# MLflow import, one job per run, serialised on the SQLite store by the `mlflow_db` resource
# (the default profile sets --resources mlflow_db=1). Markers live under work/, not results/.


rule mlflow_log:
    input:
        metrics=f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/metrics.json",
        history=f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/history.csv",
        figure=partition_figure,
    output:
        f"{WORK}/mlflow/{{experiment}}/{{method}}/seed{{seed}}.run",
    params:
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.seed),
    resources:
        mlflow_db=1,
    log:
        f"{WORK}/logs/mlflow/{{experiment}}/{{method}}/seed{{seed}}.log",
    shell:
        cli("track") + " --experiment {wildcards.experiment} --method {wildcards.method}"
        " --seed {wildcards.seed} --run-dir {params.out} --partition-figure {input.figure}"
        " --marker {output} > {log} 2>&1"
