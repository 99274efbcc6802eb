"""No value from params.yaml ever runs as shell (issue "nothing unchecked", item 1).

The paths in params.yaml reach the rules' shell commands: each is validated (a path, nothing a shell
reads as syntax, never an option) and every value is passed quoted, so a legitimate path with a space
works and a crafted one is refused before any job starts."""

import pytest

from fedbayes.study import ConfigError, validate
from dagutil import copy_repo, sh
from test_config import params, schema  # noqa: F401  (the repository's params.yaml and schema, as read)


@pytest.mark.parametrize("key,value", [
    ("work", "work; touch PWNED"),
    ("raw", "data/raw || touch PWNED"),
    ("runs", "$(touch PWNED)"),
    ("reports", "reports`id`"),
    ("partitions", "parts'x"),
    ("work", "-rf"),            # read as an option by the commands it reaches
    ("raw", "data/raw\ntouch PWNED"),
    ("raw", ""),
])
def test_path_settings_that_a_shell_would_read_are_refused(params, schema, key, value):
    params["paths"][key] = value
    with pytest.raises(ConfigError, match=rf"paths\.{key}"):
        validate(params, schema)


@pytest.mark.parametrize("value", ["sqlite:///mlflow.db; touch PWNED", "http://host:5000/$(id)", "x y"])
def test_a_tracking_uri_with_shell_syntax_is_refused(params, schema, value):
    params["paths"]["mlflow_uri"] = value
    with pytest.raises(ConfigError, match=r"paths\.mlflow_uri"):
        validate(params, schema)


def test_ordinary_paths_validate(params, schema):
    params["paths"].update(raw="/srv/data sets/raw", work="my work", runs="results/runs-v2",
                           mlflow_uri="http://127.0.0.1:5000")
    validate(params, schema)


def test_a_crafted_path_never_reaches_a_shell(repo, tmp_path):
    """The crafted value of the issue (it created a file when a training target was built): refused by
    `snakemake` itself, before any job, naming the key; nothing is created."""
    d = copy_repo(repo, tmp_path / "repo", lambda p: p["paths"].update(work="work; touch PWNED"))
    out = sh("snakemake -n --cores 1 reports/smoke/table1.csv", d, check=False)
    assert "paths.work" in out
    assert not (d / "PWNED").exists() and not any(d.rglob("PWNED"))


def test_paths_with_spaces_reach_the_jobs_quoted(repo, tmp_path):
    """A path with a space (legitimate) runs: the data job writes where params.yaml says."""
    d = copy_repo(repo, tmp_path / "repo", lambda p: p["paths"].update(raw="raw data", work="my work"))
    sh("snakemake --cores 1 'my work/smoke/data/mnist5k.json'", d)
    assert (d / "raw data/mnist5k/manifest.json").is_file()
    assert (d / "my work/smoke/data/mnist5k.json").is_file()
