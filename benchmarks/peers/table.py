"""One pair's measurements -> a row of benchmarks/peers/peers.json, and peers.md rewritten from all rows.

    python3 benchmarks/peers/table.py add --work DIR --peer flower --out-json benchmarks/peers/peers.json
    python3 benchmarks/peers/table.py md --json benchmarks/peers/peers.json --md benchmarks/peers/peers.md

`add` reads what run.sh left in DIR: <peer>.measure.json / ours_<peer>.measure.json (measure.py),
<peer>.json (the peer's own per-round record), ours_<peer>/history.csv (fedbayes's), fidelity.json and
load.txt (uptime before and after), and appends one row (a pair measured at the same moment).
Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path


def _ours(work: Path, peer: str) -> dict:
    m = json.loads((work / f"ours_{peer}.measure.json").read_text())
    rows = list(csv.DictReader(open(work / f"ours_{peer}" / "history.csv")))
    rounds = [r for r in rows if int(r["round"]) >= 1]
    per = [float(r["time_s"]) + float(r["eval_s"]) for r in rounds]
    return {"name": "fedbayes", "rc": m["rc"], "wall_s": m["wall_s"], "cpu_s": m["cpu_s_seen"], "rounds": len(rounds),
            "s_per_round": m["wall_s"] / max(len(rounds), 1),
            "steady_s_per_round": sum(per[1:]) / max(len(per) - 1, 1),
            "peak_pss_mib": m["peak_pss_mib"], "peak_rss_sum_mib": m["peak_rss_sum_mib"],
            "processes": m["max_processes"], "final_acc": float(rounds[-1]["test/acc"]) if rounds else None}


def _peer(work: Path, peer: str) -> dict:
    m = json.loads((work / f"{peer}.measure.json").read_text())
    row = {"name": peer, "rc": m["rc"], "wall_s": m["wall_s"], "cpu_s": m["cpu_s_seen"], "peak_pss_mib": m["peak_pss_mib"],
           "peak_rss_sum_mib": m["peak_rss_sum_mib"], "processes": m["max_processes"]}
    res = work / f"{peer}.json"
    if m["rc"] == 0 and res.exists():
        r = json.loads(res.read_text())
        h = r["history"]  # the evaluation after each round, h[0] = before round 1; t = seconds since start
        n = len(h) - 1
        row.update(rounds=n, s_per_round=m["wall_s"] / max(n, 1),
                   steady_s_per_round=(h[-1]["t"] - h[1]["t"]) / max(n - 1, 1),
                   final_acc=h[-1]["test/acc"], versions={k: r[k] for k in ("flwr", "ray", "torch", "flbench") if k in r},
                   client_optimizer=r.get("client_optimizer"), adam_step_last_round=r.get("adam_step_last_round"))
    else:
        tail = (work / f"{peer}.log").read_text(errors="replace").splitlines()[-15:] if (work / f"{peer}.log").exists() else []
        row.update(failed=True, log_tail=tail)
    return row


def add(a) -> None:
    work = Path(a.work)
    fid = json.loads((work / f"{a.peer}.fidelity.json").read_text())
    load = (work / f"load_{a.peer}.txt").read_text().splitlines()
    entry = {"peer": a.peer, "experiment": "fmnist10-iid-k10", "seed": a.seed, "local_epochs": a.local_epochs,
             "rounds": a.rounds, "cores": "one each (taskset -c 0 fedbayes, -c 1 peer), same moment, 1 thread",
             "time": a.time, "host_cpu": a.cpu, "load_before": load[0] if load else "", "load_after": load[-1] if load else "",
             "ours": _ours(work, a.peer), "theirs": _peer(work, a.peer), "fidelity": fid}
    out = Path(a.out_json)
    rows = json.loads(out.read_text()) if out.exists() else []
    rows.append(entry)
    out.write_text(json.dumps(rows, indent=1) + "\n")


def _f(x, fmt="{:.1f}") -> str:
    return "—" if x is None else fmt.format(x)


def md(a) -> None:
    rows = json.loads(Path(a.json).read_text())
    lines = ["# FedAvg beside the peers", "",
             "fmnist10-iid-k10 (10 iid clients of a 10 % subsample of Fashion-MNIST's training set, seed 0), "
             "MLP 784-200-100-10 sigmoid on raw 0–255 pixels, Adam lr 1e-3, batch 32, E local epochs, all "
             "clients every round, the global model evaluated on the 10,000 test images after every round. "
             "Each pair ran at the same moment, one core each (`taskset -c 0` fedbayes, `-c 1` the peer, "
             "OMP/MKL threads 1), CPU only. Written by `bash benchmarks/peers/run.sh` (benchmarks/peers/table.py "
             "from peers.json).", "",
             "Columns: wall = the whole command (start-up, data, every round, evaluation); s/round = wall / rounds; "
             "CPU s = user + system seconds of all the run's processes, as last sampled (every 0.25 s; what it cost the machine, less sensitive "
             "than wall to the other jobs that shared the cores); steady s/round = rounds 2…R only (train + evaluate; a Flower run's first round also starts its Ray "
             "worker); peak memory = the peak of the summed PSS of all the run's processes (Ray's GCS server, "
             "raylet and workers included; measure.py), RSS summed over processes in brackets; acc = test "
             "accuracy after the last round.", "",
             "| ended (UTC) | load (1-min, before → after) | E | rounds | framework | wall s | CPU s | s/round | steady s/round "
             "| peak memory MiB (RSS sum) | procs | final acc | protocol fidelity |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lb = r["load_before"].split("load average:")[-1].split(",")[0].strip()
        la = r["load_after"].split("load average:")[-1].split(",")[0].strip()
        for side in ("ours", "theirs"):
            s = r[side]
            name = s["name"] + (f" {s.get('versions', {}).get('flwr', '')}" if s["name"] == "flower" else "")
            if s.get("failed"):
                lines.append(f"| {r['time'][:16]} | {lb} → {la} | {r['local_epochs']} | {r['rounds']} | {name} | "
                             f"{s['wall_s']:.1f} | {_f(s.get('cpu_s'))} | failed (rc {s['rc']}) | | {s['peak_pss_mib']:.0f} | "
                             f"{s['processes']} | — | {r['fidelity'].get('failure', 'see peers.json log_tail')} |")
                continue
            fid = "reference" if side == "ours" else r["fidelity"]["summary"]
            lines.append(f"| {r['time'][:16]} | {lb} → {la} | {r['local_epochs']} | {s.get('rounds')} | {name} | "
                         f"{s['wall_s']:.1f} | {_f(s.get('cpu_s'))} | {_f(s.get('s_per_round'), '{:.2f}')} | "
                         f"{_f(s.get('steady_s_per_round'), '{:.2f}')} | {s['peak_pss_mib']:.0f} "
                         f"({s['peak_rss_sum_mib']:.0f}) | {s['processes']} | {_f(s.get('final_acc'), '{:.4f}')} | {fid} |")
    lines.append("")
    if a.notes and Path(a.notes).exists():
        lines += [Path(a.notes).read_text().rstrip(), ""]
    lines += ["## Protocol fidelity, per peer (as of its latest row)", ""]
    latest = {r["peer"]: r for r in rows}
    for peer, r in latest.items():
        lines.append(f"**{peer}**")
        lines.append("")
        for k, v in r["fidelity"].items():
            if k != "summary":
                lines.append(f"- {k}: {v}")
        lines.append("")
    Path(a.md).write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("add")
    p.add_argument("--work", required=True)
    p.add_argument("--peer", required=True)
    p.add_argument("--out-json", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--local-epochs", type=int, required=True)
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--time", required=True)
    p.add_argument("--cpu", default="")
    p = sub.add_parser("md")
    p.add_argument("--json", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--notes", default=None, help="markdown appended after the table (notes.md)")
    a = ap.parse_args()
    {"add": add, "md": md}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
