"""Property: whatever params.yaml holds, `fedbayes validate` either accepts it or refuses it with a
ConfigError (exit 2) whose first line names the file or the problem and whose other lines are one problem
each ("  - <key>: ..."); never another exception, never a traceback.

The files are the real params.yaml mutated: a key deleted, a value replaced or a key inserted (odd strings,
huge and non-finite numbers, wrong types, integer keys), the whole document replaced, written as YAML or as
JSON, or its bytes damaged (non-UTF-8 bytes, a cut)."""

import contextlib
import io
import json
import shutil

import pytest
import yaml

ODD_STRINGS = ["", " ", "a/b", "../x", "a" * 300, "cuda:0", "cuda", "test/brierr", "sweeps/x", "-rf", "é",
               "\x00", "${HOME}", "'; rm -rf /", "~", "null", "1e-05", ".nan", "*alias", "{a: 1}"]
ODD_NUMBERS = [10**12, 2**63, 10**30, -1, 0, -0.0, 1e308, float("nan"), float("inf"), float("-inf")]


def _values():
    from hypothesis import strategies as st

    leaf = st.one_of(st.none(), st.booleans(), st.sampled_from(ODD_NUMBERS), st.sampled_from(ODD_STRINGS),
                     st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=8))
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(0, 9)), inner, max_size=3)), max_leaves=4)


def _nodes(x, path=()):
    """Every (path, node) of a loaded document."""
    yield path, x
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _nodes(v, path + (i,))


def _mutated(data, base: dict, sites: list) -> bytes:
    """The bytes of one mutated params file."""
    import copy

    from hypothesis import strategies as st

    kind = data.draw(st.sampled_from(["delete", "replace", "insert", "whole", "bytes", "cut"]))
    text = yaml.safe_dump(base, sort_keys=False)
    if kind == "bytes":
        at = data.draw(st.integers(0, len(text)))
        junk = data.draw(st.sampled_from([b"\xe9", b"\xff\xfe", b"\x80", b"caf\xe9", b"\xc3"]))
        return text.encode()[:at] + junk + text.encode()[at:]
    if kind == "cut":
        return text.encode()[:data.draw(st.integers(0, len(text)))]
    if kind == "whole":
        doc = data.draw(_values())
    else:
        doc = copy.deepcopy(base)
        path = data.draw(st.sampled_from(sites))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if kind == "delete":
            del parent[path[-1]]
        elif kind == "replace":
            parent[path[-1]] = data.draw(_values())
        else:
            node = parent[path[-1]]
            target = node if isinstance(node, dict) else parent if isinstance(parent, dict) else doc
            target[data.draw(st.one_of(st.sampled_from(ODD_STRINGS), st.integers(0, 9)))] = data.draw(_values())
    as_json = data.draw(st.booleans()) and isinstance(doc, dict)
    if as_json:
        try:
            return json.dumps(doc).encode()
        except (TypeError, ValueError):
            pass
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=data.draw(st.booleans())).encode()


def _one_line_each(msg: str) -> None:
    lines = msg.splitlines()
    assert lines and lines[0].strip(), msg
    assert all(ln.startswith("  - ") and len(ln) > 4 for ln in lines[1:]), msg


def test_validate_accepts_or_refuses_in_lines_never_a_traceback(tmp_path, repo, monkeypatch):
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from fedbayes.cli import main
    from fedbayes.study import ConfigError, load_params

    (tmp_path / "workflow/schemas").mkdir(parents=True)
    shutil.copy(repo / "workflow/schemas/params.schema.yaml", tmp_path / "workflow/schemas")
    shutil.copy(repo / "params.smoke.yaml", tmp_path)
    monkeypatch.chdir(tmp_path)   # relative paths the params name stay in here
    base = yaml.safe_load((repo / "params.yaml").read_text())
    sites = [p for p, _ in _nodes(base) if p]
    f = tmp_path / "params.yaml"

    # no shrinking: a failure is reported as drawn (shrinking a validation of ~0.3 s an example takes minutes)
    @settings(max_examples=50, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def check(data):
        f.write_bytes(_mutated(data, base, sites))
        try:
            load_params(f)
        except ConfigError as e:
            _one_line_each(str(e))
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                main(["validate", "--params", str(f)])
                code = 0
            except SystemExit as e:
                code = e.code
        assert code in (0, 2), (code, err.getvalue())
        assert "Traceback" not in err.getvalue()
        if code:
            assert err.getvalue().startswith("fedbayes validate: error: "), err.getvalue()
            _one_line_each(err.getvalue().removeprefix("fedbayes validate: error: "))

    check()


@pytest.mark.parametrize("doc", [None, [], [1], 3, "x", True, {"experiments": {1: {}}}, {"scale": None}])
def test_validate_refuses_odd_documents_with_a_config_error(repo, doc):
    """Hand-picked shapes the property test may draw rarely."""
    from fedbayes.study import ConfigError, validate

    schema = yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text())
    with pytest.raises(ConfigError) as err:
        validate(doc, schema)
    _one_line_each(str(err.value))
