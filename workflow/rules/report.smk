# Tables (ours vs published), their learning-curve figures and the sweep reports they rest on.
# One rule per table; each (experiment, method) of a table is its own input function, so Snakemake
# schedules every sweep selection (a checkpoint) of the table at once rather than one after another.
# An experiment whose data could not be obtained on this machine (the data checkpoint) contributes no
# inputs: its rows read "not run (data unavailable: ...)".


def selected_runs(experiment, method):
    """Input function: the runs of the selected point (all seeds) and the (experiment, method)'s MLflow
    import marker."""

    def inputs(wc):
        if not experiment_available(experiment):
            return []
        point = selected_point(experiment, method)
        runs = [run_dir(experiment, method, point, s) for s in seeds(config, experiment, method)]
        return ([f"{r}/metrics.json" for r in runs] + [f"{r}/history.csv" for r in runs]
                + [f"{WORK}/mlflow/{experiment}/{method}.runs"])

    return inputs


def table_status(experiments):
    """Input function: the data status of every dataset of the table's experiments."""
    return lambda wc: sorted({f"{WORK}/data/{d}.json" for e in experiments for d in experiment_datasets(e)})


def sweep_reports(table, experiments):
    """The sweep reports a table rests on: reports/sweeps/<exp>.csv, or reports/fedlap/sweep_<exp>.csv
    for the FedLap paper's tables."""
    where = f"{REPORTS}/fedlap/sweep_{{}}.csv" if table.startswith("fedlap/") else f"{REPORTS}/sweeps/{{}}.csv"
    return lambda wc: [where.format(e) for e in experiments if experiment_available(e)]


for _table, _spec in config["tables"].items():
    # a table's not_comparable experiments (no faithful substitute here) carry published numbers only
    _exps = comparable_experiments(_spec)
    # the (experiment, method) pairs with runs: a param, so adding a method to an experiment rebuilds
    # the table (the profile's rerun-triggers leave out "input")
    _pairs = {e: [m for m in dict.fromkeys(split_variant(m)[0] for m in _spec["methods"])
                  if m in experiment(e)["methods"]] for e in _exps}

    rule:
        name:
            f"table_{_table.replace('/', '_')}"
        input:
            *[selected_runs(e, m) for e, ms in _pairs.items() for m in ms],  # bayesadmm@mean → bayesadmm
            status=table_status(_exps),
            sweeps=sweep_reports(_table, _exps),
            notes=[_spec["notes"]] if "notes" in _spec else [],
            code=fixed(code("reports", "papers")),
        output:
            csv=f"{REPORTS}/{_table}.csv",
            md=f"{REPORTS}/{_table}.md",
            figures=[f"{REPORTS}/figures/{f}" for f in table_figures(_table, _spec)],
        params:
            spec=json.dumps(_spec, sort_keys=True),
            std_ddof=config.get("std_ddof", 1),
            runs=json.dumps(_pairs, sort_keys=True),
            code=code_hash(code("reports", "papers")),
            name=_table,
        shell:
            cli("table") + " {params.name} --out {output.csv}"


TOY_FIGURES = {"fedep/table4": ["fedep_fig1.png", "fedep_fig4_left.png"],  # written beside each toy table
               "bayesadmm/figures": ["bayesadmm_fig3b.png", "bayesadmm_fig4.png", "bayesadmm_fig3a.png"]}

for _toy in config.get("toys", {}):

    rule:
        name:
            f"toy_{_toy.replace('/', '_')}"
        input:
            code=fixed(code("toys", "reports/toys.py", "papers")),
            data=fixed([f"{WORK}/data/mnist5k.json"] if _toy.startswith("bayesadmm/") else []),  # fetched mnist5k
        output:
            csv=f"{REPORTS}/{_toy}.csv",
            md=f"{REPORTS}/{_toy}.md",
            figures=[f"{REPORTS}/figures/{f}" for f in TOY_FIGURES.get(_toy, [])],
        params:
            spec=json.dumps(config["toys"][_toy], sort_keys=True),
            code=code_hash(code("toys", "reports/toys.py", "papers")),
            name=_toy,
        shell:
            cli("toy") + " {params.name} --out {output.csv}"


# The reproduction scorecard: every table's published cells counted by verdict, the causes of the cells
# outside tolerance (params `scorecard.causes`) and the papers' claims (papers/<paper>.yaml) checked.
_SC = config.get("scorecard", {})

rule scorecard:
    input:
        tables=[f"{REPORTS}/{t}.csv" for t in config["tables"]],
        causes=[_SC["causes"]] if _SC.get("causes") else [],
        alternates=[a["csv"] for a in _SC.get("alternates", [])],
        code=fixed(code("reports/scorecard.py", "papers")),
    output:
        f"{REPORTS}/README.md",
    params:
        spec=json.dumps(_SC, sort_keys=True),
        code=code_hash(code("reports/scorecard.py", "papers")),
    shell:
        cli("scorecard") + " --out {output}"
