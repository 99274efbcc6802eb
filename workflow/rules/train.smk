# One federated training run per (experiment, method, sweep point, seed). Progress: one line per round.
# A killed run resumes from its checkpoint (<run>/checkpoint.pt, not a declared output).
# Declared outputs are the committed files (history.csv, run.json), so a fresh clone reuses finished
# runs; predictions.npz (large, not committed) is written beside them for the evaluate rule.
# Inputs are only the code it runs (compared by content hash): the job fetches its data and writes its
# partition (data/partitions/..., the same file the partition rule writes) itself when they are
# missing, so the data and partition jobs a fresh clone must run never make finished runs look stale.


def train_code(wc):
    return sorted(set(code("engine", "models", "eval/metrics.py")
                      + method_code(wc.method) + dataset_code(wc.experiment)))


def changed_config(wc):
    """A finished run whose run.json records another configuration than params.yaml gives it now is
    stale, also where Snakemake has no record of the params it ran with (a fresh clone, a DVC pull):
    then a marker naming the changed keys is written (new mtime) and made an input, so the run
    reruns. A run whose recorded configuration matches needs nothing (a clone adopts it)."""
    from fedbayes.config import config_changes

    rec = Path(run_dir(wc.experiment, wc.method, wc.point, wc.seed)) / "run.json"
    try:
        recorded = json.loads(rec.read_text())["config"]
    except (OSError, ValueError, KeyError):
        return []
    changed = config_changes(recorded, run_config(config, wc.experiment, wc.method, int(wc.seed), wc.point))
    if not changed:
        return []
    marker = Path(WORK) / "changed" / wc.experiment / wc.method / wc.point / f"seed{wc.seed}.txt"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("params.yaml changed since this run: " + ", ".join(changed) + "\n")
    return [str(marker)]


rule train:
    input:
        code=lambda wc: fixed(train_code(wc)),
        changed=changed_config,
    output:
        history=f"{RUN}/history.csv",
        run=f"{RUN}/run.json",
    params:
        cfg=lambda wc: json.dumps(run_config(config, wc.experiment, wc.method, int(wc.seed), wc.point), sort_keys=True),
        code=lambda wc: code_hash(train_code(wc)),
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
        partition=f"{PART}/{{experiment}}/seed{{seed}}.npz",
    threads: 1
    log:
        f"{WORK}/logs/train/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:
        cli("train") + " --experiment {wildcards.experiment} --method {wildcards.method}"
        " --point '{wildcards.point}' --seed {wildcards.seed} --partition {params.partition}"
        " --out '{params.out}' --threads {threads} 2>&1 | tee '{log}'"
