"""A workflow job in a fresh process against the same job forked by a warm server (fedbayes.cli.warm).

Small jobs are what a rehearsal or a smoke build is made of: a training job of a few steps, its
evaluation, a validation. Each job runs ``--repeats`` times each way, in alternation (load on the machine
hits both alike), in a temporary study with one small synthetic experiment. Reported per job: median wall
seconds and CPU seconds of the whole job (fresh: the process; warm: the command plus the server's child,
read from the server's reaped-children counters), and the ratios.

    python benchmarks/bench_warm.py                    # 5 repeats
    python benchmarks/bench_warm.py --out benchmarks/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
from fedbayes.cli.warm import SERVE, WARM_ENV, socket_for  # noqa: E402

SYNTH = {"dataset": "synthetic", "subsample": 1.0, "clients": 4, "partition": {"scheme": "iid"}, "rounds": 2,
         "report_rounds": [2], "model": {"name": "mlp", "hidden": [16], "activation": "relu"},
         "input_scale": "unit", "train": {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1},
         "methods": {"fedavg": {"sweep": {"local_epochs": [1]}}}}
FEDBAYES = [sys.executable, "-m", "fedbayes.cli"]


def study(d: Path) -> None:
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["experiments"] = {"synth": SYNTH}
    p["seeds"] = [0]
    p["tables"] = {}
    p.pop("headline")
    p["paths"] = {k: str(d / k) for k in ("raw", "partitions", "runs", "reports", "work")}
    p["paths"]["mlflow_uri"] = f"sqlite:///{d / 'mlflow.db'}"
    (d / "workflow/schemas").mkdir(parents=True)
    shutil.copy(REPO / "workflow/schemas/params.schema.yaml", d / "workflow/schemas/params.schema.yaml")
    (d / "params.yaml").write_text(yaml.safe_dump(p))


def children_cpu(pid: int) -> float:
    """CPU seconds of the children ``pid`` has reaped (/proc/<pid>/stat: cutime, cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def run(argv, cwd, env, server_pid=None) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    served = children_cpu(server_pid) if server_pid else 0.0
    t0 = time.perf_counter()
    subprocess.run(FEDBAYES + argv, cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if server_pid:
        time.sleep(0.05)    # the server reaps its child after answering
        cpu += children_cpu(server_pid) - served
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="append the result as one JSON line")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    folder = tempfile.mkdtemp(prefix="fbw-", dir="/tmp")
    cold = {k: v for k, v in os.environ.items() if k != WARM_ENV}
    hot = cold | {WARM_ENV: folder}
    study(d)
    part = d / "partitions/synth/seed0.npz"
    subprocess.run(FEDBAYES + ["data", "synthetic", "--root", str(d / "raw")], cwd=d, env=cold, check=True,
                   capture_output=True)
    subprocess.run(FEDBAYES + ["partition", "--experiment", "synth", "--seed", "0", "--out", str(part)], cwd=d,
                   env=cold, check=True, capture_output=True)
    sock = socket_for(folder, cold)
    server = subprocess.Popen([sys.executable, "-c", SERVE, sock], env=cold, stderr=subprocess.DEVNULL)
    while not os.path.exists(sock):
        time.sleep(0.1)
    jobs = {
        "validate": lambda out: ["validate"],
        "train (2 rounds, 4 clients, MLP)": lambda out: [
            "train", "--experiment", "synth", "--method", "fedavg", "--point", "local_epochs=1", "--seed", "0",
            "--partition", str(part), "--out", str(out), "--threads", "1"],
        "evaluate": lambda out: ["evaluate", str(out)],
    }
    times = {(j, how): [] for j in jobs for how in ("fresh", "warm")}
    try:
        for i in range(args.repeats):
            for how, env in (("fresh", cold), ("warm", hot)):
                out = d / f"{how}{i}"
                for job, argv in jobs.items():
                    times[(job, how)].append(run(argv(out), d, env, server.pid if how == "warm" else None))
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)
    rows = {}
    print(f"{'job':34s} {'fresh wall':>10s} {'warm wall':>10s} {'ratio':>6s} {'fresh CPU':>10s} {'warm CPU':>9s} {'ratio':>6s}")
    for job in jobs:
        fw, fc = (statistics.median(t[k] for t in times[(job, "fresh")]) for k in (0, 1))
        ww, wc = (statistics.median(t[k] for t in times[(job, "warm")]) for k in (0, 1))
        rows[job] = {"fresh_wall_s": fw, "warm_wall_s": ww, "fresh_cpu_s": fc, "warm_cpu_s": wc}
        print(f"{job:34s} {fw:10.2f} {ww:10.2f} {fw / ww:5.1f}× {fc:10.2f} {wc:9.2f} {fc / wc:5.1f}×")
    print(f"(medians of {args.repeats}, alternating; load average {os.getloadavg()[0]:.1f})")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"bench": "warm", "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "jobs": rows,
                                "repeats": args.repeats, "load": os.getloadavg()[0]}) + "\n")


if __name__ == "__main__":
    main()
