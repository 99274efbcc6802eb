# Metrics from saved predictive log-probabilities (a metric change never retrains), and the sweep
# selection: every grid point runs on the first seed, `selection` in params.yaml picks one.
import functools


# Inputs are the train job's committed outputs. run.json is ancient(): git checks files out in path
# order, so in a fresh clone run.json is newer than metrics.json and by mtime every committed run
# would look stale (re-evaluating fails there: predictions.npz is not committed). history.csv is not
# ancient: it sorts before metrics.json, so a clone never makes it newer, and a retrained run (a new
# history.csv) re-evaluates — Snakemake propagates a rerun only through inputs that are not all ancient.


@functools.cache
def metric_code():
    """fedbayes.eval.evaluate.metrics_fingerprint of the code at hand (numpy and scipy: 0.3 s of CPU, once a
    process, only where a finished run's metrics.json is met)."""
    from fedbayes.eval.evaluate import metrics_fingerprint

    return metrics_fingerprint()


def stale_metrics(wc):
    """A metrics.json to compute again, though its run has not changed (metrics.json read once):

    - damaged or another run's (fedbayes.runfiles.metrics_problems): rebuilt, a marker naming the problem
      as an input, as for a changed run (train.smk);
    - computed with other metric definitions than the code's (its ``metric_code``, else the definitions
      before it was recorded): re-evaluated, a marker naming the change as an input. So a metric
      definition change re-evaluates every run also where Snakemake has no record of the evaluate job's
      code (a fresh clone, the committed runs), and a refactor of the metric code re-evaluates nothing
      (the fingerprint is of numbers). A committed run has no predictions.npz: its evaluate job then
      stops, naming the remedy (retrain it), instead of leaving its cells on the old definition."""
    from fedbayes.eval.evaluate import FROZEN_METRIC_CODE
    from fedbayes.runfiles import metrics_problems

    d = Path(run_dir(wc.experiment, wc.method, wc.point, wc.seed))
    problems, metrics = metrics_problems(d)
    if problems:
        return marker_input(f"{WORK}/damaged/{wc.experiment}/{wc.method}/{wc.point}/seed{wc.seed}.metrics.txt",
                            "rebuilt because ", problems, [d / "metrics.json"])
    if metrics is None:
        return []   # none yet, or its run is not finished: the job runs for its output
    then, now = metrics.get("metric_code", FROZEN_METRIC_CODE), metric_code()
    return marker_input(f"{WORK}/changed/{wc.experiment}/{wc.method}/{wc.point}/seed{wc.seed}.metrics.txt",
                        "re-evaluated because ", [f"the metric definitions changed ({then} -> {now})"] if then != now else [],
                        [d / "metrics.json"])


rule evaluate:
    input:
        history=f"{RUN}/history.csv",  # the train job's outputs; it also writes <run>/predictions.npz
        run=ancient(f"{RUN}/run.json"),
        code=fixed(code("eval")),
        stale=stale_metrics,
    output:
        f"{RUN}/metrics.json",
    params:
        code=code_hash(code("eval")),
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
    log:
        f"{WORK}/logs/evaluate/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:  # quiet on the terminal (a job a run): a failure's log is shown (profile: show-failed-logs)
        f"{FEDBAYES} evaluate {{params.out:q}} > {{log:q}} 2>&1"


def damaged_selection(wc):
    """A damaged selected.json (fedbayes.runfiles.selection_problems) is made again: a marker naming the
    damage becomes the select job's input (the tables and imports waiting for it: selected_point)."""
    from fedbayes.runfiles import selection_problems

    f = selected_file(wc.experiment, wc.method)
    return marker_input(f"{WORK}/damaged/{wc.experiment}/{wc.method}.selected.txt", "selected again because ",
                        selection_problems(f)[0], [f])


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
        damaged=damaged_selection,
    output:
        selected_file("{experiment}", "{method}"),
    params:
        code=code_hash(code("reports/selection.py", "reports/cells.py", "runpaths.py", "runfiles.py")),
        grid=lambda wc: json.dumps(sweep_points(config, wc.experiment, wc.method)),
        rule=lambda wc: json.dumps(selection(config, wc.experiment), sort_keys=True),
        source=lambda wc: [recorded_point(f) or "" for f in selection_source(wc)],
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
