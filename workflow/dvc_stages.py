"""dvc.yaml's table stages, generated whole from params.yaml's tables and the paper folders; the `params:` and
`outs:` of its hand-written (toy) stages.

A paper is one folder, ``papers/<paper>/`` (published values, authors' code cells, notes, causes, evidence:
fedbayes.published), and its tables are ``tables.<paper>/<table>`` in params.yaml. Between the lines
``# ---- generated stages`` and ``# ---- end of the generated stages`` of dvc.yaml, this writes one stage per
paper, ``<paper>_tables``, asking Snakemake for its tables (the `${reports_dir}/<table>.csv` of its `cmd`); the
headline table's stage (params ``headline.table``, named as the table) with its DVC metrics; a stage of its
own, ``table_<name>``, for a table of no paper folder (a user's own); and the scorecard's stage, which reads
every table. So adding a paper is its folder, its tables in params.yaml and `make dvc.yaml`.

A table stage's `params:` are the keys its jobs read: the run settings, the selection rule, the tables' own
`tables.<name>` specs, the experiments the tables run and those they take their selection from
(fedbayes.study ``comparable_experiments``, ``selection_from``), and the tables' methods those experiments
run (a table reads only its own methods' runs: workflow/rules/report.smk); the headline table's stage also
reads `headline`, a toy's stage its `toys.<name>` block. So an edit marks in `dvc status` the stages whose
tables Snakemake reruns, and no other. DVC splits a key at its dots: a dot in a name is written `?` (DVC
matches keys as globs), e.g. `experiments.fmnist10-labeldir0?01-k20`.

Its `deps:` are the raw data its experiments read that the `data` stage fetches, the workflow and the
package (and the folders of the plug-ins whose methods it shows), the paper files its tables read (their
notes, the published values they cite, the authors' code cells), and the committed runs its tables read:
the folder ``<runs>/<experiment>/<method>`` of each of its experiments × its tables' methods that git holds
files under (without git: that holds a run file on disk), so a deleted or damaged run.json, history.csv,
metrics.json or selected.json flags the stage in `dvc status`, as it makes Snakemake rerun the run. Only
folders that exist are listed: DVC refuses a stage whose dependency is missing after its command ran, and an
experiment never run here (its data not downloadable) has none; a run committed later enters at the next
`make dvc.yaml` (the check below names it). Its `outs:` are the files its tables write: each table's CSV,
Markdown and figures (fedbayes.study.table_figures), the headline table's curve CSVs
(fedbayes.reports.headline.plot_files); a toy's, its CSV, Markdown and figures (fedbayes.reports.toys.TOYS).

    python workflow/dvc_stages.py           # write the generated stages (`make dvc.yaml`)
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
import textwrap
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


BEGIN = ("  # ---- generated stages: written whole by `make dvc.yaml` (workflow/dvc_stages.py) from params.yaml's\n"
         "  # tables and the paper folders (papers/<paper>/); edit those, not these\n")
END = "  # ---- end of the generated stages\n"
CODE = ["Snakefile", "workflow", "profiles", "src/fedbayes"]   # what every table job runs
SCORECARD_CODE = ["src/fedbayes/reports/scorecard.py", "src/fedbayes/reports/tally.py", "src/fedbayes/reports/claims.py"]


def paper_of(name: str, root: Path) -> str | None:
    """The paper whose folder holds table ``name`` (``<paper>/<table>`` with a ``papers/<paper>/published.yaml``),
    or None."""
    paper = name.split("/")[0] if "/" in name else None
    return paper if paper and (root / "papers" / paper / "published.yaml").is_file() else None


def table_stages(p: dict, root: Path) -> dict[str, list[str]]:
    """``{stage: its tables}`` in params.yaml's order: a paper's tables in ``<paper>_tables``, the headline table
    (outside a paper folder) in a stage named after it, any other table in ``table_<name>``."""
    headline = (p.get("headline") or {}).get("table")
    stages: dict[str, list[str]] = {}
    for name in p["tables"]:
        paper = paper_of(name, root)
        stage = (f"{paper}_tables" if paper else re.sub(r"[^A-Za-z0-9_]", "_", name) if name == headline
                 else "table_" + re.sub(r"[^A-Za-z0-9_]", "_", name))
        stages.setdefault(stage, []).append(name)
    return stages


def data_deps(p: dict, names: list[str], data_outs: list[str]) -> list[str]:
    """The `data` stage's outputs (``<raw>/<dataset>``) that the tables' experiments (and those they take
    their selection from) read."""
    from fedbayes.study import comparable_experiments, paths
    from fedbayes.workflow.plan import experiment_datasets

    raw = paths({**p, "scale": "paper"})["raw"]
    read = {f"{raw}/{d}" for name in names for e in comparable_experiments(p["tables"][name])
            for x in (e, p["experiments"][e].get("selection_from")) if x for d in experiment_datasets(p, x)}
    return [o for o in data_outs if o in read]


def paper_deps(p: dict, names: list[str], root: Path) -> list[str]:
    """The paper files the tables read: their notes, the published values they cite (``published:``
    ``<paper>:<table>`` → ``papers/<paper>/published.yaml``) and every paper's authors' code cells."""
    files = [p["tables"][n]["notes"] for n in names if p["tables"][n].get("notes")]
    files += [f"papers/{ref.split(':')[0]}/published.yaml" for n in names for ref in p["tables"][n].get("published", [])]
    files += sorted(f.relative_to(root).as_posix() for f in (root / "papers").glob("*/authors_code.yaml"))
    return list(dict.fromkeys(files))


def table_stage(p: dict, stage: str, names: list[str], committed: set[tuple[str, str]], data_outs: list[str],
                root: Path) -> str:
    """dvc.yaml's stage asking Snakemake for the tables ``names``: its command, deps, params, outs (and the
    headline table's metrics)."""
    headline = (p.get("headline") or {}).get("table") in names
    paper = paper_of(names[0], root)
    if paper:
        from fedbayes.fileio import load_yaml

        title = load_yaml((root / "papers" / paper / "published.yaml").read_text()).get("title", paper)
        about = f"{title}: the tables of papers/{paper}/"
    elif headline:
        about = "The headline table (params.yaml `headline`), with its DVC metrics and plots"
    else:
        about = "A table of no paper folder (a user's own)"
    targets = [f"${{reports_dir}}/{n}.csv" for n in names] + (["${reports_dir}/metrics"] if headline else [])
    code = [*CODE, *dict.fromkeys(f for n in names for f in plugin_folders(p, n, root))]
    runs = stage_runs(p, names, committed)
    out = (f"  {stage}:\n" + "".join(f"    # {line}\n" for line in textwrap.wrap(about + ".", 104))
           + f"    cmd: python3 workflow/dvc_stages.py --check && snakemake --cores all {' '.join(targets)}\n"
           "    deps:\n" + "".join(f"      - {d}\n" for d in [*data_deps(p, names, data_outs), *code, *paper_deps(p, names, root)])
           + (RUNS_HEADER + "".join(f"      - {d}\n" for d in runs) if runs else "")
           + "    params:\n" + render(stage_params(p, names))
           + "    outs:\n" + render_outs(stage_outs(p, names, [])))
    if headline:
        out += ("    metrics:\n      - ${reports_dir}/metrics:      # <experiment>/<method>.json: a row each in "
                "`dvc metrics show`\n          cache: false\n")
    return out


