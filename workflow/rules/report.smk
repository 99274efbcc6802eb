# Tables (ours vs published) and their learning-curve figures.


def table_inputs(name):
    spec = config["tables"][name]
    runs = [(e, m, s) for e in spec["experiments"] for m in spec["methods"] for s in seeds(config)]
    return {
        "metrics": [f"{run_dir(e, m, s)}/metrics.json" for e, m, s in runs],
        "history": [f"{run_dir(e, m, s)}/history.csv" for e, m, s in runs],
        "mlflow": [f"{WORK}/mlflow/{e}/{m}/seed{s}.run" for e, m, s in runs],
    }


rule table:
    input:
        unpack(lambda wc: table_inputs(wc.table)),
        code=code("reports", "papers"),
    output:
        csv=f"{REPORTS}/{{table}}.csv",
        md=f"{REPORTS}/{{table}}.md",
        figure=f"{REPORTS}/figures/{{table}}_curves.png",
    params:
        spec=lambda wc: json.dumps(config["tables"][wc.table], sort_keys=True),
    wildcard_constraints:
        table="|".join(config["tables"]),
    shell:
        cli("table") + " {wildcards.table} --out {output.csv}"
