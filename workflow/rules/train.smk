# One federated training run per (experiment, method, sweep point, seed). Progress: one line per round.
# A killed run resumes from its checkpoint (<run>/checkpoint.pt, not a declared output).
# Declared outputs are the committed files (history.csv, run.json), so a fresh clone reuses finished
# runs; predictions.npz (large, not committed) is written beside them for the evaluate rule.
# What reruns a finished run is its resolved configuration and its numerics versions (the rerun rule,
# fedbayes.catalog), as params and, where Snakemake has no record, as a marker input; never the mtime or
# hash of a source file. The job fetches its data and writes its partition (data/partitions/..., the same file the partition rule writes) itself when they are
# missing, so the data and partition jobs a fresh clone must run never make finished runs look stale.


def numerics_key(wc):
    """The rerun rule (fedbayes.catalog): a finished run is rerun when its resolved configuration, the
    defaults its method reads from its spec, or the numerics version of its method or of the core
    changes, never because a source file was edited. The defaults enter only where they differ from the
    frozen record (catalog.defaults_key), so the key of a run under today's defaults is what it was."""
    from fedbayes.study import defaults_key, numerics

    hp = run_config(config, wc.experiment, wc.method, int(wc.seed), wc.point)["hparams"]
    changed = defaults_key(wc.method, hp)
    return json.dumps({**numerics(wc.method), **({"defaults": changed} if changed else {})}, sort_keys=True)


_NUMERICS_CHECKED = set()   # (method, code path tag) checked in this process
_NUMERICS_ALL = []          # set once this process has checked every due method with a committed golden


def numerics_checked(method, hparams):
    """The numerics rule, enforced here (fedbayes.engine.replay.numerics_check): the first time a DAG
    meets a finished run while the code (fedbayes' sources, a plug-in's package, the numerics versions)
    or the machine class differs from that of a method's last check (work/numerics/<method>.json), the
    goldens of every such method with a committed golden are replayed, all in one process
    (`fedbayes numerics-check`, about 15 s for the 35 goldens): bit for bit on the goldens' machine class,
    within the round-off envelope on another (one line says so, and this machine's goldens are recorded
    under work/numerics/<class>/); a real change stops the DAG before any job, naming the method and the
    first value outside. A run taking a code path no golden covers (a plug-in, a new option) gets a
    baseline on its first check. Unchanged code on the same machine costs a source hash, nothing else."""
    from fedbayes.engine.replay import check_due, golden_methods, run_tag

    key = (method, run_tag(method, hparams))
    if key in _NUMERICS_CHECKED:
        return
    goldens = Path(workflow.basedir, "tests/golden/numerics")
    if not _NUMERICS_ALL:
        _NUMERICS_ALL.append(True)
        due = [m for m in golden_methods(goldens) if check_due(m, f"{WORK}/numerics/{m}.json")]
        if due:
            _numerics_check_process(goldens, due)
    if check_due(method, f"{WORK}/numerics/{method}.json", hparams):   # its round-off line was said above
        _numerics_check_process(goldens, [method], hparams, say=not _NUMERICS_SAID)
    _NUMERICS_CHECKED.add(key)


_NUMERICS_SAID = []   # the round-off line, once a planning


def _numerics_check_process(goldens, methods, hparams=None, say=True):
    """`fedbayes numerics-check` in one process for ``methods``: its round-off line passed on (``say``),
    its failure raised as the DAG's one-line error."""
    import subprocess

    cmd = [sys.executable, "-m", "fedbayes.cli", "numerics-check", *methods, "--goldens", str(goldens), "--work", WORK]
    r = subprocess.run(cmd + (["--hparams", json.dumps(hparams)] if hparams is not None else []),
                       capture_output=True, text=True)
    lines = (r.stderr.strip() + "\n" + r.stdout.strip()).strip().splitlines()
    said = [l for l in lines if l.startswith("fedbayes numerics-check: ")]
    if r.returncode != 0:
        raise WorkflowError(said[0] if said else (lines[-1] if lines else f"exit status {r.returncode}"))
    for line in said if say else ():
        print(line, file=sys.stderr)
        _NUMERICS_SAID.append(line)


def changed_config(wc):
    """A finished run whose run.json records another configuration than params.yaml gives it now, or
    other numerics versions than the code declares, is stale, also where Snakemake has no record of
    the params it ran with (a fresh clone, a DVC pull): then a marker naming what changed is made an input
    (written by its own job, ``marker``), so the run reruns. A run whose record matches needs nothing (a clone
    adopts it). A run.json without ``numerics`` was trained at version 1 of each; one without
    ``defaults`` under the frozen record (catalog.default_changes). A damaged run.json or
    history.csv (unparseable, truncated, disagreeing with each other: fedbayes.runfiles) reruns the run
    the same way, the marker naming the file. A finished run is adopted only by code that computes its
    method's numbers as the code of the last numerics check did (numerics_checked)."""
    from fedbayes.study import default_changes, numerics
    from fedbayes.study import config_changes
    from fedbayes.runfiles import run_problems

    d = Path(run_dir(wc.experiment, wc.method, wc.point, wc.seed))
    have = [f for f in ("run.json", "history.csv") if (d / f).exists()]
    if not have:
        return []  # never trained (or deleted whole): Snakemake runs it for its missing outputs
    # one of the two deleted: a marker too (behind a table built on a sweep selection, Snakemake 9 does
    # not notice a train job's missing output by itself)
    changed = [f"{f} missing" for f in ("run.json", "history.csv") if f not in have] or run_problems(d)
    if not changed:
        info = json.loads((d / "run.json").read_text())
        cfg = run_config(config, wc.experiment, wc.method, int(wc.seed), wc.point)
        numerics_checked(wc.method, cfg["hparams"])
        changed = config_changes(info["config"], cfg, values=True)
        changed += [f"default of {wc.method}'s {k} {then!r} -> {now!r}"
                    for k, (then, now) in default_changes(wc.method, cfg["hparams"], info.get("defaults")).items()]
        ran, now = info.get("numerics") or {"core": 1, "method": 1}, numerics(wc.method)
        changed += [f"numerics version of {'the core' if k == 'core' else wc.method} {ran.get(k)} -> {now[k]}"
                    for k in sorted(now) if ran.get(k) != now[k]]
    return marker_input(f"{WORK}/changed/{wc.experiment}/{wc.method}/{wc.point}/seed{wc.seed}.txt",
                        "changed since this run: ", changed, [d / "run.json", d / "history.csv"])


rule train:
    input:
        changed=changed_config,
    output:
        history=f"{RUN}/history.csv",
        run=f"{RUN}/run.json",
    params:
        cfg=lambda wc: json.dumps(run_config(config, wc.experiment, wc.method, int(wc.seed), wc.point), sort_keys=True),
        numerics=numerics_key,
        out=lambda wc: run_dir(wc.experiment, wc.method, wc.point, wc.seed),
        partition=partition_file("{experiment}", "{seed}"),
    threads: 1
    log:
        f"{WORK}/logs/train/{{experiment}}/{{method}}/{{point}}/seed{{seed}}.log",
    shell:
        cli("train") + " --experiment {wildcards.experiment} --method {wildcards.method}"
        " --point {wildcards.point:q} --seed {wildcards.seed} --partition {params.partition:q}"
        " --out {params.out:q} --threads {threads} 2>&1 | tee {log:q}"