def scorecard_stage(p: dict, root: Path) -> str:
    """dvc.yaml's scorecard stage: reports/README.md from every table's CSV, the causes files (the
    scorecard's, then each paper's), its alternate columns, its code and every paper's published values."""
    from fedbayes.study import paths

    reports = paths({**p, "scale": "paper"})["reports"]
    sc = p.get("scorecard") or {}
    papers = dict.fromkeys(x for n in p["tables"] if (x := paper_of(n, root)))
    deps = [f"{reports}/{n}.csv" for n in p["tables"]]
    deps += [sc["causes"]] if sc.get("causes") else []
    deps += [f"papers/{x}/causes.yaml" for x in papers if (root / "papers" / x / "causes.yaml").is_file()]
    deps += [a["csv"] for a in sc.get("alternates", [])]
    deps += [*SCORECARD_CODE, *sorted(f.relative_to(root).as_posix() for f in (root / "papers").glob("*/published.yaml"))]
    return ("  scorecard:\n"
            f"    # {reports}/README.md: which published cells come back (counted from every table above), why the\n"
            "    # others do not (the causes files), and the papers' claims checked on our numbers.\n"
            f"    cmd: snakemake --cores all {reports}/README.md\n"
            "    deps:\n" + "".join(f"      - {d}\n" for d in deps)
            + "    params:\n      - scorecard\n"
            + f"    outs:\n      - {reports}/README.md:\n          cache: false\n")


