"""Run a command and measure it: wall seconds, CPU seconds and peak memory of ALL its processes.

    python3 benchmarks/peers/measure.py --json OUT.json --log LOG [--marker PATH] -- COMMAND ...

`/usr/bin/time -v` reports the largest single process it reaped; a Flower or FL-bench run is a tree
(Ray's GCS server, raylet, workers), some of which Ray detaches from the command. Every 0.25 s this
reads /proc for the command's descendants plus any process whose command line contains --marker (the
peer's environment folder, which catches the detached Ray processes), and records the peak of their
summed PSS (proportional set size: shared library pages split between the processes, so the sum is the
memory the run really holds) and of their summed RSS (shared pages counted once per process), and the
CPU seconds each process had used when last seen. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def _procs() -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, cmdline, cpu seconds) for every readable process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                st = fh.read()
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        rest = st[st.rfind(")") + 2:].split()
        out[int(d)] = (int(rest[1]), cmd, (int(rest[11]) + int(rest[12])) / TICK)
    return out


def _mem(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in bytes, from smaps_rollup."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--marker", default=None, help="count any process whose command line contains this")
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    me = os.getpid()
    peak_pss = peak_rss = 0
    peak_n = 0
    cpu: dict[int, float] = {}
    t0 = time.perf_counter()
    with open(a.log, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        while True:
            procs = _procs()
            kids: dict[int, list[int]] = {}
            for pid, (ppid, _, _) in procs.items():
                kids.setdefault(ppid, []).append(pid)
            todo = [p.pid]
            if a.marker:  # and their descendants (Ray renames its workers: ray::ClientAppActor …)
                todo += [pid for pid, (_, c, _) in procs.items() if a.marker in c and pid != me]
            tree: set[int] = set()
            while todo:
                q = todo.pop()
                if q in tree:
                    continue
                tree.add(q)
                todo += kids.get(q, [])
            pss = rss = 0
            for pid in tree:
                m = _mem(pid)
                pss += m[0]
                rss += m[1]
                if pid in procs:
                    cpu[pid] = procs[pid][2]
            peak_pss, peak_rss, peak_n = max(peak_pss, pss), max(peak_rss, rss), max(peak_n, len(tree))
            if p.poll() is not None:
                break
            time.sleep(a.interval)
    wall = time.perf_counter() - t0
    res = {"cmd": cmd, "rc": p.returncode, "wall_s": wall, "cpu_s_seen": sum(cpu.values()),
           "peak_pss_mib": peak_pss / 2**20, "peak_rss_sum_mib": peak_rss / 2**20, "max_processes": peak_n}
    with open(a.json, "w") as fh:
        json.dump(res, fh, indent=1)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
