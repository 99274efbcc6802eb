"""The DVC plots template (.dvc/plots/method_lines.json) that dvc.yaml's ``plots:`` use: ``dvc plots diff``
gives every data point a ``rev`` field (the revision it was read at); a template that does not split lines
on it joins both revisions of a method into one line that jumps back and forth between them."""

import json
import re
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).resolve().parents[1] / ".dvc" / "plots" / "method_lines.json"
SERIES_CHANNELS = ("color", "detail", "strokeDash", "shape", "size", "strokeWidth")


def _raw_fields(spec: dict, field: str) -> set[str]:
    """The data fields a field of the spec is computed from (a ``calculate`` transform's ``datum.x``)."""
    for t in spec.get("transform", []):
        if t.get("as") == field and "calculate" in t:
            return set().union(*[_raw_fields(spec, f) for f in re.findall(r"datum\.(\w+)", t["calculate"])] or [set()])
    return {field}


def _series(spec: dict, values: list[dict]) -> set[tuple]:
    """The lines Vega-Lite draws: one per distinct combination of the fields its grouping channels read."""
    fields = sorted(set().union(*[_raw_fields(spec, ch["field"]) for name, ch in spec["encoding"].items()
                                  if name in SERIES_CHANNELS and "field" in ch]))
    return {tuple(v.get(f) for f in fields) for v in values}


def test_plots_diff_draws_each_revision_of_a_method_apart():
    from dvc.render import REVISION
    from dvc_render.vega import VegaRenderer
    from dvc_render.vega_templates import get_template

    points = [{"round": r, "method": m, "test_acc": 70 + r + (0.5 if rev == "HEAD" else 0), REVISION: rev}
              for rev in ("HEAD", "workspace") for m in ("fedavg", "bayesadmm@mean") for r in range(5)]
    template = get_template("method_lines", str(TEMPLATE.parent))
    spec = VegaRenderer(points, "acc", template=template, x="round", y="test_acc").get_filled_template()
    if isinstance(spec, str):
        spec = json.loads(spec)
    values = spec["data"]["values"]
    assert {v[REVISION] for v in values} == {"HEAD", "workspace"}
    assert len(_series(spec, values)) == 4   # 2 methods × 2 revisions
    one = [v for v in values if v[REVISION] == "HEAD"]
    assert len(_series(spec, one)) == 2      # one revision: a line per method, as before


def test_the_template_is_valid_json_with_dvcs_anchors():
    text = TEMPLATE.read_text()
    for anchor in ("<DVC_METRIC_DATA>", "<DVC_METRIC_X>", "<DVC_METRIC_Y>"):
        assert anchor in text
    json.loads(text)


if __name__ == "__main__":
    pytest.main([__file__])
