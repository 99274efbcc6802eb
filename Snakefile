# fedbayes — the DAG: data → partition → train → evaluate → MLflow → tables.
#   snakemake --cores all reports/table1.csv                 # paper scale
#   snakemake --cores all reports/smoke/table1.csv --config scale=smoke   # 3 min 55 s measured in a fresh
#       clone (--cores 1, no other load; with reports/smoke/metrics); smoke outputs live under reports/smoke/ etc.
# params.yaml is validated (JSON schema + semantic checks) before any job starts.

import sys

from snakemake.utils import min_version, update_config

from fedbayes.study import ConfigError, as_read, check_implementations, load_params_text, validate
from fedbayes.study.memo import share_for_good
from fedbayes.workflow import plan
from fedbayes.workflow.overrides import name_given, read_as_params
from fedbayes.workflow.scheduler import one_pending_reevaluation
from fedbayes.fileio import load_yaml
from fedbayes.frontdoor import check_device, environment_problems
from fedbayes.cli.warm import start as start_warm, stop as stop_warm

min_version("9.0")


# params.yaml as written, through fedbayes' loader: Snakemake's own YAML loader (`configfile:`) keeps the
# last of two equal keys silently, expands an alias bomb and parses in pure Python (≈ 1 s a plan); a file
# that is not UTF-8 or holds no mapping is refused too (ConfigError in one line naming the file, the key
# and line, or the bomb). Then what `configfile:` does: the command line's --config/--configfile values laid
# over it key by key (`--configfile` alone, with Snakemake's --replace-workflow-config).
try:
    _params_yaml = load_params_text(Path(workflow.basedir, "params.yaml"))
except ConfigError as e:   # the problem alone, without Snakemake's "in file Snakefile, line …" and frames
    sys.exit(str(e))
workflow.configfiles.append("params.yaml")
# --config values read as params.yaml's are (Snakemake keeps a nested one a string: seeds=[0,1] gives '0', '1')
OVERRIDES = read_as_params(workflow.config_settings.overwrite_config or {})
if not (workflow.config_settings.replace_workflow_config and workflow.config_settings.overwrite_config):
    config.clear()
    update_config(config, _params_yaml)
update_config(config, OVERRIDES)


# `snakemake --report report.html`: the results as a browsable site (outputs marked with report() in
# workflow/rules/report.smk; this is its front page).
report: "workflow/report/workflow.rst"


# The schema and the semantic checks (unknown names, impossible sizes), every problem listed with its
# dotted key (ConfigError), before the DAG is built: no job starts and nothing is written.
try:   # each problem in its own line, naming the key; exit 1 before any job
    as_read(config, Path(workflow.basedir, "params.yaml"))  # the earlier layout upgraded, params.smoke.yaml laid in
    # (the configuration an earlier plan here validated and stamped, unchanged, with this code: not again)
    VALIDATED_BEFORE = plan.validated_before(config)
    if not VALIDATED_BEFORE:
        validate(config, load_yaml(Path(workflow.basedir, "workflow/schemas/params.schema.yaml").read_text()))
    # An installed method whose implementation cannot be imported (a missing dependency): refused here, once,
    # not in each of its training jobs (it imports torch; the jobs' own validation does not).
    check_implementations(config)
    # A CUDA device this machine lacks (torch is imported only for one): refused here where the jobs run here;
    # on a cluster they run elsewhere, and each training job checks its own machine (engine.loop.pick_device).
    if workflow.local_exec:
        check_device(config)
    # Environment variables set to a value fedbayes cannot use: every job would fail on them.
    if environment_problems():
        raise ConfigError("; ".join(environment_problems()))
except ConfigError as e:   # a problem in a value typed on the command line is said to be one
    sys.exit(name_given(str(e), OVERRIDES))
# config is not edited from here on: each experiment, overlay and method block is resolved once for the
# whole planning (the input functions ask for them thousands of times, again after each checkpoint).
share_for_good()
one_pending_reevaluation()   # Snakemake's scheduler: one pending wake-up, not one per pass (fedbayes.workflow.scheduler)


# Warm jobs (fedbayes.cli.warm): where the jobs run on this machine, one process keeps PyTorch imported and
# forks each `fedbayes` command of the build (the same result, ≈ 2.5 CPU-s less a job), for a build of enough
# jobs to repay the server's start (3 or fewer, and no checkpoint: each runs itself). FEDBAYES_WARM=0: off.
onstart:
    start_warm(WORK, workflow.dag.needrun_jobs()) if workflow.local_exec else None


onsuccess:
    stop_warm()


onerror:
    stop_warm()


include: "workflow/rules/common.smk"  # the input functions and paths every rule file reads (no rule)
include: "workflow/rules/marker.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/track.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/report_pages.smk"  # the report's HTML views of the .md and .csv files
include: "workflow/rules/scale.smk"  # last: it refuses the paper-scale twins of the rules above at scale smoke


rule all:
    default_target: True
    input:
        [f"{PATHS['reports']}/{t}.csv" for t in config["tables"]],
        all_sweep_reports,  # the sweep reports of the tables' experiments (rule sweeps)
        # no scorecard of stand-in data: the rehearsal's summary of what ran instead
        f"{PATHS['reports']}/summary.md" if stand_in_size(config) else f"{PATHS['reports']}/README.md",
        [f"{PATHS['reports']}/metrics"] if config.get("headline") else [],  # the headline numbers for `dvc metrics show`
        [f"{WORK}/mlflow/{g}.runs" for g in MLFLOW_GROUPS],  # every table's runs in MLflow (rule mlflow)
