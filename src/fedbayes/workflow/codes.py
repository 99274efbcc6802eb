"""The package sources a rule runs, read from the import graph of its entry modules (every ``import`` of a
fedbayes module, at module level or inside a function), and their content hash: a rule's ``code`` input
and param, so that an edit of code the rule runs reruns it (Snakemake's own code trigger sees only the
shell command).

Reading the import graph parses every module (≈ 0.4 s, in every Snakemake command, dry runs included). What a
module imports is a fact about its text, so it is remembered per (module name, SHA-256 of its source) in the
user's cache (``imports.json`` in ``$XDG_CACHE_HOME/fedbayes``, or ``$FEDBAYES_IMPORTS_CACHE``): an edited
file has another hash and is parsed again, and a cache that cannot be read or written only costs the parse."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from pathlib import Path

import fedbayes
from fedbayes.data import DATASETS
from fedbayes.fileio import user_cache_path

ROOT = Path(fedbayes.__file__).parent


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """``{module name: file}`` of every module under the package ``root``."""
    out = {}
    for p in root.rglob("*.py"):
        parts = [root.name, *p.relative_to(root).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _longest(name: str, modules: dict) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _statements(body):
    """Every statement in ``body``, nested ones (in functions, classes, ``if``, ``try``, ``with``) too:
    an import is a statement, so expressions need no visit (a full ``ast.walk`` costs seconds here)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements(inner)


def imported_names(text: str, name: str, is_package: bool) -> list[str]:
    """Every dotted name the source ``text`` of module ``name`` imports, wherever the statement is (``from a
    import b`` gives ``a.b`` and ``a``; a relative import resolved against its package), in order."""
    package = name if is_package else name.rpartition(".")[0]
    out = []
    for node in _statements(ast.parse(text).body):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            out += [f"{base}.{a.name}" for a in node.names] + [base]
    return out


def imports_of(path: Path, name: str, modules: dict) -> set[str]:
    """The package modules the module ``name`` (file ``path``) imports, wherever the statement is; a
    relative import resolved against its package; each name resolved to the longest existing module."""
    return {t for n in _CACHE.names(path, name) if (t := _longest(n, modules)) and t != name}


IMPORTS_CACHE_ENV = "FEDBAYES_IMPORTS_CACHE"
CACHE_ENTRIES = 4000   # the most remembered modules (≈ 170 a version of the package); the oldest go first


def imports_cache_path() -> Path:
    return user_cache_path("imports.json", IMPORTS_CACHE_ENV)


class _ImportsCache:
    """(module name, is a package, source SHA-256) → ``imported_names``, read once a process and written back
    (atomically, whole) when this process parsed a module it did not hold."""

    def __init__(self):
        self.entries: dict[str, list[str]] | None = None
        self.added = False

    def _load(self) -> dict[str, list[str]]:
        if self.entries is None:
            try:
                raw = json.loads(imports_cache_path().read_text())
            except (OSError, ValueError):
                raw = {}
            self.entries = {k: v for k, v in (raw.items() if isinstance(raw, dict) else ())
                            if isinstance(v, list) and all(isinstance(n, str) for n in v)}
        return self.entries

    def names(self, path: Path, name: str) -> list[str]:
        data = path.read_bytes()
        is_package = path.name == "__init__.py"
        key = f"{name} {int(is_package)} {hashlib.sha256(data).hexdigest()}"
        entries = self._load()
        if key not in entries:
            entries[key] = imported_names(data.decode(), name, is_package)
            self.added = True
        return entries[key]

    def save(self) -> None:
        """Best effort: an unwritable cache costs a parse next time."""
        if not self.added:
            return
        entries = dict(list(self.entries.items())[-CACHE_ENTRIES:])
        path = imports_cache_path()
        tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(entries))
            os.replace(tmp, path)
            self.added = False
        except OSError:
            tmp.unlink(missing_ok=True)


_CACHE = _ImportsCache()



def closure(entries, root: Path = ROOT) -> list[Path]:
    """The files of ``entries`` (module names) and of every package module they import, transitively; a
    module's parent packages too (their ``__init__`` runs first). Sorted."""
    return [Path(f) for f in _closure(tuple(entries), str(root))]


@functools.cache
def _modules(root: str) -> dict[str, Path]:
    return module_files(Path(root))


@functools.cache
def _imports(root: str, module: str) -> frozenset[str]:
    modules = _modules(root)
    return frozenset(imports_of(modules[module], module, modules))


@functools.cache
def _closure(entries: tuple[str, ...], root: str) -> tuple[str, ...]:
    modules = _modules(root)
    unknown = [e for e in entries if e not in modules]
    if unknown:
        raise ValueError(f"not a module of {root}: {', '.join(unknown)}")
    seen, todo = set(), list(entries)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parents = [".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)]
        todo += [p for p in parents if p in modules] + sorted(_imports(root, m))
    _CACHE.save()
    return tuple(sorted(str(modules[m]) for m in seen))


def data_files(parts, repo: Path) -> list[Path]:
    """Data a rule reads: files of the repository ``repo`` matching each glob (``papers/*/published.yaml``:
    every paper's published values)."""
    return [f for part in parts for f in sorted(repo.glob(part))]


def rule_code(entries, data=(), root: Path = ROOT) -> list[str]:
    """The sources a rule runs (``closure`` of its entry modules under the package ``root``) and the data it
    reads (relative to the repository holding the package, ``src/<package>``)."""
    return sorted({str(f) for f in [*closure(entries, root), *data_files(data, Path(root).parents[1])]})


def code_hash(files, root: Path = ROOT) -> str:
    """Content hash of files, by their path relative to the package (the same in any clone; a file outside
    it, a paper's data, as ``../../papers/...``)."""
    import os

    rel = sorted((os.path.relpath(Path(f).resolve(), Path(root).resolve()), Path(f)) for f in files)
    h = hashlib.sha256()
    for name, f in rel:
        h.update(name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def dataset_modules(datasets) -> list[str]:
    """The modules defining the loaders of ``datasets`` (registry names): a run's data code."""
    return sorted({DATASETS[d].loader.__module__ for d in datasets})


PUBLISHED = "papers/*/published.yaml"   # the papers' published values and claims (fedbayes.published)

# The code each rule runs: (its entry modules: those its CLI command calls, the papers' data it reads).
# tests/test_workflow_plan.py checks that the entries' import graph holds every module the command calls
# but the command line's plumbing (COMMAND_PLUMBING).
RULE_CODE = {
    "evaluate": (["fedbayes.eval.evaluate"], []),
    "select": (["fedbayes.reports.selection"], []),
    "table": (["fedbayes.reports.tables", "fedbayes.reports.tally"], [PUBLISHED, "papers/*/authors_code.yaml"]),
    "toy": (["fedbayes.reports.toys"], [PUBLISHED]),
    "scorecard": (["fedbayes.reports.scorecard"], [PUBLISHED, "papers/*/causes.yaml"]),
    "headline": (["fedbayes.reports.headline"], []),
    "rehearsal_summary": (["fedbayes.reports.rehearsal"], []),
    "partition": (["fedbayes.engine.partitions"], []),
    "report_page": (["fedbayes.report_pages"], []),
}
# Modules a command calls to read its arguments and guard its outputs, not to compute them: their edit
# reruns no job (the evaluate job of a committed run, which keeps no predictions, could not rerun).
# fedbayes.cli.common is the commands' own reading of --params/--scale.
COMMAND_PLUMBING = {"fedbayes.study", "fedbayes.ownership", "fedbayes.fileio", "fedbayes.runpaths", "fedbayes.cli.common"}
