"""The workflow's planning, importable and unit-tested: what the Snakemake rules (Snakefile,
workflow/rules/*.smk) ask of the files on disk, as pure functions with explicit arguments. The rule files
keep the rules and one-line input functions that call these.

- ``codes``: the package sources a rule runs (its entry modules' import graph) and their content hash;
- ``markers``: the rerun markers that make a job rerun for a reason Snakemake's own checks miss;
- ``staleness``: why a finished run, metrics file or selection is to be made again;
- ``plan``: tables' runs, data availability, sweep reports, MLflow import groups, report categories;
- ``numerics``: the numerics gate (a job, not a subprocess of planning) that a code change meets.

Nothing here starts a process or writes a file: planning only looks."""
