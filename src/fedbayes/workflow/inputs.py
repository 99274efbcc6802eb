"""The input functions of one planning that hold state or decide between cases: the rerun markers (their
texts, the forced jobs they need), the numerics gate, why a run or its metrics are stale, the runs a table
reads. The rule files call them as one-liners (``workflow/rules/common.smk``); what they decide is
``markers``, ``staleness``, ``numerics`` and ``plan``. Snakemake's own objects (the workflow's DAG
settings, the checkpoints) are given, and read only when an input is asked for."""

from __future__ import annotations

import functools
from pathlib import Path

from fedbayes import runpaths
from fedbayes.eval import fingerprint
from fedbayes.study import run_config, seeds
from fedbayes.workflow import markers, numerics, plan, staleness


class Inputs:
    """The input functions of one Snakemake process's planning.

    ``workflow`` and ``checkpoints`` are Snakemake's (``workflow.dag_settings``: the command line's
    --forcerun; ``checkpoints.select``: the sweep selections); ``planning`` is False in a job's own
    process, which builds no DAG and checks no --forcerun."""

    def __init__(self, config: dict, paths: dict, workflow, checkpoints, planning: bool):
        self.config, self.paths, self.work = config, paths, paths["work"]
        self.workflow, self.checkpoints, self.planning = workflow, checkpoints, planning
        self.marker_text: dict[str, str] = {}   # marker path → its text, for the marker jobs (their params)

    # -- paths ------------------------------------------------------------------------------------------
    def run_dir(self, experiment, method, point, seed) -> str:
        return str(runpaths.run_dir(self.paths, experiment, method, point, seed))

    def selected_file(self, experiment, method) -> str:
        return str(runpaths.selected_file(self.paths, experiment, method))

    # -- markers ----------------------------------------------------------------------------------------
    def forced(self, path: str, text: str, rule: str) -> str:
        """``path``, the output of a forced rule's job; stops a DAG whose --forcerun left the rule out."""
        s = self.workflow.dag_settings
        if self.planning and (problem := markers.forcerun_problem(path, text, s.forceall, s.forcerun, rule)):
            from snakemake.exceptions import WorkflowError

            raise WorkflowError(problem)
        return path

    def marker_input(self, path, why: str, reasons, consumer) -> list[str]:
        """A rerun marker as an input (``markers.marker``), or none; planning writes nothing: the marker
        job does, its text taken from ``marker_text``."""
        if (made := markers.marker(path, why, reasons, consumer)) is None:
            return []
        self.marker_text[made[0]] = made[1]
        return [self.forced(*made, "marker")]

    def missing_outputs(self, name: str, files, anchor):
        """An input function: a marker naming a job's missing outputs where its ``anchor`` output exists
        (Snakemake 9 checks only the requested outputs of a target job)."""
        return lambda wc: self.marker_input(f"{self.work}/missing/outputs/{name}.txt",
                                            "rebuilt because these outputs are missing: ", markers.missing(files),
                                            files) if Path(anchor).exists() else []

    # -- numerics gate ----------------------------------------------------------------------------------
    @functools.cached_property
    def numerics_gate(self) -> tuple[str, dict[str, list[str]]] | None:
        """(gate file, {method: its due code paths' hyperparameters}) where checks are due, else None."""
        return numerics.study_gate(self.config, self.work)

    def gate_input(self, method: str) -> list[str]:
        """The gate as an input where the method's check is due (forced, as the markers)."""
        g = self.numerics_gate
        if not g or method not in g[1]:
            return []
        return [self.forced(g[0], f"numerics check of {', '.join(g[1])} due", "numerics_check")]

    # -- runs and their metrics -------------------------------------------------------------------------
    def run_cfg(self, wc) -> dict:
        return run_config(self.config, wc.experiment, wc.method, int(wc.seed), wc.point)

    def changed_config(self, wc) -> list[str]:
        """A marker naming why a finished run is stale (``staleness.run_changes``); a run that will train
        also waits on its method's numerics gate."""
        d = self.run_dir(wc.experiment, wc.method, wc.point, wc.seed)
        changed = staleness.run_changes(d, wc.method, self.run_cfg(wc))
        marker = self.marker_input(f"{self.work}/changed/{wc.experiment}/{wc.method}/{wc.point}/seed{wc.seed}.txt",
                                   "changed since this run: ", changed, [f"{d}/run.json", f"{d}/history.csv"])
        return marker + (self.gate_input(wc.method) if changed or not staleness.finished(d) else [])

    @functools.cached_property
    def metric_codes(self) -> dict[str, str]:
        """The code of each metric (``eval.fingerprint.metric_codes``): scipy's import, once, where a
        metrics.json is met."""
        return fingerprint.metric_codes()

    def stale_metrics(self, wc) -> list[str]:
        """A marker where a metrics.json is damaged, or misses a metric or holds one of another definition
        (``staleness.metrics_changes``, naming each): that metric re-evaluated (a run without
        predictions.npz records a new metric as not evaluated, and stops on a changed one, naming the
        remedy)."""
        d = self.run_dir(wc.experiment, wc.method, wc.point, wc.seed)
        kind, reasons = staleness.metrics_changes(d, lambda: self.metric_codes)
        return self.marker_input(f"{self.work}/{kind or 'changed'}/{wc.experiment}/{wc.method}/{wc.point}/seed{wc.seed}.metrics.txt",
                                 "rebuilt because " if kind == "damaged" else "re-evaluated because ", reasons,
                                 [f"{d}/metrics.json"])

    # -- selections and the runs a table reads ----------------------------------------------------------
    def selected_point(self, experiment: str, method: str) -> str:
        """Waits for the (experiment, method) sweep selection (a checkpoint; a damaged one as one not
        made) and returns its point."""
        from snakemake.exceptions import IncompleteCheckpointException
        from snakemake.io import checkpoint_target

        out = self.checkpoints.select.get(experiment=experiment, method=method).output[0]
        if (point := staleness.recorded_point(out)) is None:
            raise IncompleteCheckpointException(self.checkpoints.select.rule, checkpoint_target(out))
        return point

    def missing_marker(self, experiment: str, method: str, files, table_csv: str) -> list[str]:
        """A marker where a run file or selection was deleted behind an existing table."""
        return self.marker_input(f"{self.work}/missing/{experiment}/{method}.txt", "rebuilt because of: ",
                                 markers.missing(files), [table_csv])

    def selected_runs(self, experiment: str, method: str, table_csv: str):
        """An input function: the runs of the selected point (all seeds) and the method's numerics gate
        where due. Where a selection or a data status does not exist yet it is asked for as a plain input
        with a marker (Snakemake 9 checks neither the params nor the input mtimes of a job that still
        waits on a checkpoint, and would say "Nothing to be done"); when its job has run, Snakemake asks
        again."""
        def inputs(wc) -> list[str]:
            datasets = plan.experiment_datasets(self.config, experiment)
            if (available := plan.availability(self.work, datasets)) is None:
                unrecorded = plan.unrecorded(self.work, datasets)
                return unrecorded + self.marker_input(f"{self.work}/missing/data/{experiment}.txt", "rebuilt because of: ",
                                                      unrecorded, [table_csv])
            if not available:
                return []
            if not Path(selected := self.selected_file(experiment, method)).exists():
                return [selected] + self.missing_marker(experiment, method, [selected], table_csv)
            point = self.selected_point(experiment, method)
            files, kept = plan.run_inputs([self.run_dir(experiment, method, point, s)
                                           for s in seeds(self.config, experiment, method)])
            return files + self.missing_marker(experiment, method, kept, table_csv) + self.gate_input(method)

        return inputs
