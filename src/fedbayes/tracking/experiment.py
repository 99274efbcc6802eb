"""An MLflow experiment per (scale, experiment): opened once per import process, created where missing
(get-or-create: two importers racing into an empty store both end with the one experiment), and tagged
with its description, its page kind and the runs table's shared view."""

from __future__ import annotations

import json
from pathlib import Path

from fedbayes.study import experiment_config, paths, stand_in_size, table_figures
from fedbayes.tracking.store import (TrackingUnavailable, damaged, is_server, sqlite_path, tracking_uri,
                                     with_retry)

# MLflow 3 opens an experiment on the view its tag ``mlflow.experimentKind`` names; without it, on an empty
# GenAI dashboard (traces). "custom_model_development" is its "Model training" kind: the runs table.
EXPERIMENT_KIND = "custom_model_development"
# MLflow 3.17's UI keeps a browser-wide GenAI / Model training switch that overrides the tag (GenAI
# until switched): ``#/experiments/<id>/runs?workflowType=machine_learning`` opens the runs table, and
# ``&viewStateShareKey=fedbayes`` with the columns below (a shared view: experiment tag
# ``mlflow.sharedViewState.<key>``, JSON of the runs table's state), sorted by run name (method, seed,
# point): the final accuracy (a series' latest value: its last round, the value metrics.json holds; the
# default columns show no param or metric), its published value and verdict and whether the run's point is
# the selected one. MLflow groups the columns by kind (metrics, then tags in name order): one metric, so that
# the tags are on the first screen.
VIEW_KEY = "fedbayes"
VIEW_STATE = {"selectedColumns": ["metrics.`test/acc`", "tags.`published/test/acc`", "tags.`verdict/test/acc`",
                                  "tags.`selected`"],
              "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True, "runsHiddenMode": "SHOW_ALL"}


def experiment_name(p: dict, experiment: str) -> str:
    return experiment if p["scale"] == "paper" else f"{p['scale']}-{experiment}"


def get_or_create(client, name: str, artifact_location: str | None) -> str:
    """The id of experiment ``name``, created if missing. Another importer may create it between the
    look-up and the create (RESOURCE_ALREADY_EXISTS, or a unique-constraint error from a SQL store):
    then its experiment is the one."""
    e = client.get_experiment_by_name(name)
    if e is not None:
        return e.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except Exception as err:
        text = str(err)
        if not any(w in text for w in ("RESOURCE_ALREADY_EXISTS", "already exists", "UNIQUE constraint")):
            raise
        e = client.get_experiment_by_name(name)
        if e is None:
            raise
        return e.experiment_id


def open_experiment(session: dict, p: dict, experiment: str):
    """(client, experiment id) of ``experiment`` in the store, opened once per ``session`` (a dict kept
    between the runs of one import process)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(p)
    exp_name = experiment_name(p, experiment)
    if "client" in session and exp_name in session.setdefault("experiments", {}):
        session["exp_id"] = session["experiments"][exp_name]
        return session["client"], session["exp_id"]
    mlflow.set_tracking_uri(uri)
    try:
        client = session.get("client") or with_retry(lambda: _ready_client(MlflowClient()))
    except Exception as e:
        if sqlite_path(uri) is not None and any(w in str(e).lower() for w in ("not a database", "malformed")):
            raise damaged(sqlite_path(uri), (str(e).strip().splitlines() or ["?"])[0][:200]) from None
        if isinstance(e, ImportError) or type(e).__name__ == "NoSuchModuleError":   # a database URI whose driver is not installed
            raise TrackingUnavailable(f"MLflow tracking store {uri}: its driver is not installed ({e})") from None
        if not is_server(uri):
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise TrackingUnavailable(f"MLflow tracking server {uri} does not answer: {first}") from None

    # a tracking server stores (or proxies) artifacts; a local store keeps them under paths.mlartifacts
    art = None if is_server(uri) else \
        (Path(paths(p).get("mlartifacts", "mlartifacts")).resolve() / exp_name).as_uri()
    exp_id = with_retry(lambda: get_or_create(client, exp_name, art))
    with_retry(lambda: client.set_experiment_tag(exp_id, "mlflow.note.content", experiment_description(p, experiment)))
    with_retry(lambda: client.set_experiment_tag(exp_id, "mlflow.experimentKind", EXPERIMENT_KIND))
    with_retry(lambda: client.set_experiment_tag(exp_id, f"mlflow.sharedViewState.{VIEW_KEY}", json.dumps(VIEW_STATE)))
    session["client"] = client
    session.setdefault("experiments", {})[exp_name] = exp_id
    session["exp_id"] = exp_id
    return client, exp_id


def _ready_client(client):
    client.search_experiments(max_results=1)  # creates / migrates the store now, inside the retry
    return client


def experiment_description(p: dict, experiment: str) -> str:
    """mlflow.note.content of an experiment: what it is, which tables read it, how to read its runs."""
    try:
        e = experiment_config(p, experiment)
    except Exception:  # an experiment params.yaml does not define (a test's): the generic part only
        e = {}
    lines = [f"# {experiment} ({p.get('scale', 'paper')} scale)", ""]

    if stand_in_size(p):
        lines += [f"**STAND-IN REHEARSAL**: trained on generated stand-in data (size {stand_in_size(p)}), not on "
                  f"the real dataset: it shows that the pipeline runs, never a result.", ""]
    if e:
        part = e.get("partition") or {}
        how = ", ".join(f"{k} {v}" for k, v in part.items() if k != "scheme")
        sub = f"{e['subsample'] * 100:g} % of " if e.get("subsample") not in (None, 1, 1.0) else ""
        model = (e.get("model") or {}).get("name", "?")
        lines.append(f"{sub}**{e.get('dataset', '?')}** split over {e.get('clients', '?')} clients "
                     f"({part.get('scheme', '?')}{': ' + how if how else ''}), {e.get('rounds', '?')} rounds, "
                     f"model {model}" + (f", OOD set {e['ood']}" if e.get("ood") else "") + ".")
        lines.append("")
        lines.append("Methods: " + ", ".join(e.get("methods") or []) + ".")
    tables = {name: t for name, t in (p.get("tables") or {}).items() if experiment in (t.get("experiments") or [])}
    if tables:
        reports = paths(p)["reports"]
        lines.append("Tables that read it: " + ", ".join(f"{t} ({reports}/{t}.md)" for t in tables) + ".")
        figures = [f"{reports}/figures/{f}" for name, t in tables.items() for f in table_figures(name, t)]
        if figures:
            lines.append("Their figures: " + ", ".join(figures) + ".")
        lines.append(f"Which published cells reproduce, with the causes of the others: the scorecard, {reports}/README.md.")
    lines += ["",
              "One run per (method, sweep point, seed), imported from the run's files (history.csv, metrics.json, "
              "run.json) after training; each prediction variant is a run of its own (tag method = "
              "'bayesadmm@mean', base_method, variant) and holds the variant's metrics, the method's run its own "
              "prediction's. Tag selected = true marks the selected sweep point.",
              "",
              "Tags published/<metric> and verdict/<metric> (within, outside, …, the scorecard's words): the "
              "published value and the verdict of each table cell a run is averaged into; cell/<metric> names the "
              "table, the round, ours and the tolerance.",
              "",
              "A metric's latest value is its last round's, the run's final value (metrics.json's 'final'); a final value "
              "with no per-round series is logged as final/<metric>.",
              "",
              "Units: accuracy (test/acc, local/acc) in %, as in the tables; NLL in nats; ECE, "
              "MCE, Brier and OOD AUROC as fractions. The history.csv and metrics.json artifacts keep accuracy "
              "as a fraction.",
              "",
              "Provenance: git_sha / mlflow.source.git.commit = the commit that trained the run (unknown for runs "
              "from before it was recorded), git_dirty, source_hash, hardware (the machine class); start and end = "
              "the training's (tag times says how they were obtained).",
              "",
              "Search: `tags.method = 'bayesadmm@mean' and tags.selected = 'true' and attributes.status = "
              "'FINISHED'`."]
    return "\n".join(lines)
