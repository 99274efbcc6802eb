"""Warm jobs: a server that has the heavy libraries imported forks a process for each ``fedbayes`` command.

A Snakemake build runs hundreds of short ``fedbayes`` jobs (a rehearsal: about 600); each fresh process
spends about 2.5 CPU-seconds importing PyTorch, NumPy and SciPy before its own work, more than many jobs
then do. While a workflow runs (``start`` from the Snakefile's ``onstart``, ``stop`` at its end),
``FEDBAYES_WARM`` names a folder of servers, one for each environment the jobs come with (Snakemake sets
a job's thread variables to its ``threads``): a server holds those libraries imported and listens on the
Unix socket ``<folder>/<env_key>.sock``. The ``fedbayes`` command (``fedbayes.cli.main``) sends its
server its arguments, working directory, environment, umask and standard streams, and the server forks a
child that runs the command exactly as the process would have (``fedbayes.cli.app.main``), then reports
its exit status, which the command exits with. The first command of an environment finds no server: it
starts one in the background and runs itself.

What makes the child the same as a fresh process:

* **Modules are imported, nothing is run**: the libraries (``PRELOAD``) and fedbayes' own modules that
  every job imports (``PRELOAD_OWN``: the command line, the engine, evaluation; none of them reads a file,
  the working directory or an environment variable when imported). No function is called in the server,
  so no random generator, thread pool, cache or file is used before the fork (PyTorch's generator keeps
  its default seed; a run seeds its own anyway); params.yaml, schemas, data and the methods' packages
  (plug-ins) are read by the child.
* **The environment that libraries read at import** (``env_key``: thread counts, instruction-set caps,
  ``PYTHON*``, ``LD_*``, the interpreter) must equal the server's, else the command runs itself.
* **The preloaded files must be unchanged** (size and modification time of every loaded module's file,
  and of each folder on ``sys.path``, where an installed or removed package shows; checked at each fork):
  after an edit of fedbayes' sources or a ``pip install`` in the middle of a build, the server refuses
  and ends, and the commands run themselves.
* The child takes the command's streams as its file descriptors 0-2 (a job's ``log:`` redirection
  included), its directory, environment and umask, and rebuilds ``sys.stdout``/``sys.stderr`` as Python
  would for those descriptors.

A command that cannot reach a server (none yet, another machine of a cluster, a socket left by a killed
build) runs itself, so the servers are an optimisation only: nothing depends on them. A server ends with
the build (``stop``; or when the Snakemake process that started the folder is gone, or after ``IDLE_S``
without a command).
Signals: the command forwards SIGINT, SIGTERM and SIGHUP to its child; if the command dies without
forwarding (SIGKILL), the child sees its connection close and kills itself the same way. The child's
status comes back as the command's: an exit code, or death by the same signal.
tests/test_warm.py compares a run trained through the server with one trained in a fresh process byte for
byte and checks each rule above.

By hand, outside Snakemake: ``export FEDBAYES_WARM=$(mktemp -d)``; the commands start their servers.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

WARM_ENV = "FEDBAYES_WARM"
# what a fedbayes job imports from outside the package (python -X importtime on train/evaluate/select)
PRELOAD = ("numpy", "torch", "scipy.special", "jsonschema", "yaml", "tqdm")
# and fedbayes' modules a train, evaluate or select job imports (≈ 0.4 CPU-s a job; the selection's pandas
# 0.5 more). Not the reports': matplotlib reads a matplotlibrc in the working directory when it is imported.
PRELOAD_OWN = ("fedbayes.cli.app", "fedbayes.engine.loop", "fedbayes.engine.data", "fedbayes.eval.evaluate",
               "fedbayes.reports.selection")
# environment variables a preloaded library (or the interpreter) reads when it loads
KEY_PREFIXES = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "ONEDNN_", "DNNL_", "ATEN_", "TORCH", "PYTORCH_",
                "CUDA_", "CUBLAS_", "NVIDIA_", "NPY_", "NUMPY_", "PANDAS_", "PYTHON", "LD_", "MALLOC_")
SERVE = "import sys; from fedbayes.cli.warm import serve; serve(sys.argv[1])"
IDLE_S = 600.0             # a server nobody spoke to for this long ends (a build killed without its `stop`)
_LEN = struct.Struct("!I")


def env_key(environ) -> str:
    """The fingerprint of what a process's libraries read at import: interpreter and the variables above."""
    picked = {k: v for k, v in environ.items() if k.startswith(KEY_PREFIXES)}
    interpreter = [os.path.realpath(sys.executable), sys.prefix, sys.version]
    return hashlib.sha256(json.dumps([interpreter, sorted(picked.items())]).encode()).hexdigest()[:16]


def socket_for(folder: str, environ) -> str:
    """The socket of the server for ``environ`` in ``folder`` (a Unix socket's path has at most 107 bytes:
    the folder is short, under /tmp)."""
    return os.path.join(folder, env_key(environ) + ".sock")


# -- the command's side -------------------------------------------------------------------------------

