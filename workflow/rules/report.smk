# Tables (ours vs published), their learning-curve figures and the sweep reports of their experiments.
# A table asks for exactly the runs it shows: its methods on its experiments (each method's own sweep,
# which its selection reads, and the selected point on every seed), never another method of those
# experiments. The sweep reports (every method of an experiment: evaluate.smk) are their own targets,
# `snakemake sweeps` (part of the default target), not a table's inputs. One rule per table; each (experiment, method) of a table is its own input function, so Snakemake
# schedules every sweep selection (a checkpoint) of the table at once rather than one after another.
# An experiment whose data could not be obtained on this machine (the data checkpoint) contributes no
# inputs: its rows read "not run (data unavailable: ...)".
#
# `snakemake --report report.html` is the browsable view of the results: every table (CSV and rendered
# .md), figure, sweep report and notes file is marked with report(), in a category per paper (its title
# from src/fedbayes/papers/<paper>.yaml) and a subcategory per table; captions in workflow/report/.


def in_report(path, name, caption, subcategory=None):  # marked for `snakemake --report` once built (a report runs nothing)
    return report(path, caption=f"../report/{caption}.rst", category=plan.report_category(name, codes.ROOT / "papers"), subcategory=subcategory or name, labels={"file": Path(path).name, "table": name}) if Path(path).exists() else path


def missing_marker(experiment, method, files, table_csv):  # a run file or selection deleted behind an existing table
    return marker_input(f"{WORK}/missing/{experiment}/{method}.txt", "rebuilt because of: ", markers.missing(files), [table_csv])


def selected_runs(experiment, method, table_csv):
    """Input function: the runs of the selected point (all seeds) and the method's numerics gate where due.
    Where a selection or a data status does not exist yet it is asked for as a plain input with a marker
    (Snakemake 9 checks neither the params nor the input mtimes of a job that still waits on a
    checkpoint, and would say "Nothing to be done"); when its job has run, Snakemake asks again."""
    def inputs(wc):
        if (available := experiment_available(experiment)) is None:
            return plan.unrecorded(WORK, experiment_datasets(experiment)) + marker_input(f"{WORK}/missing/data/{experiment}.txt", "rebuilt because of: ", plan.unrecorded(WORK, experiment_datasets(experiment)), [table_csv])
        if not available:
            return []
        if not Path(selected := selected_file(experiment, method)).exists():
            return [selected] + missing_marker(experiment, method, [selected], table_csv)
        files, kept = plan.run_inputs([run_dir(experiment, method, selected_point(experiment, method), s) for s in seeds(config, experiment, method)])
        return files + missing_marker(experiment, method, kept, table_csv) + gate_input(method)

    return inputs


def table_status(experiments):  # the data status of every dataset of the table's experiments
    return lambda wc: sorted({plan.status_file(WORK, d) for e in experiments for d in experiment_datasets(e)})


def sweep_reports(table, spec, experiments):  # a table's sweep reports, or the data status not recorded yet
    return lambda wc: [f for e in experiments for f in ([plan.sweep_report(REPORTS, table, spec, e)] if experiment_available(e) else plan.unrecorded(WORK, experiment_datasets(e)))]


TABLE_PAIRS = {}  # table -> {experiment: [methods with runs]} (the headline rule reads the same runs)

for _table, _spec in config["tables"].items():
    # the (experiment, method) pairs with runs: a param, so adding a method to an experiment rebuilds
    # the table (the profile's rerun-triggers leave out "input")
    _pairs = plan.table_pairs(config, _spec)
    _exps = list(_pairs)
    TABLE_PAIRS[_table] = _pairs

    rule:
        name:
            plan.job_rule("table", _table)
        input:
            *[selected_runs(e, m, f"{REPORTS}/{_table}.csv") for e, ms in _pairs.items() for m in ms],  # bayesadmm@mean → bayesadmm
            status=table_status(_exps),
            notes=[in_report(_spec["notes"], _table, "notes", "notes")] if "notes" in _spec else [],
            outputs=missing_outputs(f"table/{_table}", [f"{REPORTS}/{_table}.csv", f"{REPORTS}/{_table}.md",
                                    *[f"{REPORTS}/figures/{f}" for f in table_figures(_table, _spec)]],
                                    f"{REPORTS}/{_table}.csv"),
            code=fixed(CODE["table"]),
        output:
            csv=in_report(f"{REPORTS}/{_table}.csv", _table, "table"),
            md=in_report(f"{REPORTS}/{_table}.md", _table, "table"),
            figures=[in_report(f"{REPORTS}/figures/{f}", _table, "figure") for f in table_figures(_table, _spec)],
        params:
            spec=json.dumps({k: v for k, v in _spec.items() if k != "sweeps"}, sort_keys=True),  # where, not what
            std_ddof=config.get("std_ddof", 1),
            runs=json.dumps(_pairs, sort_keys=True),
            code=CODE_HASH["table"],
            name=_table,
        log:
            f"{WORK}/logs/table/{_table}.log",
        shell:  # its one-line summary on the terminal too
            cli("table") + " {params.name:q} --out {output.csv:q} 2>&1 | tee {log:q}"


