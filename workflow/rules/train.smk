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


rule train:
    input:
        code=lambda wc: fixed(train_code(wc)),
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
