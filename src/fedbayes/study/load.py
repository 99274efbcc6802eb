"""params.yaml loaded: read, upgraded, its scales' overlay laid in, validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedbayes.frontdoor import ConfigError
from fedbayes.study.layers import with_smoke_overlay
from fedbayes.study.legacy import upgrade_layout
from fedbayes.study.reading import load_params_text
from fedbayes.study.schema import _schema_for, schema_file, validate
from fedbayes.study.stamp import stamp_path, stamped


def load_params(path: str | Path = "params.yaml", scale: str | None = None, trust_stamp: bool = True) -> dict:
    """Read, schema-check and semantically check params.yaml with its smoke overlay (``with_smoke_overlay``);
    apply ``scale`` (or params' own). A file the planner stamped as validated, unchanged, by this code
    (``fedbayes.study.stamp``: the effective configuration Snakemake's jobs read) is not checked again
    unless ``trust_stamp`` is False."""
    path = Path(path)
    params = as_read(load_params_text(path), path)
    if not (trust_stamp and stamp_path(path).exists() and stamped(path, schema_file(path))):
        try:
            validate(params, _schema_for(path))
        except ConfigError as e:   # the checks name the file as params.yaml: the one given, where it is another
            text = str(e)
            if path.name != "params.yaml" and text.startswith("params.yaml "):
                raise ConfigError(f"{path}{text[len('params.yaml'):]}") from None
            raise
    if scale is not None:
        params["scale"] = scale
    return params


def as_read(params: Any, params_path: str | Path) -> Any:
    """params as every reader takes them (``load_params``, the Snakefile's ``config``), in place: the
    earlier layout upgraded (``upgrade_layout``) and the smoke overlay laid in (``with_smoke_overlay``)."""
    return with_smoke_overlay(upgrade_layout(params), params_path)
