"""The `params:` lists of dvc.yaml's table and toy stages, generated from params.yaml as the Snakemake rules read it.

A table stage asks Snakemake for some tables (the `${reports_dir}/<table>.csv` in its `cmd`). Their jobs
read the run settings, the selection rule, the tables' own `tables.<name>` specs, the experiments the
tables run and those they take their selection from (fedbayes.study ``comparable_experiments``,
``selection_from``), and the tables' methods those experiments run: a table reads only its own methods'
runs and selections (workflow/rules/report.smk). A table no stage asks for (a user's own) gets a stage of
its own, ``table_<name>``, added under ``stages:``. The headline
table's stage also reads `headline`; a toy's stage, its `toys.<name>` block. So an edit marks in `dvc status` the stages whose tables Snakemake
reruns, and no other. DVC splits a key at its dots: a dot in a name is written `?` (DVC matches keys as
globs), e.g. `experiments.fmnist10-labeldir0?01-k20`.

    python workflow/dvc_stages.py           # rewrite the table stages' params lists (`make dvc.yaml`)
    python workflow/dvc_stages.py --check   # exit 1, naming the stages, where dvc.yaml differs

Each table stage runs the check before Snakemake, so a table that gained an experiment after dvc.yaml was
generated stops `dvc repro` with this command to run, instead of leaving that experiment's edits unseen.
tests/test_dvc_stages.py fails when the committed dvc.yaml differs from what this writes.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_SETTINGS = ["scale", "seeds", "std_ddof"]   # what every run and table reads (device, batch_clients: no rerun)
HEADER = "      # generated from params.yaml by `make dvc.yaml` (workflow/dvc_stages.py): edit params.yaml, not this\n"


def stage_tables(cmd: str, tables: dict) -> list[str]:
    """The params.yaml tables (or toys) a stage's command asks Snakemake for (``${reports_dir}/<name>.csv``)."""
    return [t for t in re.findall(r"\$\{reports_dir\}/(\S+)\.csv", cmd) if t in tables]


def key(section: str, name: str, entries: dict) -> str:
    """DVC's key of ``section.name``: a dot in the name written as the glob ``?``, which must match it alone."""
    k = name.replace(".", "?")
    if k != name and fnmatch.filter(entries, k) != [name]:
        raise SystemExit(f"params.yaml: {section}.{name}: its DVC key {section}.{k} also matches "
                         f"{[n for n in fnmatch.filter(entries, k) if n != name]}; rename one")
    return f"{section}.{k}"


def stage_params(p: dict, names: list[str]) -> list:
    """The params keys the tables ``names`` read (DVC's list: strings, and the smoke overlay's file)."""
    from fedbayes.study import split_variant
    from fedbayes.study import comparable_experiments

    experiments = []
    for name in names:
        for e in comparable_experiments(p["tables"][name]):
            for x in (e, p["experiments"][e].get("selection_from")):
                if x and x not in experiments:
                    experiments.append(x)
    # a table reads only its own methods' runs (workflow/rules/report.smk), each on its experiments
    shown = {split_variant(m)[0] for name in names for m in p["tables"][name]["methods"]}
    methods = [m for m in p.get("methods", {})
               if m in shown and any(m in p["experiments"][e]["methods"] for e in experiments)]
    keys = [*RUN_SETTINGS, {"params.smoke.yaml": ["smoke"]}, "selection"]
    keys += [key("experiments", e, p["experiments"]) for e in experiments]
    keys += [f"methods.{m}" for m in methods]
    keys += [f"tables.{t}" for t in names]
    if (p.get("headline") or {}).get("table") in names:
        keys.append("headline")
    return keys


def render(keys: list) -> str:
    lines = []
    for k in keys:
        if isinstance(k, dict):
            (f, ks), = k.items()
            lines += [f"      - {f}:"] + [f"          - {x}" for x in ks]
        else:
            lines.append(f"      - {k}")
    return HEADER + "\n".join(lines) + "\n"


def generate(text: str, p: dict) -> tuple[str, list[str]]:
    """dvc.yaml's ``text`` with every table stage's params list generated; the stages it changed."""
    import yaml

    changed = []
    for stage, body in yaml.safe_load(text)["stages"].items():
        cmd = str(body.get("cmd", ""))
        if names := stage_tables(cmd, p["tables"]):
            keys = stage_params(p, names)
        elif toys := stage_tables(cmd, p.get("toys", {})):   # a toy reads its own block alone
            keys = [f"toys.{t}" for t in toys]
        else:
            continue
        # the stage's `params:` block: from its line to the stage's next key
        m = re.search(rf"^  {re.escape(stage)}:\n(?:(?!  \S).*\n)*?    params:\n((?:(?:      .*|\s*)\n)*?)(?=    \S)",
                      text, re.M)
        if not m:
            raise SystemExit(f"dvc.yaml: stage {stage} has no params: block to generate")
        new = render(keys)
        if m.group(1) != new:
            changed.append(stage)
            text = text[:m.start(1)] + new + text[m.end(1):]
    staged = {t for body in yaml.safe_load(text)["stages"].values() for t in stage_tables(str(body.get("cmd", "")), p["tables"])}
    for name in [t for t in p["tables"] if t not in staged]:   # a table of the user's own: a stage of its own
        stage = "table_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
        m = re.search(r"^stages:\n(?:(?:  .*|\s*)\n)*", text, re.M)
        text = text[:m.end()] + own_stage(p, stage, name) + text[m.end():]
        changed.append(stage)
    return text, changed


def own_stage(p: dict, stage: str, name: str) -> str:
    """dvc.yaml's stage of a table no stage asks for (a user's own): Snakemake builds it, its params
    generated as every table stage's, its CSV, Markdown and figures its outputs."""
    from fedbayes.study import table_figures

    outs = [f"${{reports_dir}}/{name}.{x}" for x in ("csv", "md")]
    outs += [f"${{reports_dir}}/figures/{f}" for f in table_figures(name, p["tables"][name])]
    return (f"  {stage}:\n"
            f"    cmd: python3 workflow/dvc_stages.py --check && snakemake --cores all ${{reports_dir}}/{name}.csv\n"
            "    deps:\n" + "".join(f"      - {d}\n" for d in ("Snakefile", "workflow", "profiles", "src/fedbayes"))
            + "    params:\n" + render(stage_params(p, [name]))
            + "    outs:\n" + "".join(f"      - {o}:\n          cache: false\n" for o in outs))


def main(argv=None) -> None:
    from fedbayes.study import load_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say whether dvc.yaml is as generated")
    ap.add_argument("--root", default=".", help="the repository (default: the current directory)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    dvc = root / "dvc.yaml"
    text, changed = generate(dvc.read_text(), load_params(root / "params.yaml"))
    if args.check:
        if changed:
            sys.exit(f"dvc.yaml: the params of stage(s) {', '.join(changed)} differ from what params.yaml's "
                     f"tables read; run `make dvc.yaml` (python workflow/dvc_stages.py), then dvc repro again")
        return
    if changed:
        dvc.write_text(text)
    print(f"dvc.yaml: {len(changed)} stage(s) rewritten" + (f" ({', '.join(changed)})" if changed else ""))


if __name__ == "__main__":
    main()
