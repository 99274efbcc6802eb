# Raw datasets, fetched from the first source that works (local mirror, package, official download)
# and verified against official checksums. DVC tracks data/raw/ (dvc.yaml stage `data`).


rule data:
    output:
        directory(f"{RAW}/{{dataset}}"),
    log:
        f"{WORK}/logs/data/{{dataset}}.log",
    shell:
        "fedbayes data {wildcards.dataset} --root {RAW} 2>&1 | tee {log}"
