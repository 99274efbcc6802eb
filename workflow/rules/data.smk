# Raw datasets, fetched from the first source that works (local mirror, package, official download)
# and verified against official checksums into data/raw/<dataset>/ (DVC-tracked; manifest.json is
# rewritten only when the verified content changes).
#
# A checkpoint: its output records whether the dataset could be obtained on this machine
# (work/data/<dataset>.json). Experiments whose data is unavailable are not run; their table rows say
# "not run (data unavailable: ...)" instead of failing the table. To try again (new mirror, network):
# delete work/data/<dataset>.json.


checkpoint data:
    output:
        f"{WORK}/data/{{dataset}}.json",
    log:
        f"{WORK}/logs/data/{{dataset}}.log",
    shell:
        "fedbayes data {wildcards.dataset} --root {RAW} --status {output} 2>&1 | tee {log}"


def data_status(dataset):
    """Waits for the data checkpoint of ``dataset``; its recorded status."""
    with open(checkpoints.data.get(dataset=dataset).output[0]) as f:
        return json.load(f)


def experiment_available(name):
    """True when every dataset of the experiment (train set, OOD set) was obtained here."""
    return all(data_status(d)["available"] for d in experiment_datasets(name))
