# Raw datasets, fetched from the first source that works (local mirror, package, official download)
# and verified against official checksums into data/raw/<dataset>/ (DVC-tracked; manifest.json is
# rewritten only when the verified content changes).
#
# Whether a dataset could be obtained on this machine is recorded in work/data/<dataset>.json by the data
# step, a checkpoint: planning only reads the record (fedbayes.workflow.plan.availability). Where there is
# none yet, a table (or MLflow import, sweep report) asks for the record as a plain input with a rerun
# marker, and when the step has run Snakemake re-evaluates it: an experiment whose data could be obtained
# then asks for its runs; one whose data is unavailable is not run, its rows reading "not run (data
# unavailable: ...)". To try again (new mirror, network): delete work/data/<dataset>.json.
#
# At rehearsal scale every dataset is a stand-in (fedbayes.data.standin), generated and fetched by the same
# code into the folder beside paths.raw named "<raw>-stand-in/<size>" (fedbayes.study.paths).
STAND_IN = ["--stand-in", stand_in_size(config)] if stand_in_size(config) else []
# A fetched folder that dvc.yaml keeps in DVC's cache (the `data` stage's outs) goes into the cache after
# the fetch: `dvc status` then reads it as up to date and `dvc push` sends it to a remote (docs/cluster.md).
DVC_CACHED = plan.dvc_cached_outputs(".")


checkpoint data:
    conda:
        CONDA_ENV
    output:
        f"{WORK}/data/{{dataset}}.json",
    log:
        f"{WORK}/logs/data/{{dataset}}.log",
    params:
        dvc_cache=dvc_cache,
    shell:
        f"{FEDBAYES} data {{wildcards.dataset}} --root {shlex.quote(RAW)} {shlex.join(STAND_IN)}"
        f" --status {{output:q}} 2>&1 | tee {{log:q}} && {{params.dvc_cache}} >> {{log:q}} 2>&1"
