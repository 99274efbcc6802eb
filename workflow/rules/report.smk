# Tables (ours vs published), their learning-curve figures and the sweep reports they rest on.


def table_inputs(wc):
    spec = config["tables"][wc.table]
    metrics, history, mlflow = [], [], []
    for e in spec["experiments"]:
        sel_seed = selection(config, e)["seed"]
        for m in spec["methods"]:
            point = selected_point(e, m)
            for s in seeds(config):
                metrics.append(f"{run_dir(e, m, point, s)}/metrics.json")
                history.append(f"{run_dir(e, m, point, s)}/history.csv")
                mlflow.append(f"{WORK}/mlflow/{e}/{m}/{point}/seed{s}.run")
            mlflow += [f"{WORK}/mlflow/{e}/{m}/{pt}/seed{sel_seed}.run" for pt in sweep_points(config, e, m)]
    return {"metrics": metrics, "history": history, "mlflow": sorted(set(mlflow)),
            "sweeps": [f"{REPORTS}/sweeps/{e}.csv" for e in spec["experiments"]]}


rule table:
    input:
        unpack(table_inputs),
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