def generated_stages(p: dict, committed: set[tuple[str, str]], data_outs: list[str], root: Path) -> dict[str, str]:
    """``{stage: its text}``: every table stage, then the scorecard's."""
    out = {s: table_stage(p, s, names, committed, data_outs, root) for s, names in table_stages(p, root).items()}
    if p.get("scorecard") is not None:
        out["scorecard"] = scorecard_stage(p, root)
    return out


def stage_blocks(text: str) -> dict[str, str]:
    """``{stage: its lines}`` of a run of stages (each from its ``  <name>:`` line to the next)."""
    starts = [m for m in re.finditer(r"^  ([^\s#][^:]*):\n", text, re.M)]
    return {m.group(1): text[m.start():(starts[i + 1].start() if i + 1 < len(starts) else len(text))]
            for i, m in enumerate(starts)}


def generate(text: str, p: dict, root: Path = ROOT) -> tuple[str, list[str]]:
    """dvc.yaml's ``text`` with its generated stages written again, and the params and outs of its other
    (toy) stages; the stages it changed (added, rewritten or removed)."""
    import yaml

    root = Path(root)
    m = re.search(rf"^{re.escape(BEGIN)}((?:.*\n)*?){re.escape(END)}", text, re.M)
    if not m:
        raise SystemExit(f"dvc.yaml: no generated stages under stages: (the lines {BEGIN.strip()!r} and "
                         f"{END.strip()!r}); add the two lines where the table stages go")
    committed = committed_runs(root, paths_runs(p))
    data = (yaml.safe_load(text)["stages"].get("data") or {}).get("outs", [])
    data_outs = [next(iter(o)) if isinstance(o, dict) else o for o in data]
    old, new = stage_blocks(m.group(1)), generated_stages(p, committed, data_outs, root)
    changed = [s for s in new if old.get(s) != new[s]] + [s for s in old if s not in new]
    text = text[:m.start(1)] + "".join(new.values()) + text[m.end(1):]
    for stage, body in yaml.safe_load(text)["stages"].items():   # the hand-written ones: a toy's params, outs
        if stage in new or not (toys := stage_tables(str(body.get("cmd", "")), p.get("toys", {}))):
            continue
        before = text
        m = block(text, stage, "params")
        if not m:
            raise SystemExit(f"dvc.yaml: stage {stage} has no params: block to generate")
        text = text[:m.start(1)] + render([f"toys.{t}" for t in toys]) + text[m.end(1):]   # a toy reads its own block alone
        m = block(text, stage, "outs")
        if not m:
            raise SystemExit(f"dvc.yaml: stage {stage} has no outs: block to generate")
        text = text[:m.start(1)] + render_outs(stage_outs(p, [], toys)) + text[m.end(1):]
        if text != before:
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
