# Metrics from saved predictive log-probabilities (a metric change never retrains).


rule evaluate:
    input:
        predictions=f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/predictions.npz",
        run=f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/run.json",
        code=code("eval"),
    output:
        f"{RUNS}/{{experiment}}/{{method}}/seed{{seed}}/metrics.json",
    params:
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.seed),
    shell:
        "fedbayes evaluate {params.out}"
