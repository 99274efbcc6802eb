# One federated training run per (experiment, method, sweep point, seed). Progress: one line per round.
# A killed run resumes from its checkpoint (<run>/checkpoint.pt, not a declared output).


rule train:
    input:
        partition=f"{PART}/{{experiment}}/seed{{seed}}.npz",
        data=lambda wc: datasets_of(wc.experiment),
        code=lambda wc: code("engine", "models", "eval/metrics.py", "methods/base.py")
        + method_code(wc.method) + dataset_code(wc.experiment),
    output:
        history=f"{RUN}/history.csv",
        predictions=f"{RUN}/predictions.npz",
        run=f"{RUN}/run.json",
    params:
        cfg=lambda wc: json.dumps(run_config(config, wc.experiment, wc.method, int(wc.seed), wc.point), sort_keys=True),
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
    threads: 1
    log:
        f"{WORK}/logs/train/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:
        cli("train") + " --experiment {wildcards.experiment} --method {wildcards.method}"
        " --point '{wildcards.point}' --seed {wildcards.seed} --partition {input.partition}"
        " --out '{params.out}' --threads {threads} 2>&1 | tee '{log}'"
