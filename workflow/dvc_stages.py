"""The `params:`, run `deps:` and `outs:` of dvc.yaml's table and toy stages, generated from params.yaml as the Snakemake rules read it.

A table stage asks Snakemake for some tables (the `${reports_dir}/<table>.csv` in its `cmd`). Their jobs
read the run settings, the selection rule, the tables' own `tables.<name>` specs, the experiments the
tables run and those they take their selection from (fedbayes.study ``comparable_experiments``,
``selection_from``), and the tables' methods those experiments run: a table reads only its own methods'
runs and selections (workflow/rules/report.smk). A table no stage asks for (a user's own) gets a stage of
its own, ``table_<name>``, added under ``stages:``. The headline
table's stage also reads `headline`; a toy's stage, its `toys.<name>` block. So an edit marks in `dvc status` the stages whose tables Snakemake
reruns, and no other. DVC splits a key at its dots: a dot in a name is written `?` (DVC matches keys as
globs), e.g. `experiments.fmnist10-labeldir0?01-k20`.

A table stage also depends on the committed runs its tables read: the folder ``<runs>/<experiment>/<method>``
of each of its experiments × its tables' methods that git holds files under (without git: that holds a run
file on disk), so a deleted or damaged run.json, history.csv, metrics.json or selected.json flags the stage
in `dvc status`, as it makes Snakemake rerun the run. Only folders that exist are listed: DVC refuses a
stage whose dependency is missing after its command ran, and an experiment never run here (its data not
downloadable) has none; a run committed later enters at the next `make dvc.yaml` (the check below names it).
A stage's `outs:` are the files its tables (or toys) write: each table's CSV, Markdown and figures
(fedbayes.study.table_figures), the headline table's curve CSVs (fedbayes.reports.headline.plot_files), a
toy's figures (fedbayes.reports.toys.TOYS).

    python workflow/dvc_stages.py           # rewrite the generated parts of the stages (`make dvc.yaml`)
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


RUNS_HEADER = ("      # the committed runs its tables read, generated by `make dvc.yaml`: a deleted or edited run file "
               "flags the stage\n")


def committed_runs(root: Path, runs: str) -> set[tuple[str, str]]:
    """The (experiment, method) folders under the paper-scale ``runs`` root that hold committed run files:
    those git tracks (deleted ones included, so that a deletion is seen rather than dropped), or, outside a
    git checkout, those holding a run file on disk."""
    import subprocess

    base = root.resolve()
    try:
        top = subprocess.run(["git", "-C", str(base), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        tracked = (subprocess.run(["git", "-C", str(base), "ls-files", "-z", "--", runs], capture_output=True,
                                  text=True, check=True).stdout.split("\0")
                   if top.returncode == 0 and Path(top.stdout.strip()).resolve() == base else None)
    except (OSError, subprocess.CalledProcessError):
        tracked = None
    if tracked is None:
        tracked = [str(f.relative_to(base)) for f in (base / runs).rglob("*")
                   if f.name in ("run.json", "history.csv", "metrics.json", "selected.json")]
    depth = len(Path(runs).parts)
    return {(f.parts[depth], f.parts[depth + 1]) for f in map(Path, tracked) if len(f.parts) > depth + 2}


def stage_runs(p: dict, names: list[str], committed: set[tuple[str, str]]) -> list[str]:
    """The committed run folders ``<runs>/<experiment>/<method>`` the tables ``names`` read: their
    experiments (and those they take their selection from) × their methods each experiment runs."""
    from fedbayes.study import split_variant
    from fedbayes.study import comparable_experiments

    runs = paths_runs(p)
    shown = {split_variant(m)[0] for name in names for m in p["tables"][name]["methods"]}
    out = []
    for name in names:
        for e in comparable_experiments(p["tables"][name]):
            for x in (e, p["experiments"][e].get("selection_from")):
                for m in (p["experiments"].get(x, {}).get("methods") or {}) if x else ():
                    d = f"{runs}/{x}/{m}"
                    if m in shown and (x, m) in committed and d not in out:
                        out.append(d)
    return out


def stage_outs(p: dict, names: list[str], toys: list[str]) -> list[str]:
    """What the stage's tables write (each table's CSV, Markdown, figures; the headline table's curve
    CSVs) or its toys (CSV, Markdown, figures), under ``${reports_dir}``."""
    from fedbayes.study import paths, table_figures

    outs = []
    for name in names:
        outs += [f"${{reports_dir}}/{name}.{x}" for x in ("csv", "md")]
        outs += [f"${{reports_dir}}/figures/{f}" for f in table_figures(name, p["tables"][name])]
    if (p.get("headline") or {}).get("table") in names:
        from fedbayes.reports.headline import plot_files

        reports = Path(paths(p)["reports"])
        outs += [f"${{reports_dir}}/{f.relative_to(reports).as_posix()}" for f in plot_files(p)]
    if toys:
        from fedbayes.reports.toys import TOYS

        for t in toys:
            outs += [f"${{reports_dir}}/{t}.{x}" for x in ("csv", "md")]
            outs += [f"${{reports_dir}}/figures/{f}" for f in TOYS[t].figures]
    return outs


def render_outs(outs: list[str]) -> str:
    return "".join(f"      - {o}:\n          cache: false\n" for o in outs)


def block(text: str, stage: str, name: str) -> re.Match | None:
    """The lines of the stage's ``name:`` block (a list indented 6 spaces; group 1), up to its next key."""
    return re.search(rf"^  {re.escape(stage)}:\n(?:(?!  \S).*\n)*?    {name}:\n((?:      .*\n)*)", text, re.M)


