# Metrics from saved predictive log-probabilities (a metric change never retrains), and the sweep
# selection: every grid point runs on the first seed, `selection` in params.yaml picks one.
#
# Inputs are the train job's committed outputs. run.json is ancient(): git checks files out in path
# order, so in a fresh clone run.json is newer than metrics.json and by mtime every committed run
# would look stale (re-evaluating fails there: predictions.npz is not committed). history.csv is not
# ancient: it sorts before metrics.json, so a clone never makes it newer, and a retrained run (a new
# history.csv) re-evaluates — Snakemake propagates a rerun only through inputs that are not all ancient.


rule evaluate:
    conda:
        CONDA_ENV
    input:
        history=f"{RUN}/history.csv",  # the train job's outputs; it also writes <run>/predictions.npz
        run=ancient(f"{RUN}/run.json"),
        code=fixed(CODE["evaluate"]),
        stale=stale_metrics,
    output:
        # update: Snakemake keeps the file while the job runs (and restores it if the job fails), so that
        # `fedbayes evaluate` computes only the metrics it lacks or holds under another definition and
        # keeps the others' values (fedbayes.eval.fingerprint); training deletes it, so a retrained run
        # is evaluated whole
        update(f"{RUN}/metrics.json"),
    params:
        code=CODE_HASH["evaluate"],
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
    log:
        f"{WORK}/logs/evaluate/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:  # quiet on the terminal (a job a run): a failure's log is shown (profile: show-failed-logs)
        f"{FEDBAYES} evaluate {{params.out:q}} > {{log:q}} 2>&1"


checkpoint select:
    conda:
        CONDA_ENV
    input:
        metrics=lambda wc: [f"{run_dir(wc.experiment, wc.method, pt, s)}/metrics.json" for pt in swept_points(config, wc.experiment, wc.method)
                            for s in selection_seeds(config, wc.experiment, wc.method)],
        # ancient: in a clone the other experiment's file may be checked out later; a changed selection
        # there still reaches this job through params.source (the point it selected)
        source=lambda wc: [ancient(f) for f in selection_source(wc)],
        code=fixed(CODE["select"]),
        damaged=damaged_selection,
    output:
        selected_file("{experiment}", "{method}"),
    params:
        code=CODE_HASH["select"],
        grid=lambda wc: json.dumps(sweep_points(config, wc.experiment, wc.method)),
        rule=lambda wc: json.dumps(selection(config, wc.experiment), sort_keys=True),
        source=lambda wc: [staleness.recorded_point(f) or "" for f in selection_source(wc)],
    log:
        f"{WORK}/logs/select/{{experiment}}/{{method}}.log",
    shell:  # its one-line pick on the terminal too
        cli("select") + " --experiment {wildcards.experiment} --method {wildcards.method} --out {output:q} 2>&1 | tee {log:q}"


rule sweep_report:
    conda:
        CONDA_ENV
    input:
        selections,
    output:
        report(f"{REPORTS}/sweeps/{{experiment}}.csv", caption="../report/sweep.rst", category="Sweeps (selection)",
               subcategory="{experiment}", labels={"file": "{experiment}.csv"}),
    log:
        f"{WORK}/logs/sweep_report/{{experiment}}.log",
    shell:
        cli("sweep-report") + " --experiment {wildcards.experiment} --out {output:q} > {log:q} 2>&1"


SWEEP_FOLDERS = sorted({f for t, s in config["tables"].items() if (f := plan.sweeps_beside(t, s))})

if SWEEP_FOLDERS:

    rule sweep_report_beside:  # the same report beside the tables that ask for it (``sweeps: beside``)
        conda:
            CONDA_ENV
        input:
            selections,
        output:
            report(f"{REPORTS}/{{folder}}/sweep_{{experiment}}.csv", caption="../report/sweep.rst",
                   category="Sweeps (selection)", subcategory="{experiment}",
                   labels={"file": "{folder}/sweep_{experiment}.csv"}),
        wildcard_constraints:
            folder="|".join(re.escape(f) for f in SWEEP_FOLDERS),
        log:
            f"{WORK}/logs/sweep_report/{{folder}}/{{experiment}}.log",
        shell:
            cli("sweep-report") + " --experiment {wildcards.experiment} --out {output:q} > {log:q} 2>&1"
