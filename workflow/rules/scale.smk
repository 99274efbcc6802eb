# Smoke-scale outputs never share a path with paper-scale ones (fedbayes.study.paths: reports/smoke/,
# results/runs/smoke/, …). At scale smoke, asking for a paper-scale output (reports/table1.csv) would
# otherwise end in Snakemake's bare "No rule to produce": this rule matches exactly the paper-scale
# outputs of the rules above (fedbayes.workflow.plan.paper_twin_pattern) and fails before any job starts,
# naming the path to ask for instead.
if SCALE != "paper":
    PAPER_REPORTS = paths({**config, "scale": "paper"})["reports"]

    rule paper_output_at_smoke_scale:
        conda:
            CONDA_ENV
        input:
            lambda wc: plan.refuse_paper_output(wc.paper_output, REPORTS, PAPER_REPORTS, SCALE),
        output:
            "{paper_output}",
        wildcard_constraints:
            paper_output=plan.paper_twin_pattern(REPORTS, PAPER_REPORTS, [f for r in workflow.rules for f in r.output]),
        localrule: True
        shell:
            "false"
