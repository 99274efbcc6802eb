# Tables (ours vs published), their learning-curve figures and the sweep reports of their experiments.
# A table asks for exactly the runs it shows: its methods on its experiments (each method's own sweep,
# which its selection reads, and the selected point on every seed), never another method of those
# experiments. The sweep reports (every method of an experiment: evaluate.smk) are their own targets,
# `snakemake sweeps` (part of the default target), not a table's inputs. One rule per table; each (experiment, method) of a table is its own input function, so Snakemake
# schedules every sweep selection (a checkpoint) of the table at once rather than one after another.
# An experiment whose data could not be obtained on this machine (the data checkpoint) contributes no
# inputs: its rows read "not run (data unavailable: ...)".
#
# `snakemake --report report.html` is the browsable view of the results: every figure, sweep report and
# notes file is marked with report() (tables as rendered pages: report_pages.smk), in a category per paper (its title
# from papers/<paper>/published.yaml) and a subcategory per table; captions in workflow/report/.


TABLE_PAIRS = {}  # table -> {experiment: [methods with runs]} (the headline rule reads the same runs)

for _table, _spec in config["tables"].items():
    # the (experiment, method) pairs with runs: a param, so adding a method to an experiment rebuilds
    # the table (the profile's rerun-triggers leave out "input")
    _pairs = plan.table_pairs(config, _spec)
    _exps = list(_pairs)
    TABLE_PAIRS[_table] = _pairs

    rule:
        conda:
            CONDA_ENV
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
            csv=f"{REPORTS}/{_table}.csv",  # in the report as rendered pages (report_pages.smk)
            md=f"{REPORTS}/{_table}.md",
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


rule sweeps:
    input:
        all_sweep_reports,


for _toy in config.get("toys", {}):

    rule:
        conda:
            CONDA_ENV
        name:
            plan.job_rule("toy", _toy)
        input:
            code=fixed(CODE["toy"]),
            # the datasets it reads, fetched: a status not recorded yet only where the toy is built anyway (the
            # data job it would wait on makes an existing toy rerun; a toy rebuilt for its code reads its data itself)
            data=lambda wc, toy=_toy: fixed([f for f in map(lambda d: plan.status_file(WORK, d), TOYS[toy].datasets) if Path(f).exists() or not Path(f"{REPORTS}/{toy}.csv").exists()]),
        output:
            csv=f"{REPORTS}/{_toy}.csv",  # in the report as rendered pages (report_pages.smk)
            md=f"{REPORTS}/{_toy}.md",
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
# outside tolerance (params `scorecard.causes`, then papers/<paper>/causes.yaml: in the scorecard's code)
# and the papers' claims (papers/<paper>/published.yaml) checked.
_SC = config.get("scorecard", {})
SCORECARD = f"{REPORTS}/README.md"

rule scorecard:
    conda:
        CONDA_ENV
    input:
        tables=[f"{REPORTS}/{t}.csv" for t in config["tables"]],
        toys=[f"{REPORTS}/{t}.csv" for t in config.get("toys", {})],  # their published cells and figure claims
        causes=[_SC["causes"]] if _SC.get("causes") else [],
        alternates=[a["csv"] for a in _SC.get("alternates", [])],
        code=fixed(CODE["scorecard"]),
    output:  # in Snakemake's report as a rendered page, the first category (report_pages.smk)
        SCORECARD,
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
        conda:
            CONDA_ENV
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
        conda:
            CONDA_ENV
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
