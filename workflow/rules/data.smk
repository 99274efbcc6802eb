# Raw datasets, fetched from the first source that works (local mirror, package, official download)
# and verified against official checksums into data/raw/<dataset>/ (DVC-tracked; manifest.json is
# rewritten only when the verified content changes).
#
# Whether a dataset could be obtained on this machine is recorded in work/data/<dataset>.json.
# Experiments whose data is unavailable are not run; their table rows say "not run (data
# unavailable: ...)" instead of failing the table. The record is made when the DAG is built (the
# first time a table needs it), not by a checkpoint: Snakemake does not re-evaluate a job whose
# output exists while a checkpoint it depends on is pending, so a checkpoint here would hide
# stale tables. To try again (new mirror, network): delete work/data/<dataset>.json.
import subprocess


# At rehearsal scale every dataset is a stand-in (fedbayes.data.standin), generated and fetched by the same
# code into paths.raw + "-stand-in/<size>" (fedbayes.config.paths).
STAND_IN = ["--stand-in", stand_in_size(config)] if stand_in_size(config) else []


rule data:
    output:
        f"{WORK}/data/{{dataset}}.json",
    log:
        f"{WORK}/logs/data/{{dataset}}.log",
    shell:
        f"{FEDBAYES} data {{wildcards.dataset}} --root {shlex.quote(RAW)} {shlex.join(STAND_IN)} --status {{output:q}}"
        f" 2>&1 | tee {{log:q}}"


def data_status(dataset):
    """The recorded status of ``dataset``; fetched (or found unavailable) now if there is none yet."""
    path = Path(f"{WORK}/data/{dataset}.json")
    if not path.exists():
        # the CLI through this workflow's Python (FEDBAYES): a bare `fedbayes` is on PATH only in an
        # activated venv, and `.venv/bin/snakemake …` must work without activating it
        subprocess.run([sys.executable, "-m", "fedbayes.cli", "data", dataset, "--root", RAW, *STAND_IN,
                        "--status", str(path)], check=True)
    return json.loads(path.read_text())


def experiment_available(name):
    """True when every dataset of the experiment (train set, OOD set) was obtained here."""
    return all(data_status(d)["available"] for d in experiment_datasets(name))
