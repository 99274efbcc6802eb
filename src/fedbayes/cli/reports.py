"""Subcommands that build reports from finished runs: ``table``, ``headline``, ``scorecard``,
``rehearsal-summary``, ``toy``, ``select`` and ``sweep-report``."""

from __future__ import annotations

import sys
from pathlib import Path

from fedbayes.cli.common import _params, _study
from fedbayes.fileio import write_text_atomic
from fedbayes.ownership import check_output_dir, check_outputs, check_own_kind, json_with, starts_with
from fedbayes.reports.headline import write_headline
from fedbayes.reports.rehearsal import TITLE as REHEARSAL_TITLE, build_summary
from fedbayes.reports.toys import TOYS, toy_csv, toy_files
from fedbayes.runpaths import selected_file
from fedbayes.study import ConfigError, experiment_config, paths
from fedbayes.study.model import Study


def cmd_table(args) -> None:
    study = _study(args)
    from fedbayes.reports.tally import table_summary
    from fedbayes.reports.tables import build_table, built_files, table_csv  # (lazy: matplotlib, pandas)

    table = study.tables[args.table]
    files = built_files(study, table, args.out)
    check_outputs(study.params, "--out", files, built_files(study, table, table_csv(study, table)), ".csv")
    check_elsewhere(args.out, table_csv(study, table), ".csv", starts_with(TABLE_HEAD, whole_line=False), "a table's CSV")
    md = Path(args.out).with_suffix(".md")
    if md.exists() and not Path(args.out).exists():   # a Markdown file of its own (README.md), not a table's
        raise ConfigError(f"--out {args.out}: {md} exists without {args.out} beside it and is not a table's; "
                          "give another path")
    df = build_table(study, table, out=args.out)
    print("\n".join(table_summary(df, args.table, built_files(study, table, args.out))), flush=True)


def cmd_headline(args) -> None:
    study = _study(args)
    p = study.params
    own = Path(study.paths["reports"]) / "metrics"
    check_output_dir(p, "--out", Path(args.out), own)
    plots = None if Path(args.out).resolve() == own.resolve() else Path(args.out).parent / "plots"   # beside --out
    if plots is not None:
        check_output_dir(p, "--out", plots, own.parent / "plots")   # (its curves, beside it)
    absent = []
    files = write_headline(study, args.table_csv, args.out, absent, plots)
    plots = [f for f in files if f.suffix == ".csv"]
    print(f"headline ({p['headline']['table']}): {len(files) - len(plots)} experiment × method files under "
          f"{args.out}/ for `dvc metrics show`, {len(plots)} curve files for `dvc plots show`", flush=True)
    if absent:
        print(f"  no curve (runs absent): {', '.join(dict.fromkeys(absent))}", flush=True)
    print("\n".join(f"  wrote {f}" for f in plots), flush=True)


def cmd_scorecard(args) -> None:
    study = _study(args)
    from fedbayes.reports.scorecard import TITLE, build_scorecard, terminal_line  # (lazy: pandas)

    check_report(study.params, args.out, "README.md", TITLE, "a scorecard")
    print(f"wrote {args.out}: {terminal_line(build_scorecard(study, args.out))}")


def cmd_rehearsal_summary(args) -> None:
    study = _study(args)
    if not study.stand_in:
        raise ConfigError(f"scale {study.scale}: the rehearsal summary is built at scale rehearsal (--scale rehearsal)")
    check_report(study.params, args.out, "summary.md", REHEARSAL_TITLE, "a rehearsal summary")
    rows = build_summary(study, args.out)
    bad = [f"{r['experiment']}/{r['method']}" for r in rows if not r["ok"]]
    print(f"wrote {args.out}: {len({r['experiment'] for r in rows})} experiments, {len(rows) - len(bad)} of "
          f"{len(rows)} experiment × method pairs ran on stand-in data" + (f"; not: {', '.join(bad)}" if bad else ""))
    if bad:
        sys.exit(1)


# the first columns of a table's CSV (and, the first three, of a sweep report's): an earlier one is written again
TABLE_HEAD = ("experiment", "method", "point", "round", "metric")


