# Metrics from saved predictive log-probabilities (a metric change never retrains), and the sweep
# selection: every grid point runs on the first seed, `selection` in params.yaml picks one.


# Inputs are the train job's committed outputs. run.json is ancient(): git checks files out in path
# order, so in a fresh clone run.json is newer than metrics.json and by mtime every committed run
# would look stale (re-evaluating fails there: predictions.npz is not committed). history.csv is not
# ancient: it sorts before metrics.json, so a clone never makes it newer, and a retrained run (a new
# history.csv) re-evaluates — Snakemake propagates a rerun only through inputs that are not all ancient.
def damaged_metrics(wc):
    """A metrics.json that is damaged or another run's (fedbayes.runfiles.metrics_problems) is rebuilt: a
    marker naming the problem (new mtime) becomes an input, as for a changed run (train.smk)."""
    from fedbayes.runfiles import metrics_problems

    return marker_input(f"{WORK}/damaged/{wc.experiment}/{wc.method}/{wc.point}/seed{wc.seed}.metrics.txt",
                        "rebuilt because ", metrics_problems(run_dir(wc.experiment, wc.method, wc.point, wc.seed)))


_METRIC_CODE = {}   # the metric definitions' fingerprint, computed once a process (eval.evaluate)


def metric_code():
    """fedbayes.eval.evaluate.metrics_fingerprint of the code at hand, remembered in work/metric_code.json
    by the eval sources' hash (computed again only when they change: numpy and scipy, a second)."""
    if "now" not in _METRIC_CODE:
        record, src = Path(f"{WORK}/metric_code.json"), code_hash(code("eval"))
        try:
            rec = json.loads(record.read_text())
        except (OSError, ValueError):
            rec = {}
        if rec.get("sources") != src:
            from fedbayes.eval.evaluate import metrics_fingerprint

            rec = {"sources": src, "fingerprint": metrics_fingerprint()}
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(rec) + "\n")
        _METRIC_CODE["now"] = rec["fingerprint"]
    return _METRIC_CODE["now"]


def changed_metrics(wc):
    """A metrics.json computed with other metric definitions than the code's (its ``metric_code``, else the
    definitions before it was recorded) is re-evaluated: a marker naming the change becomes an input. So a
    metric definition change re-evaluates every run also where Snakemake has no record of the evaluate
    job's code (a fresh clone, the committed runs), and a refactor of the metric code re-evaluates nothing
    (the fingerprint is of numbers). A committed run has no predictions.npz: its evaluate job then stops,
    naming the remedy (retrain it), instead of leaving its cells on the old definition."""
    from fedbayes.eval.evaluate import FROZEN_METRIC_CODE

    d = Path(run_dir(wc.experiment, wc.method, wc.point, wc.seed))
    try:
        then = json.loads((d / "metrics.json").read_text()).get("metric_code", FROZEN_METRIC_CODE)
    except (OSError, ValueError, AttributeError):
        return []   # none yet (the job runs for its output) or damaged (damaged_metrics)
    now = metric_code()
    return marker_input(f"{WORK}/changed/{wc.experiment}/{wc.method}/{wc.point}/seed{wc.seed}.metrics.txt",
                        "re-evaluated because ", [f"the metric definitions changed ({then} -> {now})"] if then != now else [])


rule evaluate:
    input:
        history=f"{RUN}/history.csv",  # the train job's outputs; it also writes <run>/predictions.npz
        run=ancient(f"{RUN}/run.json"),
        code=fixed(code("eval")),
        damaged=damaged_metrics,
        metric_code=changed_metrics,
    output:
        f"{RUN}/metrics.json",
    params:
        code=code_hash(code("eval")),
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
    log:
        f"{WORK}/logs/evaluate/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:  # quiet on the terminal (a job a run): a failure's log is shown (profile: show-failed-logs)
        f"{FEDBAYES} evaluate {{params.out:q}} > {{log:q}} 2>&1"


def selection_source(wc):
    """The selected.json of the experiment this one takes its selection from (selection_from), if any."""
    return [selected_file(s, wc.method) for s in [experiment(wc.experiment).get("selection_from")] if s]


checkpoint select:
    input:
        metrics=lambda wc: [
            f"{run_dir(wc.experiment, wc.method, pt, s)}/metrics.json"
            for pt in swept_points(config, wc.experiment, wc.method)
            for s in selection_seeds(config, wc.experiment, wc.method)
        ],
        # ancient: in a clone the other experiment's file may be checked out later; a changed selection
        # there still reaches this job through params.source (the point it selected)
        source=lambda wc: [ancient(f) for f in selection_source(wc)],
        code=fixed(code("reports/selection.py", "reports/cells.py", "runpaths.py", "runfiles.py")),
    output:
        selected_file("{experiment}", "{method}"),
    params:
        code=code_hash(code("reports/selection.py", "reports/cells.py", "runpaths.py", "runfiles.py")),
        grid=lambda wc: json.dumps(sweep_points(config, wc.experiment, wc.method)),
        rule=lambda wc: json.dumps(selection(config, wc.experiment), sort_keys=True),
        source=lambda wc: [json.loads(Path(f).read_text())["point"] if Path(f).exists() else "" for f in selection_source(wc)],
    log:
        f"{WORK}/logs/select/{{experiment}}/{{method}}.log",
    shell:  # its one-line pick on the terminal too
        cli("select") + " --experiment {wildcards.experiment} --method {wildcards.method} --out {output:q} 2>&1 | tee {log:q}"


def selections(wc):
    return [selected_file(wc.experiment, m) for m in experiment(wc.experiment)["methods"]]


rule sweep_report:
    input:
        selections,
    output:
        report(f"{REPORTS}/sweeps/{{experiment}}.csv", caption="../report/sweep.rst", category="Sweeps (selection)",
               subcategory="{experiment}", labels={"file": "{experiment}.csv"}),
    log:
        f"{WORK}/logs/sweep_report/{{experiment}}.log",
    shell:
        cli("sweep-report") + " --experiment {wildcards.experiment} --out {output:q} > {log:q} 2>&1"


def sweeps_beside(table, spec):
    """The folder under the reports where a table with ``sweeps: beside`` keeps its sweep reports (its
    own folder), else None."""
    return (table.rpartition("/")[0] or None) if spec.get("sweeps") == "beside" else None


SWEEP_FOLDERS = sorted({f for t, s in config["tables"].items() if (f := sweeps_beside(t, s))})

if SWEEP_FOLDERS:

    rule sweep_report_beside:  # the same report beside the tables that ask for it (``sweeps: beside``)
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