def delegate(argv: list[str]) -> int | None:
    """Run ``fedbayes argv`` in a warm server's child; its exit code, or None where no server took it (the
    caller then runs the command itself). Death of the child by a signal is repeated here."""
    folder = os.environ.get(WARM_ENV)
    if not folder or folder == "0" or not os.path.isdir(folder):
        return None
    key = env_key(os.environ)
    path = os.path.join(folder, key + ".sock")    # socket_for, with the key the request carries
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        s.close()
        _spawn(folder, path)
        return None
    try:
        umask = os.umask(0)
        os.umask(umask)
        _send(s, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask, "key": key}, [0, 1, 2])
        reply = _readline(s)
    except OSError:
        s.close()
        return None
    if not reply.startswith("ok "):     # refused: another environment, or changed library files
        s.close()
        return None
    child = int(reply.split()[1])

    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    try:   # a forwarded signal's handler returns, and the read goes on (PEP 475)
        status = _readline(s)
    except OSError:   # the server ended before answering: wait the child out; its status is lost
        while _alive(child):
            time.sleep(0.1)
        print(f"fedbayes: the warm server ended while {' '.join(argv[:1])} ran (pid {child}); its exit status "
              f"is unknown, so it counts as failed: run it again", file=sys.stderr)
        status = "exit 1"
    s.close()
    kind, _, value = status.partition(" ")
    if kind == "signal":
        signal.signal(int(value), signal.SIG_DFL)
        os.kill(os.getpid(), int(value))
    return int(value) if kind == "exit" else 1


