# One client split per (experiment, seed), shared by every method of the experiment.


rule partition:
    conda:
        CONDA_ENV
    input:
        data=lambda wc: fixed(datasets_of(wc.experiment)[:1]),
        code=lambda wc: fixed(partition_code(wc.experiment)),
    output:
        npz=partition_file("{experiment}", "{seed}"),
        figure=partition_figure_of("{experiment}", "{seed}"),
    params:
        cfg=lambda wc: json.dumps(partition_config(config, wc.experiment, int(wc.seed)), sort_keys=True),
        code=lambda wc: codes.code_hash(partition_code(wc.experiment)),
    log:
        f"{WORK}/logs/partition/{{experiment}}/seed{{seed}}.log",
    shell:
        cli("partition") + " --experiment {wildcards.experiment} --seed {wildcards.seed}"
        " --out {output.npz:q} --figure {output.figure:q} 2>&1 | tee {log:q}"
