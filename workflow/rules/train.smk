# One federated training run per (experiment, method, seed). Progress: one line per round.
# A killed run resumes from its checkpoint (results/.../checkpoint.pt, not a declared output).


rule train:
    input:
        partition=f"{PART}/{{experiment}}/seed{{seed}}.npz",
        data=lambda wc: datasets_of(wc.experiment),
        code=code("engine", "methods", "models", "eval/metrics.py", "config.py", "data", "cli.py"),
    output:
        history=f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/history.csv",
        predictions=f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/predictions.npz",
        run=f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/run.json",
    params:
        cfg=lambda wc: json.dumps(run_config(config, wc.experiment, wc.method, int(wc.seed)), sort_keys=True),
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.seed),
    threads: 1
    log:
        f"{WORK}/logs/train/{{experiment}}/{{method}}/seed{{seed}}.log",
    shell:
        cli("train") + " --experiment {wildcards.experiment} --method {wildcards.method}"
        " --seed {wildcards.seed} --partition {input.partition} --out {params.out}"
        " --threads {threads} 2>&1 | tee {log}"
