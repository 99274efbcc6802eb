"""The workflow's planning, importable and unit-tested: what the Snakemake rules (Snakefile,
workflow/rules/*.smk) ask of the files on disk, as pure functions with explicit arguments. The rule files
keep the rules; their input functions, one statement each, live in workflow/rules/common.smk (which
defines no rule: `snakemake --lint` is clean) and call these.

- ``codes``: the package sources a rule runs (its entry modules' import graph) and their content hash;
- ``markers``: the rerun markers that make a job rerun for a reason Snakemake's own checks miss;
- ``staleness``: why a finished run, metrics file or selection is to be made again;
- ``plan``: tables' runs, data availability, sweep reports, MLflow import groups, report categories;
- ``numerics``: the numerics gate (a job, not a subprocess of planning) that a code change meets;
- ``overrides``: the command line's ``--config`` values read as params.yaml's are, and problems in them named;
- ``scheduler``: Snakemake's scheduler woken by one pending timer, not one a pass (installed by the Snakefile);
- ``inputs``: the input functions that hold a planning's state or decide between cases (markers and their
  forced jobs, the gate, stale runs and metrics, the runs a table reads), built on the four above.

Nothing here starts a process or writes a file: planning only looks."""
