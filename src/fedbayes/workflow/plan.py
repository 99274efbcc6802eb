"""What the rules plan, from the resolved configuration and the files at hand: a table's runs, data
availability, sweep reports, MLflow import groups, report categories, and the paper-scale paths refused at
another scale."""

from __future__ import annotations

import functools
import json
import re
import shlex
from pathlib import Path

import yaml

from fedbayes.fileio import load_yaml
from fedbayes.frontdoor import ConfigError
from fedbayes.study import split_variant
from fedbayes.study import comparable_experiments, experiment_config, paths
from fedbayes.study.schema import schema_file
from fedbayes.study.stamp import validated_before as stamped_before


def effective_text(config: dict) -> str:
    """The text of the effective configuration the CLI reads (work/params.effective.yaml): JSON, keys in
    params.yaml's order (an experiment's methods are the order of its reports' rows)."""
    return json.dumps(config, indent=1)


def effective_path(config: dict) -> Path:
    """Where the effective configuration lives: ``<work>/params.effective.yaml`` (paths.work at the scale)."""
    return Path(paths(config)["work"]) / "params.effective.yaml"


def validated_before(config: dict) -> bool:
    """Whether an earlier plan of this folder validated this very configuration with this code: its effective
    file holds ``effective_text(config)`` and the stamp beside it matches (``study.stamp``: the file's bytes,
    fedbayes' sources, the papers' published values, the schema, the plug-ins). The planner then skips
    validating it again; any other configuration, or one too broken to name its folder, is validated."""
    try:
        effective = effective_path(config)
        return stamped_before(effective, effective_text(config), schema_file(effective))
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError):
        return False


def experiment_datasets(params: dict, experiment: str) -> list[str]:
    """The datasets an experiment reads: its training set, then its OOD set if any."""
    e = experiment_config(params, experiment)
    return [d for d in (e["dataset"], e.get("ood")) if d]


def table_pairs(params: dict, spec: dict) -> dict[str, list[str]]:
    """A table's (experiment, method) pairs with runs, as {experiment: [methods]}: its comparable
    experiments (a not_comparable one carries published numbers only), each with the table's methods it
    runs (a prediction variant ``<method>@<variant>`` → its method)."""
    methods = list(dict.fromkeys(split_variant(m)[0] for m in spec["methods"]))
    return {e: [m for m in methods if m in experiment_config(params, e)["methods"]]
            for e in comparable_experiments(spec)}


def status_file(work, dataset: str) -> str:
    """The data step's record of whether ``dataset`` was obtained on this machine."""
    return f"{work}/data/{dataset}.json"


def data_status(work, dataset: str) -> dict | None:
    """The recorded data status of ``dataset``, or None where the data step has not run (or its record is
    unreadable: the step runs again)."""
    try:
        return json.loads(Path(status_file(work, dataset)).read_text())
    except (OSError, ValueError):
        return None


def availability(work, datasets) -> bool | None:
    """False when a dataset is recorded unavailable, None when one is not recorded yet (the data step is
    to run), True when every one was obtained."""
    statuses = [data_status(work, d) for d in datasets]
    if any(s is not None and not s.get("available") for s in statuses):
        return False
    return None if any(s is None for s in statuses) else True


def dvc_cached_outputs(root) -> set[str]:
    """The outputs dvc.yaml (in ``root``) keeps in DVC's cache, as written there: a dataset folder fetched
    by the data step among them is put into the cache after the fetch (``dvc commit <folder>``), so that
    ``dvc status`` reads it as up to date and ``dvc push`` sends it to a remote."""
    f = Path(root) / "dvc.yaml"
    if not f.is_file() or not (Path(root) / ".dvc").is_dir():
        return set()
    cached = set()
    for stage in (yaml.safe_load(f.read_text()) or {}).get("stages", {}).values():
        for o in stage.get("outs", []):
            path, opts = next(iter(o.items())) if isinstance(o, dict) else (o, {})
            if (opts or {}).get("cache", True) is not False:
                cached.add(str(path))
    return cached


def dvc_cache_command(folder: str, cached: set[str], lock: str, python: str) -> str:
    """The shell command that puts a fetched ``folder`` into DVC's cache when dvc.yaml caches it (``cached``,
    from dvc_cached_outputs), one at a time (``flock`` on ``lock``); ``:`` otherwise. DVC only caches here:
    content that differs from dvc.lock is refused (and left for ``dvc status`` to report), which the command
    says in one line without failing the fetch that succeeded."""
    if folder not in cached:
        return ":"
    q = shlex.quote(folder)
    return (f"flock {shlex.quote(lock)} {shlex.quote(python)} -m dvc commit -q {q}"
            f" || echo 'fedbayes: dvc commit {q} refused (see dvc status); the data step itself succeeded'")