def all_sweep_reports(wc):  # every table's experiments' sweep reports (each trains every method of its experiment)
    return sorted({f for t, s in config["tables"].items() for f in sweep_reports(t, s, list(TABLE_PAIRS[t]))(wc)})


rule sweeps:
    input:
        all_sweep_reports,


for _toy in config.get("toys", {}):

    rule:
        name:
            plan.job_rule("toy", _toy)
        input:
            code=fixed(CODE["toy"]),
            # the datasets it reads, fetched: a status not recorded yet only where the toy is built anyway (the
            # data job it would wait on makes an existing toy rerun; a toy rebuilt for its code reads its data itself)
            data=lambda wc, toy=_toy: fixed([f for f in map(lambda d: plan.status_file(WORK, d), TOYS[toy].datasets) if Path(f).exists() or not Path(f"{REPORTS}/{toy}.csv").exists()]),
        output:
            csv=in_report(f"{REPORTS}/{_toy}.csv", _toy, "toy"),
            md=in_report(f"{REPORTS}/{_toy}.md", _toy, "toy"),
            figures=[in_report(f"{REPORTS}/figures/{f}", _toy, "toy") for f in TOYS[_toy].figures],  # beside it
        params:
            spec=json.dumps(config["toys"][_toy], sort_keys=True),
            code=CODE_HASH["toy"],
            name=_toy,
        log:
            f"{WORK}/logs/toy/{_toy}.log",
        shell:
            cli("toy") + " {params.name:q} --out {output.csv:q} 2>&1 | tee {log:q}"


# The reproduction scorecard: every table's published cells counted by verdict, the causes of the cells
# outside tolerance (params `scorecard.causes`) and the papers' claims (papers/<paper>.yaml) checked.
_SC = config.get("scorecard", {})
SCORECARD = f"{REPORTS}/README.md"

rule scorecard:
    input:
        tables=[f"{REPORTS}/{t}.csv" for t in config["tables"]],
        toys=[f"{REPORTS}/{t}.csv" for t in config.get("toys", {})],  # their published cells and figure claims
        causes=[_SC["causes"]] if _SC.get("causes") else [],
        alternates=[a["csv"] for a in _SC.get("alternates", [])],
        code=fixed(CODE["scorecard"]),
    output:  # in Snakemake's report, its own category (once built: see in_report)
        report(SCORECARD, caption="../report/scorecard.rst", category="Reproduction scorecard",
               labels={"file": "README.md"}) if Path(SCORECARD).exists() else SCORECARD,
    params:
        spec=json.dumps(_SC, sort_keys=True),
        code=CODE_HASH["scorecard"],
    log:
        f"{WORK}/logs/scorecard.log",
    shell:
        cli("scorecard") + " --out {output:q} 2>&1 | tee {log:q}"

# DVC's view of the headline table (params.yaml `headline`; dvc.yaml `metrics:` and `plots:`): a flat
# JSON of our last-round numbers per experiment × method (<reports>/metrics/<experiment>/<method>.json:
# `dvc metrics show` prints a row each), and the mean learning curves as CSVs. Written from the table's
# CSV and the histories of the runs the table read (its inputs, so they exist).
HEADLINE = config.get("headline")  # optional: a params.yaml without one has no DVC metrics view


if HEADLINE:

    rule headline:
        input:
            table=f"{REPORTS}/{HEADLINE['table']}.csv",
            outputs=missing_outputs("headline", [str(f) for f in headline_plot_files(config)], f"{REPORTS}/metrics"),
            code=fixed(CODE["headline"]),
        output:
            metrics=directory(f"{REPORTS}/metrics"),
            plots=[in_report(str(f), HEADLINE["table"], "headline", "DVC metrics and plots")
                   for f in headline_plot_files(config)],
        params:
            spec=json.dumps(HEADLINE, sort_keys=True),
            code=CODE_HASH["headline"],
        log:
            f"{WORK}/logs/headline.log",
        shell:
            cli("headline") + " {input.table:q} --out {output.metrics:q} 2>&1 | tee {log:q}"


# The rehearsal's summary (scale rehearsal): every experiment × method with what ran on stand-in data, after
# every table (whose inputs are the runs and their metrics) is built and every experiment ×
# method is imported into MLflow, those in no table too (fmnist-labeldir0.01-k20, left out of the FOLA
# tables for its cost; the -r20 grid search another experiment selects on): the rehearsal runs them all.
if stand_in_size(config):

    rule rehearsal_summary:
        input:
            tables=[f"{REPORTS}/{t}.csv" for t in config["tables"]],
            tracked=import_marker(REHEARSAL_IMPORT),
            code=fixed(CODE["rehearsal_summary"]),
        output:
            f"{REPORTS}/summary.md",
        params:
            code=CODE_HASH["rehearsal_summary"],
        log:
            f"{WORK}/logs/rehearsal_summary.log",
        shell:
            cli("rehearsal-summary") + " --out {output:q} 2>&1 | tee {log:q}"
