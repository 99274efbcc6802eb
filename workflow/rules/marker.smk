# The rerun markers' jobs (fedbayes.workflow.markers): a job that must rerun for a reason Snakemake's own
# checks miss gets an input file this job writes (marker_input), named by a hash of its text and of the
# state of the files of the job that reads it. Snakemake runs the job of a missing intermediate file only
# when a job that reads it must run anyway (temp-file semantics), so the marker jobs are forced:
# profiles/default/config.yaml says `forcerun: [marker, numerics_check]`; marker_input stops a DAG whose
# command line replaced that list.


rule marker:  # the file that makes its consumer rerun; its log repeats the text
    conda:
        CONDA_ENV
    output:
        f"{WORK}/{{marker}}.rerun-{{key}}.txt",
    wildcard_constraints:
        key="[0-9a-f]{12}",
    params:
        text=lambda wc, output: INPUTS.marker_text.get(output[0], "rerun marker"),
    message:
        "{params.text}"
    log:
        f"{WORK}/logs/marker/{{marker}}.rerun-{{key}}.log",
    localrule: True
    shell:
        "printf '%s\\n' {params.text:q} | tee {log:q} > {output:q}"
