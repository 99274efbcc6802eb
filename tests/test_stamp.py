"""The planner's stamp: a job trusts the configuration Snakemake validated (its file unchanged, by the same
code) instead of validating it again; anything else is validated as before."""

import json
import re
import shutil

import pytest

from fedbayes.study import ConfigError, load_params, stamp
from fedbayes.workflow import plan


@pytest.fixture
def effective(repo, tmp_path):
    """The effective configuration as the Snakefile writes it (validated, then stamped), in a folder with
    the repository's schema."""
    (tmp_path / "workflow/schemas").mkdir(parents=True)
    shutil.copy(repo / "workflow/schemas/params.schema.yaml", tmp_path / "workflow/schemas/params.schema.yaml")
    path = tmp_path / "params.effective.yaml"
    path.write_text(plan.effective_text(load_params(repo / "params.yaml")))
    stamp.write_stamp(path, tmp_path / "workflow/schemas/params.schema.yaml")
    return path


@pytest.fixture
def validations(monkeypatch):
    """The number of times load_params validates."""
    import fedbayes.study.load as load

    calls = []
    real = load.validate
    monkeypatch.setattr(load, "validate", lambda *a, **k: (calls.append(1), real(*a, **k)))
    return calls


def test_a_stamped_file_is_not_validated_again(effective, validations):
    assert load_params(effective)["scale"] == "paper"
    assert validations == []


def test_validate_and_an_untrusting_caller_validate_a_stamped_file(effective, validations):
    load_params(effective, trust_stamp=False)
    assert validations == [1]


def test_an_edited_file_is_validated_and_refused(effective, validations):
    params = json.loads(effective.read_text())
    params["methods"]["fedavg"]["lr"] = -1.0
    effective.write_text(json.dumps(params, indent=1))
    with pytest.raises(ConfigError, match=r"methods\.fedavg\.lr"):
        load_params(effective)
    assert validations == [1]


def test_other_code_or_another_schema_is_validated_again(effective, validations, monkeypatch, tmp_path):
    schema = tmp_path / "workflow/schemas/params.schema.yaml"
    schema.write_text(schema.read_text() + "\n# edited\n")
    load_params(effective)
    assert validations == [1]
    stamp.write_stamp(effective, schema)
    load_params(effective)
    assert validations == [1]
    # a plug-in installed, edited or removed since the planner stamped it: another code key
    monkeypatch.setattr(stamp, "_plugin_sources", lambda: [("fedbayes.methods", "mine", "mine.spec:SPEC", "mine", "1", "x")])
    load_params(effective)
    assert validations == [1, 1]


def test_a_missing_or_damaged_stamp_is_validation(effective, validations):
    stamp.stamp_path(effective).write_text("{not json")
    load_params(effective)
    stamp.stamp_path(effective).unlink()
    load_params(effective)
    assert validations == [1, 1]


def test_the_code_key_covers_fedbayes_own_files(monkeypatch, tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "study").mkdir(parents=True)
    (pkg / "study/x.py").write_text("A = 1\n")
    monkeypatch.setattr(stamp, "_PACKAGE", pkg)
    before = stamp.code_key(None)
    (pkg / "study/x.py").write_text("A = 2\n")
    assert stamp.code_key(None) != before


def test_a_problem_names_the_file_given(effective):
    """Validation's lines began "params.yaml is invalid" whatever file --params named."""
    params = json.loads(effective.read_text())
    params["methods"]["fedavg"]["lr"] = -1.0
    other = effective.with_name("mine.yaml")
    other.write_text(json.dumps(params, indent=1))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(other))} (is invalid|does not match)"):
        load_params(other)


def test_the_code_key_covers_the_papers_published_values(monkeypatch, tmp_path):
    """Validation reads papers/<paper>/published.yaml (a table's ``published`` names one of its tables)."""
    (tmp_path / "p/x").mkdir(parents=True)
    (tmp_path / "p/x/published.yaml").write_text("tables: {t1: {}}\n")
    monkeypatch.setattr(stamp, "PAPERS", tmp_path / "p")
    before = stamp.code_key(None)
    (tmp_path / "p/x/published.yaml").write_text("tables: {t2: {}}\n")
    assert stamp.code_key(None) != before


def test_the_planner_validates_a_configuration_once_per_folder_and_code(repo, tmp_path, monkeypatch):
    """The Snakefile skips validating the configuration an earlier plan of the folder validated and stamped
    (``plan.validated_before``): the same text, the same code. An edited value, other code, a damaged stamp
    or a configuration that names no folder is validated."""
    (tmp_path / "workflow/schemas").mkdir(parents=True)
    schema = tmp_path / "workflow/schemas/params.schema.yaml"
    shutil.copy(repo / "workflow/schemas/params.schema.yaml", schema)
    monkeypatch.chdir(tmp_path)
    config = load_params(repo / "params.yaml")
    assert not plan.validated_before(config)            # no plan here yet
    effective = plan.effective_path(config)              # what the Snakefile writes after validating
    effective.parent.mkdir(parents=True)
    effective.write_text(plan.effective_text(config))
    assert not plan.validated_before(config)            # written, not stamped
    stamp.write_stamp(effective, schema)
    assert plan.validated_before(config)
    edited = json.loads(json.dumps(config))
    edited["methods"]["fedavg"]["lr"] = -1.0
    assert not plan.validated_before(edited)
    monkeypatch.setattr(stamp, "_plugin_sources", lambda: [("fedbayes.methods", "mine", "mine.spec:SPEC", "mine", "1", "x")])
    assert not plan.validated_before(config)
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert plan.validated_before(config)
    stamp.stamp_path(effective).write_text("{not json")
    assert not plan.validated_before(config)
    assert not plan.validated_before({"experiments": []})   # too broken to name its folder
