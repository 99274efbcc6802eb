"""An exception raised inside a method's own code (its client update, server update, predictions), told
in one line that names the method, the file and line of its code that raised, and the exception.

A method's code is the package directory of its implementation (``MethodSpec.implementation``) and, for
an installed package's method, the top-level packages of its spec and implementation (``plugin_origin``).
The line names the innermost frame in that code; the full traceback goes to a log file, never to the
console of a workflow of many jobs.
"""

from __future__ import annotations

import importlib.util
import traceback
from pathlib import Path

from fedbayes.methods.spec import method_specs, plugin_origin


class MethodFailed(Exception):
    """``method``'s code raised ``error`` at ``where`` (``file:line in function``)."""

    def __init__(self, method: str, error: BaseException, where: str, during: str = ""):
        self.method, self.error, self.where, self.during = method, error, where, during
        what = f"{type(error).__name__}: {error}".strip().splitlines()
        first = what[0] if what else type(error).__name__
        super().__init__(f"method {method!r} raised {first} at {where}" + (f" ({during})" if during else ""))


def _module_dir(module: str) -> Path | None:
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    if found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations))).resolve()
    return Path(found.origin).resolve().parent if found.origin else None


def method_code_dirs(method: str) -> list[Path]:
    """The directories whose files are ``method``'s own code (see the module's docstring); [] when no
    installed method is called so."""
    spec = method_specs().get(method)
    if spec is None:
        return []
    modules = [spec.implementation.partition(":")[0]]
    origin = plugin_origin(method)
    if origin is not None:
        modules += origin[2]
    dirs = [d for d in map(_module_dir, dict.fromkeys(modules)) if d is not None]
    return list(dict.fromkeys(dirs))


def _inside(path: str, dirs: list[Path]) -> bool:
    try:
        p = Path(path).resolve()
    except OSError:
        return False
    return any(p.is_relative_to(d) for d in dirs)


def raised_in_method(method: str, error: BaseException) -> str | None:
    """``file:line in function`` of the innermost frame of ``error``'s traceback that lies in ``method``'s
    own code, or None when the traceback never passes through it (the engine's, a library's or the
    machine's fault: disk full, out of memory, a damaged file)."""
    if isinstance(error, MethodFailed):
        return error.where
    dirs = method_code_dirs(method)
    if not dirs:
        return None
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _inside(f.filename, dirs)]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}"


def method_failure(method: str, error: BaseException, during: str = "") -> MethodFailed | None:
    """A ``MethodFailed`` for ``error`` if it was raised inside ``method``'s code, else None. Running out
    of memory is the machine's limit, not the code's fault: never a method failure."""
    if isinstance(error, MethodFailed):   # already told (raised by a run of the method)
        return error if not during or error.during else MethodFailed(error.method, error.error, error.where, during)
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return None
    where = raised_in_method(method, error)
    return None if where is None else MethodFailed(method, error, where, during)


def format_traceback(error: BaseException) -> str:
    """The full traceback of ``error`` (with its causes), for a log file."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))
