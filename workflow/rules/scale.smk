# Smoke-scale outputs never share a path with paper-scale ones (fedbayes.config.paths: reports/smoke/,
# results/runs/smoke/, …). At scale smoke, asking for a paper-scale output (reports/table1.csv) would
# otherwise end in Snakemake's bare "No rule to produce": this rule matches exactly the paper-scale
# outputs of the rules above and fails before any job starts, naming the path to ask for instead.
import re

if SCALE != "paper":
    PAPER_REPORTS = paths({**config, "scale": "paper"})["reports"]

    def _paper_pattern(pattern):
        """Regex of the paper-scale twin of a smoke output pattern (its wildcards: any text)."""
        rest = pattern[len(REPORTS) + 1:]
        parts = re.split(r"\{[^}]*\}", rest)
        return re.escape(f"{PAPER_REPORTS}/") + ".+".join(re.escape(x) for x in parts)

    _smoke_outputs = sorted({str(f) for r in workflow.rules for f in r.output if str(f).startswith(f"{REPORTS}/")})
    # never this scale's own outputs (reports/smoke/fedlap/sweep_x.csv matches reports/{folder}/sweep_{e}.csv)
    _paper_outputs = f"(?!{re.escape(REPORTS)}/)(?:" + "|".join(f"(?:{_paper_pattern(f)})" for f in _smoke_outputs) + ")"

    def _refuse_paper_path(wc):
        smoke = f"{REPORTS}/{wc.paper_output[len(PAPER_REPORTS) + 1:]}"
        raise WorkflowError(
            f"{wc.paper_output} is a paper-scale output; this workflow runs at scale {SCALE}, whose outputs "
            f"live under {REPORTS}/ so that they never overwrite the paper-scale ones: ask for {smoke} "
            f"(e.g. snakemake --cores all {smoke} --config scale={SCALE})")

    rule paper_output_at_smoke_scale:
        input:
            _refuse_paper_path,
        output:
            "{paper_output}",
        wildcard_constraints:
            paper_output=_paper_outputs or "(?!)",
        localrule: True
        shell:
            "false"
