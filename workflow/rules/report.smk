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
# from src/fedbayes/papers/<paper>.yaml) and a subcategory per table; captions in workflow/report/.


def report_category(name):
    """The report category of a table or toy: its paper's title, or "Headline benchmark" for table1."""
    import fedbayes

    if "/" not in name:
        return "Headline benchmark"
    paper = name.split("/")[0]
    f = Path(fedbayes.__file__).parent / "papers" / f"{paper}.yaml"
    return (yaml.safe_load(f.read_text()) or {}).get("title", paper) if f.exists() else paper


def in_report(path, name, caption, subcategory=None):
    """``path`` marked for Snakemake's report, under the paper of table ``name`` — if it exists. The
    report is a separate invocation that runs nothing (`snakemake --report` after the build): it lists
    what has been built, and an output not built yet (a figure added since the last table build, a table
    whose runs are still training) is left out instead of failing the whole report."""
    if not Path(path).exists():
        return path
    return report(path, caption=f"../report/{caption}.rst", category=report_category(name),
                  subcategory=subcategory or name, labels={"file": Path(path).name, "table": name})



def missing_marker(experiment, method, files, table_csv):
    """A run file or selection deleted behind an existing table (or a selection not made yet): Snakemake 9
    does not rerun an existing table for an input that is missing, nor look behind one whose inputs hang
    on a checkpoint (the sweep selection), and would say "Nothing to be done". A marker naming what is
    missing becomes an input, so the table reruns and the jobs that write the missing files run."""
    missing = [f for f in files if not Path(f).exists()]
    return marker_input(f"{WORK}/missing/{experiment}/{method}.txt", "rebuilt because of: ", missing, [table_csv])


def selected_runs(experiment, method, table_csv):
    """Input function: the runs of the selected point (all seeds). (The MLflow import is not on a table's
    path: the table reads the run files; `snakemake mlflow` imports, workflow/rules/track.smk.)

    A pair not selected yet (a method or experiment new to the table, or its selected.json deleted) asks
    for its selected.json as a plain input, not through the checkpoint, with a marker naming it: Snakemake
    9 checks neither the params nor the input mtimes of a job that still waits on a checkpoint after the
    existing selections are read, so waiting on a selection that does not exist yet made the table look up
    to date ("Nothing to be done") and hid every other edit of it. The table then reruns, the selection
    job runs (its output is a missing input), and when it finishes Snakemake re-evaluates this function,
    which then reads the selected point and asks for its runs on every seed. No marker where the table
    does not exist yet (marker_input): it is built anyway."""

    def inputs(wc):
        if not experiment_available(experiment):
            return []
        selected = selected_file(experiment, method)
        if not Path(selected).exists():
            return [selected] + missing_marker(experiment, method, [selected], table_csv)
        point = selected_point(experiment, method)
        runs = [run_dir(experiment, method, point, s) for s in seeds(config, experiment, method)]
        files = [f"{r}/metrics.json" for r in runs] + [f"{r}/history.csv" for r in runs]
        return files + missing_marker(experiment, method, files + [f"{r}/run.json" for r in runs], table_csv)

    return inputs


def table_status(experiments):
    """Input function: the data status of every dataset of the table's experiments."""
    return lambda wc: sorted({f"{WORK}/data/{d}.json" for e in experiments for d in experiment_datasets(e)})


def sweep_reports(table, spec, experiments):
    """The sweep reports of a table's experiments: reports/sweeps/<exp>.csv, or, with the table's ``sweeps:
    beside``, reports/<its folder>/sweep_<exp>.csv (rule sweep_report_beside)."""
    folder = sweeps_beside(table, spec)
    where = f"{REPORTS}/{folder}/sweep_{{}}.csv" if folder else f"{REPORTS}/sweeps/{{}}.csv"
    return lambda wc: [where.format(e) for e in experiments if experiment_available(e)]


TABLE_PAIRS = {}  # table -> {experiment: [methods with runs]} (the headline rule reads the same runs)

