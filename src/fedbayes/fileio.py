"""Atomic file writes: a reader (or a killed job) never sees a half-written result; fast YAML reads."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path


MAX_ALIAS_NODES = 10_000  # nodes a document may add through aliases (params.yaml's anchors add ~600)


class YAMLInputError(ValueError):
    """A YAML document that loads, but not as written: a duplicate key (PyYAML would keep the last one
    silently) or aliases expanding to more than ``MAX_ALIAS_NODES`` nodes (an alias bomb)."""


def _yaml_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class CheckedLoader(base):
        """The safe loader (libyaml's where PyYAML has it) that refuses duplicate keys and alias bombs.
        Parsing stays in C; the checks add a walk over the node graph (~2 ms for params.yaml)."""

        def get_single_data(self):
            node = self.get_single_node()
            if node is None:
                return None
            _check_alias_expansion(node, yaml)
            return self.construct_document(node)

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged keys may be overridden
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node)
                    except TypeError:  # an unhashable key: the constructor names it
                        continue
                    if first is not key_node:
                        raise YAMLInputError(
                            f"duplicate key {key!r} at line {key_node.start_mark.line + 1} (first at line "
                            f"{first.start_mark.line + 1}); a YAML mapping takes each key once")
            return super().construct_mapping(node, deep=deep)

    # a number in exponent form without a dot (`1e-3`, `2E+4`) is a float, as in YAML 1.2 (and DVC, which reads
    # params.yaml too); PyYAML's YAML 1.1 rules leave it a string that the schema then refuses as not a number
    CheckedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789."))
    return CheckedLoader


_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


def _check_alias_expansion(root, yaml) -> None:
    """Refuse a document whose aliases expand to more than ``MAX_ALIAS_NODES`` nodes, or refer to
    themselves, before anything is constructed (merge keys of a bomb blow up in construction itself)."""
    size: dict[int, int] = {}  # id(node) -> nodes in its expansion; -1 while the node is being walked
    aliased = 0
    seq, mapping = yaml.SequenceNode, yaml.MappingNode

    def walk(node) -> int:
        nonlocal aliased
        n = size.get(id(node))
        if n is not None:  # a node met again is an alias use: it expands to the whole node
            if n < 0:
                raise YAMLInputError(f"recursive alias at line {node.start_mark.line + 1}")
            aliased += n
            if aliased > MAX_ALIAS_NODES:
                raise YAMLInputError(
                    f"aliases expand to more than {MAX_ALIAS_NODES} nodes (at line {node.start_mark.line + 1}); "
                    "an anchor may be reused, not multiplied")
            return n
        n = 1
        if isinstance(node, seq):
            size[id(node)] = -1
            for c in node.value:
                n += walk(c)
        elif isinstance(node, mapping):
            size[id(node)] = -1
            for k, v in node.value:
                n += walk(k) + walk(v)
        size[id(node)] = n
        return n

    try:
        walk(root)
    except RecursionError:
        raise YAMLInputError("the document is nested too deeply") from None


def load_yaml(text: str):
    """``yaml.safe_load`` through libyaml where PyYAML has it (the same safe loader, ~10× faster: every
    workflow job reads the schema and params at start-up), refusing what the safe loader lets through
    silently: a duplicate key (the last would win) and aliases expanding past ``MAX_ALIAS_NODES`` nodes
    (:class:`YAMLInputError`, naming the key or the line)."""
    global _LOADER
    if _LOADER is None:
        _LOADER = _yaml_loader()
    import yaml

    return yaml.load(text, Loader=_LOADER)


_LOADER = None


def user_cache_dir() -> Path:
    """fedbayes' folder in the user's cache (``$XDG_CACHE_HOME/fedbayes``, else ``~/.cache/fedbayes``):
    what is remembered across processes and clones to save time, never needed for a result."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedbayes"


def user_cache_path(name: str, env: str) -> Path:
    """An entry of the user's cache: ``$<env>`` where set (it moves the entry), else ``user_cache_dir()/name``."""
    return Path(os.environ[env]) if os.environ.get(env) else user_cache_dir() / name


def temp_path(path: str | Path, keep_suffix: bool = False) -> Path:
    """A temporary name beside ``path`` that no other process uses (its pid in the name), so two writers
    of one file never write into the same temporary file: ``<name>.<pid>.tmp``, or with ``keep_suffix``
    ``<stem>.<pid>.tmp<suffix>`` for writers that go by the suffix (``.npz``, ``.png``)."""
    path = Path(path)
    if keep_suffix:
        return path.with_name(f"{path.stem}.{os.getpid()}.tmp{path.suffix}")
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


@contextmanager
def atomic_target(path: str | Path, keep_suffix: bool = False):
    """Yield a :func:`temp_path` to write; on success it replaces ``path`` (``os.replace``), on an error
    it is removed. A write that failed because the disk is full raises ``OSError(ENOSPC)`` naming
    ``path`` (libraries that write through C++ streams, torch.save among them, report it as a generic
    "file write failed")."""
    tmp = temp_path(path, keep_suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, Exception) and _disk_full(e, Path(path).parent):
            raise OSError(errno.ENOSPC, f"no space left on the device of {Path(path).parent} while writing "
                                        f"{path}: free some space and run the command again") from e
        raise


def _disk_full(e: Exception, where: Path) -> bool:
    """The write error ``e`` was (or probably was) a full disk under ``where``."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(e, RuntimeError):  # torch.save's PytorchStreamWriter: "iostream error", "unexpected pos"
        try:
            return shutil.disk_usage(where).free < 1 << 20
        except OSError:
            return False
    return False


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_target(path) as tmp:
        tmp.write_text(text)
    return path


def save_figure_atomic(fig, path: str | Path, dpi: int = 110) -> Path:
    """Save a matplotlib ``Figure`` as PNG via a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_target(path, keep_suffix=True) as tmp:
        fig.savefig(tmp, dpi=dpi)
    return path


class LockHeld(BlockingIOError):
    """Another process holds the lock (:func:`try_exclusive_lock`); ``holder`` is its pid if it wrote one."""

    def __init__(self, path: Path, holder: str):
        super().__init__(f"{path} is held by {holder or 'another process'}")
        self.path, self.holder = path, holder


class LockRefused(ValueError):
    """A lock file that is not the lock's own: a symbolic link, another kind of file, or a second name of
    another file. Locking through it would truncate or write the file it leads to."""


def open_lock_file(lock: Path) -> int:
    """A descriptor (read-write) of the lock file ``lock``: created exclusively (``O_EXCL``) when missing,
    else opened without following a symbolic link (``O_NOFOLLOW``), and refused (:class:`LockRefused`)
    unless it is a regular file with one name. Nothing is truncated: the caller decides what to write."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK   # O_NONBLOCK: a FIFO does not hang
    try:
        fd = os.open(lock, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        try:
            fd = os.open(lock, flags)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise LockRefused(f"{lock} is a symbolic link, not a lock file: remove it (the lock file is "
                              "created anew)") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "has other names (a hard link)" if stat.S_ISREG(st.st_mode) else "is not a regular file"
        raise LockRefused(f"{lock} {what}, not a lock file of its own: remove it (the lock file is created anew)")
    return fd


def try_exclusive_lock(lock: str | Path):
    """Take an exclusive ``flock`` on the file ``lock`` (created if missing) without waiting: a context
    manager holding it, or :class:`LockHeld` at once when another process holds it. The holder's pid is
    written into the file. The kernel releases the lock when its holder dies."""
    import fcntl

    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fh = os.fdopen(open_lock_file(lock), "r+")  # not truncated yet: a holder's pid is read below
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip()
        fh.close()
        raise LockHeld(lock, holder) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()

    @contextmanager
    def held():
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()

    return held()


@contextmanager
def exclusive_lock(path: str | Path, read_only_ok: bool = False):
    """Hold an exclusive ``flock`` on ``<path>.lock`` (created if missing): processes that create or
    write the same file (a dataset, a partition, a SQLite store) take turns. The kernel releases the
    lock when its holder dies, so a killed job never leaves it held. With ``read_only_ok``, a directory
    this process cannot write (a read-only data mirror) is used without the lock: nothing there can be
    written by us, and a file that is missing or damaged fails where it is read, naming it."""
    import fcntl

    lock = Path(str(path) + ".lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fh = os.fdopen(open_lock_file(lock), "r+")
    except OSError as e:
        if read_only_ok and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            yield  # a directory nobody here can write: no writer to take turns with; readers go ahead
            return
        raise
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
