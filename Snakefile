# fedbayes — the DAG: data → partition → train → evaluate → MLflow → tables.
#   snakemake --cores all reports/table1.csv                 # paper scale
#   snakemake --cores all reports/table1.csv --config scale=smoke   # about a minute
# params.yaml is validated (JSON schema + semantic checks) before any job starts.

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "params.yaml"


validate(config, "workflow/schemas/params.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/track.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        [f"{PATHS['reports']}/{t}.csv" for t in config["tables"]],