def check_elsewhere(out: str, own: str | Path, suffix: str, ours, what: str) -> None:
    """Outside its own file, ``--out`` may name a new file or an earlier one of ``what`` (``ours(text)``),
    never a file of the user's of another kind."""
    if Path(out).resolve() != Path(own).resolve():
        check_own_kind("--out", out, suffix, ours, what)


def check_report(p: dict, out: str, name: str, first_line: str, what: str) -> None:
    """A Markdown report's ``--out``: its own file (``<reports>/<name>``) or one outside the workflow's folders
    that is new or an earlier one of these reports (``first_line``), never another file (the project's
    README, a table's .md, a run's file)."""
    own = Path(paths(p)["reports"]) / name
    check_outputs(p, "--out", [Path(out)], [own], ".md")
    check_elsewhere(out, own, ".md", starts_with(first_line), what)


def cmd_toy(args) -> None:
    p = _params(args)
    if args.name not in TOYS:
        raise SystemExit(f"fedbayes toy: unknown toy {args.name!r}; known: {sorted(TOYS)}")
    if args.name not in (p.get("toys") or {}):
        raise ConfigError(f"toy {args.name!r}: params.yaml has no `toys.{args.name}` block (its toys: "
                          f"{', '.join(p.get('toys') or {}) or 'none'})")
    # the toy's own files, or paths outside the workflow's folders (fedbayes.ownership), as `table --out`
    check_outputs(p, "--out", toy_files(p, args.name, args.out), toy_files(p, args.name, toy_csv(p, args.name)), ".csv")
    md = Path(args.out).with_suffix(".md")
    if md.exists() and not Path(args.out).exists():   # a Markdown file of its own (README.md), not a toy's
        raise ConfigError(f"--out {args.out}: {md} exists without {args.out} beside it and is not a toy's; "
                          "give another path")
    print(TOYS[args.name].build(p, args.out).to_string(index=False))


def cmd_select(args) -> None:
    from fedbayes.reports.selection import write_selection  # (lazy: pandas)

    p = _params(args)
    own = selected_file(paths(p), args.experiment, args.method)
    if args.out:
        check_outputs(p, "--out", [Path(args.out)], [own], ".json")
        check_elsewhere(args.out, own, ".json", json_with("experiment", "method", "point"), "a selection")
    sel = write_selection(p, args.experiment, args.method, args.out)
    if "from" in sel["criterion"]:
        print(f"{args.experiment}/{args.method}: {sel['point']} (selected on {sel['criterion']['from']})")
    for c in sel["candidates"]:
        print(f"{args.experiment}/{args.method} {c['point']:>20}: {sel['criterion']['metric']} = {c['value']:.4f}"
              + ("   <- selected" if c["point"] == sel["point"] else ""))


def cmd_sweep_report(args) -> None:
    study = _study(args)
    p = study.params
    from fedbayes.reports.selection import sweep_frame  # (lazy: pandas)

    check_outputs(p, "--out", [Path(args.out)], sweep_report_files(study, args.experiment), ".csv")
    if not any(Path(args.out).resolve() == Path(f).resolve() for f in sweep_report_files(study, args.experiment)):
        check_own_kind("--out", args.out, ".csv", starts_with(TABLE_HEAD[:3], whole_line=False), "a sweep report")
    df = sweep_frame(p, args.experiment, list(experiment_config(p, args.experiment)["methods"]))
    write_text_atomic(args.out, df.to_csv(index=False, float_format="%.6g"))
    print(df.to_string(index=False))


def sweep_report_files(study: Study, experiment: str) -> list[Path]:
    """Where the workflow keeps an experiment's sweep report: ``<reports>/sweeps/<experiment>.csv``, and
    ``<reports>/<folder>/sweep_<experiment>.csv`` beside each table with ``sweeps: beside``."""
    reports = Path(study.paths["reports"])
    folders = sorted({t.rpartition("/")[0] for t, s in study.tables.items() if s.sweeps == "beside"} - {""})
    return [reports / "sweeps" / f"{experiment}.csv"] + [reports / f / f"sweep_{experiment}.csv" for f in folders]
