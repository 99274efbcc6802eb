"""The planner's stamp on the configuration it validated, so that its jobs do not validate it again.

Snakemake validates params.yaml once when it plans (the Snakefile), then writes the effective
configuration every job reads (``work/params.effective.yaml``) and, beside it, this stamp: the SHA-256
of that file's bytes and of the code that validated it (fedbayes' own files, the schema file, the
installed packages that register methods, datasets or metrics). A job whose file and code match the
stamp trusts the planner's validation; validating again cost each job 0.17-0.27 CPU-s (measured in
fresh processes; 0.05-0.09 with the stamp, whose code hash is most of it; about 700 jobs in a CI run). Any other file, an edited byte, a changed fedbayes or an installed, removed or edited plug-in
gives no match and is validated as before; ``fedbayes validate`` always validates.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

from fedbayes.fileio import write_text_atomic
from fedbayes.published import PAPERS
from fedbayes.methods.spec import DISTRIBUTION

GROUPS = ("fedbayes.methods", "fedbayes.datasets", "fedbayes.metrics")   # the entry points validation reads
_PACKAGE = Path(__file__).resolve().parents[1]   # fedbayes' own files


def stamp_path(params_path: str | Path) -> Path:
    """Where the stamp of ``params_path`` lives: beside it, named after it."""
    p = Path(params_path)
    return p.with_name(p.name + ".validated")


def _plugin_sources() -> list[tuple[str, ...]]:
    """Each installed entry point of the groups validation reads that is not fedbayes' own: its group,
    name, value, distribution and version, and the SHA-256 of the file of the module it names (an
    editable package changes with no new version)."""
    from importlib.metadata import entry_points

    out = []
    for group in GROUPS:
        for ep in entry_points(group=group):
            dist = getattr(ep, "dist", None)
            name = (dist.metadata["Name"] or "") if dist is not None else ""
            if name.lower() == DISTRIBUTION:
                continue
            module = ep.value.partition(":")[0].strip()
            try:
                loaded = sys.modules.get(module)
                origin = getattr(loaded, "__file__", None) or getattr(importlib.util.find_spec(module), "origin", None)
                digest = hashlib.sha256(Path(origin).read_bytes()).hexdigest() if origin else "no file"
            except (ImportError, ValueError, OSError) as e:   # validation itself names such a package
                digest = f"unreadable: {type(e).__name__}"
            out.append((group, ep.name, ep.value, name, dist.version if dist is not None else "", digest))
    return sorted(out)


def code_key(schema_file: Path | None) -> str:
    """The SHA-256 of what validating a configuration reads besides the configuration: fedbayes' own
    files (Python and data), the papers' published values (a table's ``published`` names one of their
    tables), the schema file, the installed plug-ins (``_plugin_sources``)."""
    h = hashlib.sha256()
    for f in sorted(_PACKAGE.rglob("*")):
        if f.suffix in (".py", ".yaml", ".yml", ".json") and "__pycache__" not in f.parts and f.is_file():
            h.update(f.relative_to(_PACKAGE).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    for f in sorted(PAPERS.glob("*/published.yaml")):
        h.update(b"paper\0" + f.parent.name.encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(b"schema\0" + (schema_file.read_bytes() if schema_file is not None else b"none"))
    h.update(json.dumps(_plugin_sources()).encode())
    return h.hexdigest()


def _record(params_path: Path, schema_file: Path | None) -> dict:
    return {"params_sha256": hashlib.sha256(Path(params_path).read_bytes()).hexdigest(),
            "code_sha256": code_key(schema_file)}


def write_stamp(params_path: str | Path, schema_file: Path | None) -> None:
    """Stamp ``params_path`` as validated (call only after validating what it holds); rewritten only when
    its content changes."""
    text = json.dumps(_record(Path(params_path), schema_file), indent=1) + "\n"
    target = stamp_path(params_path)
    if not target.exists() or target.read_text() != text:
        write_text_atomic(target, text)


def stamped(params_path: str | Path, schema_file: Path | None) -> bool:
    """Whether ``params_path`` is exactly what its stamp says was validated, by this code."""
    target = stamp_path(params_path)
    try:
        recorded = json.loads(target.read_text())
    except (OSError, ValueError):
        return False
    try:
        return recorded == _record(Path(params_path), schema_file)
    except OSError:
        return False


def validated_before(params_path: str | Path, text: str, schema_file: Path | None) -> bool:
    """Whether ``text`` is the content of ``params_path`` (the effective configuration an earlier plan wrote)
    and its stamp says this code validated it: the planner then need not validate the same configuration
    again (each ``snakemake`` command did, 0.3-0.4 CPU-s)."""
    try:
        return Path(params_path).read_text() == text and stamped(params_path, schema_file)
    except (OSError, UnicodeDecodeError):
        return False
