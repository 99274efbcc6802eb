"""The package's shape (issue 20's acceptance as tests): no import cycle between fedbayes modules, and the
engine and the workflow rules name no method and no paper (they read what a method or table needs from
its spec and from params.yaml)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "fedbayes"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path, modules: set[str]) -> set[str]:
    """fedbayes modules a module imports when it is imported (module level, outside functions and
    ``if TYPE_CHECKING``), each resolved to the longest existing module name."""
    out = set()
    tree = ast.parse(path.read_text())
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for n in names:
            while n and n not in modules:
                n = n.rpartition(".")[0]
            if n.startswith("fedbayes"):
                out.add(n)
    return out


def test_no_import_cycle_between_fedbayes_modules():
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(files)
    graph = {m: top_level_imports(p, modules) - {m} for m, p in files.items()}
    # a package's __init__ runs before its submodules: an edge from a submodule to its own package (or to
    # fedbayes itself, which every module imports first) is not a cycle of module bodies
    for m in graph:
        graph[m] = {d for d in graph[m] if not m.startswith(d + ".")}
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                raise AssertionError("import cycle: " + " → ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def code_words(text: str, python: bool) -> list[str]:
    """The identifiers and string contents of code, without comments and docstrings (Python), or the
    lines of a Snakemake file without its comments."""
    if not python:
        return [re.sub(r"#.*$", "", line) for line in text.splitlines()]
    words, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and prev in (None, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL):
            prev = tok.type                                    # a docstring or bare string statement
            continue
        if tok.type in (tokenize.NAME, tokenize.STRING):
            words.append(tok.string)
        if tok.type not in (tokenize.COMMENT,):
            prev = tok.type
    return words


def test_engine_and_workflow_name_no_method_and_no_paper():
    from fedbayes.methods import method_specs

    names = set(method_specs()) | {p.stem for p in (SRC / "papers").glob("*.yaml")}
    pattern = re.compile(r"(?<![a-z0-9_])(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")(?![a-z0-9_])")
    found = []
    for path in sorted((SRC / "engine").glob("*.py")):
        for w in code_words(path.read_text(), python=True):
            if pattern.search(w.lower() if w[:1] not in "'\"" else w):
                found.append(f"{path.relative_to(REPO)}: {w}")
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        for i, line in enumerate(code_words(path.read_text(), python=False), 1):
            if (m := pattern.search(line)):
                found.append(f"{path.relative_to(REPO)}:{i}: {m.group(0)!r} in {line.strip()[:100]}")
    assert not found, "the engine / workflow name methods or papers:\n" + "\n".join(found)


# Tensor factories that must say where their tensor lives: one that defaults to the CPU while the run is on
# a GPU fails there ("Expected all tensors to be on the same device"), which no CPU test sees. Two such
# calls in fedep.py (the FedAvg-server weights, FedEP's Gaussian draws) broke the smoke DAG on the first
# GPU it ran on (reports/evidence/gpu.md).
FACTORIES = {"tensor", "zeros", "ones", "full", "empty", "arange", "eye", "linspace", "randn", "rand",
             "randint", "as_tensor"}
# (file, the call's source) that are on the CPU on purpose: bookkeeping scalars of a client's state (read as
# Python ints), sums brought back to the host
HOST_SIDE = {("methods/bayesadmm/algorithm.py", "torch.zeros((), dtype=torch.long)"),
             ("methods/bayesadmm/algorithm.py", "torch.tensor(st.t)"),
             ("methods/fedcurv/algorithm.py", "torch.zeros((), dtype=torch.long)"),
             ("methods/fedcurv/algorithm.py", "torch.tensor(rnd)"),
             ("methods/core/local.py", "torch.tensor(steps, dtype=torch.float64)")}


def device_less_factories(path: Path) -> list[tuple[int, str]]:
    """torch factory calls in ``path`` with no ``device=`` that are not moved at once (``.to(...)``)."""
    src = path.read_text()
    tree = ast.parse(src)
    moved = {id(node.func.value) for node in ast.walk(tree)     # torch.xxx(...).to(...)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"}
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords) and id(node) not in moved):
            out.append((node.lineno, ast.get_source_segment(src, node)))
    return out


def test_tensor_factories_in_methods_and_engine_name_their_device():
    found = []
    for folder in ("methods", "engine", "eval"):
        for path in sorted((SRC / folder).rglob("*.py")):
            rel = str(path.relative_to(SRC))
            found += [f"{rel}:{line}: {call}" for line, call in device_less_factories(path)
                      if (rel, call) not in HOST_SIDE]
    assert not found, "tensor created on the CPU whatever the run's device:\n" + "\n".join(found)


def test_device_check_catches_a_planted_call(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("import torch\nw = torch.tensor([1.0], dtype=torch.float32)\n"
                       "ok = torch.tensor([1.0]).to('cuda')\nok2 = torch.zeros(3, device=w.device)\n")
    assert [line for line, _ in device_less_factories(planted)] == [2]


# A hyperparameter's default is written once, in its method's spec (``fedbayes.methods.<key>``): the
# implementation reads ``self.p.<name>`` (typed, that default applied), never ``hp.get(name, <a default of its
# own>)`` — the issue counted 79 such copies, with server_lr defaulting to 1e-3, 1.0 or 0.5 by where it was read.
INLINE_DEFAULT = re.compile(r"""hp\.get\(\s*["']([a-z_0-9]+)["']\s*,\s*(?!\s|HPARAM_DEFAULTS|Hyperparameters\.field)""")
NOT_HYPERPARAMETERS = {"lr_scale"}   # set by a method for the schedule it builds (IVON's h0 + δ), never by params.yaml


def inline_defaults(path: Path) -> list[str]:
    return [f"{path.name}:{path.read_text()[:m.start()].count(chr(10)) + 1}: {m.group(0)}…"
            for m in INLINE_DEFAULT.finditer(path.read_text()) if m.group(1) not in NOT_HYPERPARAMETERS]


def test_methods_write_no_hyperparameter_default_of_their_own():
    found = [hit for path in sorted((SRC / "methods").rglob("*.py")) for hit in inline_defaults(path)]
    assert not found, "defaults written beside the spec's:\n" + "\n".join(found)


def test_inline_default_check_catches_a_planted_one(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text('a = self.hp.get("server_lr", 1.0)\nb = hp.get("prox_norm", HPARAM_DEFAULTS["prox_norm"])\n')
    assert len(inline_defaults(planted)) == 1


# A built-in method is written exactly like a plug-in: a package fedbayes/methods/<key>/ (its spec in
# __init__, its math in algorithm.py) named in pyproject.toml's entry-point table, which is the registry.


def entry_point_table() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["fedbayes.methods"]


def spec_constructions(path: Path) -> list[int]:
    """Lines of ``MethodSpec(...)`` calls in a module."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "MethodSpec"]


def test_every_method_package_is_registered_in_the_entry_point_table_and_nowhere_else():
    from fedbayes.methods.spec import method_specs, plugin_origin

    table = entry_point_table()
    packages = {p.parent.name for p in (SRC / "methods").glob("*/__init__.py")} - {"core"}
    named = {value.partition(":")[0] for value in table.values()}
    assert named == {f"fedbayes.methods.{p}" for p in packages}, \
        f"packages under methods/ and the entry-point table differ: {sorted(named ^ {f'fedbayes.methods.{p}' for p in packages})}"
    builtin = {k for k in method_specs() if plugin_origin(k) is None}
    assert builtin == set(table), (f"fedbayes' methods are not its entry-point table's (reinstall after editing "
                                   f"pyproject.toml: pip install -e .): {sorted(builtin ^ set(table))}")
    assert all(method_specs()[k].key == k for k in table)
    made = [f"{path.relative_to(SRC)}:{line}" for path in sorted(SRC.rglob("*.py")) for line in spec_constructions(path)
            if not (path.name == "__init__.py" and path.parent.parent == SRC / "methods" and path.parent.name != "core")
            and path != SRC / "methods" / "spec.py"]
    assert not made, "a MethodSpec made outside a method's package:\n" + "\n".join(made)


def test_registration_check_catches_a_spec_made_elsewhere(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("from fedbayes.methods import spec\nS = [spec.MethodSpec(key='x', implementation='a:B')]\n")
    assert spec_constructions(planted) == [2]


# One typed path: a method reads its hyperparameters as ``self.p.<name>`` (its spec's Params: the one
# default, validated), the engine its options as ``EngineOptions``; neither reads the run's raw dict.
RAW_DICTS = {"hp", "hparams"}
RAW_READ_ALLOWED = {("methods/core/base.py", "__init__")}   # with_fixed: the dict given, checked against the spec's fixed values


def _is_raw_dict(node: ast.AST) -> bool:
    """``hp``, ``self.hp``, ``x["hparams"]``, ``x.get("hparams", …)``."""
    if isinstance(node, ast.Name):
        return node.id in RAW_DICTS
    if isinstance(node, ast.Attribute):
        return node.attr in RAW_DICTS
    key = node.slice if isinstance(node, ast.Subscript) else \
        node.args[0] if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args else None
    return isinstance(key, ast.Constant) and key.value in RAW_DICTS


def raw_hparam_reads(path: Path) -> list[tuple[int, str]]:
    """(line, enclosing function) of each read of one value out of a raw hyperparameter dict:
    ``hp["lr"]``, ``self.hp.get("clip")``, ``cfg["hparams"]["mc_every"]``."""
    out = []

    def visit(node: ast.AST, func: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            func = node.name
        if isinstance(node, ast.Subscript) and _is_raw_dict(node.value) and not isinstance(node.ctx, ast.Store):
            out.append((node.lineno, func))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and _is_raw_dict(node.func.value):
            out.append((node.lineno, func))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(ast.parse(path.read_text()), "")
    return out


def test_methods_and_engine_read_no_raw_hyperparameter():
    found = []
    for path in sorted([*(SRC / "methods").rglob("*.py"), *(SRC / "engine").rglob("*.py")]):
        rel = str(path.relative_to(SRC))
        found += [f"{rel}:{line} (in {func or 'the module'})" for line, func in raw_hparam_reads(path)
                  if (rel, func) not in RAW_READ_ALLOWED]
    assert not found, "raw hyperparameter reads (read self.p.<name>, or EngineOptions in the engine):\n" + "\n".join(found)


def test_raw_hyperparameter_check_catches_planted_reads(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("def f(self, hp, cfg):\n    a = self.hp['lr']\n    b = hp.get('clip')\n"
                       "    c = cfg['hparams']['mc_every']\n    d = cfg.get('hparams', {}).get('client_stream')\n"
                       "    e = self.p.lr\n    g = cfg['hparams']\n")
    assert raw_hparam_reads(planted) == [(2, "f"), (3, "f"), (4, "f"), (5, "f")]


def test_methods_read_no_engine_option():
    """An engine option (``EngineOptions``) is the engine's: a method's algorithm never reads it."""
    import dataclasses

    from fedbayes.methods.spec import EngineOptions

    names = {f.name for f in dataclasses.fields(EngineOptions)}
    found = [f"{path.relative_to(SRC)}:{node.lineno}: p.{node.attr}"
             for path in sorted((SRC / "methods").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr in names and getattr(node.value, "attr", getattr(node.value, "id", "")) == "p"]
    assert not found, "\n".join(found)
