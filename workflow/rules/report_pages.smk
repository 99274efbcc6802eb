# The pages of Snakemake's report (`make report`): the scorecard and every table's and toy's .md and .csv
# rendered to HTML under <work>/report/ (git-ignored), so that the report shows them in place; Snakemake's
# report displays images and HTML and offers any other file only as a download. The scorecard's page is
# its own category, named to sort first ("1. Reproduction scorecard"); a table's pages sit beside its
# figures (its paper's category, a subcategory per table). `snakemake report_pages` renders them; the
# report itself (`snakemake --report`) runs nothing.
from fedbayes.report_pages import SCORECARD_CATEGORY

REPORT_PAGES = {"README.md": "scorecard"} | {
    f"{t}.{ext}": t for t in [*config["tables"], *config.get("toys", {})] for ext in ("md", "csv")}


rule report_page:
    conda:
        CONDA_ENV
    input:
        page=f"{REPORTS}/{{page}}",
        code=fixed(CODE["report_page"]),
    output:
        report(f"{WORK}/report/{{page}}.html", caption="../report/page.rst",
               category=lambda wc: SCORECARD_CATEGORY if wc.page == "README.md" else plan.report_category(page_of(wc), PAPERS),
               subcategory=lambda wc: "scorecard (reports/README.md)" if wc.page == "README.md" else page_of(wc),
               labels=lambda wc: {"page": wc.page, "shows": f"rendered {wc.page.rsplit('.', 1)[-1]}"}),
    wildcard_constraints:
        page="|".join(re.escape(p) for p in REPORT_PAGES),
    params:
        code=CODE_HASH["report_page"],
    log:
        f"{WORK}/logs/report_page/{{page}}.log",
    shell:
        f"{shlex.quote(sys.executable)} -m fedbayes.report_pages {{input.page:q}} {{output:q}} 2>&1 | tee {{log:q}}"


rule report_pages:
    input:
        [f"{WORK}/report/{p}.html" for p in REPORT_PAGES],