def generate(text: str, p: dict, root: Path = ROOT) -> tuple[str, list[str]]:
    """dvc.yaml's ``text`` with every table stage's params list, committed-run deps and outs generated (a
    toy stage's params and outs); the stages it changed."""
    import yaml

    committed = committed_runs(root, paths_runs(p))
    changed = []
    for stage, body in yaml.safe_load(text)["stages"].items():
        cmd = str(body.get("cmd", ""))
        toys = []
        if names := stage_tables(cmd, p["tables"]):
            keys = stage_params(p, names)
        elif toys := stage_tables(cmd, p.get("toys", {})):   # a toy reads its own block alone
            keys = [f"toys.{t}" for t in toys]
        else:
            continue
        before = text
        # the stage's `params:` block: from its line to the stage's next key (blank lines kept in it)
        m = re.search(rf"^  {re.escape(stage)}:\n(?:(?!  \S).*\n)*?    params:\n((?:(?:      .*|\s*)\n)*?)(?=    \S)",
                      text, re.M)
        if not m:
            raise SystemExit(f"dvc.yaml: stage {stage} has no params: block to generate")
        text = text[:m.start(1)] + render(keys) + text[m.end(1):]
        if names:   # its deps: the hand-written ones (code, data, notes), then the committed runs
            m = block(text, stage, "deps")
            if not m:
                raise SystemExit(f"dvc.yaml: stage {stage} has no deps: block to generate")
            own = m.group(1).split(RUNS_HEADER)[0]
            runs = stage_runs(p, names, committed)
            text = text[:m.start(1)] + own + (RUNS_HEADER + "".join(f"      - {d}\n" for d in runs) if runs else "") \
                + text[m.end(1):]
        m = block(text, stage, "outs")
        if not m:
            raise SystemExit(f"dvc.yaml: stage {stage} has no outs: block to generate")
        text = text[:m.start(1)] + render_outs(stage_outs(p, names, toys)) + text[m.end(1):]
        if text != before:
            changed.append(stage)
    staged = {t for body in yaml.safe_load(text)["stages"].values() for t in stage_tables(str(body.get("cmd", "")), p["tables"])}
    for name in [t for t in p["tables"] if t not in staged]:   # a table of the user's own: a stage of its own
        stage = "table_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
        m = re.search(r"^stages:\n(?:(?:  .*|\s*)\n)*", text, re.M)
        text = text[:m.end()] + own_stage(p, stage, name, committed, root) + text[m.end():]
        changed.append(stage)
    return text, changed


def paths_runs(p: dict) -> str:
    """The paper-scale runs root (params.yaml ``paths.runs``): where the committed runs live."""
    from fedbayes.study import paths

    return paths({**p, "scale": "paper"})["runs"]


def plugin_folders(p: dict, name: str, root: Path) -> list[str]:
    """The folders of the installed packages (outside fedbayes) whose methods a table shows: their code
    decides the table's numbers as src/fedbayes does (a numerics bump in a plug-in reruns its runs), so
    they are the stage's deps too; relative to the repository where inside it, else absolute (DVC reads
    an absolute dependency outside the repository)."""
    import importlib.util

    from fedbayes.methods.spec import plugin_origin
    from fedbayes.study import split_variant

    out = []
    for method in dict.fromkeys(split_variant(m)[0] for m in p["tables"][name].get("methods", [])):
        for module in (plugin_origin(method) or (None, None, []))[2]:
            spec = importlib.util.find_spec(module)
            where = list(spec.submodule_search_locations or []) if spec else []
            folder = Path(where[0] if where else spec.origin).resolve() if spec and (where or spec.origin) else None
            if folder is not None:
                inside = folder.is_relative_to(root.resolve())
                out.append(str(folder.relative_to(root.resolve()) if inside else folder))
    return list(dict.fromkeys(out))


def own_stage(p: dict, stage: str, name: str, committed: set[tuple[str, str]], root: Path = ROOT) -> str:
    """dvc.yaml's stage of a table no stage asks for (a user's own): Snakemake builds it, its params
    and committed-run deps generated as every table stage's, the folders of the plug-ins whose methods it
    shows, its CSV, Markdown and figures its outputs."""
    runs = stage_runs(p, [name], committed)
    code = ["Snakefile", "workflow", "profiles", "src/fedbayes", *plugin_folders(p, name, root)]
    return (f"  {stage}:\n"
            f"    cmd: python3 workflow/dvc_stages.py --check && snakemake --cores all ${{reports_dir}}/{name}.csv\n"
            "    deps:\n" + "".join(f"      - {d}\n" for d in code)
            + (RUNS_HEADER + "".join(f"      - {d}\n" for d in runs) if runs else "")
            + "    params:\n" + render(stage_params(p, [name]))
            + "    outs:\n" + render_outs(stage_outs(p, [name], [])))


def main(argv=None) -> None:
    from fedbayes.study import load_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say whether dvc.yaml is as generated")
    ap.add_argument("--root", default=".", help="the repository (default: the current directory)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    dvc = root / "dvc.yaml"
    text, changed = generate(dvc.read_text(), load_params(root / "params.yaml"), root)
    if args.check:
        if changed:
            sys.exit(f"dvc.yaml: the params, committed runs or outputs of stage(s) {', '.join(changed)} differ from "
                     f"what params.yaml's tables read and write; run `make dvc.yaml` (python workflow/dvc_stages.py), "
                     f"then dvc repro again")
        return
    if changed:
        dvc.write_text(text)
    print(f"dvc.yaml: {len(changed)} stage(s) rewritten" + (f" ({', '.join(changed)})" if changed else ""))


if __name__ == "__main__":
    main()
