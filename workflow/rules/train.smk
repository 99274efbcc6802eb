# One federated training run per (experiment, method, sweep point, seed). Progress: one line per round.
# A killed run resumes from its checkpoint (<run>/checkpoint.pt, not a declared output).
# Declared outputs are the committed files (history.csv, run.json), so a fresh clone reuses finished
# runs; predictions.npz (large, not committed) is written beside them for the evaluate rule.
# What reruns a finished run is its resolved configuration and its numerics versions (the rerun rule,
# fedbayes.study.rerun), as params and, where Snakemake has no record, as a marker input naming what changed
# (fedbayes.workflow.staleness.run_changes); never the mtime or hash of a source file. The job fetches its
# data and writes its partition itself when they are missing, so the data and partition jobs a fresh
# clone must run never make finished runs look stale.
#
# The numerics gate (fedbayes.workflow.numerics): where a method's code or this machine's class differs
# from that of its last numerics check, or its runs take a code path no golden covered, its check is due.
# One job (numerics_check, one process) replays every due check of the study (`fedbayes numerics-check`: bit
# for bit on the goldens' machine class, within round-off on another) before any run of a due method trains
# and before a table shows its finished runs; a real change stops there, naming the method and the first
# value outside. Unchanged code on the same machine costs a source hash and plans no job.

GOLDENS = Path(workflow.basedir, "tests/golden/numerics")


rule numerics_check:
    conda:
        CONDA_ENV
    output:
        f"{WORK}/numerics/gate/check-{{key}}.txt",
    wildcard_constraints:
        key="[0-9a-f]{12}",
    params:
        paths=lambda wc: [json.dumps({"method": m, "hparams": json.loads(h)}) for m, hs in INPUTS.numerics_gate[1].items() for h in hs],
        methods=lambda wc: list(INPUTS.numerics_gate[1]),
        cmd=f"{FEDBAYES} numerics-check --goldens {shlex.quote(str(GOLDENS))} --work {shlex.quote(WORK)} --due-only --remember",
    log:
        f"{WORK}/logs/numerics/check-{{key}}.log",
    shell:  # every due code path's check in turn, in one process (one line if this machine rounds differently), then the gate
        "args=(); for p in {params.paths:q}; do args+=(--path \"$p\"); done;"
        " {params.cmd} \"${{args[@]}}\" 2>&1 | tee {log:q}"
        " && printf '%s\\n' {params.methods:q} > {output:q}"


rule train:
    conda:
        CONDA_ENV
    input:
        changed=changed_config,
    output:
        history=f"{RUN}/history.csv",
        run=f"{RUN}/run.json",
    params:
        cfg=lambda wc: json.dumps(run_cfg(wc), sort_keys=True),
        numerics=lambda wc: staleness.numerics_key(wc.method, run_cfg(wc)["hparams"]),
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
        partition=partition_file("{experiment}", "{seed}"),
    threads: 1
    log:
        f"{WORK}/logs/train/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:
        cli("train") + " --experiment {wildcards.experiment} --method {wildcards.method}"
        " --point {wildcards.point:q} --seed {wildcards.seed} --partition {params.partition:q}"
        " --out {params.out:q} --threads {threads} 2>&1 | tee {log:q}"