def unrecorded(work, datasets) -> list[str]:
    """The status files of ``datasets`` the data step has yet to write."""
    return [status_file(work, d) for d in datasets if data_status(work, d) is None]


def run_inputs(run_dirs) -> tuple[list[str], list[str]]:
    """(the files a table reads of these runs: metrics.json and history.csv, the files whose loss reruns
    it: those and run.json)."""
    files = [f"{r}/metrics.json" for r in run_dirs] + [f"{r}/history.csv" for r in run_dirs]
    return files, files + [f"{r}/run.json" for r in run_dirs]


def sweeps_beside(table: str, spec: dict) -> str | None:
    """The folder under the reports where a table with ``sweeps: beside`` keeps its sweep reports (its
    own folder), else None."""
    return (table.rpartition("/")[0] or None) if spec.get("sweeps") == "beside" else None


def sweep_report(reports: str, table: str, spec: dict, experiment: str) -> str:
    """A table's sweep report of ``experiment``: reports/sweeps/<exp>.csv, or beside the table."""
    folder = sweeps_beside(table, spec)
    return f"{reports}/{folder}/sweep_{experiment}.csv" if folder else f"{reports}/sweeps/{experiment}.csv"


def job_rule(kind: str, name: str) -> str:
    """The rule of a table or toy: ``table_<name>``, "/" as "_" (table_fedlap_table1)."""
    return f"{kind}_{name.replace('/', '_')}"


def import_rule(group: str) -> str:
    """The MLflow import rule of a group (a table's name, "/" and the like as "_")."""
    return "mlflow_" + re.sub(r"[^A-Za-z0-9]", "_", group)


def import_groups(params: dict, rehearsal_group: str | None) -> dict[str, dict[str, list[str]]]:
    """Import group → {experiment: [methods]}: each table's pairs; with ``rehearsal_group`` (at rehearsal
    scale) one group of every (experiment, method), those in no table too. A clash of names: ValueError."""
    groups = {t: table_pairs(params, s) for t, s in params["tables"].items()}
    if rehearsal_group:
        if rehearsal_group in groups:
            raise ValueError(f"params: a table may not be named {rehearsal_group!r} at rehearsal scale "
                             "(the name of the MLflow import of every experiment)")
        groups[rehearsal_group] = {e: list(experiment_config(params, e)["methods"]) for e in params["experiments"]}
    if len({import_rule(g) for g in groups}) < len(groups):
        raise ValueError(f"params: two tables' names give the same MLflow import rule ({sorted(groups)})")
    return groups


def report_category(name: str, papers: Path) -> str:
    """The report category of a table or toy: its paper's title (``<papers>/<paper>/published.yaml``), or
    "Headline benchmark" for a table outside any paper's folder."""
    if "/" not in name:
        return "Headline benchmark"
    paper = name.split("/")[0]
    return _paper_title(str(Path(papers) / paper / "published.yaml"), paper)


@functools.lru_cache(maxsize=None)
def _paper_title(path: str, paper: str) -> str:
    """A paper's title, read once a process (a table's outputs ask for it each)."""
    f = Path(path)
    return (load_yaml(f.read_text()) or {}).get("title", paper) if f.exists() else paper   # libyaml: 10× safe_load


def paper_twin_pattern(reports: str, paper_reports: str, outputs) -> str:
    """Regex matching the paper-scale twin (under ``paper_reports``) of each output pattern under this
    scale's ``reports`` (wildcards: any text), never this scale's own outputs; one that matches nothing
    where there are none."""
    def twin(pattern):
        parts = re.split(r"\{[^}]*\}", pattern[len(reports) + 1:])
        return re.escape(f"{paper_reports}/") + ".+".join(re.escape(x) for x in parts)

    mine = sorted({str(f) for f in outputs if str(f).startswith(f"{reports}/")})
    if not mine:
        return "(?!)"
    return f"(?!{re.escape(reports)}/)(?:" + "|".join(f"(?:{twin(f)})" for f in mine) + ")"


def paper_output_refusal(path: str, reports: str, paper_reports: str, scale: str) -> str:
    """The one line refusing a paper-scale output asked for at another scale, naming the path to ask."""
    smoke = f"{reports}/{path[len(paper_reports) + 1:]}"
    return (f"{path} is a paper-scale output; this workflow runs at scale {scale}, whose outputs live under "
            f"{reports}/ so that they never overwrite the paper-scale ones: ask for {smoke} "
            f"(e.g. snakemake --cores all {smoke} --config scale={scale})")


def refuse_paper_output(path: str, reports: str, paper_reports: str, scale: str):
    """The input function of the rule that matches a paper-scale output asked for at another scale:
    stops the DAG before any job, with ``paper_output_refusal``'s line."""
    from snakemake.exceptions import WorkflowError

    raise WorkflowError(paper_output_refusal(path, reports, paper_reports, scale))
