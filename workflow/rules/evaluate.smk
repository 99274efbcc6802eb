# Metrics from saved predictive log-probabilities (a metric change never retrains), and the sweep
# selection: every grid point runs on the first seed, `selection` in params.yaml picks one.


# Inputs are the train job's committed outputs, wrapped in ancient(): a retrained run still re-evaluates
# (a job that reruns upstream always propagates), but a fresh clone or `dvc pull`, which gives files
# arbitrary timestamps (git writes run.json after metrics.json), never makes a committed metrics.json
# look stale; re-evaluating it there would fail, as predictions.npz is not committed.
rule evaluate:
    input:
        history=ancient(f"{RUN}/history.csv"),  # the train job's outputs; it also writes <run>/predictions.npz
        run=ancient(f"{RUN}/run.json"),
        code=fixed(code("eval")),
    output:
        f"{RUN}/metrics.json",
    params:
        code=code_hash(code("eval")),
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
    shell:
        "fedbayes evaluate '{params.out}'"


checkpoint select:
    input:  # ancient: as for evaluate, the metrics jobs' reruns propagate, clone timestamps do not
        metrics=lambda wc: [
            ancient(f"{run_dir(wc.experiment, wc.method, pt, selection(config, wc.experiment)['seed'])}/metrics.json")
            for pt in swept_points(config, wc.experiment, wc.method)
        ],
        source=lambda wc: [ancient(f"{RUNS}/{s}/{wc.method}/selected.json")
                           for s in [experiment(wc.experiment).get("selection_from")] if s],
        code=fixed(code("reports/selection.py", "reports/tables.py")),
    output:
        f"{RUNS}/{{experiment}}/{{method}}/selected.json",
    params:
        code=code_hash(code("reports/selection.py", "reports/tables.py")),
        grid=lambda wc: json.dumps(sweep_points(config, wc.experiment, wc.method)),
        rule=lambda wc: json.dumps(selection(config, wc.experiment), sort_keys=True),
    shell:
        cli("select") + " --experiment {wildcards.experiment} --method {wildcards.method} --out {output}"


def selections(wc):
    return [f"{RUNS}/{wc.experiment}/{m}/selected.json" for m in experiment(wc.experiment)["methods"]]


rule sweep_report:
    input:
        selections,
    output:
        f"{REPORTS}/sweeps/{{experiment}}.csv",
    shell:
        cli("sweep-report") + " --experiment {wildcards.experiment} --out {output}"


rule fedlap_sweep_report:  # the same report where the FedLap issue asks for it, beside the FedLap tables
    input:
        selections,
    output:
        f"{REPORTS}/fedlap/sweep_{{experiment}}.csv",
    shell:
        cli("sweep-report") + " --experiment {wildcards.experiment} --out {output}"