def _spawn(folder: str, path: str) -> None:
    """Start the server for this environment in the background, unless another command already did."""
    import subprocess

    try:
        os.close(os.open(Path(path).with_suffix(".starting"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return
    try:
        with open(Path(path).with_suffix(".log"), "ab") as err:
            subprocess.Popen([sys.executable, "-c", SERVE, path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err, close_fds=True, start_new_session=True)
    except OSError:
        pass


def _send(s: socket.socket, payload: dict, fds: list[int]) -> None:
    """One request: its JSON, length first, with the file descriptors ``fds`` passed beside it."""
    msg = json.dumps(payload).encode()
    socket.send_fds(s, [_LEN.pack(len(msg)) + msg], fds)


def _readline(s: socket.socket) -> str:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(64)
        if not chunk:
            raise ConnectionResetError("warm server closed the connection")
        buf += chunk
    return buf.decode().strip()


# -- the server's side --------------------------------------------------------------------------------

def _module_files() -> dict[str, tuple[int, int]]:
    """Size and modification time of each loaded module's file and of each folder on ``sys.path``."""
    out = {}
    for f in [getattr(mod, "__file__", None) for mod in list(sys.modules.values())] + [p for p in sys.path if p]:
        if f:
            try:
                st = os.stat(f)
            except OSError:
                continue
            out[f] = (st.st_size, st.st_mtime_ns)
    return out


def _changed(files: dict[str, tuple[int, int]]) -> str | None:
    for f, sig in files.items():
        try:
            st = os.stat(f)
        except OSError:
            return f
        if (st.st_size, st.st_mtime_ns) != sig:
            return f
    return None


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    while len(data) < _LEN.size or len(data) < _LEN.size + _LEN.unpack_from(data)[0]:
        more = conn.recv(1 << 20)
        if not more:
            raise ConnectionResetError("short request")
        data += more
    n = _LEN.unpack_from(data)[0]
    return json.loads(data[_LEN.size:_LEN.size + n]), list(fds)


def _run_child(conn: socket.socket, req: dict, fds: list[int]) -> None:
    """In the forked child: become the command's process and run it; never returns."""
    import io
    import threading

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    os.umask(req["umask"])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    enc = os.environ.get("PYTHONIOENCODING", "").split(":")[0] or sys.getfilesystemencoding()
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=enc)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding=enc,
                                  line_buffering=os.isatty(1), write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding=enc,
                                  errors="backslashreplace", line_buffering=True)
    sys.argv = ["fedbayes", *req["argv"]]

    def watch():   # the command died without forwarding a signal (SIGKILL): die as it did
        try:
            conn.recv(1)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, daemon=True).start()
    code = 0
    try:
        from fedbayes.cli.app import main
        main(req["argv"])
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    _finish()
    os._exit(code)


def _finish() -> None:
    import atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def serve(path: str, idle_s: float = IDLE_S) -> None:
    """Preload, listen on ``path`` and fork a child a request until told to stop (a request ``stop``),
    until the process that started it is gone, or after ``idle_s`` without a request."""
    import importlib

    import fedbayes  # noqa: F401  (the numerics environment, before the libraries load)
    for name in PRELOAD + PRELOAD_OWN:
        try:
            importlib.import_module(name)
        except Exception:   # a missing library, a source being edited: each child imports it and says so
            pass
    files = _module_files()
    key = env_key(os.environ)
    owner = _owner(os.path.dirname(path))
    Path(path).unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(64)
    srv.settimeout(0.05)
    waiting: dict[int, socket.socket] = {}
    last = time.monotonic()
    try:
        while True:
            _reap(waiting)
            if not _alive(owner) or not os.path.exists(path) or (not waiting and time.monotonic() - last > idle_s):
                return
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            last = time.monotonic()
            conn.settimeout(None)
            try:
                req, fds = _recv_request(conn)
            except (OSError, ValueError):
                conn.close()
                continue
            if req.get("stop"):
                conn.sendall(b"stopped\n")
                conn.close()
                return
            if req.get("key") != key or len(fds) != 3:
                why = "environment"
            elif (f := _changed(files)) is not None:
                why = f"changed {f}"
            else:
                why = None
                pid = os.fork()
                if pid == 0:
                    srv.close()
                    for c in waiting.values():
                        c.close()
                    _run_child(conn, req, fds)
                conn.sendall(f"ok {pid}\n".encode())
                waiting[pid] = conn
                print(f"fedbayes.cli.warm: ran {req['argv']} as {pid}", file=sys.stderr, flush=True)
            for fd in fds:
                os.close(fd)
            if why is not None:
                print(f"fedbayes.cli.warm: refused {req.get('argv')}: {why}", file=sys.stderr, flush=True)
                conn.sendall(f"refused {why}\n".encode())
                conn.close()
                if why.startswith("changed"):    # the preloaded libraries are out of date: of no more use
                    return
    finally:
        srv.close()
        Path(path).unlink(missing_ok=True)
        _reap(waiting, block=True)    # each running command's status still goes back to it
        if not _alive(owner):
            _leave_nothing(path)


def _leave_nothing(path: str) -> None:
    """A build killed without its ``stop``: the last server of its folder removes the folder (its log lines
    go with it; ``stop`` keeps them in work/warm.log)."""
    import shutil

    for suffix in (".starting", ".log"):
        Path(path).with_suffix(suffix).unlink(missing_ok=True)
    folder = os.path.dirname(path)
    try:
        if set(os.listdir(folder)) <= {"owner"}:
            shutil.rmtree(folder, ignore_errors=True)
    except FileNotFoundError:
        pass


def _owner(folder: str) -> int | None:
    """The process the folder's servers live for (``start``'s Snakemake); None: no owner (by hand)."""
    try:
        return int(Path(folder, "owner").read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(waiting: dict[int, socket.socket], block: bool = False) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is None:
            continue
        msg = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.waitstatus_to_exitcode(status)}"
        try:
            conn.sendall(msg.encode() + b"\n")
        except OSError:
            pass
        conn.close()


# -- the workflow's side ------------------------------------------------------------------------------

_started: tuple[str, Path] | None = None


# A server costs ≈ 3.8 CPU-s (its imports and start) and saves ≈ 2.5 a job after the first, which runs itself
# while the server starts: a build of one job through warm servers took 8.5 CPU-s, 4.7 without.
MIN_JOBS = 4


def worth_a_server(jobs) -> bool:
    """Whether a build's planned jobs (``workflow.dag.needrun_jobs()`` at ``onstart``) repay the servers:
    ``MIN_JOBS`` or more, or a checkpoint among them (the jobs after it are planned only once it has run)."""
    jobs = list(jobs)
    return len(jobs) >= MIN_JOBS or any(job.rule.is_checkpoint for job in jobs)


def start(logdir: str | os.PathLike, jobs=None) -> str | None:
    """Make the folder of this build's servers (the Snakefile's ``onstart``) and point this process's
    environment, which the jobs inherit, at it; the servers' logs go to ``logdir``/warm.log at ``stop``.
    Off where ``FEDBAYES_WARM`` is already set (``0``: off; a folder: that one's servers), and for a build
    whose planned ``jobs`` (given) are too few to repay a server (``worth_a_server``): each runs itself."""
    import tempfile

    global _started
    if os.environ.get(WARM_ENV) or (jobs is not None and not worth_a_server(jobs)):
        return None
    folder = tempfile.mkdtemp(prefix=f"fedbayes-warm-{os.getpid()}-", dir="/tmp")
    Path(folder, "owner").write_text(str(os.getpid()))
    os.environ[WARM_ENV] = folder
    _started = (folder, Path(logdir))
    return folder


def stop() -> None:
    """End the servers ``start``'s folder holds (the Snakefile's ``onsuccess``/``onerror``), keep their logs
    in ``logdir``/warm.log and remove the folder."""
    import shutil

    global _started
    if _started is None:
        return
    folder, logdir = _started
    _started = None
    os.environ.pop(WARM_ENV, None)
    for sock in Path(folder).glob("*.sock"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(30)
            s.connect(str(sock))
            _send(s, {"stop": True}, [])
            _readline(s)
        except OSError:
            pass
        finally:
            s.close()
    logs = b"".join(f.read_bytes() for f in sorted(Path(folder).glob("*.log")))
    if logs:
        logdir.mkdir(parents=True, exist_ok=True)
        with open(logdir / "warm.log", "ab") as out:
            out.write(logs)
    shutil.rmtree(folder, ignore_errors=True)