for _table, _spec in config["tables"].items():
    # the (experiment, method) pairs with runs: a param, so adding a method to an experiment rebuilds
    # the table (the profile's rerun-triggers leave out "input")
    _pairs = table_pairs(_spec)
    _exps = list(_pairs)
    TABLE_PAIRS[_table] = _pairs

    rule:
        name:
            f"table_{_table.replace('/', '_')}"
        input:
            *[selected_runs(e, m, f"{REPORTS}/{_table}.csv") for e, ms in _pairs.items() for m in ms],  # bayesadmm@mean → bayesadmm
            status=table_status(_exps),
            notes=[in_report(_spec["notes"], _table, "notes", "notes")] if "notes" in _spec else [],
            outputs=missing_outputs(f"table/{_table}", [f"{REPORTS}/{_table}.csv", f"{REPORTS}/{_table}.md",
                                    *[f"{REPORTS}/figures/{f}" for f in table_figures(_table, _spec)]],
                                    f"{REPORTS}/{_table}.csv"),
            code=fixed(code("reports", "papers", "published.py", "runpaths.py", "runfiles.py", "eval/registry.py")),
        output:
            csv=f"{REPORTS}/{_table}.csv",  # in the report as rendered pages (report_pages.smk)
            md=f"{REPORTS}/{_table}.md",
            figures=[in_report(f"{REPORTS}/figures/{f}", _table, "figure") for f in table_figures(_table, _spec)],
        params:
            spec=json.dumps({k: v for k, v in _spec.items() if k != "sweeps"}, sort_keys=True),  # where, not what
            std_ddof=config.get("std_ddof", 1),
            runs=json.dumps(_pairs, sort_keys=True),
            code=code_hash(code("reports", "papers", "published.py", "runpaths.py", "runfiles.py", "eval/registry.py")),
            name=_table,
        log:
            f"{WORK}/logs/table/{_table}.log",
        shell:  # its one-line summary on the terminal too
            cli("table") + " {params.name:q} --out {output.csv:q} 2>&1 | tee {log:q}"


def all_sweep_reports(wc):
    """Input function: the sweep reports of every table's experiments (each waits on every method's
    selection there, so it trains every method of its experiment)."""
    return sorted({f for t, s in config["tables"].items() for f in sweep_reports(t, s, list(TABLE_PAIRS[t]))(wc)})


rule sweeps:
    input:
        all_sweep_reports,


for _toy in config.get("toys", {}):

    rule:
        name:
            f"toy_{_toy.replace('/', '_')}"
        input:
            code=fixed(code("toys", "reports/toys.py", "papers", "published.py")),
            data=fixed([f"{WORK}/data/{d}.json" for d in TOYS[_toy].datasets]),  # the datasets it reads, fetched
        output:
            csv=f"{REPORTS}/{_toy}.csv",  # in the report as rendered pages (report_pages.smk)
            md=f"{REPORTS}/{_toy}.md",
            figures=[in_report(f"{REPORTS}/figures/{f}", _toy, "toy") for f in TOYS[_toy].figures],  # beside it
        params:
            spec=json.dumps(config["toys"][_toy], sort_keys=True),
            code=code_hash(code("toys", "reports/toys.py", "papers", "published.py")),
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
        code=fixed(code("reports/scorecard.py", "reports/verdicts.py", "papers", "published.py")),
    output:  # in Snakemake's report as a rendered page, the first category (report_pages.smk)
        SCORECARD,
    params:
        spec=json.dumps(_SC, sort_keys=True),
        code=code_hash(code("reports/scorecard.py", "reports/verdicts.py", "papers", "published.py")),
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
            code=fixed(code("reports/headline.py", "reports/verdicts.py", "reports/cells.py", "reports/selection.py", "runpaths.py", "runfiles.py", "eval/registry.py")),
        output:
            metrics=directory(f"{REPORTS}/metrics"),
            plots=[in_report(str(f), HEADLINE["table"], "headline", "DVC metrics and plots")
                   for f in headline_plot_files(config)],
        params:
            spec=json.dumps(HEADLINE, sort_keys=True),
            code=code_hash(code("reports/headline.py", "reports/verdicts.py", "reports/cells.py", "reports/selection.py", "runpaths.py", "runfiles.py", "eval/registry.py")),
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
            code=fixed(code("reports/rehearsal.py")),
        output:
            f"{REPORTS}/summary.md",
        params:
            code=code_hash(code("reports/rehearsal.py")),
        log:
            f"{WORK}/logs/rehearsal_summary.log",
        shell:
            cli("rehearsal-summary") + " --out {output:q} 2>&1 | tee {log:q}"
